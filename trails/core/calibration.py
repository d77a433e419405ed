"""Thresholds that keep a false-hit bound with confidence, not on the point estimate.

A threshold fitted to the rate seen on labelled pairs overshoots on new questions
(the dev file's 1.9 % became 2.7 % on held-out pairs at the same threshold). So a
threshold is chosen where the one-sided Clopper-Pearson upper bound of the false-hit
rate, not the observed rate, is within the bound; the figure is then checked on a
split the choice never saw.

A scope's own labels (feedback on recalls, re-searches, near misses, operator
rejections) move the threshold only where they show with confidence that the bound
is broken (up) or holds (down), within a floor and a ceiling, and no single reporter
moves it more than a bounded step on its own.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from functools import lru_cache
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


@lru_cache(maxsize=65536)
def upper_bound(events: int, trials: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate: the largest rate under which
    seeing `events` or fewer in `trials` is still at least (1 - confidence) likely."""
    _check(events, trials, confidence)
    if trials == 0 or events >= trials:
        return 1.0
    alpha = 1.0 - confidence
    return _bisect(lambda p: _binomial_cdf(events, trials, p) <= alpha)


@lru_cache(maxsize=65536)
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


@dataclass(frozen=True)
class FalseHitVerdict:
    """What a scope's judged recalls say of its false hits against its bound.

    `verdict`: "over" when even the interval's low end is above the bound (an alert and a
    red strip), "watch" when reports came but too few recalls were judged to tell, "ok"
    otherwise (within the bound, or nothing reported). `low`, `high`: the 95 % interval.
    """

    verdict: str
    reported: int
    judged: int
    bound: float
    low: float
    high: float

    @property
    def too_few_to_tell(self) -> bool:
        return self.low <= self.bound < self.high

    @property
    def share(self) -> float | None:
        return self.reported / self.judged if self.judged else None

    @property
    def enough_to_tell(self) -> int | None:
        """How many judged recalls, at the share seen so far, would tell (see judged_to_tell)."""
        return judged_to_tell(self.reported, self.judged, self.bound) if self.too_few_to_tell else None


def judged_to_tell(reported: int, judged: int, bound: float, confidence: float = 0.95, cap: int = 20_000) -> int | None:
    """The fewest judged recalls at which the share seen so far (reported / judged) would put
    the interval wholly on one side of the bound: over it, or within it.

    Returns:
        That number (at least `judged`), or None: none judged yet, a share at the bound
        itself, or more than `cap` needed.
    """
    if judged <= 0:
        return None
    share = reported / judged
    if math.isclose(share, bound):
        return None

    def tells(n: int) -> bool:
        low, high = interval(round(share * n), n, confidence)
        return not low <= bound < high

    if tells(judged):
        return judged
    low, high = judged, judged * 2
    while not tells(high):
        if high >= cap:
            return None
        low, high = high, min(high * 2, cap)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if tells(middle) else (middle, high)
    return high


def false_hit_verdict(reported: int, judged: int, bound: float, confidence: float = 0.95) -> FalseHitVerdict:
    """The one false-hit verdict: the overview's health strip, the alert's gauge and the
    what-if page all read it (see FalseHitVerdict)."""
    low, high = interval(reported, judged, confidence) if judged > 0 else (0.0, 1.0)
    verdict = "over" if judged > 0 and low > bound else "watch" if reported and high > bound else "ok"
    return FalseHitVerdict(verdict, reported, judged, bound, low, high)


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
    false_hit_similarities: Iterable[float], trials: int, grid: Sequence[float], bound: float, confidence: float = 0.95
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
        chosen = Calibration(
            threshold, bound, confidence, false_hits, trials, upper_bound(false_hits, trials, confidence)
        )
        if chosen.holds:
            return chosen
    return chosen


@dataclass(frozen=True)
class Label:
    """A judged recall: the similarity of the trail it served (or, for a miss, of the nearest
    candidate), whether serving it was a false hit, and who said so."""

    similarity: float
    false_hit: bool
    # Who gave the label: an API key ("key:…"), an operator ("operator:…"), or "" (unknown).
    # Operators are trusted; every other reporter's weight is bounded (LearningLimits).
    reporter: str = ""

    @property
    def trusted(self) -> bool:
        return self.reporter.startswith("operator:")


