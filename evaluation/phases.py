"""Where a recall's time goes: recall()'s steps timed by name, for the scale benchmark.

The steps are the names trails.serving.recall calls them by; while `timing` is open they are
wrapped there (and put back after), so the product's code carries no timers.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import trails.serving.recall as recall_module
from evaluation.timing import percentile

PHASES = ("sign", "read_candidates", "score_candidates", "add_paths", "validate", "write_recall_effects")


class PhaseClock:
    """Seconds spent in each phase, per label (the store being recalled on)."""

    def __init__(self) -> None:
        self.label = ""
        self.seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def mean_ms(self, label: str, recalls: int) -> dict[str, float]:
        return {phase: round(self.seconds[label][phase] / recalls * 1000.0, 3) for phase in PHASES}

    def reset(self) -> None:
        self.seconds.clear()


@contextmanager
def timing() -> Iterator[PhaseClock]:
    clock = PhaseClock()
    originals = {name: getattr(recall_module, name) for name in PHASES}

    def timed(name, function):
        def call(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                clock.seconds[clock.label][name] += time.perf_counter() - started

        return call

    for name, function in originals.items():
        setattr(recall_module, name, timed(name, function))
    try:
        yield clock
    finally:
        for name, function in originals.items():
            setattr(recall_module, name, function)


def alternately(
    sides: dict[str, Callable[[object], object]], questions: list, clock: PhaseClock, untimed: int
) -> tuple[dict[str, list[float]], dict[str, list]]:
    """Asks each question on every side in turn, which side goes first alternating, so a slow
    minute of the machine lands on all; times (ms) and keeps the results of those past the
    first `untimed`, the clock's phases likewise."""
    spent: dict[str, list[float]] = {name: [] for name in sides}
    answers: dict[str, list] = {name: [] for name in sides}
    names = list(sides)
    for i, question in enumerate(questions):
        if i == untimed:
            clock.reset()
        for name in names if i % 2 == 0 else names[::-1]:
            clock.label = name
            t0 = time.perf_counter()
            answer = sides[name](question)
            elapsed = (time.perf_counter() - t0) * 1000.0
            if i >= untimed:
                spent[name].append(elapsed)
                answers[name].append(answer)
    return spent, answers


def side_by_side(spent: dict[str, list[float]], clock: PhaseClock, over: str, under: str) -> dict:
    """Each side's p50, p99 and mean phases, and `over`'s p50 and p99 as multiples of `under`'s."""
    row: dict = {
        name: {
            "p50_ms": round(statistics.median(t), 3),
            "p99_ms": round(percentile(t, 0.99), 3),
            "phases_mean_ms": clock.mean_ms(name, len(t)),
        }
        for name, t in spent.items()
    }
    row["p50_ratio"] = round(row[over]["p50_ms"] / row[under]["p50_ms"], 2)
    row["p99_ratio"] = round(row[over]["p99_ms"] / row[under]["p99_ms"], 2)
    return row
