"""Token estimates and the cut of prefetched text to a token budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from infra.tokens import TOKEN as _TOKEN  # the budget's unit, shared with the section splitter
from infra.tokens import count_tokens, token_weight

# Recall counts the same sections' tokens over and over: counts of recent texts are kept,
# keyed by the text itself (exact), up to this many characters in all, then started afresh.
_MEMO_CHARACTERS = 4_000_000
_memo: dict[str, int] = {}
_memo_size = [0]


def forget() -> None:
    """Drops every remembered count (the texts were a purge's to erase)."""
    _memo.clear()
    _memo_size[0] = 0


def counted(text: str) -> int:
    """count_tokens, remembered for texts seen recently (section texts recur on every recall)."""
    found = _memo.get(text)
    if found is None:
        found = count_tokens(text)
        if _memo_size[0] + len(text) > _MEMO_CHARACTERS:
            _memo.clear()
            _memo_size[0] = 0
        _memo[text] = found
        _memo_size[0] += len(text)
    return found


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
        tokens = counted(text)
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
    """Returns the character offset just past the last whole unit within n tokens (n >= 1)."""
    counted, end = 0, 0
    for match in _TOKEN.finditer(text):
        counted += token_weight(match.group(0))
        if counted > n:
            return end
        end = match.end()
    return len(text)
