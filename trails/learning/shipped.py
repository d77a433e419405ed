"""The shipped calibration: matcher thresholds for a scope's false-hit bound.

trails/learning/calibration.json holds, per matcher, how many false hits the fit split gave at
each threshold of a grid (written by `manage.py calibrate_thresholds`). A scope's
thresholds for its bound are the lowest whose one-sided upper confidence bound (at the
confidence the fit used, 95 %: `confidence` in the file) is within it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from trails.core.calibration import LearningLimits, threshold_within, upper_bound

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


def thresholds_for(bound: float, matcher: str = "embedding", embedding_fit: dict | None = None) -> dict[str, float]:
    """{"lexical_threshold": ..., "embedding_threshold": ...} for a scope's bound and matcher.

    A scope matching by both serves a hit that either matcher finds, so its false hits
    are at most the sum of each matcher's: each gets half the bound. `embedding_fit`: the
    embedder's own fit where it is not the shipped model (lexical matching has no model).
    """
    share = bound / 2 if matcher == "both" else bound
    return {
        "lexical_threshold": threshold_for("lexical", share),
        "embedding_threshold": threshold_for("embedding", share, embedding_fit),
    }


# The learned threshold never rises past the point where fewer than this share of the
# paraphrases matched at the configured threshold (on the fit split) still match.
CEILING_REUSE_SHARE = 0.5
# How far under the configured threshold labels may lower it: embedding band keys are
# drawn 0.04 under the configured threshold (trails.serving.matching.EMBEDDING_BAND_MARGIN), so
# candidates down to 0.03 under are still found. Lexical band layouts follow the
# configured threshold's S-curve closely, so lexical thresholds are never lowered.
LOWERING_ROOM = {"embedding": 0.03, "lexical": 0.0}
# The most one untrusted reporter's labels may move a threshold on their own.
REPORTER_SHIFT = {"embedding": 0.01, "lexical": 0.05}


def ceiling_for(matcher: str, configured: float, fit: dict | None = None) -> float:
    """The highest threshold at which at least CEILING_REUSE_SHARE of the paraphrases that
    match at `configured` (on the fit split) still match; never below `configured`."""
    fit = fit or shipped()
    curve = sorted((point["threshold"], point["correct_hits"]) for point in fit["matchers"][matcher]["curve"])
    at_configured = next((hits for threshold, hits in curve if threshold >= configured - 1e-9), None)
    if at_configured is None:
        return configured
    kept = [
        threshold
        for threshold, hits in curve
        if threshold >= configured - 1e-9 and hits >= CEILING_REUSE_SHARE * at_configured
    ]
    return max([configured, *kept])


def grid_for(matcher: str, fit: dict | None = None) -> list[float]:
    fit = fit or shipped()
    return [point["threshold"] for point in fit["matchers"][matcher]["curve"]]


def floor_for(matcher: str, configured: float) -> float:
    """The lowest threshold labels may lower this matcher's configured one to."""
    return round(configured - LOWERING_ROOM[matcher], 6)


def limits_for(matcher: str, configured: float, fit: dict | None = None) -> LearningLimits:
    """How far a scope's labels may move this matcher's configured threshold."""
    return LearningLimits(
        floor=floor_for(matcher, configured),
        ceiling=ceiling_for(matcher, configured, fit),
        reporter_shift=REPORTER_SHIFT[matcher],
    )


def at_threshold(matcher: str, threshold: float, fit: dict | None = None) -> dict | None:
    """What the shipped calibration says of a threshold (the grid point at or just above it):
    the false-hit rate's 95 % upper bound, and the share of true paraphrases reused."""
    fit = fit or shipped()
    curve = sorted(fit["matchers"][matcher]["curve"], key=lambda point: point["threshold"])
    if not curve or not curve[0]["threshold"] - 1e-9 <= threshold <= curve[-1]["threshold"] + 1e-9:
        return None  # outside the calibrated grid, below it as above it: nothing measured there
    point = next((p for p in curve if p["threshold"] >= threshold - 1e-9), None)
    if point is None:
        return None
    return {
        "grid_threshold": point["threshold"],
        "false_hit_upper": upper_bound(point["false_hits"], fit["distinct"], fit["confidence"]),
        "reuse": point["correct_hits"] / fit["duplicates"],
    }
