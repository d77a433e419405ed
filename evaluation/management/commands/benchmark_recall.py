"""Recall latency and record throughput at 10,000 and 100,000 trails, on the configured database."""

from __future__ import annotations

import statistics
import time
import uuid
from contextlib import nullcontext

from django.core.management.base import BaseCommand
from django.db import connection
from django.utils import timezone

from evaluation.bulk import drop_scope
from evaluation.questions import QuestionMaker
from evaluation.scale import vacuum_analyze
from evaluation.timing import percentile
from scopes.demo import faq_sections
from scopes.models import Scope, Section
from trails.core.hint import RecordedStep
from trails.embedders import PrecomputedEmbedder, get_embedder, serving
from trails.serving.matching import matching_settings
from trails.serving.recall import recall
from trails.serving.record import RecordInput, TrailRows, record


class Command(BaseCommand):
    help = "Prints recall p50/p99 latency and record throughput at growing trail counts (in-process, real database)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
        parser.add_argument(
            "--recalls", type=int, default=2000, help="recalls timed at each size (half hits, half misses)"
        )
        parser.add_argument("--records", type=int, default=1000, help="records timed for throughput")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--matcher", choices=["lexical", "embedding"], default="lexical")
        parser.add_argument("--keep", action="store_true", help="keep the benchmark scope afterwards")
        parser.add_argument(
            "--analyze",
            action="store_true",
            help="ANALYZE after each fill (PostgreSQL); by default the statistics are the ones taken before the "
            "scope grew, as for a new tenant growing inside a big table with autovacuum behind",
        )

    def handle(self, *args, sizes, recalls, records, seed, keep, matcher, analyze, **options) -> None:
        vendor = connection.vendor
        self.analyze = analyze
        if vendor == "postgresql":
            vacuum_analyze()  # the last statistics before the benchmark scope grows
        scope = Scope.objects.create(
            scratch=True, slug=f"bench-{uuid.uuid4().hex[:8]}", name="benchmark", matcher=matcher
        )
        try:
            self._run(scope, sorted(sizes), recalls, records, seed, vendor)
        finally:
            if not keep:
                drop_scope(scope)

    @staticmethod
    def _precomputed(texts: list[str], embedding: bool):
        """Embeds the texts in one batch for the block (embedding matcher only)."""
        return serving(PrecomputedEmbedder(get_embedder(), texts)) if embedding else nullcontext()

    def _time_recalls(self, scope: Scope, asked: list[tuple[bool, str]]):
        """Times recall of each (is a stored question, query); the first 50 warm up."""
        hits, misses, candidates, query_counts = [], [], [], []
        found = 0
        for i, (is_hit, query) in enumerate(asked):
            statements = [0]

            def count(execute, sql, params, many, context):
                statements[0] += 1
                return execute(sql, params, many, context)

            with connection.execute_wrapper(count):
                t0 = time.perf_counter()
                result = recall(scope, query)
                elapsed = (time.perf_counter() - t0) * 1000.0
            if i < 50:
                continue  # warm-up: connections, caches, permutations, the model
            (hits if is_hit else misses).append(elapsed)
            candidates.append(result.candidates)
            found += is_hit and result.outcome.value == "prefetch"
            query_counts.append(statements[0])
        return hits, misses, candidates, query_counts, found

    def _run(self, scope: Scope, sizes: list[int], recalls: int, records: int, seed: int, vendor: str) -> None:
        maker = QuestionMaker(seed)
        texts = dict(list(faq_sections("old").items())[:200])
        Section.upsert(scope, texts)
        current = {s.section_id: s for s in Section.objects.filter(scope=scope)}
        section_ids = list(texts)
        stored: list[str] = []
        embedding = scope.uses_embedding
        matching = matching_settings(scope)
        layout = matching.embedding_layout.label if embedding else matching.lexical_layout.label
        statistics_note = (
            "ANALYZE after each fill" if self.analyze else "statistics from before the scope grew (no ANALYZE)"
        )
        self.stdout.write(f"database: {vendor}; matcher {scope.matcher}; band layout {layout}; {statistics_note}")
        if embedding:
            self.stdout.write("embedding: p50/p99 and hit/miss exclude embedding the query; 'incl.' is p50 with it")
        self.stdout.write(
            f"{'trails':>8} {'p50 ms':>7} {'p99 ms':>7} {'hit p50':>8} {'miss p50':>9} {'queries':>8} {'cands':>6} {'fill s':>7}"
            + (f" {'incl. p50':>10} {'incl. p99':>10}" if embedding else "")
        )

        results = {}
        for size in sizes:
            started = time.perf_counter()
            now = timezone.now()
            while len(stored) < size:
                questions = [maker.question() for _ in range(min(5000, size - len(stored)))]
                with self._precomputed(questions, embedding):
                    batch = []
                    for query in questions:
                        cited = maker.random.sample(section_ids, 2)
                        batch.append(
                            TrailRows.build(
                                scope,
                                RecordInput(
                                    query=query,
                                    cited=cited,
                                    signal="accepted",
                                    steps=[RecordedStep("search", {"query": query}, cited)],
                                ),
                                current,
                                "",
                                now,
                            )
                        )
                TrailRows.save_all(batch)
                stored.extend(questions)
            fill = time.perf_counter() - started
            if vendor == "postgresql" and self.analyze:
                vacuum_analyze()

            asked = [
                (i % 2 == 0, maker.random.choice(stored) if i % 2 == 0 else maker.question())
                for i in range(recalls + 50)
            ]
            with self._precomputed([q for _, q in asked], embedding):
                timing = self._time_recalls(scope, asked)
            hits, misses, candidates, query_counts, found = timing
            both = hits + misses
            results[size] = statistics.median(both)
            line = (
                f"{size:>8} {statistics.median(both):7.2f} {percentile(both, 0.99):7.2f} {statistics.median(hits):8.2f} "
                f"{statistics.median(misses):9.2f} {statistics.mean(query_counts):8.1f} {statistics.mean(candidates):6.2f} {fill:7.1f}"
            )
            if embedding:
                with_model = self._time_recalls(scope, asked[: min(len(asked), 550)])
                total = with_model[0] + with_model[1]
                line += f" {statistics.median(total):10.2f} {percentile(total, 0.99):10.2f}"
            self.stdout.write(line + f"  (stored questions answered prefetch: {found}/{len(hits)})")
        if len(results) > 1:
            low, high = results[min(results)], results[max(results)]
            self.stdout.write(f"recall p50 ratio {max(results)}/{min(results)} trails: {high / low:.2f}x")

        started = time.perf_counter()
        for _ in range(records):
            query = maker.question()
            cited = maker.random.sample(section_ids, 2)
            record(
                scope,
                RecordInput(
                    query=query, cited=cited, signal="accepted", steps=[RecordedStep("search", {"query": query}, cited)]
                ),
            )
        elapsed = time.perf_counter() - started
        self.stdout.write(
            f"record: {records} trails in {elapsed:.2f} s = {records / elapsed:.0f} trails/s (one transaction each)"
        )
