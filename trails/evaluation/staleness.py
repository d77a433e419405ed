"""Evaluation experiments run through the product's own record and recall code.

Experiment 2 (staleness): oracle trails recorded on a corpus, the corpus edited,
the same questions replayed against ragtrail and against a text cache that stores
and serves section text (the obvious alternative).
"""
from __future__ import annotations

import random
import uuid
from dataclasses import asdict, dataclass, field

from scopes.models import Scope, Section
from trails.recall import recall
from trails.record import RecordInput, StepInput, record


@dataclass
class ArmResult:
    """What one arm served after the edit."""

    questions: int = 0
    hits: int = 0
    stale_served: int = 0  # hits whose text differs from the section's current text
    prefetch_kept: int = 0
    hint: int = 0
    miss: int = 0

    @property
    def stale_share(self) -> float:
        return self.stale_served / self.hits if self.hits else 0.0

    def as_json(self) -> dict:
        return {**asdict(self), "stale_share_of_hits": round(self.stale_share, 4)}


@dataclass
class StalenessResult:
    edit: str
    changed_sections: int
    ragtrail: ArmResult = field(default_factory=ArmResult)
    text_cache: ArmResult = field(default_factory=ArmResult)

    def as_json(self) -> dict:
        return {"edit": self.edit, "changed_sections": self.changed_sections,
                "ragtrail": self.ragtrail.as_json(), "text_cache": self.text_cache.as_json()}


def random_edit(texts: dict[str, str], ids: list[str], share: float, seed: int) -> dict[str, str]:
    """Edits a uniformly random share of the given sections (appends a sentence)."""
    rng = random.Random(seed)
    chosen = rng.sample(ids, round(len(ids) * share))
    return {**texts, **{i: texts[i] + "\n\nThis answer was revised." for i in chosen}}


def staleness(before: dict[str, str], after: dict[str, str], questions: list[tuple[str, str]], edit: str, matcher: str = "lexical") -> StalenessResult:
    """Records one oracle trail per (question, section id) on `before`, moves the store to
    `after` (ids missing from it are deleted), and replays every question on both arms."""
    scope = Scope.objects.create(slug=f"eval-{uuid.uuid4().hex[:8]}", matcher=matcher)
    try:
        Section.upsert(scope, before)
        text_cache: dict[str, tuple[str, str]] = {}
        for question, section_id in questions:
            record(scope, RecordInput(query=question, cited=[section_id], signal="accepted",
                                      steps=[StepInput("read", {"id": section_id}, [section_id])]))
            text_cache[question] = (section_id, before[section_id])
        Section.upsert(scope, after)
        Section.objects.filter(scope=scope).exclude(section_id__in=list(after)).delete()
        cited = {s for _, s in questions}
        result = StalenessResult(edit, sum(1 for s in cited if after.get(s) != before[s]))
        for question, _ in questions:
            answer = recall(scope, question)
            arm = result.ragtrail
            arm.questions += 1
            if answer.outcome.value == "miss":
                arm.miss += 1
            else:
                arm.hits += 1
                arm.prefetch_kept += answer.outcome.value == "prefetch"
                arm.hint += answer.outcome.value == "hint"
                arm.stale_served += any(s.get("text") is not None and not after.get(s["id"], "").startswith(s["text"]) for s in answer.sections)
            cached_id, cached_text = text_cache[question]
            cache_arm = result.text_cache
            cache_arm.questions += 1
            cache_arm.hits += 1  # a text cache keyed by the question always hits a repeat
            cache_arm.prefetch_kept += 1
            cache_arm.stale_served += after.get(cached_id) != cached_text
        return result
    finally:
        scope.delete()
