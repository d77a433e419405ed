"""ragtrail's recall() against a bare pgvector lookup and GPTCache's get(), side by side in one run.

All stores hold the same questions with the same MiniLM vectors; the embedding is excluded on
every side (precomputed vectors). ragtrail's side is `recall()` in-process on this database with
validation and the event write; pgvector's is a questions table with an HNSW index on the same
database, top-1 by cosine with the scope's threshold (evaluation/peer/pgvector_peer.py);
GPTCache 0.1.44's is its own `get()` (SQLite + FAISS) in its own process and venv. The asked
questions go in blocks, the sides taking turns (the first side rotating), so a slow minute of
this machine weighs on all alike.

Each size is measured twice: fresh, right after the fill, with the statistics from before it
(autovacuum held off for the phase, as a store that has just grown has them); and analysed,
after VACUUM ANALYZE of every store's tables. The hit path's plan is read in each phase.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from evaluation import results
from evaluation.bulk import drop_scope
from evaluation.peer.pgvector_peer import EF_SEARCH, HNSW, PgvectorPeer, brute_force_nearest, vector_text
from evaluation.scale import (
    TRAIL_TABLES,
    ScaleWorkload,
    database_label,
    faq_sections_for,
    footprint,
    store_citing_two,
    vacuum_analyze,
)
from evaluation.timing import percentile, save_figures
from scopes.models import Scope
from trails.embedders import PrecomputedEmbedder, get_embedder, serving
from trails.serving.matching import matching_settings
from trails.serving.recall import recall

PEER = Path(__file__).resolve().parents[2] / "peer"
PHASES = ("fresh", "analysed")
GPTCACHE_TARGET, PGVECTOR_TARGET = 10.0, 1.0


@contextmanager
def autovacuum_held(tables: tuple[str, ...]) -> Iterator[Callable[[], None]]:
    """Keeps autovacuum off these tables until the yielded function is called (or the block ends)."""
    held = connection.vendor == "postgresql"
    if held:
        with connection.cursor() as cursor:
            for table in tables:
                cursor.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")

    def release() -> None:
        nonlocal held
        if held:
            with connection.cursor() as cursor:
                for table in tables:
                    cursor.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")
            held = False

    try:
        yield release
    finally:
        release()


def summary(values: list[float]) -> dict:
    if not values:
        return {"p50_ms": None, "p99_ms": None}
    return {"p50_ms": round(statistics.median(values), 3), "p99_ms": round(percentile(values, 0.99), 3)}


def plan_nodes(plan: dict, found: list[str]) -> list[str]:
    """The scans of a plan tree: node, table or index, rows read over all loops."""
    kind = plan.get("Node Type", "")
    if "Scan" in kind and ("Relation Name" in plan or "Index Name" in plan) and "CTE" not in kind:
        rows = (plan.get("Actual Rows", 0) + plan.get("Rows Removed by Filter", 0)) * plan.get("Actual Loops", 1)
        where = plan.get("Index Name") or plan.get("Relation Name")
        on = plan.get("Relation Name", "")
        found.append(f"{kind} {where}{f' on {on}' if on and on != where else ''} ({rows} rows)")
    for child in plan.get("Plans", []):
        plan_nodes(child, found)
    return found


def hit_path_plan(scope: Scope, question: str) -> list[str]:
    """What one recall's reads scan on PostgreSQL (EXPLAIN ANALYZE of each SELECT it ran, a dry run)."""
    if connection.vendor != "postgresql":
        return []
    captured: list[tuple[str, list]] = []

    def capture(execute, sql, params, many, context):
        captured.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        recall(scope, question, dry_run=True)
    scans = []
    with connection.cursor() as cursor:
        for sql, params in captured:
            if not sql.lstrip().upper().startswith(("WITH", "SELECT")):
                continue
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            plan = cursor.fetchone()[0]
            plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
            scans += plan_nodes(plan, [])
    return scans


