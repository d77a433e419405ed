"""Token counts with no model: what prefetch budgets and the section splitter count.

Close to what the BPE tokenizers of today's LLMs count (cl100k-style), erring high: a run of
letters is a token per 12 characters, digits go in threes, a run of one punctuation character
(a table's `-----`) a token per 8, each line break run a token, and a run of two or more
spaces or tabs (a table's padding, code's indent) a token per 16, where a single space
between words is part of the next word's token. CJK characters are a token each. The
benchmark `benchmark_tokens` prints how close on real documentation pages.
"""

from __future__ import annotations

import re

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
# One match per counted unit; the runs longer than a unit's width add to it (below).
TOKEN = re.compile(rf"[{_CJK}]|[^\W\d_{_CJK}]+|\d{{1,3}}|_|([^\w\s])\1*|\n+|[ \t]{{2,}}")
_LONG = (
    (re.compile(rf"[^\W\d_{_CJK}]{{12,}}"), 12, 0),
    (re.compile(r"([^\w\s])\1{8,}"), 8, 1),
    (re.compile(r"[ \t]{16,}"), 16, 0),
)
WORD_WIDTH, PUNCTUATION_WIDTH, SPACE_WIDTH = 12, 8, 16


def token_weight(run: str) -> int:
    """How many tokens one TOKEN match counts for."""
    first = run[0]
    if first in " \t":
        return 1 + len(run) // SPACE_WIDTH
    if first == "\n" or first == "_" or first.isdigit() or len(run) == 1:
        return 1
    if first.isalpha():
        return 1 + len(run) // WORD_WIDTH
    return 1 + (len(run) - 1) // PUNCTUATION_WIDTH


def count_tokens(text: str) -> int:
    """Estimates the number of tokens in text (see the module's docstring)."""
    count = sum(1 for _ in TOKEN.finditer(text))
    for pattern, width, less in _LONG:  # rare: long words, rules of dashes, wide padding
        count += sum((len(m.group(0)) - less) // width for m in pattern.finditer(text))
    return count
