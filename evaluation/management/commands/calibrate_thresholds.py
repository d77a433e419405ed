"""Fits the matcher thresholds to a false-hit bound on the fit split and writes trails/learning/calibration.json."""

from __future__ import annotations

import json
import time
from pathlib import Path

from django.core.management.base import BaseCommand

from evaluation import matching
from evaluation.matching import DEFAULT_PAIRS
from trails.embedders import PrecomputedEmbedder, get_embedder, serving
from trails.learning.shipped import CALIBRATION_FILE


class Command(BaseCommand):
    help = "Chooses each matcher's threshold so the upper confidence bound of false hits on the fit split is within the bound."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--pairs", default=str(DEFAULT_PAIRS))
        parser.add_argument("--bound", type=float, default=0.02, help="accepted false-hit rate (default 0.02)")
        # 95 % on four fifths of the file: an outside held-out set gave 1.32 % false hits at a
        # threshold fitted at 99 % on half the file (bound 2 %), the same rate the validation
        # split showed; the wider margin bought nothing but lost reuse.
        parser.add_argument(
            "--confidence", type=float, default=0.95, help="one-sided confidence of the bound (default 0.95)"
        )
        parser.add_argument("--limit", type=int, default=0, help="use only the first N pairs")
        parser.add_argument("--output", default=str(CALIBRATION_FILE))

    def handle(self, *args, pairs: str, bound: float, confidence: float, limit: int, output: str, **options) -> None:
        data = matching.load_pairs(Path(pairs), limit)
        fit = matching.fit_split(data)
        texts = sorted({p["a"] for p in fit} | {p["b"] for p in fit})
        started = time.perf_counter()
        with serving(PrecomputedEmbedder(get_embedder(), texts)) as embedder:
            self.stdout.write(
                f"{len(texts):,} questions embedded in {time.perf_counter() - started:.0f} s ({embedder.name})"
            )
            result = matching.fit_thresholds(data, bound, confidence, progress=self.stdout.write)
        result["pairs_file"] = Path(pairs).name
        result["embedding_model"] = embedder.name
        Path(output).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        for matcher, fitted in result["matchers"].items():
            self.stdout.write(
                f"{matcher}: threshold {fitted['threshold']} ({'holds' if fitted['holds'] else 'DOES NOT HOLD'}): "
                f"{fitted['false_hits']}/{result['distinct']} false hits on the fit split, upper bound {fitted['false_upper']:.2%}"
            )
        self.stdout.write(f"written to {output}")
