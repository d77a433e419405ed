"""Finding and redacting personal data in stored query text."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Iterable, Sequence

REDACTED = "[redacted]"


def _luhn_ok(digits: str) -> bool:
    total, parity = 0, len(digits) % 2
    for i, ch in enumerate(digits):
        d = int(ch)
        if i % 2 == parity:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _iban_ok(candidate: str) -> bool:
    compact = candidate.replace(" ", "").upper()
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


# Apostrophes and quotes people type for one another (O'Brien, O’Brien, Oʼbrien).
_QUOTES = {ord(q): "'" for q in "\u2018\u2019\u201a\u201b\u02bc\u02bb\u0060\u00b4\u2032"}


def fold(text: str) -> tuple[str, list[int]]:
    """The text as an erasure subject is matched against: NFKC-compatible forms, accents
    dropped, quotes made one, case folded (Zoë Åberg reads as zoe aberg); with, for each
    folded character, the index of the character of `text` it came from.

    Returns:
        (folded text, origin index per folded character).
    """
    out: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text.translate(_QUOTES)):
        for part in unicodedata.normalize("NFKD", char):
            if unicodedata.combining(part):
                continue
            for folded in part.casefold():
                out.append(folded)
                origin.append(index)
    return "".join(out), origin


@dataclass(frozen=True)
class Rule:
    """A named pattern, optionally with a check that rules out look-alike numbers; a
    `folded` pattern is matched against the folded text (`fold`), its spans mapped back."""

    name: str
    pattern: re.Pattern[str]
    check: object = None  # a callable on the matched text, or None
    folded: bool = False

    def spans(self, text: str) -> list[tuple[int, int]]:
        if self.folded:
            folded, origin = fold(text)
            return [
                (origin[a], origin[b - 1] + 1) for a, b in (m.span() for m in self.pattern.finditer(folded)) if b > a
            ]
        found = []
        for match in self.pattern.finditer(text):
            value = match.group(0)
            if self.check is not None and not self.check(re.sub(r"[ -]", "", value)):
                continue
            found.append(match.span())
        return found


BUILTIN_RULES: tuple[Rule, ...] = (
    Rule("email", re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")),
    Rule("card number", re.compile(r"\b(?:\d[ -]?){12,18}\d\b"), _luhn_ok),
    Rule("iban", re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b"), _iban_ok),
    Rule(
        "ip address",
        re.compile(
            r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b|\b(?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}\b"
        ),
    ),
    Rule("phone number", re.compile(r"(?<![\w])\+?\d[\d ()-]{7,}\d(?![\w])")),
)


def rules_for(extra: Iterable[tuple[str, str]] = (), subject: str | None = None, builtin: bool = True) -> list[Rule]:
    """Builds the rule list: the built-in rules, a scope's patterns, and an erasure subject.

    Raises:
        re.error: an extra pattern does not compile.
    """
    rules = list(BUILTIN_RULES) if builtin else []
    rules.extend(Rule(name, re.compile(pattern)) for name, pattern in extra)
    for identifier in identifiers(subject or ""):
        rules.append(subject_rule(identifier))
    return rules


def subject_rule(identifier: str) -> Rule:
    """Matches one identifier of an erasure subject as a whole word (or run of words), in
    any case, accents, quotes or compatibility forms: "Park" finds "park" and "PARK" but not
    "Parking", "12345" not "123456", "O'Brien" finds "O’Brien", "Zoë Åberg" finds "zoe aberg".
    A name's words also match joined by a dot, underscore or hyphen: "Jane Roe" finds
    jane.roe@example.com and jane_roe too."""
    words = [re.escape(word) for word in fold(identifier)[0].split()]
    return Rule("subject", re.compile(r"(?<!\w)" + r"[\s._-]+".join(words) + r"(?!\w)"), folded=True)


def in_context(text: str, rules: Sequence[Rule], width: int = 30) -> list[str]:
    """Each match with up to `width` characters either side, the match in [brackets]: what a
    preview shows, so an operator sees a match is a true one before anything is deleted."""
    shown = []
    for _, a, b in find(text, rules):
        before, after = text[max(0, a - width) : a], text[b : b + width]
        shown.append(f"{'…' if a > width else ''}{before}[{text[a:b]}]{after}{'…' if b + width < len(text) else ''}")
    return shown


def identifiers(subject: str) -> list[str]:
    """An erasure subject's identifiers: one per line (a name, an e-mail, an id)."""
    return [line.strip() for line in subject.replace(";", "\n").splitlines() if line.strip()]


def find(text: str, rules: Sequence[Rule]) -> list[tuple[str, int, int]]:
    """Returns (rule name, start, end) for every match, in text order."""
    return sorted(((rule.name, a, b) for rule in rules for a, b in rule.spans(text)), key=lambda m: m[1])


def redact(text: str, rules: Sequence[Rule]) -> str:
    """Replaces every match (overlaps merged) with [redacted]."""
    spans = sorted((a, b) for _, a, b in find(text, rules))
    merged: list[list[int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out, last = [], 0
    for a, b in merged:
        out.append(text[last:a])
        out.append(REDACTED)
        last = b
    out.append(text[last:])
    return "".join(out)
