"""Embedding recall as one scope grows to a million trails of real-looking questions,
against brute-force cosine over the same store (evaluation.scale)."""

from __future__ import annotations

import json
import re
import statistics
import time
import uuid
from contextlib import nullcontext
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from evaluation import phases
from evaluation.bulk import bulk_transaction, drop_scope
from evaluation.scale import (
    ScaleWorkload,
    database_label,
    faq_sections_for,
    footprint,
    indexes_built_after,
    store_citing_two,
    vacuum_analyze,
)
from evaluation.scale_records import against, record_scale
from evaluation.timing import WARM_UP, percentile, save_figures
from scopes.models import Scope
from trails.embedders import PrecomputedEmbedder, get_embedder, serving
from trails.models import Trail
from trails.serving.candidates import Candidate
from trails.serving.matching import matching_settings, score_candidates, sign
from trails.serving.recall import recall


class Command(BaseCommand):
    help = "Prints embedding recall latency, candidates per lookup and hit rates against brute force at growing store sizes."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
        parser.add_argument("--recalls", type=int, default=2000, help="questions timed at each size")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--json", dest="json_path", type=Path, help="also write the figures to this file")
        parser.add_argument(
            "--answers-like",
            type=Path,
            metavar="JSON",
            help="a previous run's --json (same seed and sizes): prints how many questions got the same answer, and how the disk per trail changed",
        )
        parser.add_argument(
            "--record",
            action="store_true",
            help="keep the disk per trail at the largest size (and, with --interleaved, its ratio to the small store) "
            "in docs/benchmark-results.json",
        )
        parser.add_argument("--keep", action="store_true", help="keep the benchmark scope afterwards")
        parser.add_argument(
            "--reuse",
            metavar="SLUG",
            help="measure a scope kept by an earlier run (same seed), filling only past its trails",
        )
        parser.add_argument("--analyze", action="store_true", help="VACUUM ANALYZE after each fill (PostgreSQL)")
        parser.add_argument(
            "--scopes",
            type=int,
            default=1,
            metavar="N",
            help="the store holds N scopes of the largest size, each asked the same questions (tenants alike); recall is timed on the first",
        )
        parser.add_argument(
            "--interleaved",
            type=int,
            metavar="SMALL",
            default=0,
            help="then a second scope of SMALL trails, and recall on the two alternately (one process, the same questions)",
        )
        parser.add_argument(
            "--against-fillfactor",
            type=int,
            metavar="PERCENT",
            help="then a second store as large, filled at this fillfactor, and recall on the two alternately",
        )
        parser.add_argument(
            "--indexes-after",
            action="store_true",
            help="drop the trail tables' indexes that hold no constraint during the fill and build them after it (PostgreSQL; "
            "the fill time includes the builds)",
        )
        parser.add_argument(
            "--index-workers",
            type=int,
            default=2,
            metavar="N",
            help="with --indexes-after: connections building indexes at once, a table's on one (default 2)",
        )
        parser.add_argument(
            "--index-memory",
            default="",
            metavar="SIZE",
            help="with --indexes-after: maintenance_work_mem for the builds, e.g. 4GB (default: the server's)",
        )
        parser.add_argument(
            "--fillfactor",
            type=int,
            metavar="PERCENT",
            help="the trails table's fillfactor for this run's fill (PostgreSQL; the migrations set 80), restored afterwards",
        )

    def handle(
        self,
        *args,
        sizes,
        recalls,
        seed,
        json_path: Path | None,
        keep,
        analyze,
        reuse,
        interleaved: int = 0,
        answers_like: Path | None = None,
        record: bool = False,
        scopes: int = 1,
        fillfactor: int | None = None,
        against_fillfactor: int | None = None,
        indexes_after: bool = False,
        index_workers: int = 2,
        index_memory: str = "",
        **options,
    ) -> None:
        if index_workers < 1:
            raise CommandError("--index-workers must be 1 or more")
        if index_memory and not re.fullmatch(r"\d+(kB|MB|GB)", index_memory):
            raise CommandError("--index-memory takes a size such as 512MB or 4GB")
        # How the fill builds its indexes after the rows; None: row by row, as record writes them.
        index_build = {"workers": index_workers, "maintenance_work_mem": index_memory} if indexes_after else None
        for given in (fillfactor, against_fillfactor):
            if given is not None and not 10 <= given <= 100:
                raise CommandError("--fillfactor and --against-fillfactor must be between 10 and 100")
        embedder = get_embedder()
        started = time.perf_counter()
        workload = ScaleWorkload(embedder, seed)
        asked = workload.asked(recalls + WARM_UP)
        self.stdout.write(
            f"workload: {len(workload.base_texts)} QQP questions embedded by {embedder.name} "
            f"({time.perf_counter() - started:.0f} s), grown with variants; {len(asked)} questions asked at each size"
        )
        if reuse:
            scope, keep = Scope.objects.get(slug=reuse), True
        else:
            scope = Scope.objects.create(
                scratch=True, slug=f"bench-scale-{uuid.uuid4().hex[:8]}", name="scale benchmark", matcher="embedding"
            )
        if scopes < 1:
            raise CommandError("--scopes must be at least 1")
        previous_fillfactor = self._set_fillfactor(fillfactor) if fillfactor is not None else None
        self.others: list[Scope] = []
        try:
            figures = self._run(scope, workload, asked, sorted(sizes), analyze, scopes, index_build)
            figures["fillfactor"] = self._fillfactor()
            if interleaved:
                figures["interleaved"] = self._interleaved(scope, max(sizes), workload, asked, interleaved, analyze)
            if against_fillfactor is not None:
                figures["against_fillfactor"] = self._interleaved(
                    scope, max(sizes), workload, asked, max(sizes), analyze, fillfactor=against_fillfactor
                )
        finally:
            if fillfactor is not None:
                self._set_fillfactor(previous_fillfactor)
            for other in self.others if not keep else []:
                drop_scope(other)
            if not keep:
                drop_scope(scope)
            else:
                self.stdout.write(f"kept scope {scope.slug} (--reuse {scope.slug})")
        if answers_like:
            figures["against"] = against(self.stdout.write, json.loads(answers_like.read_text()), figures)
        if record:
            record_scale(self.stdout.write, figures, max(sizes), interleaved, answers_like, scopes)
        save_figures(json_path, figures)

    @staticmethod
    def _fillfactor() -> int | None:
        """The trails table's fillfactor as PostgreSQL has it (100 when unset); None elsewhere."""
        if connection.vendor != "postgresql":
            return None
        with connection.cursor() as cursor:
            cursor.execute("SELECT reloptions FROM pg_class WHERE relname = %s", [Trail._meta.db_table])
            options = cursor.fetchone()[0] or []
        return next((int(o.split("=", 1)[1]) for o in options if o.startswith("fillfactor=")), 100)

    def _set_fillfactor(self, percent: int | None) -> int | None:
        """Sets the trails table's fillfactor (None resets it); returns the one it had."""
        previous = self._fillfactor()
        if previous is None:
            return None
        with connection.cursor() as cursor:
            table = Trail._meta.db_table
            cursor.execute(
                f"ALTER TABLE {table} SET (fillfactor = {int(percent)})"
                if percent
                else f"ALTER TABLE {table} RESET (fillfactor)"
            )
        self.stdout.write(f"trails table fillfactor {percent or 100} for this run (was {previous})")
        return previous

    def _fill_others(self, count: int, workload: ScaleWorkload, size: int) -> None:
        """Fills `count` more scopes with the store's first `size` questions (their time counts in the fill's)."""
        started = time.perf_counter()
        texts, vectors = workload.first(size)
        for n in range(count):
            other = Scope.objects.create(
                scratch=True,
                slug=f"bench-scale-tenant-{uuid.uuid4().hex[:8]}",
                name="scale benchmark (tenant)",
                matcher="embedding",
            )
            self.others.append(other)
            store_citing_two(other, texts, vectors, faq_sections_for(other), seed=size + n)
            if (n + 1) % 10 == 0 or n + 1 == count:
                self.stdout.write(f"  {n + 1} of {count} more scopes filled ({time.perf_counter() - started:.0f} s)")

    def _run(
        self,
        scope: Scope,
        workload: ScaleWorkload,
        asked,
        sizes: list[int],
        analyze: bool,
        scopes: int = 1,
        index_build: dict | None = None,
    ) -> dict:
        current = faq_sections_for(scope)
        # A kept scope's trails are the workload's first ones, in id order (the same seed).
        # From a cold cache a kept million-trail scope's ids took longer than the service's 5 s.
        with bulk_transaction():
            ids: list[int] = list(Trail.objects.filter(scope=scope).order_by("id").values_list("id", flat=True))
        workload.grow(len(ids))
        matching = matching_settings(scope)
        threshold = matching.embedding_threshold
        database = database_label()
        self.stdout.write(
            f"database: {database}; threshold {threshold}; band layout {matching.embedding_layout.label}; "
            f"sketch limit {matching.embedding_sketch_limit} bits, nearest {settings.RAGTRAIL_EMBEDDING_NEAREST} read; "
            + ("VACUUM ANALYZE after each fill" if analyze else "statistics and visibility as left by autovacuum")
        )
        self.stdout.write(
            "latency: recall() in-process with its event write, excluding the query embedding (vectors precomputed)"
        )
        self.stdout.write(
            f"{'trails':>9} {'p50 ms':>7} {'p99 ms':>7} {'hit p50':>8} {'miss p50':>9} {'cands':>6} {'c p99':>6} "
            f"{'fill s':>7}  correct hits (index / brute force)  false hits (index / brute force)  index missed"
        )
        figures: dict = {
            "threshold": threshold,
            "layout": matching.embedding_layout.label,
            "database": database,
            "sizes": {},
        }
        for size in sizes:
            if size < len(ids):
                raise CommandError(f"the kept scope holds {len(ids):,} trails, more than {size:,}")
            started = time.perf_counter()
            texts, vectors = workload.grow(size)
            with (
                indexes_built_after(self.stdout.write, **index_build)
                if index_build is not None
                else nullcontext({}) as built
            ):
                ids += store_citing_two(scope, texts, vectors, current, seed=size)
                if size == sizes[-1] and scopes > 1:
                    self._fill_others(scopes - 1, workload, size)
                    figures["store"] = {"scopes": scopes, "trails": scopes * size}
            fill = time.perf_counter() - started
            started = time.perf_counter()
            if analyze:
                vacuum_analyze()
            analyzed = time.perf_counter() - started
            figures["sizes"][size] = row = self._measure(scope, workload, asked, ids, size, threshold, fill)
            if built:
                row["index_build_s"] = round(built["seconds"], 1)
            if analyze:
                row["analyze_s"] = round(analyzed, 1)
        low, high = figures["sizes"][sizes[0]], figures["sizes"][sizes[-1]]
        if len(sizes) > 1:
            figures["p50_ratio"] = round(high["p50_ms"] / low["p50_ms"], 2)
            figures["p99_ratio"] = round(high["p99_ms"] / low["p99_ms"], 2)
            self.stdout.write(
                f"p50 {sizes[-1]:,}/{sizes[0]:,} trails: {figures['p50_ratio']:.2f}x; p99: {figures['p99_ratio']:.2f}x"
            )
        return figures

    def _interleaved(
        self,
        large: Scope,
        size: int,
        workload: ScaleWorkload,
        asked,
        small_size: int,
        analyze: bool,
        fillfactor: int | None = None,
    ) -> dict:
        """Recall on the large store and on a small one, alternating question by question in
        this process: a slow minute of the machine lands on both, so their ratio is the store's.
        With a fillfactor, the second store is filled at it (the trails table's setting for its
        pages only): the ratio is then the fillfactor's."""
        previous = self._set_fillfactor(fillfactor) if fillfactor is not None else None
        small = Scope.objects.create(
            scratch=True,
            slug=f"bench-scale-small-{uuid.uuid4().hex[:8]}",
            name="scale benchmark (small)",
            matcher="embedding",
        )
        try:
            # The large store's first questions: grow() hands out only questions not handed out before.
            texts, vectors = workload.first(small_size)
            try:
                store_citing_two(small, texts, vectors, faq_sections_for(small), seed=small_size)
            finally:
                if fillfactor is not None:
                    self._set_fillfactor(previous)
            if analyze:
                vacuum_analyze()
            with (
                serving(
                    PrecomputedEmbedder(get_embedder(), [a.text for a in asked], np.stack([a.vector for a in asked]))
                ),
                phases.timing() as clock,
            ):
                spent, _ = phases.alternately(
                    {"large": lambda q: recall(large, q.text), "small": lambda q: recall(small, q.text)},
                    asked,
                    clock,
                    untimed=WARM_UP,
                )
        finally:
            drop_scope(small)
        row = phases.side_by_side(spent, clock, over="large", under="small")
        first, second = (
            (f"{size:,} trails", f"{small_size:,} trails")
            if fillfactor is None
            else (f"fillfactor {self._fillfactor()}", f"fillfactor {fillfactor}")
        )
        self.stdout.write(
            f"interleaved, {len(spent['large'])} questions on each: {first} p50 {row['large']['p50_ms']:.2f} ms, "
            f"p99 {row['large']['p99_ms']:.2f} ms; {second} p50 {row['small']['p50_ms']:.2f} ms, p99 "
            f"{row['small']['p99_ms']:.2f} ms; ratio p50 {row['p50_ratio']}x, p99 {row['p99_ratio']}x"
            + (" (target <= 1.5x)" if fillfactor is None else "")
        )
        self.stdout.write(
            "  mean ms a recall by phase (first / second): "
            + ", ".join(
                f"{phase} {row['large']['phases_mean_ms'][phase]:.2f} / {row['small']['phases_mean_ms'][phase]:.2f}"
                for phase in phases.PHASES
            )
        )
        return row

    @staticmethod
    def _trail_updates() -> tuple[int, int] | None:
        """(updates, HOT updates) of the trails table so far, from PostgreSQL's statistics."""
        if connection.vendor != "postgresql":
            return None
        time.sleep(1.2)  # a backend reports its counts at most once a second
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = %s", [Trail._meta.db_table]
            )
            return cursor.fetchone()

    def _measure(
        self, scope: Scope, workload: ScaleWorkload, asked, ids: list[int], size: int, threshold: float, fill: float
    ) -> dict:
        updates_before = self._trail_updates()
        by_index: dict[int, int | None] = {}
        timings: list[tuple[str, float, int]] = []
        asked_vectors = PrecomputedEmbedder(
            get_embedder(), [a.text for a in asked], np.stack([a.vector for a in asked])
        )
        with serving(asked_vectors):
            for i, question in enumerate(asked):
                t0 = time.perf_counter()
                result = recall(scope, question.text)
                elapsed = (time.perf_counter() - t0) * 1000.0
                by_index[i] = result.trail.id if result.outcome.value != "miss" else None
                if i >= WARM_UP:
                    timings.append((question.kind, elapsed, result.candidates))
        updates_after = self._trail_updates()
        with serving(asked_vectors):
            brute = self._brute_force(scope, workload, asked, ids, size, threshold)
        latencies = [t for _, t, _ in timings]
        hits = [t for (kind, t, _), i in zip(timings, range(WARM_UP, len(asked))) if by_index[i] is not None]
        misses = [t for (kind, t, _), i in zip(timings, range(WARM_UP, len(asked))) if by_index[i] is None]
        candidates = [c for _, _, c in timings]
        answered = dict(
            Trail.objects.filter(id__in={t for t in by_index.values() if t is not None}).values_list("id", "query")
        )
        rates = {}
        for kind in ("duplicate", "not duplicate"):
            rows = [i for i, a in enumerate(asked) if a.kind == kind]
            rates[kind] = (
                sum(by_index[i] is not None for i in rows),
                sum(brute[i] is not None for i in rows),
                len(rows),
            )
        missed = sum(1 for i in by_index if brute[i] is not None and by_index[i] is None)
        other = sum(1 for i in by_index if brute[i] is not None and by_index[i] is not None and by_index[i] != brute[i])
        extra = sum(1 for i in by_index if brute[i] is None and by_index[i] is not None)
        row = {
            "p50_ms": round(statistics.median(latencies), 3),
            "p99_ms": round(percentile(latencies, 0.99), 3),
            "hit_p50_ms": round(statistics.median(hits), 3) if hits else None,
            "miss_p50_ms": round(statistics.median(misses), 3) if misses else None,
            "candidates_mean": round(statistics.mean(candidates), 2),
            "candidates_p99": percentile(candidates, 0.99),
            "fill_s": round(fill, 1),
            "correct_hits": {
                "index": rates["duplicate"][0],
                "brute_force": rates["duplicate"][1],
                "of": rates["duplicate"][2],
            },
            "false_hits": {
                "index": rates["not duplicate"][0],
                "brute_force": rates["not duplicate"][1],
                "of": rates["not duplicate"][2],
            },
            "index_missed": missed,
            "other_trail": other,
            "index_only": extra,
            # What each asked question was answered with (the trail's question), so a change of
            # storage can be held to the same answers (--answers-like).
            "answers": [answered.get(by_index[i]) for i in range(len(asked))],
            "footprint": footprint(),
        }
        if updates_before and updates_after:
            # A hit counts itself on its trail's row: a HOT update writes no index entries.
            done, hot = updates_after[0] - updates_before[0], updates_after[1] - updates_before[1]
            row["trail_updates"], row["hot_share"] = done, round(hot / done, 3) if done else None
            self.stdout.write(f"{'':>9} trail row updates during the run: {done}, HOT {hot} ({hot / max(1, done):.1%})")
        dup, non = rates["duplicate"], rates["not duplicate"]
        if row["footprint"]:
            per_table = ", ".join(f"{name} {t['bytes_per_trail']:,}" for name, t in row["footprint"]["tables"].items())
            self.stdout.write(
                f"{'':>9} disk: {row['footprint']['bytes_per_trail']:,} bytes per trail "
                f"({row['footprint']['bytes'] / 2**30:.2f} GiB for {row['footprint']['trails']:,} trails; {per_table})"
            )
        self.stdout.write(
            f"{size:>9,} {row['p50_ms']:7.2f} {row['p99_ms']:7.2f} {row['hit_p50_ms'] or 0:8.2f} {row['miss_p50_ms'] or 0:9.2f} "
            f"{row['candidates_mean']:6.1f} {row['candidates_p99']:6d} {fill:7.0f}  "
            f"{dup[0] / dup[2]:6.2%} / {dup[1] / dup[2]:6.2%} of {dup[2]}      "
            f"{non[0] / non[2]:6.2%} / {non[1] / non[2]:6.2%} of {non[2]}      "
            f"{missed} of {sum(b is not None for b in brute.values())} answered (another trail: {other}, index only: {extra})"
        )
        return row

    @staticmethod
    def _brute_force(
        scope: Scope, workload: ScaleWorkload, asked, ids: list[int], size: int, threshold: float
    ) -> dict[int, int | None]:
        """What recall would answer from a full cosine scan: the best trail at the threshold that the guard lets through."""
        matrix = workload.matrix()[:size]
        queries = np.stack([a.vector for a in asked])
        answers: dict[int, int | None] = {}
        model = get_embedder().name
        for start in range(0, len(asked), 256):
            cosines = queries[start : start + 256] @ matrix.T
            for offset, row in enumerate(cosines):
                i = start + offset
                above = np.flatnonzero(row >= threshold)
                found = [
                    Candidate(
                        ids[j], uuid.uuid4(), workload.texts[j], "", b"", model, matrix[j].astype("<f4").tobytes()
                    )
                    for j in above
                ]
                matches = score_candidates(scope, sign(scope, asked[i].text, ""), found) if found else []
                answers[i] = matches[0].trail.id if matches else None
        return answers
