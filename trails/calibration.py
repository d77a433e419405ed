"""The shipped calibration: matcher thresholds for a scope's false-hit bound.

trails/calibration.json holds, per matcher, how many false hits the fit split gave at
each threshold of a grid (written by `manage.py calibrate_thresholds`). A scope's
thresholds for its bound are the lowest whose one-sided upper confidence bound (at the
confidence the fit used, 99 %) is within it.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from trails.core.calibration import threshold_within

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")


@lru_cache(maxsize=1)
def shipped() -> dict:
    return json.loads(CALIBRATION_FILE.read_text(encoding="utf-8"))


def threshold_for(matcher: str, bound: float, fit: dict | None = None) -> float:
    """The lowest threshold of the fit's grid whose false-hit upper bound is within `bound`
    (the grid's highest where none is)."""
    fit = fit or shipped()
    curve = [(point["threshold"], point["false_hits"]) for point in fit["matchers"][matcher]["curve"]]
    return threshold_within(curve, fit["distinct"], bound, fit["confidence"]).threshold


def thresholds_for(bound: float, matcher: str = "embedding") -> dict[str, float]:
    """{"lexical_threshold": ..., "embedding_threshold": ...} for a scope's bound and matcher.

    A scope matching by both serves a hit that either matcher finds, so its false hits
    are at most the sum of each matcher's: each gets half the bound.
    """
    share = bound / 2 if matcher == "both" else bound
    return {f"{name}_threshold": threshold_for(name, share) for name in ("lexical", "embedding")}
