"""ragtrail's recall() against GPTCache's get(), side by side in one run (issue 28, target 1).

Both stores hold the same questions with the same MiniLM vectors; the embedding is excluded
on both sides (precomputed vectors). ragtrail's side is `recall()` in-process on this
database with validation and the event write; the peer's is GPTCache 0.1.44's own `get()`
(SQLite + FAISS) in its own process and venv. The asked questions go in blocks, alternating
between the two, so a slow minute of this machine weighs on both alike.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from evaluation import results
from evaluation.bulk import drop_scope
from evaluation.scale import ScaleWorkload, database_label, faq_sections_for, store_citing_two, vacuum_analyze
from evaluation.timing import percentile, save_figures
from scopes.models import Scope
from trails.embedders import PrecomputedEmbedder, get_embedder, serving
from trails.serving.matching import matching_settings
from trails.serving.recall import recall

PEER = Path(__file__).resolve().parents[2] / "peer"


class Command(BaseCommand):
    help = "Prints ragtrail recall() and GPTCache get() p50/p99 at each store size, measured in alternating blocks, and their ratios."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
        parser.add_argument("--recalls", type=int, default=2000, help="questions timed on each side at each size")
        parser.add_argument("--blocks", type=int, default=20, help="alternations between the two sides")
        parser.add_argument(
            "--peer-python",
            type=Path,
            default=Path(settings.BASE_DIR) / ".venv-peer" / "bin" / "python",
            help="a Python with evaluation/peer/requirements.txt installed (make .venv-peer)",
        )
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--json", dest="json_path", type=Path, help="also write the figures to this file")
        parser.add_argument(
            "--record",
            action="store_true",
            help="keep each size's figure in docs/benchmark-results.json (peer-100k, peer-1m, ...)",
        )

    def handle(
        self, *args, sizes, recalls, blocks, peer_python: Path, seed, json_path, record: bool = False, **options
    ) -> None:
        if not peer_python.exists():
            raise CommandError(f"{peer_python} not found: make .venv-peer (GPTCache in its own venv)")
        embedder = get_embedder()
        workload = ScaleWorkload(embedder, seed)
        warm = 100
        asked = workload.asked(recalls + warm)
        scope = Scope.objects.create(
            scratch=True, slug=f"bench-peer-{uuid.uuid4().hex[:8]}", name="peer benchmark", matcher="embedding"
        )
        threshold = matching_settings(scope).embedding_threshold
        database = database_label()
        self.stdout.write(
            f"database: {database}; embedding threshold {threshold} (GPTCache: the same cosine); "
            f"{recalls} questions a side at each size in {blocks} alternating blocks, after {warm} to warm up; "
            "embedding excluded on both sides"
        )
        figures: dict = {"threshold": threshold, "recalls": recalls, "database": database, "sizes": {}}
        try:
            current = faq_sections_for(scope)
            for size in sorted(sizes):
                started = time.perf_counter()
                new_texts, new_vectors = workload.grow(size)  # only the questions not stored yet
                store_citing_two(scope, new_texts, new_vectors, current, seed=size)
                vacuum_analyze()
                fill = time.perf_counter() - started
                texts, vectors = workload.first(size)  # GPTCache is built anew with all of them
                figures["sizes"][size] = self._measure(
                    scope, texts, vectors, asked, warm, blocks, threshold, peer_python, fill
                )
        finally:
            drop_scope(scope)
        if record:
            for size, row in figures["sizes"].items():
                self._record(size, row, figures["database"], recalls, blocks)
        save_figures(json_path, figures)

    def _record(self, size: int, row: dict, database: str, recalls: int, blocks: int) -> None:
        label = results.SIZE_LABELS.get(size, str(size))
        ours, theirs = row["ragtrail"], row["gptcache"]
        results.record(
            f"peer-{label}",
            say=self.stdout.write,
            target=f"recall() >= 10x faster than GPTCache 0.1.44's get() at {size:,} questions, p50 and p99",
            command=f"`benchmark_peer --sizes {size} --record` ({blocks} alternating blocks, {recalls:,} questions a side; "
            "embedding excluded on both sides; validation and the event write included)",
            measured=f"{database}: p50 {ours['p50_ms']:.2f} against {theirs['p50_ms']:.2f} ms, **{row['ratio_p50']}x**; "
            f"p99 {ours['p99_ms']:.2f} against {theirs['p99_ms']:.2f} ms, **{row['ratio_p99']}x** "
            f"(hits {ours['hits']} / {theirs['hits']}; fill {ours['fill_s']:,.0f} s / GPTCache's import {theirs['fill_s']:,.0f} s)",
            met=row["ratio_p50"] >= 10 and row["ratio_p99"] >= 10,
        )

    def _measure(self, scope, texts, vectors, asked, warm, blocks, threshold, peer_python, fill) -> dict:
        with tempfile.TemporaryDirectory(prefix="ragtrail-peer-") as folder:
            folder = Path(folder)
            (folder / "stored.json").write_text(json.dumps(texts))
            np.save(folder / "stored.npy", np.asarray(vectors, dtype=np.float32))
            (folder / "asked.json").write_text(json.dumps([a.text for a in asked]))
            np.save(folder / "asked.npy", np.stack([a.vector for a in asked]).astype(np.float32))
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

                def peer_block(start: int, end: int) -> tuple[list[float], int]:
                    peer.stdin.write(json.dumps({"get": [start, end]}) + "\n")
                    answer = json.loads(peer.stdout.readline())
                    return answer["ms"], answer["hits"]

                ours: list[float] = []
                theirs: list[float] = []
                hits = {"ragtrail": 0, "gptcache": 0}
                embedder = PrecomputedEmbedder(
                    get_embedder(), [a.text for a in asked], np.stack([a.vector for a in asked])
                )
                with serving(embedder):
                    for question in asked[:warm]:
                        recall(scope, question.text)
                    peer_block(0, warm)
                    edges = np.linspace(warm, len(asked), blocks + 1).astype(int)
                    for block, (start, end) in enumerate(zip(edges[:-1], edges[1:])):
                        # Alternate which side goes first, so neither always follows the other's work.
                        for side in ("ragtrail", "gptcache") if block % 2 == 0 else ("gptcache", "ragtrail"):
                            if side == "gptcache":
                                timings, found = peer_block(int(start), int(end))
                                theirs += timings
                                hits["gptcache"] += found
                                continue
                            for question in asked[start:end]:
                                t0 = time.perf_counter()
                                result = recall(scope, question.text)
                                ours.append((time.perf_counter() - t0) * 1000.0)
                                hits["ragtrail"] += result.outcome.value != "miss"
            finally:
                peer.stdin.close()
                peer.wait(60)
        row = {
            "ragtrail": {
                "p50_ms": round(statistics.median(ours), 3),
                "p99_ms": round(percentile(ours, 0.99), 3),
                "hits": hits["ragtrail"],
                "fill_s": round(fill, 1),
            },
            "gptcache": {
                "p50_ms": round(statistics.median(theirs), 3),
                "p99_ms": round(percentile(theirs, 0.99), 3),
                "hits": hits["gptcache"],
                "fill_s": ready["fill_s"],
            },
        }
        row["ratio_p50"] = round(row["gptcache"]["p50_ms"] / row["ragtrail"]["p50_ms"], 2)
        row["ratio_p99"] = round(row["gptcache"]["p99_ms"] / row["ragtrail"]["p99_ms"], 2)
        size = len(texts)
        self.stdout.write(
            f"{size:>9,} trails: ragtrail recall() p50 {row['ragtrail']['p50_ms']:.2f} ms, p99 {row['ragtrail']['p99_ms']:.2f} ms "
            f"({row['ragtrail']['hits']} hits); GPTCache get() p50 {row['gptcache']['p50_ms']:.2f} ms, "
            f"p99 {row['gptcache']['p99_ms']:.2f} ms ({row['gptcache']['hits']} hits); "
            f"ragtrail faster {row['ratio_p50']}x at p50, {row['ratio_p99']}x at p99 (target >= 10x); "
            f"fill {fill:.0f} s / {ready['fill_s']:.0f} s"
        )
        return row
