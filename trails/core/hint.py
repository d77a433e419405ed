"""The short text an agent receives with a hint."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class RecordedStep:
    """One tool call of a path: what record takes, the store keeps and recall returns."""

    tool: str
    args: dict[str, Any]
    section_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "section_ids", tuple(self.section_ids))

    def describe(self) -> str:
        """Returns the step as a call, such as `search(query="copy object")`."""
        args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in self.args.items())
        return f"{self.tool}({args})"


def starting_step(steps: Sequence[RecordedStep], invalid_ids: Sequence[str]) -> RecordedStep | None:
    """Returns the first step that returned a changed or deleted section.

    Steps before it led only to sections that still hold, so it is where the
    recorded path needs redoing. With no such step, the first step is returned.
    """
    invalid = set(invalid_ids)
    for step in steps:
        if invalid.intersection(step.section_ids):
            return step
    return steps[0] if steps else None


def hint_text(
    matched_query: str,
    similarity: float,
    valid_ids: Sequence[str],
    changed_ids: Sequence[str],
    deleted_ids: Sequence[str],
    steps: Sequence[RecordedStep],
) -> str:
    """Writes the hint for an agent whose similar question has partly stale sources.

    Returns:
        A few sentences naming the valid, changed and deleted sections and the
        step to start with.
    """
    lines = [f'A similar question was answered before ("{matched_query}", similarity {similarity:.2f}).']
    if valid_ids:
        lines.append("These sections are still valid: " + ", ".join(valid_ids) + ".")
    if changed_ids:
        lines.append("These changed since and must be read again: " + ", ".join(changed_ids) + ".")
    if deleted_ids:
        lines.append("These no longer exist: " + ", ".join(deleted_ids) + ".")
    start = starting_step(steps, [*changed_ids, *deleted_ids])
    if start is not None:
        lines.append(f"Start with: {start.describe()}.")
    return " ".join(lines)
