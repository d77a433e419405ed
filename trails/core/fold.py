"""The one fold of text that matching and erasure share, with each folded character's origin.

Rules, in order (docs/matching.md and docs/promises.md say them for users):

1. Unicode's default-ignorable code points are removed (zero-width space and joiners, soft
   hyphen, variation selectors...), read from the Unicode property by the `regex` library.
2. A base character and the marks that follow it are NFKC-normalised together, so NFC and
   NFD spellings, ligatures, full-width and other compatibility forms agree.
3. Apostrophes and quotes people type for one another become "'".
4. Latin letters are transliterated to ASCII by `anyascii` (é→e, ł→l, ø→o, ı→i, ß→ss, æ→ae);
   other scripts keep their letters and marks (が stays が), since transliterating them would
   merge different words (東京 and 董京 both read "DongJing").
5. Case is fully folded (str.casefold).

`FOLD_VERSION` names these rules; signatures made from folded text carry it.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import regex
from anyascii import anyascii

FOLD_VERSION = 2

_IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}")
# Apostrophes and quotes people type for one another (O'Brien, O’Brien, Oʼbrien).
_QUOTES = frozenset("\u2018\u2019\u201a\u201b\u02bc\u02bb\u0060\u00b4\u2032")
# Hangul vowel and final jamo continue a syllable begun by a leading jamo (NFD Korean).
_HANGUL_CONTINUING = ((0x1160, 0x11FF), (0xD7B0, 0xD7FF))


@dataclass(frozen=True)
class Folded:
    """Folded text and, per folded character, the span of the original text it came from."""

    text: str
    starts: tuple[int, ...] | None  # None: the identity (ASCII text folds character for character)
    ends: tuple[int, ...] | None

    def origin(self, a: int, b: int) -> tuple[int, int]:
        """The span of the original text that folded characters a..b (b > a) came from."""
        if self.starts is None or self.ends is None:
            return a, b
        return self.starts[a], self.ends[b - 1]


def _continues(char: str) -> bool:
    if unicodedata.combining(char):
        return True
    code = ord(char)
    return any(low <= code <= high for low, high in _HANGUL_CONTINUING)


@lru_cache(maxsize=65536)
def _fold_cluster(cluster: str) -> str:
    """A base character with its marks, folded (rules 2-5)."""
    out = []
    for char in unicodedata.normalize("NFKC", cluster):
        if char.isascii():
            out.append(char.lower())
        elif char in _QUOTES:
            out.append("'")
        elif _IGNORABLE.match(char):
            continue
        elif unicodedata.name(char, "").startswith("LATIN"):
            out.append(anyascii(char).lower())
        else:
            out.append(char.casefold())
    return unicodedata.normalize("NFC", "".join(out))


def fold(text: str) -> Folded:
    """Folds text by the module's rules, keeping where each folded character came from.

    Returns:
        The folded text with its origin spans (a redaction cuts the original there).
    """
    if text.isascii():
        return Folded(text.lower(), None, None)
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    length, i = len(text), 0
    while i < length:
        if _IGNORABLE.match(text, i):
            i += 1
            continue
        j = i + 1
        while j < length and _continues(text[j]) and not _IGNORABLE.match(text, j):
            j += 1
        folded = _fold_cluster(text[i:j])
        out.append(folded)
        starts.extend([i] * len(folded))
        ends.extend([j] * len(folded))
        i = j
    return Folded("".join(out), tuple(starts), tuple(ends))


def fold_text(text: str) -> str:
    """The folded text alone."""
    return text.lower() if text.isascii() else fold(text).text