class Command(BaseCommand):
    help = (
        "Prints ragtrail recall(), a bare pgvector HNSW top-1 and GPTCache get() p50/p99 at each store size, "
        "fresh and analysed, measured in alternating blocks, and their ratios."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
        parser.add_argument("--recalls", type=int, default=2000, help="questions timed on each side in each phase")
        parser.add_argument("--blocks", type=int, default=20, help="turns each side takes in each phase")
        parser.add_argument(
            "--peer-python",
            type=Path,
            default=Path(settings.BASE_DIR) / ".venv-peer" / "bin" / "python",
            help="a Python with evaluation/peer/requirements.txt installed (make .venv-peer)",
        )
        parser.add_argument("--no-pgvector", action="store_true", help="leave the pgvector peer out")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--json", dest="json_path", type=Path, help="also write the figures to this file")
        parser.add_argument(
            "--record",
            action="store_true",
            help="keep each size's figures in docs/benchmark-results.json (peer-100k, pgvector-100k, ...)",
        )

    def handle(
        self,
        *args,
        sizes,
        recalls,
        blocks,
        peer_python: Path,
        seed,
        json_path,
        no_pgvector: bool = False,
        record: bool = False,
        **options,
    ) -> None:
        if not peer_python.exists():
            raise CommandError(f"{peer_python} not found: make .venv-peer (GPTCache in its own venv)")
        embedder = get_embedder()
        workload = ScaleWorkload(embedder, seed)
        warm = 100
        asked = workload.asked(warm + recalls * len(PHASES))
        asked_vectors = np.stack([a.vector for a in asked]).astype(np.float32)
        pgvector = None
        if not no_pgvector:
            if connection.vendor != "postgresql":
                self.stdout.write("pgvector: left out (the database is not PostgreSQL)")
            else:
                pgvector = PgvectorPeer(connection.get_connection_params())
                missing = pgvector.missing()
                if missing:
                    self.stdout.write(f"pgvector: MISSING, left out of this run: {missing}")
                    pgvector.close()
                    pgvector = None
        scope = Scope.objects.create(
            scratch=True, slug=f"bench-peer-{uuid.uuid4().hex[:8]}", name="peer benchmark", matcher="embedding"
        )
        threshold = matching_settings(scope).embedding_threshold
        database = database_label()
        self.stdout.write(
            f"database: {database}; embedding threshold {threshold} (pgvector and GPTCache: the same cosine); "
            f"{recalls} questions a side in each phase in {blocks} blocks the sides take in turn, after {warm} to warm up; "
            "embedding excluded on every side"
            + (
                f"; pgvector {pgvector.version() or '(to be created)'} HNSW m {HNSW['m']}, "
                f"ef_construction {HNSW['ef_construction']}, ef_search {EF_SEARCH}"
                if pgvector
                else ""
            )
        )
        figures: dict = {
            "threshold": threshold,
            "recalls": recalls,
            "database": database,
            "pgvector": bool(pgvector),
            "sizes": {},
        }
        try:
            current = faq_sections_for(scope)
            for size in sorted(sizes):
                with autovacuum_held(TRAIL_TABLES) as release:
                    started = time.perf_counter()
                    new_texts, new_vectors = workload.grow(size)  # only the questions not stored yet
                    store_citing_two(scope, new_texts, new_vectors, current, seed=size)
                    fill = time.perf_counter() - started
                    texts, vectors = workload.first(size)  # the peers are built anew with all of them
                    vectors = np.asarray(vectors, dtype=np.float32)
                    pg_fill = pgvector.fill(vectors) if pgvector else None
                    figures["sizes"][size] = self._measure(
                        scope, texts, vectors, asked, asked_vectors, warm, recalls, blocks, threshold, peer_python,
                        fill, pgvector, pg_fill, release,
                    )  # fmt: skip
        finally:
            drop_scope(scope)
            if pgvector:
                pgvector.drop()
                pgvector.close()
        if record:
            for size, row in figures["sizes"].items():
                self._record(size, row, figures["database"], recalls, blocks)
        save_figures(json_path, figures)

    def _record(self, size: int, row: dict, database: str, recalls: int, blocks: int) -> None:
        label = results.SIZE_LABELS.get(size, str(size))
        command = (
            f"`benchmark_peer --sizes {size} --record` ({blocks} blocks a side in turn, {recalls:,} questions a side "
            "in each phase; embedding excluded on every side; validation and the event write included)"
        )

        def measured(peer: str, ratios: str) -> str:
            parts = []
            for phase in PHASES:
                ours, theirs = row[phase]["ragtrail"], row[phase][peer]
                parts.append(
                    f"{phase}: p50 {ours['p50_ms']:.2f} against {theirs['p50_ms']:.2f} ms, **{row[phase][ratios + '_p50']}x**; "
                    f"p99 {ours['p99_ms']:.2f} against {theirs['p99_ms']:.2f} ms, **{row[phase][ratios + '_p99']}x**"
                )
            return f"{database}: " + "; ".join(parts)

        results.record(
            f"peer-{label}",
            say=self.stdout.write,
            target=f"recall() >= 10x faster than GPTCache 0.1.44's get() at {size:,} questions, p50 and p99, fresh and analysed",
            command=command,
            measured=measured("gptcache", "gptcache")
            + f" (GPTCache's import {row['gptcache_fill_s']:,.0f} s; ragtrail's fill {row['ragtrail_fill_s']:,.0f} s)",
            met=all(row[p][f"gptcache_{q}"] >= GPTCACHE_TARGET for p in PHASES for q in ("p50", "p99")),
        )
        if "pgvector" not in row["fresh"]:
            return
        pg = row["pgvector_store"]
        results.record(
            f"pgvector-{label}",
            say=self.stdout.write,
            target=f"recall() p50 and p99 within 1.0x of a bare pgvector HNSW top-1 at {size:,} questions, fresh and analysed",
            command=command,
            measured=measured("pgvector", "pgvector")
            + f" (recall() / pgvector; pgvector {pg['version']} m 16, ef_construction 64, ef_search 40: recall@1 "
            f"{row['analysed']['pgvector']['recall_at_1']}, {pg['bytes_per_item']:,} bytes an item, against ragtrail's "
            f"{row['ragtrail_bytes_per_trail']:,} a trail)",
            met=all(row[p][f"pgvector_{q}"] <= PGVECTOR_TARGET for p in PHASES for q in ("p50", "p99")),
        )

    @contextmanager
    def _gptcache(self, folder: Path, texts, vectors, asked, asked_vectors, threshold, peer_python) -> Iterator:
        (folder / "stored.json").write_text(json.dumps(texts))
        np.save(folder / "stored.npy", vectors)
        (folder / "asked.json").write_text(json.dumps([a.text for a in asked]))
        np.save(folder / "asked.npy", asked_vectors)
        peer = subprocess.Popen(
            [str(peer_python), str(PEER / "gptcache_peer.py"), str(folder), str(threshold)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        try:
            ready = json.loads(peer.stdout.readline() or "{}")
            if "ready" not in ready:
                raise CommandError(f"GPTCache did not start (exit {peer.poll()})")

            def block(start: int, end: int) -> tuple[list[float], int]:
                peer.stdin.write(json.dumps({"get": [start, end]}) + "\n")
                answer = json.loads(peer.stdout.readline())
                return answer["ms"], answer["hits"]

            yield block, ready["fill_s"]
        finally:
            peer.stdin.close()
            peer.wait(60)

    def _measure(
        self, scope, texts, vectors, asked, asked_vectors, warm, recalls, blocks, threshold, peer_python, fill,
        pgvector, pg_fill, release_autovacuum,
    ) -> dict:  # fmt: skip
        size = len(texts)
        nearest, nearest_cosine = brute_force_nearest(vectors, asked_vectors)
        literals = [vector_text(v) for v in asked_vectors] if pgvector else []
        row: dict = {"ragtrail_fill_s": round(fill, 1)}
        if pgvector:
            row["pgvector_store"] = {"version": pgvector.version(), **pg_fill}
        embedder = PrecomputedEmbedder(get_embedder(), [a.text for a in asked], asked_vectors)
        with tempfile.TemporaryDirectory(prefix="ragtrail-peer-") as folder:
            context = self._gptcache(Path(folder), texts, vectors, asked, asked_vectors, threshold, peer_python)
            with context as (gptcache_block, gptcache_fill), serving(embedder):
                row["gptcache_fill_s"] = gptcache_fill
                for question in asked[:warm]:
                    recall(scope, question.text)
                gptcache_block(0, warm)
                if pgvector:
                    pgvector.ask(literals[:warm], threshold)
                for number, phase in enumerate(PHASES):
                    if phase == "analysed":
                        vacuum_analyze()
                        release_autovacuum()
                        if pgvector:
                            pgvector.analyse()
                    start = warm + number * recalls
                    row[phase] = self._phase(
                        scope, texts, asked, start, start + recalls, blocks, threshold, gptcache_block,
                        pgvector, literals, nearest, nearest_cosine,
                    )  # fmt: skip
                    hit = next(
                        (asked[i].text for i in range(start, len(asked)) if nearest_cosine[i] >= threshold), None
                    )
                    row[phase]["hit_path_plan"] = hit_path_plan(scope, hit) if hit else []
                    if pgvector:
                        row[phase]["pgvector_plan"] = pgvector.plan(literals[start])
                    self._say(size, phase, row[phase])
        row["ragtrail_bytes_per_trail"] = footprint().get("bytes_per_trail", 0)
        if pgvector:
            row["pgvector_store"]["bytes_per_item"] = pgvector.bytes_per_item()
        # The analysed store's ratios, as earlier runs kept them (bench's comparison reads these).
        row["ratio_p50"], row["ratio_p99"] = row["analysed"]["gptcache_p50"], row["analysed"]["gptcache_p99"]
        self.stdout.write(
            f"{size:>9,} trails: {row['ragtrail_bytes_per_trail']:,} bytes a trail"
            + (
                f"; pgvector {row['pgvector_store']['bytes_per_item']:,} bytes an item "
                f"(load {pg_fill['load_s']:.0f} s, HNSW build {pg_fill['index_s']:.0f} s)"
                if pgvector
                else ""
            )
            + f"; fill {fill:.0f} s, GPTCache's import {row['gptcache_fill_s']:.0f} s"
        )
        return row

    def _phase(
        self, scope, texts, asked, first, last, blocks, threshold, gptcache_block, pgvector, literals, nearest,
        nearest_cosine,
    ) -> dict:  # fmt: skip
        sides = ["ragtrail", "pgvector", "gptcache"] if pgvector else ["ragtrail", "gptcache"]
        timings: dict[str, list[float]] = {side: [] for side in sides}
        hit_ms, miss_ms = [], []
        hits = dict.fromkeys(sides, 0)
        served_nearest = dict.fromkeys(sides, 0)
        pg_nearest: list[int] = []
        edges = np.linspace(first, last, blocks + 1).astype(int)
        for block, (start, end) in enumerate(zip(edges[:-1], edges[1:])):
            start, end = int(start), int(end)
            turn = block % len(sides)  # the side that goes first rotates
            for side in sides[turn:] + sides[:turn]:
                if side == "gptcache":
                    ms, found = gptcache_block(start, end)
                    timings[side] += ms
                    hits[side] += found
                elif side == "pgvector":
                    ms, top, hit_ids = pgvector.ask(literals[start:end], threshold)
                    timings[side] += ms
                    hits[side] += len(hit_ids)
                    pg_nearest += top
                    hit_set = set(hit_ids)
                    served_nearest[side] += sum(
                        1
                        for i, t in zip(range(start, end), top)
                        if nearest_cosine[i] >= threshold and t == nearest[i] + 1 and t in hit_set
                    )
                else:
                    for i in range(start, end):
                        t0 = time.perf_counter()
                        result = recall(scope, asked[i].text)
                        ms = (time.perf_counter() - t0) * 1000.0
                        timings[side].append(ms)
                        if result.outcome.value != "miss":
                            hits[side] += 1
                            hit_ms.append(ms)
                            if nearest_cosine[i] >= threshold and result.matched_query == texts[nearest[i]]:
                                served_nearest[side] += 1
                        else:
                            miss_ms.append(ms)
        reachable = int(sum(1 for i in range(first, last) if nearest_cosine[i] >= threshold))
        out: dict = {"questions": last - first, "nearest_at_threshold": reachable}
        for side in sides:
            out[side] = {**summary(timings[side]), "hits": hits[side]}
            if side != "gptcache":
                out[side]["served_nearest"] = served_nearest[side]
        out["ragtrail"]["hits_p50_ms"] = summary(hit_ms)["p50_ms"]
        out["ragtrail"]["misses_p50_ms"] = summary(miss_ms)["p50_ms"]
        out["gptcache_p50"] = round(out["gptcache"]["p50_ms"] / out["ragtrail"]["p50_ms"], 2)
        out["gptcache_p99"] = round(out["gptcache"]["p99_ms"] / out["ragtrail"]["p99_ms"], 2)
        if pgvector:
            exact = sum(1 for i, t in zip(range(first, last), pg_nearest) if t == nearest[i] + 1)
            out["pgvector"]["recall_at_1"] = round(exact / max(1, last - first), 4)
            out["pgvector_p50"] = round(out["ragtrail"]["p50_ms"] / out["pgvector"]["p50_ms"], 2)
            out["pgvector_p99"] = round(out["ragtrail"]["p99_ms"] / out["pgvector"]["p99_ms"], 2)
        return out

    def _say(self, size: int, phase: str, row: dict) -> None:
        ours = row["ragtrail"]
        line = (
            f"{size:>9,} trails, {phase:<8}: ragtrail recall() p50 {ours['p50_ms']:.2f} ms, p99 {ours['p99_ms']:.2f} ms "
            f"({ours['hits']} hits, p50 {ours['hits_p50_ms'] or 0:.2f} ms; misses p50 {ours['misses_p50_ms'] or 0:.2f} ms)"
        )
        if "pgvector" in row:
            pg = row["pgvector"]
            line += (
                f"; pgvector top-1 p50 {pg['p50_ms']:.2f} ms, p99 {pg['p99_ms']:.2f} ms ({pg['hits']} hits, "
                f"recall@1 {pg['recall_at_1']})"
            )
        gpt = row["gptcache"]
        line += f"; GPTCache get() p50 {gpt['p50_ms']:.2f} ms, p99 {gpt['p99_ms']:.2f} ms ({gpt['hits']} hits)"
        self.stdout.write(line)
        ratios = f"    GPTCache / ragtrail {row['gptcache_p50']}x at p50, {row['gptcache_p99']}x at p99 (target >= 10x)"
        if "pgvector" in row:
            ratios += (
                f"; ragtrail / pgvector {row['pgvector_p50']}x at p50, {row['pgvector_p99']}x at p99 (target <= 1.0x)"
            )
        served = (
            f"    of {row['nearest_at_threshold']} questions whose exact nearest reaches the threshold, "
            f"served it: ragtrail {ours['served_nearest']}"
        )
        if "pgvector" in row:
            served += f", pgvector {row['pgvector']['served_nearest']}"
        self.stdout.write(ratios)
        self.stdout.write(served)
        self.stdout.write("    hit path's scans: " + "; ".join(row.get("hit_path_plan", [])))