# Fewer labels than this leave the threshold alone: one bad trail is the business of
# that trail's reports (it goes back to pending), not of the scope's threshold.
# The kinds of flag a threshold decision raises for an operator ("ceiling": the labels demand more
# than the ceiling; "reporter": one reporter was held back); each has its alert.
FLAG_KINDS = ("ceiling", "reporter")
MIN_LABELS = 20
# Lowering opens a band of similarities the scope has not served: it needs this many
# labels inside that band, so the decision rests on evidence about the band itself.
MIN_BAND_LABELS = 10


@dataclass(frozen=True)
class LearningLimits:
    """How far a scope's labels may move its threshold, and how sure they must be.

    Raising protects users, so it needs less certainty (95 %) than lowering, which
    serves more (99 %: the threshold is recomputed on every label, and each look is
    another chance for an unlucky sample to pass).
    """

    floor: float  # the lowest threshold labels may lower it to (candidates are found down to it)
    ceiling: float  # the highest it may rise to; a demand past it flags the scope for an operator
    reporter_shift: float  # the most one reporter's labels, added to everyone else's, may move it
    raise_confidence: float = 0.95
    lower_confidence: float = 0.99
    min_labels: int = MIN_LABELS
    min_band_labels: int = MIN_BAND_LABELS


@dataclass(frozen=True)
class LearnedThreshold:
    """What a scope's labels decide for one matcher, with the evidence."""

    threshold: float | None  # None: the configured (calibrated) threshold stands
    demanded: float  # what all labels together demand, before the ceiling and the reporter limit
    flags: tuple[
        str, ...
    ]  # "ceiling": the labels demand more than the ceiling; "reporter:<id>": one reporter was held back
    labels: int
    false_hits: int
    reporters: int
    at_threshold: tuple[int, int]  # (false hits, labels) at or above the threshold in use
    bound: float
    asked: int = 0  # questions asked in the labels' window
    # The reporters behind the labels, most labels first: (reporter, labels, false hits), at most 10.
    by_reporter: tuple[tuple[str, int, int], ...] = ()

    def evidence(self) -> dict:
        false_hits, judged = self.at_threshold
        return {
            "labels": self.labels,
            "false_hits": self.false_hits,
            "reporters": self.reporters,
            "asked": self.asked,
            "at_threshold": {"false_hits": false_hits, "labels": judged},
            "demanded": self.demanded,
            "bound": self.bound,
            "flags": list(self.flags),
            "by_reporter": [list(r) for r in self.by_reporter],
        }


class _Counts:
    """False hits and labels at or above any threshold, from labels sorted once; the counts
    without one reporter's labels are the difference of two such counts (no re-sorting)."""

    def __init__(self, labels: Sequence[Label], minus: "_Counts | None" = None) -> None:
        self.similarities = sorted(label.similarity for label in labels)
        self.false_similarities = sorted(label.similarity for label in labels if label.false_hit)
        self.minus = minus

    def __len__(self) -> int:
        return len(self.similarities) - (len(self.minus) if self.minus else 0)

    def at(self, threshold: float) -> tuple[int, int]:
        # A label counts at a threshold it reaches; a tiny tolerance keeps 0.95 from failing 0.95.
        edge = threshold - 1e-9
        false_hits = len(self.false_similarities) - bisect.bisect_left(self.false_similarities, edge)
        judged = len(self.similarities) - bisect.bisect_left(self.similarities, edge)
        if self.minus is not None:
            other_false, other_judged = self.minus.at(threshold)
            false_hits, judged = false_hits - other_false, judged - other_judged
        return false_hits, judged

    def without(self, part: "_Counts") -> "_Counts":
        """These counts less a subset's (one reporter's labels)."""
        rest = _Counts([])
        rest.similarities, rest.false_similarities, rest.minus = self.similarities, self.false_similarities, part
        return rest


# A lower threshold is entered only where the evidence leaves this share of the bound
# unused; once there it is kept while the bound itself holds (hysteresis).
LOWERING_MARGIN = 0.8


