"""Token estimates and the cut of prefetched text to a token budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from infra.tokens import TOKEN as _TOKEN  # the budget's unit, shared with the section splitter
from infra.tokens import count_tokens


@dataclass(frozen=True)
class BudgetedText:
    section_id: str
    text: str | None  # None when the budget ran out before this section
    tokens: int
    truncated: bool


@dataclass(frozen=True)
class BudgetCut:
    parts: tuple[BudgetedText, ...]
    tokens: int
    truncated: bool


def cut_to_budget(texts: Sequence[tuple[str, str]], budget: int) -> BudgetCut:
    """Keeps sections whole, in order, while they fit; cuts the first that does not.

    Args:
        texts: (section id, text) pairs in citation order.
        budget: the most tokens to return; at least 0.

    Returns:
        Every section in order: whole, cut at a token boundary, or without text
        once the budget is spent; `truncated` is set when anything was cut.

    Raises:
        ValueError: the budget is negative.
    """
    if budget < 0:
        raise ValueError(f"token budget must not be negative, got {budget}")
    left = budget
    parts = []
    truncated = False
    for section_id, text in texts:
        tokens = count_tokens(text)
        if tokens <= left:
            parts.append(BudgetedText(section_id, text, tokens, False))
            left -= tokens
        elif left > 0:
            end = _end_of_token(text, left)
            parts.append(BudgetedText(section_id, text[:end], left, True))
            left = 0
            truncated = True
        else:
            parts.append(BudgetedText(section_id, None, 0, True))
            truncated = True
    return BudgetCut(tuple(parts), budget - left, truncated)


def _end_of_token(text: str, n: int) -> int:
    """Returns the character offset just past the n-th token (n >= 1)."""
    for i, match in enumerate(_TOKEN.finditer(text), start=1):
        if i == n:
            return match.end()
    return len(text)
