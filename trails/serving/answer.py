"""What recall and a second chance answer: a prefetch or hint of a trail validated on read,
within a token budget, or a miss (the API serialises it with trails.schemas.RecallOut)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trails.core import savings
from trails.core.budget import count_tokens, cut_to_budget
from trails.core.hint import RecordedStep, hint_text
from trails.core.validation import Outcome, SectionStatus, Validation
from trails.serving.candidates import Candidate
from trails.serving.matching import Match


@dataclass
class RecallResult:
    """What recall answers; the API serialises it with trails.schemas.RecallOut."""

    outcome: Outcome
    matcher: str | None = None
    recall_id: str | None = None
    trail: Candidate | None = None
    similarity: float | None = None
    matched_query: str | None = None
    sections: list[dict[str, Any]] = field(default_factory=list)
    steps: list[RecordedStep] = field(default_factory=list)
    hint: str | None = None
    tokens: int = 0
    truncated: bool = False
    candidates: int = 0
    calls_saved: int = 0
    tokens_saved: int = 0
    # Why it answered as it did (a dry run with explain only).
    explanation: dict[str, Any] | None = None
    # A second chance's answer: {"given": bool, "reason": str} (POST .../recalls/{id}/second-chance).
    second_chance: dict[str, Any] | None = None
    # A miss that kept near candidates: a second chance with the agent's search may serve one.
    second_chance_possible: bool = False

    @property
    def trail_id(self) -> str | None:
        return str(self.trail.public_id) if self.trail else None


def answer_match(match: Match, validation: Validation, budget: int) -> RecallResult:
    """A prefetch or hint of this match's trail, its sections validated on read, within the budget."""
    trail, steps = match.trail, match.trail.steps
    result = RecallResult(
        validation.outcome,
        matcher=match.matcher,
        trail=trail,
        similarity=round(match.similarity, 4),
        matched_query=trail.query,
        steps=list(steps),
    )
    if validation.outcome is Outcome.PREFETCH and all(s.text is None for s in validation.sections):
        # A hashes-only scope: the valid sections and their hashes, for the agent's own index.
        result.sections = [
            {"id": s.section_id, "status": SectionStatus.VALID.value, "hash": match.trail.current[s.section_id].hash}
            for s in validation.sections
        ]
        result.calls_saved = savings.calls_saved(validation.outcome, steps, [])
    elif validation.outcome is Outcome.PREFETCH:
        cut = cut_to_budget([(s.section_id, s.text or "") for s in validation.sections], budget)
        result.sections = [
            {
                "id": part.section_id,
                "status": SectionStatus.VALID.value,
                "text": part.text,
                "tokens": part.tokens,
                "truncated": part.truncated,
                "hash": match.trail.current[part.section_id].hash,
            }
            for part in cut.parts
        ]
        result.tokens, result.truncated = cut.tokens, cut.truncated
        result.calls_saved = savings.calls_saved(validation.outcome, steps, [])
        result.tokens_saved = savings.tokens_saved(validation.outcome, trail.path_tokens, result.tokens)
    else:
        result.hint = hint_text(
            trail.query,
            match.similarity,
            validation.with_status(SectionStatus.VALID),
            validation.with_status(SectionStatus.CHANGED),
            validation.with_status(SectionStatus.DELETED),
            steps,
        )
        result.sections, result.tokens, result.truncated = _hint_sections(
            match, validation, budget, count_tokens(result.hint)
        )
        invalid = [s.section_id for s in validation.sections if s.status is not SectionStatus.VALID]
        result.calls_saved = savings.calls_saved(validation.outcome, steps, invalid)
    return result


def _hint_sections(
    match: Match, validation: Validation, budget: int, hint_tokens: int
) -> tuple[list[dict[str, Any]], int, bool]:
    """A hint's sections: each cited id and its state; the still-valid ones with their hash and,
    within what the budget leaves after the hint's words, their current text (so the agent
    need not read and hash them again). A changed or deleted section carries neither."""
    valid = [
        (s.section_id, s.text) for s in validation.sections if s.status is SectionStatus.VALID and s.text is not None
    ]
    cut = cut_to_budget(valid, max(0, budget - hint_tokens))
    served = {part.section_id: part for part in cut.parts if part.text}
    sections = []
    for check in validation.sections:
        entry: dict[str, Any] = {"id": check.section_id, "status": check.status.value}
        if check.status is SectionStatus.VALID:
            entry["hash"] = match.trail.current[check.section_id].hash
            part = served.get(check.section_id)
            if part is not None:
                entry.update(text=part.text, tokens=part.tokens, truncated=part.truncated)
        sections.append(entry)
    return sections, hint_tokens + cut.tokens, cut.truncated
