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
            "RAGTRAIL_STATIC_ROOT",
        ):
            assert cell.startswith("(none"), name


def test_the_benchmark_table_is_generated_from_the_results_file():
    from evaluation import results

    targets = results.load()
    for path in results.PAGES:
        page = path.read_text(encoding="utf-8")
        assert page == results.page_with_table(page, targets), f"{path.name}: run manage.py benchmark_page"
    assert all(t["at"] and t["commit"] for t in targets) and len({t["id"] for t in targets}) == len(targets)


# The words docs/concepts.md defines; a page links it before it uses any of them.
CONCEPTS = re.compile(
    r"\b(scopes?|sections?|trails?|signals?|partitions?|prefetch|hint|miss|held|re-sign\w*|roll-ups?|band keys)\b",
    re.IGNORECASE,
)


def _prose(text: str) -> str:
    """The page without its code blocks and headings (a title names its topic before any link can)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return "\n".join(line for line in text.splitlines() if not line.startswith("#"))


def test_the_readme_and_every_docs_page_link_the_concepts_before_using_a_term():
    late = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if page.name == "concepts.md":
            continue
        prose = _prose(page.read_text(encoding="utf-8"))
        term, link = CONCEPTS.search(prose), prose.find("concepts.md")
        if term is not None and not 0 <= link < term.start():
            late.append(f"{page.relative_to(ROOT)}: {term.group(0)!r} before any link to concepts.md")
    assert late == []


def test_every_term_the_concepts_page_promises_is_defined_there():
    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    defined = {m.lower() for m in re.findall(r"\*\*([\w -]+?)\.?\*\*", page)}
    wanted = {"scope", "section", "trail", "signal", "partition", "prefetch", "hint", "miss", "lifecycle", "held"}
    assert wanted | {"band keys", "re-sign", "roll-up", "operator", "token budget", "signature", "embedder"} <= defined
    embedder = page.split("**Embedder.**", 1)[1].split("\n\n", 1)[0]
    assert "503 embedder_not_calibrated" in embedder and "calibrate_embedder" in embedder


# Measured figures: decimal milliseconds, ratios, percentiles with a value, rates per second.
MEASURED = re.compile(r"\d+\.\d+ ?ms\b|\b\d+(\.\d+)?x\b|\bp\d\d \d|\d/s\b")
# Pages whose figures are their subject: the benchmarks, the evaluation, what a trail costs on disk.
FIGURE_PAGES = {"how-we-know.md", "benchmarks.md", "evaluation.md", "scaling.md"}


def test_how_to_pages_send_their_measurements_to_how_we_know():
    found = [
        f"{page.relative_to(ROOT)}:{n}: {match.group(0)}"
        for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        if page.name not in FIGURE_PAGES
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        for match in MEASURED.finditer(line)
    ]
    assert found == []


def test_a_first_manage_py_without_the_secret_key_says_so_in_one_line():
    import os
    import subprocess
    import sys

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RAGTRAIL_SECRET_KEY", "RAGTRAIL_DEBUG", "DJANGO_SETTINGS_MODULE")
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "manage.py: RAGTRAIL_SECRET_KEY is not set. Set it (50+ random characters) in production, "
        "or RAGTRAIL_DEBUG=1 on a laptop to use the development key."
    ]


def test_make_test_lists_each_skip_with_its_reason():
    recipe = (ROOT / "Makefile").read_text(encoding="utf-8").split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "-m pytest -rs" in recipe


def test_the_api_table_lists_every_operation_the_api_serves():
    from ragtrail_site.api import api

    def shape(path: str) -> str:
        return re.sub(r"\{[^}]*\}", "{}", path)

    listed = set()
    for row in (ROOT / "docs" / "api.md").read_text(encoding="utf-8").splitlines():
        call = row.split("|")[1] if row.startswith("| `") else ""
        path = re.search(r"/api/v1/[^`?\s]*", call)
        if path:
            listed |= {(method, shape(path.group())) for method in re.findall(r"\b(GET|PUT|POST|DELETE|PATCH)\b", call)}
    served = {
        (method.upper(), shape(path))
        for path, operations in api.get_openapi_schema()["paths"].items()
        for method in operations
    }
    assert served - listed == set() and listed - served == set()


def test_the_python_clients_readme_names_every_call():
    import inspect

    from ragtrail_client.client import Calls

    listed = (ROOT / "clients" / "python" / "README.md").read_text(encoding="utf-8").split("- Every API call", 1)[1]
    listed = listed.split("\n- ", 1)[0]
    calls = [name for name, _ in inspect.getmembers(Calls, inspect.isfunction) if not name.startswith("_")]
    assert [name for name in calls if f"`{name}`" not in listed] == []
