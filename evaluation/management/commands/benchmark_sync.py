"""A docs release through split + sync, this splitter and the previous one side by side.

The tree is a generated Sphinx project the size of Django's docs (about 650 pages, 6 MB), or a
real one (`--tree OLD --release NEW`, e.g. two unpacked Django source archives' docs/). Each
splitter reads both revisions; trails are recorded on the old one, each citing the sections
that hold a few lines picked at random (the same lines for both splitters, so the questions
are the same); the release is synced, and the figures compared: sections, the largest, how
many exceed the default prefetch budget, split and sync times, and the share of served trails
still answered with a prefetch after the release.
"""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from evaluation.bulk import drop_scope, without_statement_timeout
from evaluation.questions import QuestionMaker
from infra.tokens import count_tokens
from scopes.models import Scope, Section
from scopes.splitting import SourceSection, split_tree
from trails.core.hint import RecordedStep
from trails.serving.record import RecordInput, TrailRows
from trails.upkeep.sync import sync_sections

# The splitter before sections followed Sphinx and MkDocs (one module then).
PREVIOUS = "d8af6ad"
WORDS = (
    "query filter model field admin cache template view form migration signal middleware "
    "session request response setting database index lookup manager"
).split()


def _paragraph(rng: random.Random, words: int = 30) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    return "\n".join(text[i : i + 76] for i in range(0, len(text), 76))


