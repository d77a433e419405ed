"""The one timing helper of the benchmarks and the evaluation."""

from __future__ import annotations

import json
from pathlib import Path

# Recalls not timed at the start of each pass: they warm up connections, caches and prepared statements.
WARM_UP = 50


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile: the value below which `share` of the values lie
    (`share` 0.5 is the median of an odd count, 0.99 the p99)."""
    if not values:
        raise ValueError("no values to take a percentile of")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def save_figures(path: Path | None, figures: dict) -> None:
    """Writes a benchmark's figures as JSON where a path was given (--json)."""
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(figures, indent=2))
