"""Estimates of what a recall spared the agent, for the operators' overview."""

from __future__ import annotations

from typing import Sequence

from trails.core.hint import RecordedStep, starting_step
from trails.core.validation import Outcome


def calls_saved(outcome: Outcome, steps: Sequence[RecordedStep], invalid_ids: Sequence[str]) -> int:
    """Returns the tool calls of the recorded path the agent need not make.

    A prefetch spares the whole path. A hint spares the steps before the first one
    that returned a changed or deleted section, since the hint starts the agent there.
    """
    if outcome is Outcome.PREFETCH:
        return len(steps)
    if outcome is Outcome.HINT:
        start = starting_step(steps, invalid_ids)
        return list(steps).index(start) if start is not None else 0
    return 0


def tokens_saved(outcome: Outcome, path_tokens: int, served_tokens: int) -> int:
    """Returns the context tokens a prefetch spared: the path's tool results less what was served.

    Hints are counted as saving no tokens: the agent still reads the changed
    sections, and the hint itself costs a few.
    """
    if outcome is Outcome.PREFETCH:
        return max(0, path_tokens - served_tokens)
    return 0
