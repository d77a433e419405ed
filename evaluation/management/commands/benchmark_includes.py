"""Bounded includes: a kilobyte of nested includes that would fan out past the budget, and a
FIFO among the pages, each split and refused; timed side by side with the same page holding
no include (the ratio is what to read: a refusal costs about what a plain split does)."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from django.core.management.base import BaseCommand

from scopes.splitting import SplitError, split_project


def fan_out_tree(folder: Path, fan: int, depth: int, snippets: bool) -> int:
    """A project whose index includes a file that includes the next `fan` times, `depth` deep:
    fan**depth lines from a kilobyte or so. Returns the included files' bytes."""
    include = (lambda name: f'--8<-- "docs/{name}"\n') if snippets else (lambda name: f".. include:: {name}\n")
    docs = folder / "docs"
    docs.mkdir(parents=True)
    (folder / ".git").mkdir()
    for level in range(depth):
        (docs / f"l{level}.txt").write_text("".join(include(f"l{level + 1}.txt") for _ in range(fan)))
    (docs / f"l{depth}.txt").write_text("x\n")
    if snippets:
        (folder / "mkdocs.yml").write_text("site_name: S\nmarkdown_extensions:\n  - pymdownx.snippets\n")
        (docs / "index.md").write_text('# Home\n\nText.\n\n--8<-- "docs/l0.txt"\n')
        return sum((docs / f"l{n}.txt").stat().st_size for n in range(depth + 1))
    (docs / "conf.py").write_text("")
    (docs / "index.rst").write_text("Home\n====\n\nText.\n\n.. include:: l0.txt\n")
    return sum((docs / f"l{n}.txt").stat().st_size for n in range(depth + 1))


def timed(folder: Path) -> tuple[float, str]:
    started = time.perf_counter()
    try:
        split_project(folder)
        said = "split"
    except SplitError as problem:
        said = str(problem)
    return time.perf_counter() - started, said


class Command(BaseCommand):
    help = "Times refusing includes that fan out past the budget and a FIFO page, against a plain split."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--fan", type=int, default=10)
        parser.add_argument("--depth", type=int, default=7, help="fan**depth lines if expanded (default 10^7)")
        parser.add_argument("--repeats", type=int, default=5)

    def handle(self, *args, fan: int, depth: int, repeats: int, **options) -> None:
        with tempfile.TemporaryDirectory(prefix="ragtrail-includes-") as scratch:
            root = Path(scratch)
            cases = {}
            for name, snippets in (("reStructuredText includes", False), ("MkDocs snippets", True)):
                size = fan_out_tree(root / name.split()[0], fan, depth, snippets)
                project = root / name.split()[0] / ("" if snippets else "docs")
                cases[f"{name}: {size:,} bytes that would expand to {fan**depth:,} lines"] = project
            fifo = root / "fifo" / "docs"
            fifo.mkdir(parents=True)
            (fifo / "conf.py").write_text("")
            (fifo / "index.rst").write_text("Home\n====\n\nText.\n")
            os.mkfifo(fifo / "page.rst")
            cases["a FIFO named page.rst"] = fifo
            plain = root / "plain" / "docs"
            plain.mkdir(parents=True)
            (plain / "conf.py").write_text("")
            (plain / "index.rst").write_text("Home\n====\n\nText.\n")
            for name, folder in cases.items():
                runs, baseline, said = [], [], ""
                for _ in range(repeats):  # alternating, so both see the same machine
                    seconds, said = timed(folder)
                    runs.append(seconds)
                    baseline.append(timed(plain)[0])
                refused, base = statistics.median(runs), statistics.median(baseline)
                self.stdout.write(
                    f"{name}: {said!r} in {refused * 1000:.1f} ms (median of {repeats}); a page with no "
                    f"include {base * 1000:.1f} ms; ratio {refused / base:.1f}"
                )
