"""Token estimates with no model: what prefetch budgets and the section splitter count."""

from __future__ import annotations

import re

# A token is a run of letters/digits or one other non-space character: close to
# what subword tokenizers produce for English prose and code, with no model needed.
TOKEN = re.compile(r"[^\W_]+|[^\s\w]|_")


def count_tokens(text: str) -> int:
    """Estimates the number of tokens in text."""
    return sum(1 for _ in TOKEN.finditer(text))
