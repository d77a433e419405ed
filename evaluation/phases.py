"""Where a recall's time goes: recall()'s steps timed by name, for the scale benchmark.

The steps are the names trails.serving.recall calls them by; while `timing` is open they are
wrapped there (and put back after), so the product's code carries no timers.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import trails.serving.recall as recall_module

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