def write_sphinx_tree(folder: Path, pages: int, seed: int, edit_share: float = 0.0, base_seed: int = 7) -> None:
    """A Sphinx project like Django's: titles, labelled sections with introductions and
    sub-headings, object descriptions. With `edit_share`, a release of it: that share of
    paragraphs edited, one sub-heading in twenty moved under a new parent, 2 % of pages gone
    and 2 % new."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conf.py").write_text('source_suffix = ".rst"\nexclude_patterns = ["_build"]\nroot_doc = "index"\n')
    (folder / "index.rst").write_text("Docs\n====\n\nThe documentation.\n")
    edits = random.Random(seed)
    for page in range(pages):
        if edit_share and page % 50 == 7:
            continue  # removed in the release
        rng = random.Random(base_seed * 100_003 + page)
        name = f"ref/area{page % 12}/page{page}.rst"

        def para() -> str:
            text = _paragraph(rng)
            return text + " (revised)" if edit_share and edits.random() < edit_share else text

        title = f"Page {page} reference"
        lines = [
            f".. _page-{page}:",
            "",
            "=" * len(title),
            title,
            "=" * len(title),
            "",
            f".. currentmodule:: project.area{page % 12}",
            "",
            para(),
            "",
        ]
        for part in range(3):
            heading = f"Part {part} of page {page}"
            lines += [f".. _page-{page}-part-{part}:", "", heading, "-" * len(heading), "", para(), ""]
            moved = edit_share and page % 20 == 3 and part == 1
            if moved:
                lines += ["Grouped checks", "~~~~~~~~~~~~~~", "", para(), ""]
            for sub in range(3):
                sub_heading = f"``item{page}_{part}_{sub}()``"
                marker = "^" if moved else "~"
                lines += [sub_heading, marker * len(sub_heading), "", para(), "", para(), ""]
            for obj in range(2):
                lines += [
                    f".. class:: Thing{page}x{part}x{obj}(value)",
                    "",
                    "    " + para().replace("\n", "\n    "),
                    "",
                    f"    .. attribute:: size{obj}",
                    "",
                    "        " + para().replace("\n", "\n        "),
                    "",
                ]
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    if edit_share:
        for page in range(pages, pages + pages // 50):
            (folder / f"ref/new/page{page}.rst").parent.mkdir(parents=True, exist_ok=True)
            (folder / f"ref/new/page{page}.rst").write_text(
                f"New {page}\n=======\n\n{_paragraph(edits)}\n\nUse\n---\n\n{_paragraph(edits)}\n"
            )


def previous_splitter():
    """The splitter at PREVIOUS, from git, or None where the history is not at hand."""
    try:
        source = subprocess.run(
            ["git", "show", f"{PREVIOUS}:scopes/splitting.py"],
            capture_output=True,
            text=True,
            check=True,
            cwd=settings.BASE_DIR,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    spec = importlib.util.spec_from_loader("previous_splitting", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules["previous_splitting"] = module
    exec(compile(source, f"{PREVIOUS}:scopes/splitting.py", "exec"), module.__dict__)  # noqa: S102 (our own history)
    return module


def as_rst(folder: Path, into: Path) -> Path:
    """A copy with .txt pages named .rst, for the previous splitter (it read .rst only)."""
    shutil.copytree(folder, into, symlinks=True)
    for page in into.rglob("*.txt"):
        page.rename(page.with_suffix(".rst"))
    for other in into.rglob("*"):
        if other.is_file() and other.suffix not in (".rst",):
            other.unlink()
    return into


def by_page(sections) -> dict[str, list[tuple[int, str]]]:
    pages: dict[str, list[tuple[int, str]]] = {}
    for section in sections:
        pages.setdefault(section.path, []).append((section.line, section.id))
    return {path: sorted(found) for path, found in pages.items()}


def containing(pages: dict[str, list[tuple[int, str]]], path: str, line: int) -> str | None:
    """The id of the section holding a line: the last one starting at or before it."""
    import bisect

    found = pages.get(path, [])
    index = bisect.bisect_right(found, (line, "\uffff")) - 1
    return found[index][1] if index >= 0 else None


class Command(BaseCommand):
    help = "A docs release (Django-sized Sphinx tree) split and synced by this splitter and the previous one, side by side."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--tree", help="a real docs folder (the old revision); default: a generated Sphinx tree")
        parser.add_argument("--release", help="the same docs at the new revision (with --tree)")
        parser.add_argument("--pages", type=int, default=650, help="pages of the generated tree")
        parser.add_argument("--trails", type=int, default=1000)
        parser.add_argument("--repeats", type=int, default=3, help="splits timed per splitter (the median is kept)")
        parser.add_argument("--out", default=str(Path(settings.BASE_DIR) / "bench-out"))
        parser.add_argument(
            "--record",
            action="store_true",
            help="keep the figures as the target's latest in docs/benchmark-results.json (and its page)",
        )

    def handle(
        self,
        *args,
        tree: str | None,
        release: str | None,
        pages: int,
        trails: int,
        repeats: int,
        out: str,
        record: bool = False,
        **options,
    ) -> None:
        work = Path(tempfile.mkdtemp(prefix="bench-sync-"))
        try:
            if tree:
                old_tree, new_tree = Path(tree), Path(release or tree)
            else:
                old_tree, new_tree = work / "old", work / "new"
                write_sphinx_tree(old_tree, pages, seed=1)
                write_sphinx_tree(new_tree, pages, seed=1, edit_share=0.08)
            size = sum(p.stat().st_size for p in old_tree.rglob("*") if p.is_file())
            self.stdout.write(f"tree: {old_tree} ({size / 2**20:.1f} MiB) -> {new_tree}")
            splitters = {"this": lambda folder: split_tree(folder)}
            previous = previous_splitter()
            if previous is not None:
                old_rst, new_rst = as_rst(old_tree, work / "old-rst"), as_rst(new_tree, work / "new-rst")
                splitters[f"previous ({PREVIOUS})"] = lambda folder: previous.split_tree(
                    {old_tree: old_rst, new_tree: new_rst}[folder], "rst"
                )
            else:
                self.stdout.write("the previous splitter is not in this checkout's history: this one alone")
            rng = random.Random(5)
            pages_text = {
                p.relative_to(old_tree).as_posix(): p.read_text(encoding="utf-8").split("\n")
                for p in sorted(old_tree.rglob("*"))
                if p.is_file() and p.suffix in (".txt", ".rst")
            }
            picks = [
                [
                    (page, rng.randrange(1, len(pages_text[page]) + 1))
                    for page in rng.sample(sorted(pages_text), k=1) * rng.randint(1, 3)
                ]
                for _ in range(trails)
            ]
            results = {}
            for name, split in splitters.items():
                results[name] = self.measure(name, split, old_tree, new_tree, picks, repeats)
            self.report(results, out)
            if record:
                self.record(results, f"--tree {tree} --release {release}" if tree else f"--pages {pages}")
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def measure(self, name: str, split, old_tree: Path, new_tree: Path, picks, repeats: int) -> dict:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            old = split(old_tree)
            times.append(time.perf_counter() - started)
        new = split(new_tree)
        # The previous splitter's sections are of its own class: the sync takes today's.
        old, new = ([SourceSection(s.id, s.text, s.path, s.line) for s in found] for found in (old, new))
        tokens = sorted((count_tokens(s.text), s.id) for s in old)
        scope = Scope.objects.create(scratch=True, slug=f"sync-{uuid.uuid4().hex[:8]}", matcher="lexical")
        try:
            with without_statement_timeout():
                started = time.perf_counter()
                sync_sections(scope, old, delete_missing=True)
                load_s = time.perf_counter() - started
                current = {s.section_id: s for s in Section.objects.filter(scope=scope)}
                maker, rows, pages = QuestionMaker(3), [], by_page(old)
                for pick in picks:
                    cited = list(
                        dict.fromkeys(
                            filter(None, (containing(pages, self._path(old, page), line) for page, line in pick))
                        )
                    )
                    if cited:
                        rows.append(
                            TrailRows.build(
                                scope,
                                RecordInput(
                                    query=maker.question(),
                                    cited=cited,
                                    signal="accepted",
                                    steps=[RecordedStep("search", {}, cited)],
                                ),
                                current,
                                "",
                                timezone.now(),
                            )
                        )
                TrailRows.save_all(rows)
                started = time.perf_counter()
                summary = sync_sections(scope, new, delete_missing=True, allow_removing_most=True)
                release_s = time.perf_counter() - started
                started = time.perf_counter()
                again = sync_sections(scope, new, delete_missing=True)
                rerun_s = time.perf_counter() - started
                if again.changes_anything:
                    raise CommandError(f"{name}: a rerun of the same release changed {len(again.changed)} sections")
        finally:
            drop_scope(scope)
        moved_away = summary.trails.get("prefetch → hint", 0) + summary.trails.get("prefetch → stale", 0)
        figures = {
            "sections": len(old),
            "largest_tokens": tokens[-1][0],
            "largest": tokens[-1][1],
            "over_2000_tokens": sum(1 for n, _ in tokens if n > 2000),
            "split_s": statistics.median(times),
            "first_load_s": load_s,
            "release_sync_s": release_s,
            "noop_rerun_s": rerun_s,
            "release": {
                "added": len(summary.added),
                "changed": len(summary.changed),
                "unchanged": summary.unchanged,
                "removed": len(summary.removed),
            },
            "trails": len(rows),
            "trail_moves": dict(summary.trails),
            "kept_at_prefetch": (len(rows) - moved_away) / len(rows) if rows else None,
        }
        self.stdout.write(f"{name}: {json.dumps(figures)}")
        return figures

    def record(self, results: dict, arguments: str) -> None:
        """The target's latest figure, for docs/benchmarks.md."""
        from evaluation import results as kept

        this = results["this"]
        previous = next((v for k, v in results.items() if k != "this"), None)
        if previous is None:
            return
        measured = (
            f"{this['sections']:,} sections, largest {this['largest_tokens']:,} tokens, {this['over_2000_tokens']} over "
            f"2,000 (previous: {previous['sections']:,}, {previous['largest_tokens']:,}, {previous['over_2000_tokens']}); "
            f"trails kept at prefetch **{this['kept_at_prefetch']:.1%}** against {previous['kept_at_prefetch']:.1%}; "
            f"split {this['split_s']:.1f} s against {previous['split_s']:.1f} s, release sync {this['release_sync_s']:.1f} s"
        )
        kept.record(
            "docs-release",
            target="a docs release: no section over the default prefetch budget (2,000 tokens), more "
            "trails kept at prefetch than the previous splitter",
            command=f"`benchmark_sync {arguments}`",
            measured=measured,
            met=this["over_2000_tokens"] == 0 and this["kept_at_prefetch"] >= previous["kept_at_prefetch"],
        )
        kept.write_pages()

    @staticmethod
    def _path(sections, page: str) -> str:
        # The previous splitter reads the .rst copy: its paths end in .rst where the tree's end in .txt.
        if sections and page.endswith(".txt") and sections[0].path.endswith(".rst"):
            return page[:-4] + ".rst"
        return page

    def report(self, results: dict, out: str) -> None:
        this = results["this"]
        for name, other in results.items():
            if name == "this":
                continue
            self.stdout.write(
                f"this splitter against {name}, same run: sections {this['sections']:,} vs {other['sections']:,}; "
                f"largest {this['largest_tokens']:,} vs {other['largest_tokens']:,} tokens; over 2,000 tokens "
                f"{this['over_2000_tokens']} vs {other['over_2000_tokens']}; split {this['split_s']:.2f} vs {other['split_s']:.2f} s "
                f"(ratio {this['split_s'] / other['split_s']:.2f}); release sync {this['release_sync_s']:.2f} vs "
                f"{other['release_sync_s']:.2f} s; trails kept at prefetch {this['kept_at_prefetch']:.1%} vs "
                f"{other['kept_at_prefetch']:.1%}"
            )
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"sync-{timezone.now():%Y%m%d-%H%M%S}.json"
        path.write_text(
            json.dumps({"at": timezone.now().isoformat(), "commit": _commit(), "results": results}, indent=2)
        )
        self.stdout.write(f"figures written to {path}")


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=settings.BASE_DIR
        ).stdout.strip()
    except OSError:
        return ""
