"""The one fold of text that matching and erasure share, with each folded character's origin.

Rules, in order (docs/matching.md and docs/promises.md say them for users):

1. Unicode's default-ignorable code points are removed (zero-width space and joiners, soft
   hyphen, variation selectors...), read from the Unicode property by the `regex` library.
2. Each grapheme cluster (a base character and its marks, a Hangul syllable's jamo) is
   NFKC-normalised as one, so NFC and NFD spellings, ligatures, full-width and other
   compatibility forms agree.
3. Apostrophes and quotes people type for one another become "'".
4. Latin letters are transliterated to ASCII by `anyascii` (é→e, ł→l, ø→o, ı→i, ß→ss, æ→ae);
   other scripts keep their letters (Σ stays σ), since transliterating them would merge
   different words (東京 and 董京 both read "DongJing").
5. Combining marks (Unicode categories Mn and Me, after canonical decomposition) are removed
   where they are accents, on Latin, Greek and Cyrillic letters and on symbols: J̲a̲n̲e̲ is jane,
   Σωκράτης is σωκρατησ, Фёдоров is федоров; in other scripts they change the word and stay
   (が is not か, कि is not क).
6. Case is fully folded (str.casefold).

For erasure, `fold(text, urls=True)` also reads percent-encoded runs (%20, %C5%81) decoded and
"+" as a space, so a name inside a URL is found (and the whole encoded run is cut).

`FOLD_VERSION` names these rules; signatures made from folded text carry it.
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote

import regex
from anyascii import anyascii

FOLD_VERSION = 3

_IGNORABLE = regex.compile(r"\p{Default_Ignorable_Code_Point}")
# Apostrophes and quotes people type for one another (O'Brien, O’Brien, Oʼbrien).
_QUOTES = frozenset("\u2018\u2019\u201a\u201b\u02bc\u02bb\u0060\u00b4\u2032")


@dataclass(frozen=True)
class Folded:
    """Folded text and where its pieces came from: (folded start, original start, original end,
    whether the piece is an ASCII run folded character for character)."""

    text: str
    pieces: tuple[tuple[int, int, int, bool], ...] | None  # None: the whole text is one ASCII run

    def _at(self, index: int) -> tuple[int, int]:
        """The original span of the folded character at `index`."""
        if self.pieces is None:
            return index, index + 1
        piece = self.pieces[bisect_right(self.pieces, (index, _END)) - 1]
        folded_start, start, end, ascii_run = piece
        return (start + index - folded_start, start + index - folded_start + 1) if ascii_run else (start, end)

    def origin(self, a: int, b: int) -> tuple[int, int]:
        """The span of the original text that folded characters a..b (b > a) came from."""
        return self._at(a)[0], self._at(b - 1)[1]


_END = float("inf")
_MARKS = frozenset({"Mn", "Me"})
# A run of percent-encoded bytes (read decoded when folding for erasure).
_PERCENT = regex.compile(r"(?:%[0-9A-Fa-f]{2})+")
# An ASCII run (not its last letter where a mark follows: e + U+0301 is é), else one grapheme cluster.
_PIECE = regex.compile(r"(?:[\x00-\x7f](?!\p{M}))+|\X")
# The same, with percent-encoded runs as pieces of their own.
_URL_PIECE = regex.compile(r"(?:%[0-9A-Fa-f]{2})+|(?:(?!%[0-9A-Fa-f]{2})[\x00-\x7f](?!\p{M}))+|\X")


@lru_cache(maxsize=65536)
def _marks_are_accents(base: str) -> bool:
    """Whether marks on this base are accents a writer may drop (Latin, Greek, Cyrillic, or a
    symbol): in other scripts they change the word (が is not か, कि is not क)."""
    if not base or base.isascii() or not base.isalpha():
        return True
    return unicodedata.name(base, "").startswith(("LATIN", "GREEK", "CYRILLIC"))


def _fold_cluster(cluster: str) -> str:
    """A grapheme cluster (a base character with its marks), folded (rules 1-6)."""
    out = []
    chars = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", cluster))
    accents = _marks_are_accents(chars[:1])
    for char in chars:
        if unicodedata.category(char) in _MARKS:
            if accents:
                continue
            out.append(char)
            continue
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


def _fold_piece(piece: str, urls: bool) -> str:
    if urls and _PERCENT.fullmatch(piece):
        return fold_text(unquote(piece))
    folded = piece.lower() if piece.isascii() else _fold_cluster(piece)
    return folded.replace("+", " ") if urls else folded


def fold(text: str, urls: bool = False) -> Folded:
    """Folds text by the module's rules, keeping where each folded character came from.

    Args:
        text: any text.
        urls: also read percent-encoded runs decoded and "+" as a space (erasure's reading).

    Returns:
        The folded text with its origins (a redaction cuts the original there).
    """
    if text.isascii() and not (urls and _PERCENT.search(text)):
        return Folded(text.lower().replace("+", " ") if urls else text.lower(), None)
    out: list[str] = []
    pieces: list[tuple[int, int, int, bool]] = []
    length = 0
    for match in (_URL_PIECE if urls else _PIECE).finditer(text):
        piece = match.group()
        ascii_run = piece.isascii() and not (urls and _PERCENT.fullmatch(piece))
        folded = _fold_piece(piece, urls)
        if folded:
            pieces.append((length, match.start(), match.end(), ascii_run))
            out.append(folded)
            length += len(folded)
    return Folded("".join(out), tuple(pieces))


def fold_text(text: str) -> str:
    """The folded text alone."""
    return (
        text.lower()
        if text.isascii()
        else "".join(piece.lower() if piece.isascii() else _fold_cluster(piece) for piece in _PIECE.findall(text))
    )
