"""Evaluation harness (in progress): the staleness experiment on the shipped Python FAQ."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from scopes.demo import FAQ_DIR, faq_questions, faq_sections
from trails.evaluation import random_edit, staleness


class Command(BaseCommand):
    help = ("Staleness: oracle trails on the FAQ at v3.6.0, then the real v3.11.0 edits and random edits of "
            "5/10/20/50 %% of the cited sections; ragtrail against a text cache. Writes report.json to --out.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--out", required=True)
        parser.add_argument("--matcher", default="embedding", choices=["lexical", "embedding", "both"])
        parser.add_argument("--seed", type=int, default=1)

    def handle(self, *args, out: str, matcher: str, seed: int, **options) -> None:
        old, new = faq_sections("old"), faq_sections("new")
        rows = [q for q in faq_questions() if "old" in q["present_in"]]
        texts = [q["question"] for q in rows]
        # A question heading two entries is one question: it is left out.
        questions = [(q["question"], q["section_id"]) for q in rows if texts.count(q["question"]) == 1]
        ids = [s for _, s in questions]
        edits = [("real revision v3.6.0 -> v3.11.0", new)] + [
            (f"random {int(share * 100)} %", random_edit(old, ids, share, seed)) for share in (0.05, 0.10, 0.20, 0.50)
        ]
        results = []
        self.stdout.write(f"{len(questions)} questions, matcher {matcher}")
        self.stdout.write(f"{'edit':32} {'changed':>7} | {'ragtrail: stale':>15} {'prefetch':>8} {'hint':>5} {'miss':>5} | {'text cache: stale':>17} {'share':>6}")
        for name, after in edits:
            result = staleness(old, after, questions, name, matcher)
            r, t = result.ragtrail, result.text_cache
            self.stdout.write(f"{name:32} {result.changed_sections:7} | {r.stale_served:15} {r.prefetch_kept:8} {r.hint:5} {r.miss:5} | "
                              f"{t.stale_served:17} {t.stale_share:6.1%}")
            results.append(result.as_json())
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=settings.BASE_DIR).stdout.strip()
        report = {
            "experiment": "staleness",
            "git_commit": commit,
            "data": json.loads((FAQ_DIR / "build-info.json").read_text())["files_sha256"],
            "settings": {"matcher": matcher, "seed": seed},
            "results": results,
        }
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "report.json").write_text(json.dumps(report, indent=2))
        self.stdout.write(f"report: {folder / 'report.json'}")
