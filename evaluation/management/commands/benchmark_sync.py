"""How long a docs release takes: 10,000 sections in Markdown pages, 1 % of them changed."""
from __future__ import annotations

import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from django.core.management.base import BaseCommand
from django.utils import timezone

from evaluation.questions import QuestionMaker
from scopes.models import Scope, Section
from scopes.splitting import split_tree
from trails.core.hint import RecordedStep
from evaluation.bulk import drop_scope
from trails.serving.record import RecordInput, TrailRows
from trails.upkeep.sync import sync_sections


def write_pages(folder: Path, pages: int, per_page: int, edits: dict[tuple[int, int], str]) -> None:
    for page in range(pages):
        lines = [f"# Page {page}", ""]
        for entry in range(per_page):
            body = edits.get((page, entry), f"Answer {page}.{entry}: " + "lorem ipsum dolor sit amet " * 12)
            lines += [f"## Question {page}.{entry}", "", body, "", "```python", f"print({page}, {entry})", "```", ""]
        (folder / f"page-{page:04d}.md").write_text("\n".join(lines), encoding="utf-8")


class Command(BaseCommand):
    help = "Times split + sync of 10,000 Markdown sections: the first load, a release with 1 % changed, a no-op rerun."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--sections", type=int, default=10_000)
        parser.add_argument("--changed", type=float, default=0.01)
        parser.add_argument("--trails", type=int, default=2_000)
        parser.add_argument("--repeats", type=int, default=3)

    def handle(self, *args, sections: int, changed: float, trails: int, repeats: int, **options) -> None:
        per_page = 100
        pages = max(1, sections // per_page)
        scope = Scope.objects.create(scratch=True, slug=f"sync-{uuid.uuid4().hex[:8]}", matcher="lexical")
        rng = random.Random(11)
        try:
            with tempfile.TemporaryDirectory() as folder_name:
                folder = Path(folder_name)
                write_pages(folder, pages, per_page, {})
                started = time.perf_counter()
                split = split_tree(folder)
                split_s = time.perf_counter() - started
                started = time.perf_counter()
                sync_sections(scope, split, delete_missing=True)
                load_s = time.perf_counter() - started
                self.stdout.write(f"{len(split)} sections in {pages} pages: split {split_s:.2f} s, first load {load_s:.2f} s")

                ids = [s.id for s in split]
                current = {s.section_id: s for s in Section.objects.filter(scope=scope)}
                maker = QuestionMaker(3)
                rows = []
                for _ in range(trails):
                    cited = rng.sample(ids, 2)
                    rows.append(TrailRows.build(scope, RecordInput(query=maker.question(), cited=cited, signal="accepted",
                                                                   steps=[RecordedStep("search", {}, cited)]),
                                                current, "", timezone.now()))
                TrailRows.save_all(rows)

                release, noop = [], []
                edits: dict[tuple[int, int], str] = {}
                for round_ in range(repeats):
                    # Each round edits a fresh 1 % (earlier edits stay), as successive releases do.
                    fresh = [(p, e) for p in range(pages) for e in range(per_page) if (p, e) not in edits]
                    edits.update({key: f"Edited in round {round_}." for key in rng.sample(fresh, int(pages * per_page * changed))})
                    write_pages(folder, pages, per_page, edits)
                    started = time.perf_counter()
                    summary = sync_sections(scope, split_tree(folder), delete_missing=True)
                    release.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    again = sync_sections(scope, split_tree(folder), delete_missing=True)
                    noop.append(time.perf_counter() - started)
                    assert again.added == again.changed == again.removed == [], "a rerun changed something"
                    self.stdout.write(f"round {round_ + 1}: {len(summary.changed)} changed (of {len(ids)}), served trails moved "
                                      f"{dict(summary.trails)}: {release[-1]:.2f} s; the no-op rerun {noop[-1]:.2f} s")
                self.stdout.write(
                    f"median split + sync, {changed:.0%} changed: {statistics.median(release):.2f} s; no-op rerun "
                    f"{statistics.median(noop):.2f} s; ratio release / no-op {statistics.median(release) / statistics.median(noop):.2f}, "
                    f"release / first load {statistics.median(release) / load_s:.2f} (same run)"
                )
        finally:
            drop_scope(scope)
