"""Finding and redacting personal data in stored query text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from .fold import Folded, fold

REDACTED = "[redacted]"
# An erasure subject's bounds: one person's identifiers, not a list of people.
MAX_IDENTIFIERS = 50
MAX_SUBJECT_CHARACTERS = 2000
# A run of letters or digits of folded text: what an identifier is looked up by.
_KEY = re.compile(r"[^\W_]+")


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


@dataclass(frozen=True)
class Rule:
    """A named pattern, optionally with a check that rules out look-alike numbers."""

    name: str
    pattern: re.Pattern[str]
    check: object = None  # a callable on the matched text, or None
    folded = False

    def spans(self, text: str, folded: Folded | None = None) -> list[tuple[int, int]]:
        found = []
        for match in self.pattern.finditer(text):
            value = match.group(0)
            if self.check is not None and not self.check(re.sub(r"[ -]", "", value)):
                continue
            found.append(match.span())
        return found


@dataclass(frozen=True)
class SubjectRule:
    """An erasure subject's identifiers, matched in the folded text (`fold.fold`), their spans
    mapped back to the original. Each identifier is indexed by its first run of letters or
    digits, so a text is folded once and only the identifiers whose run it holds are tried."""

    name: str
    by_key: dict[str, tuple[re.Pattern[str], ...]] = field(hash=False)
    keyless: tuple[re.Pattern[str], ...] = ()
    folded = True

    def spans(self, text: str, folded: Folded | None = None) -> list[tuple[int, int]]:
        folded = folded or fold(text, urls=True)
        patterns = list(self.keyless)
        for key in set(_KEY.findall(folded.text)):
            patterns.extend(self.by_key.get(key, ()))
        return [
            folded.origin(*m.span())
            for pattern in patterns
            for m in pattern.finditer(folded.text)
            if m.end() > m.start()
        ]


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


def rules_for(
    extra: Iterable[tuple[str, str]] = (), subject: str | None = None, builtin: bool = True
) -> list[Rule | SubjectRule]:
    """Builds the rule list: the built-in rules, a scope's patterns, and an erasure subject.

    Raises:
        re.error: an extra pattern does not compile.
    """
    rules: list[Rule | SubjectRule] = list(BUILTIN_RULES) if builtin else []
    rules.extend(Rule(name, re.compile(pattern)) for name, pattern in extra)
    if identifiers(subject or ""):
        rules.append(subject_rule(*identifiers(subject or "")))
    return rules


def subject_rule(*identifiers: str) -> SubjectRule:
    """Matches each identifier of an erasure subject as a whole word (or run of words) in the
    fold matching uses (`fold.fold`: case, accents and other marks, transliteration, ignorable
    characters, quotes, compatibility forms; percent-encoding and "+" read as in a URL): "Park"
    finds "park" and "PARK" but not "Parking", "12345" not "123456", "O'Brien" finds "O’Brien",
    "Łukasz" finds "LUKASZ", "Zoë Åberg" finds "zoe aberg". Words are split as the matcher
    splits them (any character but a letter or digit, underscore included, separates), and a
    name's words also match joined by any such separators or by none: "Jane Roe" finds
    jane.roe@example.com, report_jane_roe.pdf, Jane—Roe, Jane%20Roe and JaneRoe."""
    by_key: dict[str, list[re.Pattern[str]]] = {}
    for identifier in identifiers:
        words = subject_words(identifier)
        if not words:
            continue
        pattern = re.compile(r"(?<![^\W_])" + r"[\W_]*".join(map(re.escape, words)) + r"(?![^\W_])")
        # Indexed by every joined prefix of its words: "jane", "janeroe" (a text's runs are keys).
        for n in range(1, len(words) + 1):
            by_key.setdefault("".join(words[:n]), []).append(pattern)
    return SubjectRule("subject", {key: tuple(dict.fromkeys(found)) for key, found in by_key.items()})


def subject_words(identifier: str) -> list[str]:
    """An identifier's words as erasure matches them: runs of letters or digits of its fold."""
    return _KEY.findall(fold(identifier, urls=True).text)


def identifier_problem(identifier: str) -> str | None:
    """Why an identifier cannot be erased by, or None: it must fold to 3 letters or digits."""
    folded = "".join(subject_words(identifier))
    if not folded:
        return f"“{identifier}” has no letters or digits once folded; it would match nothing."
    if len(folded) < 3:
        return f"“{identifier}” folds to “{folded}”: each identifier needs at least 3 letters or digits."
    return None


def in_context(text: str, rules: Sequence[Rule | SubjectRule], width: int = 30) -> list[str]:
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


def find(text: str, rules: Sequence[Rule | SubjectRule]) -> list[tuple[str, int, int]]:
    """Returns (rule name, start, end) for every match, in text order; the text is folded once."""
    if not text:
        return []
    folded = fold(text, urls=True) if any(rule.folded for rule in rules) else None
    return sorted(((rule.name, a, b) for rule in rules for a, b in rule.spans(text, folded)), key=lambda m: m[1])


def redact(text: str, rules: Sequence[Rule | SubjectRule]) -> str:
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


def strings_in(value: Any) -> Iterable[str]:
    """Every string in a JSON value, object keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def holds(value: Any, rules: Sequence[Rule | SubjectRule]) -> bool:
    """Whether a text, or any string of a JSON value, matches."""
    return any(find(text, rules) for text in strings_in(value))


def redact_json(value: Any, rules: Sequence[Rule | SubjectRule]) -> Any:
    """A text, or every string of a JSON value (object keys included), redacted."""
    if isinstance(value, str):
        return redact(value, rules)
    if isinstance(value, dict):
        redacted: dict[str, Any] = {}
        for key, item in value.items():
            new_key = redact(key, rules)
            # Two keys redacted alike would overwrite each other; number them instead.
            while new_key in redacted:
                new_key += "'"
            redacted[new_key] = redact_json(item, rules)
        return redacted
    if isinstance(value, list):
        return [redact_json(item, rules) for item in value]
    return value
