"""Recognising answers that say the sources did not answer the question.

Such an answer's trail would teach later agents a path that leads nowhere, so
admission rejects it.
"""

from __future__ import annotations

import re

from .normalise import normalise_query

_SOURCES = (
    r"(?:documents?|docs|documentation|sources?|sections?|results?|context|materials?|information|data|pages?"
    r"|articles?|knowledge base|search(?:es)?)"
)
_NEG = r"(?:do not|don t|does not|doesn t|did not|didn t|cannot|can t|could not|couldn t|fail to|failed to|unable to|not able to)"
_PATTERNS = [
    # "the documents I found don't cover this", "the sources do not mention ..."
    rf"\b{_SOURCES}\b(?:\s+\w+){{0,4}}\s+{_NEG}\s+(?:\w+\s+){{0,2}}(?:cover|mention|contain|address|answer|say|include|discuss|explain|specify|provide|state)",
    # "I could not find any information", "I was unable to find ..."
    rf"\bi\s+(?:was\s+|am\s+)?{_NEG}\s+(?:\w+\s+){{0,2}}(?:find|locate|determine|answer|confirm)\b",
    r"\bno\s+(?:relevant\s+|specific\s+|such\s+)?(?:information|mention|details?|answer|data|results?)\s+(?:\w+\s+){0,3}(?:found|available|provided|given|about|on|regarding)\b",
    rf"\b(?:not|isn t|is not|wasn t)\s+(?:\w+\s+){{0,2}}(?:covered|mentioned|addressed|answered|specified|included|found)"
    rf"\s+(?:in|by)\s+(?:the\s+)?(?:\w+\s+){{0,2}}{_SOURCES}\b",
    r"\b(?:beyond|outside)\s+(?:the\s+)?scope\s+of\s+(?:the\s+)?(?:\w+\s+){0,2}(?:documents?|sources?|documentation|context)\b",
    r"\bi\s+don t\s+know\b",
    r"\bthere\s+is\s+no\s+(?:information|mention)\b",
]
_REFUSAL = re.compile("|".join(f"(?:{p})" for p in _PATTERNS))


def says_sources_do_not_answer(answer: str) -> bool:
    """Tells whether an answer says or implies that its sources do not answer the question."""
    # Normalising turns "don't" into "don t" and drops punctuation, so one
    # pattern covers the apostrophe variants and casing.
    return bool(_REFUSAL.search(normalise_query(answer)))
