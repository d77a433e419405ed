"""The benchmarks' latest figure per target, kept in docs/benchmark-results.json, and the table
of docs/benchmarks.md and docs/how-we-know.md generated from it (a test holds the pages equal to the file).

A benchmark that measures a target records its figure here (`record`), with the date and the
commit it ran on; `manage.py benchmark_page` rewrites the page's table.
"""

from __future__ import annotations

import json
import subprocess
from datetime import date
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "benchmark-results.json"
PAGE = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"
# How a target's id names a store size (scale-1m, peer-100k, ...).
SIZE_LABELS = {10_000: "10k", 100_000: "100k", 1_000_000: "1m", 10_000_000: "10m"}


def load(path: Path = RESULTS) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["targets"]


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        ).stdout.strip()
    except OSError:
        return ""


def record(
    target_id: str,
    *,
    target: str,
    command: str,
    measured: str,
    met: bool,
    path: Path = RESULTS,
    say: Callable[[str], None] | None = None,
) -> dict:
    """Keeps this figure as the target's latest (today, on the checkout's commit); `say` is
    told the figure it replaces beside it."""
    targets = load(path) if path.exists() else []
    entry = {
        "id": target_id,
        "target": target,
        "command": command,
        "measured": measured,
        "met": met,
        "at": date.today().isoformat(),
        "commit": commit(),
    }
    if say:
        before = next((t for t in targets if t["id"] == target_id), None)
        say(f"recorded {target_id}: {measured} (met: {'yes' if met else 'no'})")
        say(
            f"  previously: {before['measured']} (met: {'yes' if before['met'] else 'no'}; {before['at']}, {before['commit']})"
            if before
            else "  previously: nothing recorded"
        )
    targets = [t for t in targets if t["id"] != target_id] + [entry]
    path.write_text(json.dumps({"targets": targets}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return entry


def render(targets: list[dict]) -> str:
    lines = ["| target | command | measured | met | when |", "|---|---|---|---|---|"]
    for t in targets:
        lines.append(
            f"| {t['target']} | {t['command']} | {t['measured']} | {'yes' if t['met'] else 'no'} | "
            f"{t['at']}, {t['commit']} |"
        )
    return "\n".join(lines)


def page_with_table(page: str, targets: list[dict]) -> str:
    head, rest = page.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{render(targets)}\n{END}{tail}"


# The pages holding the table: the benchmarks' own, and the one the how-to pages send figures to.
PAGES = (PAGE, ROOT / "docs" / "how-we-know.md")


def write_page(path: Path = PAGE) -> None:
    path.write_text(page_with_table(path.read_text(encoding="utf-8"), load()), encoding="utf-8")


def write_pages() -> None:
    for page in PAGES:
        write_page(page)
