"""The embedding model given raw questions against their normalised form, side by side on
the QQP pairs: a threshold fitted on the fit split for each form at the same false-hit bound,
then correct and false hits on the validation split at each form's own threshold."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from django.core.management.base import BaseCommand

from evaluation import matching, results
from evaluation.matching import DEFAULT_PAIRS, FIT_GRID, split_of
from trails.core.calibration import interval, threshold_within
from trails.core.guard import check_pair, question_terms
from trails.core.normalise import question_form
from trails.embedders import get_embedder

FORMS = {"raw": lambda text: text, "normalised": question_form}


class Command(BaseCommand):
    help = (
        "Correct and false hits on the QQP validation split with the model reading raw questions and their "
        "normalised form, each at the threshold fitted on the fit split for the same bound."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--pairs", default=str(DEFAULT_PAIRS))
        parser.add_argument("--bound", type=float, default=0.02, help="accepted false-hit rate (default 0.02)")
        parser.add_argument("--limit", type=int, default=0, help="use only the first N pairs")
        parser.add_argument("--record", action="store_true", help="keep the figures in docs/benchmark-results.json")

    def handle(self, *args, pairs: str, bound: float, limit: int, record: bool, **options) -> None:
        data = matching.load_pairs(Path(pairs), limit)
        model = get_embedder().inner  # the model itself: each form is given to it as is
        duplicate = np.array([p["duplicate"] for p in data])
        fit = np.array([split_of(i) == "fit" for i in range(len(data))])
        # The embedding matcher's guard (numbers, negation, opposites, order; rewording allowed).
        allowed = np.array(
            [check_pair(question_terms(p["a"]), question_terms(p["b"]), max_unshared_terms=None).allowed for p in data]
        )
        rows = {}
        for name, form in FORMS.items():
            started = time.perf_counter()
            a = model.embed_many([form(p["a"]) for p in data])
            b = model.embed_many([form(p["b"]) for p in data])
            cosine = np.sum(a * b, axis=1)
            negatives = int(np.sum(fit & ~duplicate))
            curve = [(t, int(np.sum(fit & ~duplicate & allowed & (cosine >= t)))) for t in FIT_GRID["embedding"]]
            fitted = threshold_within(curve, negatives, bound)
            hit = allowed & (cosine >= fitted.threshold) & ~fit
            correct, dups = int(np.sum(hit & duplicate)), int(np.sum(~fit & duplicate))
            false, others = int(np.sum(hit & ~duplicate)), int(np.sum(~fit & ~duplicate))
            rows[name] = {
                "threshold": fitted.threshold,
                "correct": (correct, dups),
                "false": (false, others),
                "seconds": time.perf_counter() - started,
            }
            low, high = interval(correct, dups)
            flow, fhigh = interval(false, others)
            self.stdout.write(
                f"{name:>10}: threshold {fitted.threshold} (fit split, bound {bound:.0%}); validation correct hits "
                f"{correct / dups:.1%} [{low:.1%}, {high:.1%}] ({correct}/{dups}), false hits {false / others:.2%} "
                f"[{flow:.2%}, {fhigh:.2%}] ({false}/{others}); embedded in {rows[name]['seconds']:.0f} s"
            )
        raw, normalised = rows["raw"], rows["normalised"]
        gain = normalised["correct"][0] / normalised["correct"][1] - raw["correct"][0] / raw["correct"][1]
        self.stdout.write(f"correct hits at the same bound: {gain:+.1%} points with the normalised form")
        if record:

            def said(row: dict) -> str:
                (c, d), (f, o) = row["correct"], row["false"]
                return f"{row['threshold']}: correct {c / d:.1%} ({c}/{d}), false {f / o:.2%} ({f}/{o})"

            results.record(
                "question-form",
                say=self.stdout.write,
                target="normalised questions find at least as many duplicates as raw ones at the same false-hit bound",
                command=f"`benchmark_question_form --record` ({len(data):,} QQP pairs; thresholds fitted on the fit "
                "split at the 2 % bound, figures on the validation split; model alone plus the guard)",
                measured=f"raw at {said(raw)}; normalised at {said(normalised)}: **{gain:+.1%} points**",
                met=gain >= 0 and normalised["false"][0] / normalised["false"][1] <= bound,
            )
