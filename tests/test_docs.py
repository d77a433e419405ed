"""The README and docs/ are for users: they say what the product does, not how it was made."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "clients" / "python" / "README.md"]
# Words of a lab notebook: which working session, day or tracker issue a thing came from.
# ("session" alone is the product's own word: an agent run's id.)
HISTORY = re.compile(r"\b(sessions?|issues?|days?|stops?)\s+#?\d+\b|\b(first|second|third|last) day\b", re.IGNORECASE)


def test_no_page_tells_how_the_project_was_made():
    found = [
        f"{page.relative_to(ROOT)}:{n}: {match.group(0)}"
        for page in PAGES
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for match in HISTORY.finditer(line)
    ]
    assert found == []


def test_the_readme_is_short_and_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 250
    first_block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in first_block.strip().splitlines()] == [["make", "run"], ["make", "test"]]


def test_every_page_the_readme_and_docs_link_exists():
    missing = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#]+\.md)\)", page.read_text(encoding="utf-8")):
            if not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert missing == []


def _settings_read() -> dict[str, object]:
    """Every environment variable the service reads, with its default, from the source."""
    import ast

    found: dict[str, object] = {}
    for path in (ROOT / "ragtrail_site" / "settings.py", ROOT / "ragtrail_site" / "gunicorn_conf.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id.startswith("env_")
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                default = node.args[1] if len(node.args) > 1 else None
                try:
                    found[node.args[0].value] = eval(compile(ast.Expression(default), "default", "eval"), {})  # noqa: S307 (literals)
                except Exception:
                    found[node.args[0].value] = None  # computed from the machine or the checkout's path
    return found


def test_the_settings_table_lists_every_setting_with_its_default():
    text = (ROOT / "docs" / "operating.md").read_text(encoding="utf-8")
    table = text.split("<!-- settings:start -->", 1)[1].split("<!-- settings:end -->", 1)[0]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| ([^|]*) \|", table, flags=re.M)}
    read = _settings_read()
    assert set(rows) == set(read), f"missing from the table: {set(read) - set(rows)}; not read: {set(rows) - set(read)}"
    for name, default in read.items():
        cell = rows[name]
        if isinstance(default, bool):
            assert cell.strip() == ("on" if default else "off"), name
        elif isinstance(default, int):
            assert f"`{default}`" in cell, name
        elif isinstance(default, str) and default:
            assert f"`{default}`" in cell, name
        elif isinstance(default, list) and default:
            assert f"`{','.join(default)}`" in cell, name
        elif default in ("", [], None) and name not in (
            "RAGTRAIL_MODEL_CACHE",
            "RAGTRAIL_DEMO_CREDENTIALS",
            "RAGTRAIL_REPORTS_DIR",
            "RAGTRAIL_WORKERS",
            "RAGTRAIL_METRICS_DIR",
            "RAGTRAIL_STATE_DIR",
        ):
            assert cell.startswith("(none"), name


def test_the_benchmark_table_is_generated_from_the_results_file():
    from evaluation import results

    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    targets = results.load()
    assert page == results.page_with_table(page, targets), "run manage.py benchmark_page"
    assert all(t["at"] and t["commit"] for t in targets) and len({t["id"] for t in targets}) == len(targets)
