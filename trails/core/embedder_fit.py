"""Fitting the embedding threshold for an embedder of one's own, on labelled question pairs.

The shipped calibration was fitted by the evaluation (store every question, recall every
other); a new embedder is fitted on the pairs themselves: a pair counts at a threshold when its
own cosine reaches it. That is the stricter reading for false hits (a pair's own question is
always a candidate), and it needs no database: 10,000 pairs cost their embeddings only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from trails.core.calibration import Rate, choose_threshold


@dataclass(frozen=True)
class ScoredPair:
    """One labelled pair as the matcher scored it: the pair's cosine (0 where the look-alike
    guard refuses it: never served at any threshold), its label and its split."""

    similarity: float
    duplicate: bool
    held_out: bool


# The embedding thresholds a fit for another model considers: cosines differ between models
# (a paraphrase scores 0.95 with one and 0.8 with another), so the grid spans all that serve.
EMBEDDING_FIT_GRID = tuple(round(0.5 + 0.005 * i, 3) for i in range(100))


def fit_pairs(
    pairs: Sequence[ScoredPair],
    bound: float,
    confidence: float = 0.95,
    grid: Sequence[float] = EMBEDDING_FIT_GRID,
) -> dict:
    """Fits the embedding threshold on the pairs not held out and measures it on those held out.

    The threshold is the lowest of the grid whose false-hit upper bound (non-duplicates at
    or above it, of all non-duplicates fitted on) is within `bound` (`choose_threshold`).

    Returns:
        The fit in the shape of trails/learning/calibration.json (`distinct`, `duplicates`,
        `confidence`, `matchers.embedding` with its curve), plus `held_out`: the held-out
        pairs' false-hit rate and reuse (duplicates matched) at the threshold, with 95 %
        intervals.

    Raises:
        ValueError: no non-duplicate pair to fit on.
    """
    fit = [p for p in pairs if not p.held_out]
    distinct = sum(1 for p in fit if not p.duplicate)
    if distinct == 0:
        raise ValueError("no non-duplicate pair to fit on: a threshold needs pairs that must not match")
    false_sims = [p.similarity for p in fit if not p.duplicate]
    chosen = choose_threshold(false_sims, distinct, grid, bound, confidence)
    held = [p for p in pairs if p.held_out]
    held_false = Rate(
        sum(1 for p in held if not p.duplicate and p.similarity >= chosen.threshold),
        sum(1 for p in held if not p.duplicate),
    )
    held_reuse = Rate(
        sum(1 for p in held if p.duplicate and p.similarity >= chosen.threshold), sum(1 for p in held if p.duplicate)
    )
    return {
        "split": "four pairs in five fitted on, every fifth held out",
        "pairs": len(fit),
        "duplicates": len(fit) - distinct,
        "distinct": distinct,
        "bound": bound,
        "confidence": confidence,
        "matchers": {
            "embedding": {
                "threshold": chosen.threshold,
                "holds": chosen.holds,
                "false_hits": chosen.false_hits,
                "false_upper": round(chosen.upper, 5),
                "curve": [
                    {
                        "threshold": t,
                        "false_hits": sum(1 for s in false_sims if s >= t),
                        "correct_hits": sum(1 for p in fit if p.duplicate and p.similarity >= t),
                    }
                    for t in sorted(grid)
                ],
            }
        },
        "held_out": {
            "pairs": len(held),
            "false_hits": held_false.events,
            "distinct": held_false.trials,
            "false_rate": round(held_false.value, 5),
            "false_ci": [round(x, 5) for x in held_false.interval()] if held_false.trials else None,
            "reused": held_reuse.events,
            "duplicates": held_reuse.trials,
            "reuse": round(held_reuse.value, 5),
            "reuse_ci": [round(x, 5) for x in held_reuse.interval()] if held_reuse.trials else None,
        },
    }
