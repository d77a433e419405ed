"""Matching quality on labelled question pairs, through the product's record and recall code.

Protocol (issue 7): every distinct `a` is stored as an accepted trail, every `b` is
recalled. For a duplicate pair a hit on its own `a` (or on a stored question whose
normalised text equals the query's) is correct, any other hit wrong. For a
non-duplicate pair a hit on its own `a` is a false hit; hits on other stored
questions are counted apart (some are paraphrases the labels do not cover).
Figures are given for the whole file and for its two halves (pairs at even and
odd line numbers): thresholds were chosen on the even half.
"""
from __future__ import annotations

import json
import statistics
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand
from django.utils import timezone

from scopes.models import Scope, Section
from trails.core.normalise import normalise_query
from trails.embedders import PrecomputedEmbedder, get_embedder, serving
from trails.management.commands.ragtrail_bench import drop_scope
from trails.matching import score_candidates, sign
from trails.models import Trail, TrailStatus
from trails.recall import recall
from trails.record import RecordInput, TrailRows

DEFAULT_PAIRS = Path(settings.BASE_DIR).parent / "shared" / "data" / "qqp-pairs-dev.jsonl"
SWEEP = {
    "lexical": [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
    "embedding": [0.90, 0.92, 0.93, 0.935, 0.9375, 0.94, 0.945, 0.95, 0.96],
}


@dataclass
class Tally:
    correct: int = 0
    wrong: int = 0
    false: int = 0
    other: int = 0
    duplicates: int = 0
    distinct: int = 0

    def add(self, pair: dict, hit: str | None) -> None:
        asked, own = normalise_query(pair["b"]), normalise_query(pair["a"])
        if pair["duplicate"]:
            self.duplicates += 1
            if hit is not None and hit in (own, asked):
                self.correct += 1
            elif hit is not None:
                self.wrong += 1
        else:
            self.distinct += 1
            if hit == own:
                self.false += 1
            elif hit is not None and hit != asked:
                self.other += 1

    def row(self) -> str:
        d, n = max(1, self.duplicates), max(1, self.distinct)
        return (f"correct {self.correct / d:6.2%}  wrong {self.wrong / d:6.2%}  false {self.false / n:6.2%}  "
                f"other {self.other / n:6.2%}")


class Command(BaseCommand):
    help = "Correct-hit and false-hit rates per matcher and threshold on labelled pairs (default: the Quora dev file)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--pairs", default=str(DEFAULT_PAIRS))
        parser.add_argument("--limit", type=int, default=0, help="use only the first N pairs")

    def handle(self, *args, pairs: str, limit: int, **options) -> None:
        with open(pairs, encoding="utf-8") as rows:
            data = [json.loads(line) for line in rows]
        data = [p for p in data[: limit or None] if normalise_query(p["a"]) and normalise_query(p["b"])]
        texts = sorted({p["a"] for p in data} | {p["b"] for p in data})
        started = time.perf_counter()
        with serving(PrecomputedEmbedder(get_embedder(), texts)) as embedder:
            self.stdout.write(f"{len(data)} pairs, {len(texts)} distinct questions embedded in "
                              f"{time.perf_counter() - started:.0f} s ({embedder.name})")
            self._sweep(data)
            for matcher in ("lexical", "embedding", "both"):
                self._defaults(data, matcher)

    def _scope(self, **fields) -> Scope:
        scope = Scope.objects.create(slug=f"match-{uuid.uuid4().hex[:8]}", **fields)
        Section.upsert(scope, {"s": "a section"})
        return scope

    def _store(self, scope: Scope, data: list[dict]) -> dict[int, str]:
        """Stores every distinct `a` (by normalised text) through the record pipeline's rows."""
        current = {s.section_id: s for s in Section.objects.filter(scope=scope)}
        seen, batch, now = set(), [], timezone.now()
        for pair in data:
            key = normalise_query(pair["a"])
            if key in seen:
                continue
            seen.add(key)
            batch.append(TrailRows.build(scope, RecordInput(query=pair["a"], cited=["s"], signal="accepted"), current, TrailStatus.ACTIVE, "", now))
        for start in range(0, len(batch), 2000):
            TrailRows.save_all(batch[start:start + 2000])
        return {t.id: t.normalised_query for t in Trail.objects.filter(scope=scope).only("id", "normalised_query")}

    def _sweep(self, data: list[dict]) -> None:
        """One store with the lowest thresholds' band layouts; every threshold evaluated on its candidates."""
        scope = self._scope(matcher="both", lexical_threshold=min(SWEEP["lexical"]), embedding_threshold=min(SWEEP["embedding"]))
        try:
            names = self._store(scope, data)
            now = timezone.now()
            tallies = {(m, t, half): Tally() for m in SWEEP for t in SWEEP[m] for half in ("all", "even", "odd")}
            for index, pair in enumerate(data):
                question = sign(scope, pair["b"], "")
                found = Trail.objects.candidates(scope, "", question.keys, now, with_paths=False)
                for matcher in SWEEP:
                    scope.matcher = matcher
                    matches = score_candidates(scope, question, found)
                    for threshold in SWEEP[matcher]:
                        best = next((m for m in matches if m.similarity >= threshold), None)
                        hit = names[best.trail.id] if best else None
                        for half in ("all", "even" if index % 2 == 0 else "odd"):
                            tallies[(matcher, threshold, half)].add(pair, hit)
            self.stdout.write("\nSweep (candidates from the band layout of the lowest threshold; all pairs | even half | odd half)")
            for matcher in SWEEP:
                for threshold in SWEEP[matcher]:
                    self.stdout.write(f"{matcher:9} {threshold:<6}  " + " | ".join(tallies[(matcher, threshold, h)].row() for h in ("all", "even", "odd")))
        finally:
            drop_scope(scope)

    def _defaults(self, data: list[dict], matcher: str) -> None:
        """The operating point a new scope with this matcher gets: record, then recall (dry run)."""
        scope = self._scope(matcher=matcher)
        try:
            names = self._store(scope, data)
            tallies = {h: Tally() for h in ("all", "even", "odd")}
            latencies, candidates = [], []
            for index, pair in enumerate(data):
                started = time.perf_counter()
                result = recall(scope, pair["b"], dry_run=True)
                latencies.append((time.perf_counter() - started) * 1000)
                candidates.append(result.candidates)
                hit = names[result.trail.id] if result.trail and result.outcome.value != "miss" else None
                for half in ("all", "even" if index % 2 == 0 else "odd"):
                    tallies[half].add(pair, hit)
            threshold = scope.embedding_threshold if matcher == "embedding" else scope.lexical_threshold
            label = f"{matcher} default" + ("" if matcher == "both" else f" @ {threshold}")
            self.stdout.write(f"\n{label}: " + " | ".join(tallies[h].row() for h in ("all", "even", "odd")))
            self.stdout.write(f"  recall p50 {statistics.median(latencies):.2f} ms (embedding served from the batch), "
                              f"candidates per lookup {statistics.mean(candidates):.2f}")
        finally:
            drop_scope(scope)
