"""Matching quality on labelled question pairs: experiment 1 of the evaluation, printed.

Figures are given for the whole file, its fit split (four pairs in five) and its
validation split (every fifth pair, never fitted): thresholds were chosen on the fit
split. `evaluate` runs the same code and puts it in a report.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand

from evaluation import matching
from evaluation.matching import DEFAULT_PAIRS

SPLITS = {
    "all": "all pairs",
    "fit": "fit split (4 pairs in 5)",
    "validation": "validation split (every 5th pair, not fitted)",
}


def row(rates: dict) -> str:
    return (
        f"correct {rates['correct_rate']:6.2%}  wrong {rates['wrong_rate']:6.2%}  false {rates['false_rate']:6.2%}  "
        f"other {rates['other_rate']:6.2%}"
    )


def interval_row(rates: dict) -> str:
    (cl, ch), (fl, fh) = rates["correct_ci"], rates["false_ci"]
    return (
        f"correct {rates['correct_rate']:6.2%} [{cl:.2%}, {ch:.2%}] ({rates['correct']}/{rates['duplicates']})  "
        f"false {rates['false_rate']:6.2%} [{fl:.2%}, {fh:.2%}] ({rates['false']}/{rates['distinct']})  "
        f"wrong {rates['wrong_rate']:6.2%}  other {rates['other_rate']:6.2%}"
    )


class Command(BaseCommand):
    help = "Correct-hit and false-hit rates per matcher and threshold on labelled pairs (default: the Quora dev file)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--pairs", default=str(DEFAULT_PAIRS))
        parser.add_argument("--limit", type=int, default=0, help="use only the first N pairs")

    def handle(self, *args, pairs: str, limit: int, **options) -> None:
        result = matching.run(Path(pairs), limit, progress=self.stdout.write)
        self.stdout.write(
            f"\n{result['pairs']} pairs. Sweep (candidates from the lowest threshold's band layout; all | fit | validation)"
        )
        for arm, points in result["curves"].items():
            for point in points:
                self.stdout.write(f"{arm:21} {point['threshold']:<6}  " + " | ".join(row(point[h]) for h in SPLITS))
        for matcher, point in result["defaults"].items():
            self.stdout.write(
                f"\n{matcher} default (lexical {point['lexical_threshold']}, embedding {point['embedding_threshold']}), "
                "rates with 95 % Clopper-Pearson intervals:"
            )
            for half, name in SPLITS.items():
                self.stdout.write(f"  {name:41} " + interval_row(point[half]))
            self.stdout.write(
                f"  recall p50 {point['timing']['recall_p50_ms']:.2f} ms (embedding served from the batch), "
                f"candidates per lookup {point['candidates_per_lookup']:.2f}"
            )
        tax = result["tax"]
        if tax["at_calibrated"] and tax["at_own"]:
            self.stdout.write(
                f"\nCalibration tax on the {tax['split']} split (embedding + guard, sweep candidates): at the calibrated "
                f"{tax['calibrated_threshold']}: {interval_row(tax['at_calibrated'])}\n  at the split's own {tax['bound']:.0%} "
                f"threshold {tax['own_threshold']} (not knowable in advance): {interval_row(tax['at_own'])}\n"
                f"  tax: {tax['tax_points']} points of correct hits"
            )
