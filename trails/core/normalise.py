"""Query normalisation and shingling for lexical matching."""

from __future__ import annotations

import hashlib
import re

from .fold import fold_text

# A word is a run of letters or digits; trailing "+" and "#" stay attached so that
# "C", "C++" and "C#" remain three different words.
_WORD = re.compile(r"[^\W_]+[+#]*")


def words(text: str) -> list[str]:
    """Splits text into normalised words.

    Args:
        text: any user text.

    Returns:
        The words of the text as `fold.fold` reads it (the fold erasure matches in too),
        punctuation and white space removed, in their original order.
    """
    return _WORD.findall(fold_text(text))


def normalise_query(text: str) -> str:
    """Returns the canonical form of a query: its words joined by single spaces."""
    return " ".join(words(text))


# The form in which the embedding model reads a question: the same words lexical matching
# shingles, so "Where do visitors park?" and "where do visitors park" are one question to both.
# Part of every vector's model name: vectors of another form are never compared (re-sign them).
QUESTION_FORM = "words"


def question_form(text: str) -> str:
    """What the embedding model is given for a question: its normalised words."""
    return normalise_query(text)


def shingles(text: str) -> set[str]:
    """Returns the shingle set of a query: its words and its adjacent word pairs.

    Pairs keep some word order, so "dog bites man" and "man bites dog" differ.
    """
    tokens = words(text)
    result = set(tokens)
    result.update(f"{a} {b}" for a, b in zip(tokens, tokens[1:]))
    return result


def stable_hash32(value: str) -> int:
    """A 32-bit hash that is the same in every process and on every machine.

    Python's built-in hash() is salted per process, so it cannot be used for
    signatures that are stored and compared later.
    """
    return int.from_bytes(hashlib.blake2b(value.encode("utf-8"), digest_size=4).digest(), "big")
