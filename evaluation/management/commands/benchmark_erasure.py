"""What an erasure's preview costs: a long subject against a scope of 10,000 and 100,000 trails
(and as many recall events), each text folded once with the subject's identifiers looked up by
their first word, side by side with the shape before (every identifier folding every text)."""

from __future__ import annotations

import os
import random
import time
from unittest import mock

from django.core.management.base import BaseCommand
from django.utils import timezone

from evaluation import results
from evaluation.bulk import bulk_transaction, drop_scope
from scopes.models import Scope
from trails.core import pii
from trails.models import PurgeRun, RecallEvent, Trail, writes
from trails.upkeep import purge

FIRST = ["Jane", "Søren", "Işık", "Łukasz", "Zoë", "Mary", "Omar", "Chen", "Ana", "Piotr", "Ingrid", "Kofi"]
LAST = ["Doe", "Kierkegaard", "Yılmaz", "Nowak", "Åberg", "Major", "Haddad", "Wei", "Silva", "Zieliński"]
TOPICS = ["park the car", "visit the ICU", "find the canteen", "pay the invoice", "see the chaplain", "get a taxi"]


def _questions(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [
        f"Can {rng.choice(FIRST)} {rng.choice(LAST)} {rng.choice(TOPICS)} on ward {rng.randint(1, 40)} today?"
        for _ in range(count)
    ]


def _subject(lines: int) -> str:
    return "\n".join(f"Person{n} Surname{n}" for n in range(lines - 2)) + "\nJane Doe\nSøren Kierkegaard"


def _fold_per_identifier(subject: str):
    """The shape before: one rule per identifier, each folding the text again."""
    rules = [pii.subject_rule(identifier) for identifier in pii.identifiers(subject)]
    return lambda text, _rules: sorted(("subject", a, b) for rule in rules for a, b in rule.spans(text))


class Command(BaseCommand):
    help = "Times an erasure's preview with a long subject at 10,000 and 100,000 trails, against the shape before."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--sizes", default="10000,100000", help="trail counts (and as many recall events)")
        parser.add_argument(
            "--before", action="store_true", help="also time the shape before at the smallest size (minutes)"
        )
        parser.add_argument("--record", action="store_true", help="keep the figures in docs/benchmark-results.json")

    def handle(self, *args, sizes: str, before: bool, record: bool, **options) -> None:
        texts = _questions(2000)
        long_subject = _subject(499)
        started = time.perf_counter()
        rules = pii.rules_for(subject=long_subject, builtin=False)
        found_now = [bool(pii.find(text, rules)) for text in texts]
        per_text_now = (time.perf_counter() - started) / len(texts)
        per_identifier = _fold_per_identifier(long_subject)
        started = time.perf_counter()
        found_before = [bool(per_identifier(text, None)) for text in texts[:200]]
        per_text_before = (time.perf_counter() - started) / 200
        if found_before != found_now[:200]:
            raise AssertionError("the two shapes disagree on which texts hold the subject")
        self.stdout.write(
            f"a 499-line subject, per text: {per_text_now * 1e6:.0f} µs folded once against "
            f"{per_text_before * 1e6:.0f} µs folded per identifier ({per_text_before / per_text_now:.0f}x)"
        )
        subject = _subject(pii.MAX_IDENTIFIERS)
        measured, counts = [], [int(size) for size in sizes.split(",")]
        for count in counts:
            scope = self._fill(count)
            try:
                seconds = self._preview(scope, subject)
                line = f"{count:,} trails and {count:,} recall events, a {pii.MAX_IDENTIFIERS}-line subject: preview {seconds:.1f} s"
                if before and count == min(counts):
                    with mock.patch.object(pii, "find", _fold_per_identifier(subject)):
                        old = self._preview(scope, subject)
                    line += f" against {old:.1f} s folded per identifier ({old / seconds:.1f}x)"
                self.stdout.write(line)
                measured.append((count, seconds))
            finally:
                drop_scope(scope)
        if record:
            results.record(
                "erasure-preview",
                say=self.stdout.write,
                target="an erasure's preview with the longest subject allowed ends within gunicorn's 30 s worker timeout at 100,000 trails",
                command="`benchmark_erasure --record` (trails and as many recall events with raw queries; a "
                f"{pii.MAX_IDENTIFIERS}-identifier subject, the most a subject may have)",
                measured="; ".join(f"{count:,} trails: {seconds:.1f} s" for count, seconds in measured)
                + f"; a 499-line subject per text {per_text_now * 1e6:.0f} µs against {per_text_before * 1e6:.0f} µs "
                f"folding per identifier (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)",
                met=all(seconds < 30 for _, seconds in measured),
            )

    def _preview(self, scope: Scope, subject: str) -> float:
        run = PurgeRun.request(scope, subject, delete=False, requested_by="benchmark")
        started = time.perf_counter()
        purge.preview(run)
        purge.preview_records(run)
        return time.perf_counter() - started

    def _fill(self, count: int) -> Scope:
        scope = Scope.objects.create(slug=f"bench-erasure-{count}-{random.randint(0, 10**6)}", keep_raw_queries=True)
        questions = _questions(count, seed=count)
        writes.bulk_load(lambda: self._load(scope, questions))
        return scope

    def _load(self, scope: Scope, questions: list[str]) -> None:
        with bulk_transaction():
            now = timezone.now()
            Trail.objects.bulk_create(
                [
                    Trail.start(
                        scope,
                        signalled=True,
                        now=now,
                        query=q,
                        normalised_query=q.lower(),
                        lexical_params="minhash:128:1:fold3",
                        lexical_signature=b"",
                        band_layout="",
                    )
                    for q in questions
                ],
                batch_size=5000,
            )
            RecallEvent.objects.bulk_create(
                [
                    RecallEvent(scope=scope, outcome="miss", latency_ms=1.0, query=q, feedback_reason=q)
                    for q in questions
                ],
                batch_size=5000,
            )
