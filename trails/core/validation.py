"""The read-time check: are a trail's cited sections still what they were?"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Mapping, Sequence

from infra.hashing import section_hash


class Outcome(str, Enum):
    PREFETCH = "prefetch"
    HINT = "hint"
    MISS = "miss"


class SectionStatus(str, Enum):
    VALID = "valid"
    CHANGED = "changed"
    DELETED = "deleted"


@dataclass(frozen=True)
class Citation:
    """A section an answer cited, with its hash when the trail was recorded."""

    section_id: str
    recorded_hash: str


@dataclass(frozen=True)
class CurrentSection:
    """A section as the store holds it now; text None where the scope keeps hashes only
    (the agent reads the text from its own index, so there is nothing here to re-hash)."""

    hash: str
    text: str | None


@dataclass(frozen=True)
class SectionCheck:
    """One cited section's state now; `text` is set only when the section is valid."""

    section_id: str
    status: SectionStatus
    text: str | None = None


@dataclass(frozen=True)
class Validation:
    outcome: Outcome
    sections: tuple[SectionCheck, ...]

    def with_status(self, status: SectionStatus) -> list[str]:
        """Returns the ids of the sections in the given state, in citation order."""
        return [s.section_id for s in self.sections if s.status is status]


def validate(citations: Sequence[Citation], current: Mapping[str, CurrentSection]) -> Validation:
    """Compares each citation's recorded hash with the section's current one.

    Args:
        citations: the trail's citations, in the order the answer cited them.
        current: the scope's current sections by id; a missing id was deleted.

    Returns:
        PREFETCH when every cited section is unchanged, HINT when some are, MISS
        when none are (or nothing was cited). Text is carried only for unchanged
        sections, so a changed section's text can never be served from here.
    """
    checks = []
    for citation in citations:
        section = current.get(citation.section_id)
        if section is None:
            checks.append(SectionCheck(citation.section_id, SectionStatus.DELETED))
        elif read_hash(section) != citation.recorded_hash:
            checks.append(SectionCheck(citation.section_id, SectionStatus.CHANGED))
        else:
            checks.append(SectionCheck(citation.section_id, SectionStatus.VALID, section.text))
    return Validation(_outcome(sum(1 for c in checks if c.status is SectionStatus.VALID), len(checks)), tuple(checks))


def as_stored(digest: str, text: str | None, keeps_text: bool) -> CurrentSection:
    """A section as a scope's store holds it: a scope that keeps hashes only has no text to
    re-hash or serve (the agent reads it from its own index), so only its hash counts."""
    return CurrentSection(digest, text if keeps_text else None)


def read_hash(section: CurrentSection) -> str:
    """The hash a section is judged by: its stored hash, or "" (changed for every citation)
    where its text does not hash to it. The text itself is hashed, not only the stored hash
    trusted: whatever path wrote the row, the text served is the text the trail cited."""
    if section.text is not None and section_hash(section.text) != section.hash:
        return ""
    return section.hash


def as_read(section: CurrentSection) -> CurrentSection:
    """The section with its text hashed once and dropped: what pages judging many trails
    citing one section pass to `validate` (the same verdicts, one hash per section)."""
    return CurrentSection(read_hash(section), None)


def _outcome(valid: int, cited: int) -> Outcome:
    if cited and valid == cited:
        return Outcome.PREFETCH
    return Outcome.HINT if valid else Outcome.MISS


def outcome_once(citations: Sequence[Citation], hashes: Mapping[str, str]) -> Outcome:
    """What recall will answer for these citations once the store holds these hashes (a
    sync's summary, predicted before it writes): validate's rule on hashes alone. Serving
    never uses it; validate also hashes the text it is about to serve."""
    return validate(
        citations, {section_id: CurrentSection(digest, None) for section_id, digest in hashes.items()}
    ).outcome