def demanded_threshold(
    labels: "Sequence[Label] | _Counts",
    asked: int,
    calibrated: float,
    grid: Sequence[float],
    bound: float,
    limits: LearningLimits,
    current: float | None = None,
) -> float:
    """The threshold a set of labels demands: higher where they show with confidence that
    the bound is broken at the calibrated one, lower where they show with confidence that
    it holds lower, else the calibrated one.

    The bound is on false hits per question asked. Raising counts the labelled false hits
    against every question asked in the labels' window (`asked`): unlabelled hits can only
    add false ones, so this never overstates the rate, and the threshold rises only where
    even this count shows the bound broken (lower confidence bound above it). Lowering
    counts the false hits a lower threshold would have served among the labelled
    questions (hits judged, and misses whose path was recorded: a near miss by its nearest
    candidate, a far one as no risk at all), and needs their upper confidence bound within
    the bound: it assumes the questions agents label are like those they do not. It tests
    thresholds one after the other downwards from the calibrated one and stops at the
    first that fails (fixed-sequence testing: the chosen threshold holds at the stated
    confidence without a correction for the grid).
    """
    counts = labels if isinstance(labels, _Counts) else _Counts(labels)
    labelled = len(counts)
    if labelled < limits.min_labels:
        return calibrated
    asked = max(asked, labelled)
    false_hits, _ = counts.at(calibrated)
    if lower_bound(false_hits, asked, limits.raise_confidence) > bound:
        # 1.0 is the last resort: where even the grid's top shows the bound broken, only
        # identical questions match (a misleading trail among those is its reports' business).
        for threshold in sorted(t for t in set(grid) | {1.0} if t > calibrated):
            false_hits, _ = counts.at(threshold)
            if lower_bound(false_hits, asked, limits.raise_confidence) <= bound:
                return threshold
        return 1.0
    chosen, above = calibrated, counts.at(calibrated)[1]
    for threshold in sorted((t for t in grid if limits.floor <= t < calibrated), reverse=True):
        false_hits, judged = counts.at(threshold)
        # Going lower than where it stands needs room under the bound; staying needs the
        # bound: one more label near the edge does not flip the threshold back and forth.
        allowed = bound if current is not None and threshold >= current - 1e-9 else bound * LOWERING_MARGIN
        if upper_bound(false_hits, labelled, limits.lower_confidence) > allowed:
            break
        # Only down to where labels are: a step no label reached says nothing of its similarities.
        if judged > above and judged - counts.at(calibrated)[1] >= limits.min_band_labels:
            chosen = threshold
        above = judged
    return chosen


def learned_threshold(
    labels: Sequence[Label],
    asked: int,
    calibrated: float,
    grid: Sequence[float],
    bound: float,
    limits: LearningLimits,
    current: float | None = None,
) -> LearnedThreshold:
    """A scope's threshold from its own labels, within the limits of trust.

    What all labels demand is held within `reporter_shift` of what the labels without
    any one untrusted reporter demand (so no single key, however many labels it sends,
    moves the threshold further than that on its own), then within [floor, ceiling].
    `current` is the learned threshold in use (None: the calibrated one), for hysteresis.
    Each limit that held the threshold back is named in `flags`: the scope then waits
    for an operator.
    """
    counts = _Counts(labels)
    demanded = demanded_threshold(counts, asked, calibrated, grid, bound, limits, current)
    low, high, low_by, high_by = limits.floor, limits.ceiling, "", ""
    by_reporter: dict[str, list[Label]] = {}
    for label in labels:
        if not label.trusted:
            by_reporter.setdefault(label.reporter, []).append(label)
    for reporter in sorted(by_reporter):
        # The questions asked stay: a reporter's own recalls still count as asked.
        without = demanded_threshold(
            counts.without(_Counts(by_reporter[reporter])), asked, calibrated, grid, bound, limits, current
        )
        if without - limits.reporter_shift > low:
            low, low_by = without - limits.reporter_shift, reporter
        if without + limits.reporter_shift < high:
            high, high_by = without + limits.reporter_shift, reporter
    threshold = min(max(demanded, low), high)
    flags: list[str] = []  # of FLAG_KINDS
    if threshold > demanded and low_by:
        flags.append(f"reporter:{low_by}")
    if threshold < demanded and high_by:
        flags.append(f"reporter:{high_by}")
    if demanded > limits.ceiling:
        flags.append("ceiling")
    threshold = round(min(max(threshold, limits.floor), limits.ceiling), 6)
    tally: dict[str, list[int]] = {}
    for label in labels:
        counted = tally.setdefault(label.reporter or "unnamed", [0, 0])
        counted[0] += 1
        counted[1] += int(label.false_hit)
    by_reporter = tuple(
        (reporter, n, false)
        for reporter, (n, false) in sorted(tally.items(), key=lambda item: (-item[1][0], item[0]))[:10]
    )
    return LearnedThreshold(
        None if abs(threshold - calibrated) < 1e-9 else threshold,
        demanded,
        tuple(flags),
        len(labels),
        sum(1 for l in labels if l.false_hit),
        len({label.reporter for label in labels}),
        counts.at(threshold),
        bound,
        asked,
        by_reporter,
    )
