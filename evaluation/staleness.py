"""Evaluation experiments run through the product's own record and recall code.

Experiment 2 (staleness): oracle trails recorded on a corpus, the corpus edited,
the same questions replayed against ragtrail and against a text cache that stores
and serves section text (the obvious alternative).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import asdict, dataclass, field
from typing import Callable

from evaluation.bulk import drop_scope
from scopes.demo import faq_questions, faq_sections
from scopes.models import Scope, Section
from trails.core.hint import RecordedStep
from trails.serving.recall import recall
from trails.serving.record import RecordInput, record

RANDOM_SHARES = (0.05, 0.10, 0.20, 0.50)


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
        return {
            "edit": self.edit,
            "changed_sections": self.changed_sections,
            "ragtrail": self.ragtrail.as_json(),
            "text_cache": self.text_cache.as_json(),
        }


def random_edit(texts: dict[str, str], ids: list[str], share: float, seed: int) -> dict[str, str]:
    """Edits a uniformly random share of the given sections (appends a sentence)."""
    rng = random.Random(seed)
    chosen = rng.sample(ids, round(len(ids) * share))
    return {**texts, **{i: texts[i] + "\n\nThis answer was revised." for i in chosen}}


def staleness(
    before: dict[str, str],
    after: dict[str, str],
    questions: list[tuple[str, str]],
    edit: str,
    matcher: str = "lexical",
    companions: dict[str, str] | None = None,
) -> StalenessResult:
    """Records one oracle trail per (question, section id) on `before`, moves the store to
    `after` (ids missing from it are deleted), and replays every question on both arms.

    With `companions` each trail also cites the companion of its section, as an answer
    drawing on two sections would; then a trail whose sections changed only in part
    comes back as a hint.
    """
    scope = Scope.objects.create(scratch=True, slug=f"eval-{uuid.uuid4().hex[:8]}", matcher=matcher)
    try:
        Section.upsert(scope, before)
        text_cache: dict[str, dict[str, str]] = {}
        for question, section_id in questions:
            cited = [section_id] + ([companions[section_id]] if companions and section_id in companions else [])
            record(
                scope,
                RecordInput(
                    query=question,
                    cited=cited,
                    signal="accepted",
                    steps=[RecordedStep("read", {"id": i}, [i]) for i in cited],
                ),
            )
            text_cache[question] = {i: before[i] for i in cited}
        Section.replace_all(scope, after)
        all_cited = {i for texts in text_cache.values() for i in texts}
        result = StalenessResult(edit, sum(1 for i in all_cited if after.get(i) != before[i]))
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
                arm.stale_served += any(
                    s.get("text") is not None and not after.get(s["id"], "").startswith(s["text"])
                    for s in answer.sections
                )
            cache_arm = result.text_cache
            cache_arm.questions += 1
            cache_arm.hits += 1  # a text cache keyed by the question always hits a repeat
            cache_arm.prefetch_kept += 1
            cache_arm.stale_served += any(after.get(i) != text for i, text in text_cache[question].items())
        return result
    finally:
        drop_scope(scope)


def next_in_document(section_ids: list[str], texts: dict[str, str]) -> dict[str, str]:
    """Each section's companion: the next section of the same document in `texts` (by id order
    within the document file), or the previous one for the last."""
    by_document: dict[str, list[str]] = {}
    for section_id in texts:
        by_document.setdefault(section_id.split("#", 1)[0], []).append(section_id)
    companions = {}
    for section_id in section_ids:
        siblings = by_document.get(section_id.split("#", 1)[0], [])
        if len(siblings) < 2:
            continue
        at = siblings.index(section_id)
        companions[section_id] = siblings[at + 1] if at + 1 < len(siblings) else siblings[at - 1]
    return companions


def faq_questions_once(revision: str = "old") -> list[tuple[str, str]]:
    """The FAQ's (question, section id) pairs present at a revision; a question heading two entries is left out."""
    rows = [q for q in faq_questions() if revision in q["present_in"]]
    texts = [q["question"] for q in rows]
    return [(q["question"], q["section_id"]) for q in rows if texts.count(q["question"]) == 1]


def run(
    matcher: str,
    seed: int,
    limit: int = 0,
    shares: tuple[float, ...] = RANDOM_SHARES,
    progress: Callable[[str], None] = lambda _: None,
) -> dict:
    """Experiment 2 on the shipped FAQ: the real revision and random edits of each share."""
    old, new = faq_sections("old"), faq_sections("new")
    questions = faq_questions_once()[: limit or None]
    ids = [s for _, s in questions]
    edits = [("real revision v3.6.0 -> v3.11.0", new)] + [
        (f"random {round(share * 100)} %", random_edit(old, ids, share, seed)) for share in shares
    ]
    companions = next_in_document(ids, old)
    results = []
    for cites, pairing in ((1, None), (2, companions)):
        for name, after in edits:
            result = staleness(old, after, questions, name, matcher, pairing).as_json()
            results.append({**result, "cited_per_trail": cites})
            progress(
                f"staleness {name}, {cites} cited per trail: ragtrail served {result['ragtrail']['stale_served']} stale "
                f"({result['ragtrail']['hint']} hints), text cache {result['text_cache']['stale_served']}"
            )
    return {"questions": len(questions), "matcher": matcher, "seed": seed, "results": results}
