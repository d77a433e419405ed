"""Thresholds that keep a false-hit bound with confidence, not on the point estimate.

A threshold fitted to the rate seen on labelled pairs overshoots on new questions
(the dev file's 1.9 % became 2.7 % on held-out pairs at the same threshold). So a
threshold is chosen where the one-sided Clopper-Pearson upper bound of the false-hit
rate, not the observed rate, is within the bound; the figure is then checked on a
split the choice never saw.

A scope's own labels (feedback on recalls, operator rejections) can only raise the
threshold, and only when they show with confidence that the bound is broken: a
handful of labels cannot lower a calibrated threshold, nor push it to the ceiling.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space (n of a few thousand)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    log_n = math.lgamma(n + 1)
    total = 0.0
    for i in range(0, k + 1):
        total += math.exp(log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q)
    return min(1.0, total)


def _bisect(predicate, low: float = 0.0, high: float = 1.0) -> float:
    """The boundary in [low, high] where a monotone predicate turns from False to True."""
    for _ in range(80):
        middle = (low + high) / 2
        if predicate(middle):
            high = middle
        else:
            low = middle
    return high


def upper_bound(events: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate: the largest rate under which
    seeing `events` or fewer in `trials` is still at least (1 - confidence) likely."""
    _check(events, trials, confidence)
    if trials == 0 or events >= trials:
        return 1.0
    alpha = 1.0 - confidence
    return _bisect(lambda p: _binomial_cdf(events, trials, p) <= alpha)


def lower_bound(events: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson lower bound of a rate."""
    _check(events, trials, confidence)
    if events == 0:
        return 0.0
    alpha = 1.0 - confidence
    # P(X >= events) = 1 - P(X <= events - 1) grows with p.
    return _bisect(lambda p: 1.0 - _binomial_cdf(events - 1, trials, p) >= alpha)


def interval(events: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval at this confidence."""
    tail = 1.0 - (1.0 - confidence) / 2
    return lower_bound(events, trials, tail), upper_bound(events, trials, tail)


def _check(events: int, trials: int, confidence: float) -> None:
    if not 0 <= events <= max(trials, 0) or trials < 0:
        raise ValueError(f"events must be within 0..trials, got {events} of {trials}")
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be within [0.5, 1), got {confidence}")


@dataclass(frozen=True)
class Rate:
    """A measured rate with the counts behind it and its 95 % interval."""

    events: int
    trials: int

    @property
    def value(self) -> float:
        return self.events / self.trials if self.trials else 0.0

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        return interval(self.events, self.trials, confidence)

    def describe(self) -> str:
        low, high = self.interval()
        return f"{self.value:6.2%} [{low:.2%}, {high:.2%}] ({self.events}/{self.trials})"


@dataclass(frozen=True)
class Calibration:
    """The threshold chosen for a bound, and the evidence it was chosen on."""

    threshold: float
    bound: float
    confidence: float
    false_hits: int
    trials: int
    upper: float

    @property
    def holds(self) -> bool:
        return self.upper <= self.bound


def choose_threshold(
    false_hit_similarities: Iterable[float],
    trials: int,
    grid: Sequence[float],
    bound: float,
    confidence: float = 0.95,
) -> Calibration:
    """The lowest threshold on the grid whose false-hit upper bound is within `bound`.

    Args:
        false_hit_similarities: for every question (of `trials`) whose best match was a
            false hit, that match's similarity; a threshold above it would have refused it.
        trials: how many questions could have been false hits (the non-duplicates).
        grid: thresholds to consider, any order.
        bound: the false-hit rate the scope accepts.

    Returns:
        The lowest passing threshold, or the highest of the grid (with `holds` False)
        where none passes.
    """
    similarities = list(false_hit_similarities)
    counts = [(t, sum(1 for s in similarities if s >= t)) for t in grid]
    return threshold_within(counts, trials, bound, confidence)


def threshold_within(
    false_hits_at: Sequence[tuple[float, int]], trials: int, bound: float, confidence: float = 0.95
) -> Calibration:
    """The lowest threshold whose false-hit count (of `trials`) has its upper bound
    within `bound`, from (threshold, false hits) pairs; the highest where none does."""
    if not false_hits_at:
        raise ValueError("the grid of thresholds is empty")
    chosen = None
    for threshold, false_hits in sorted(false_hits_at):
        chosen = Calibration(threshold, bound, confidence, false_hits, trials, upper_bound(false_hits, trials, confidence))
        if chosen.holds:
            return chosen
    return chosen


@dataclass(frozen=True)
class Label:
    """A served hit that someone judged: its similarity and whether it was a false hit."""

    similarity: float
    false_hit: bool


# Fewer labels than this leave the threshold alone: one bad trail is the business of
# that trail's reports (it goes back to pending), not of the scope's threshold.
MIN_LABELS = 20


def learned_threshold(
    labels: Sequence[Label], calibrated: float, grid: Sequence[float], bound: float, confidence: float = 0.95
) -> float | None:
    """A scope's own threshold from its labelled hits, where they demand a higher one.

    The share of false hits among served hits is at least their share among all
    questions, so judging it against the bound is conservative. At the calibrated
    threshold and above, the lowest threshold where the labels no longer show with
    confidence (lower bound > bound) that the bound is broken is returned; None where
    the calibrated threshold already stands or there are fewer than MIN_LABELS labels.
    """
    if len(labels) < MIN_LABELS:
        return None
    # 1.0 is the last resort: where even the grid's top shows the bound broken, only
    # identical questions match (a misleading trail among those is its reports' business).
    for threshold in sorted(t for t in set(grid) | {calibrated, 1.0} if t >= calibrated):
        above = [label for label in labels if label.similarity >= threshold]
        false_hits = sum(1 for label in above if label.false_hit)
        if lower_bound(false_hits, len(above), confidence) <= bound:
            return None if threshold == calibrated else threshold
    return 1.0
