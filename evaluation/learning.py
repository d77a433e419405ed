"""A stream simulation of threshold learning: agents ask, record and judge over time.

Each labelled pair (a, b) is one topic with its own section. An agent asks `a` (a miss:
the topic is new), records the path citing the topic's section, and later an agent asks
`b`. Where b is a paraphrase (duplicate) its right answer cites a's section; otherwise
its own section. Honest agents judge every hit by whether the served trail cites their
answer's section (feedback), and after a miss record their path in the same session
(the re-search label of the miss's nearest candidate). A flooding agent reports every
hit it gets as not helpful, whatever it was.

Everything goes through the product's own recall(), record(), give_feedback() and the
threshold learning they trigger; nothing is set by hand. Reuse and false hits are
counted per half of the stream, with 95 % Clopper-Pearson intervals.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from evaluation.bulk import drop_scope
from scopes.models import Scope, Section
from trails.core.calibration import Rate
from trails.learning.feedback import give_feedback
from trails.models import Citation, MatchLabel, ThresholdChange, Trail, TrailStatus
from trails.serving.matching import matching_settings
from trails.serving.recall import recall
from trails.serving.record import RecordInput, record

HONEST_KEYS = ("key:honest-1", "key:honest-2", "key:honest-3")
FLOOD_KEY = "key:flood"


def easier(pairs: list[dict], unrelated: Callable[[str], bool]) -> list[dict]:
    """Traffic without Quora's adversarial look-alikes, as on an FAQ whose users ask
    paraphrases of its questions or questions it does not hold: the paraphrases, and the
    non-duplicates whose second question is on no stored question's topic (`unrelated`)."""
    return [pair for pair in pairs if pair["duplicate"] or unrelated(pair["b"])]


# Cosine under which two questions are taken to be on different topics.
APART = 0.75


def distinct_topics(
    pairs: list[dict], vectors: dict[str, "np.ndarray"], limit: int, apart: float = APART
) -> list[dict]:
    """Pairs whose first questions are all farther apart than `apart` (cosine), in file
    order, up to `limit`: one question per topic, as in an FAQ, so that a paraphrase has
    one right answer among the stored questions."""
    kept: list[dict] = []
    stored = np.zeros((limit, len(next(iter(vectors.values())))), dtype=np.float32)
    for pair in pairs:
        vector = vectors[pair["a"]]
        if kept and float(np.max(stored[: len(kept)] @ vector)) >= apart:
            continue
        stored[len(kept)] = vector
        kept.append(pair)
        if len(kept) >= limit:
            break
    return kept


@dataclass
class Half:
    duplicates: int = 0
    correct: int = 0
    wrong: int = 0
    distinct: int = 0
    false: int = 0
    asked: int = 0  # every recall of the stream (first askings too)
    served_wrong: int = 0  # recalls that served a trail citing another section than the answer's

    def describe(self) -> str:
        reuse, false = Rate(self.correct, self.duplicates), Rate(self.false, self.distinct)
        per_question = Rate(self.served_wrong, self.asked)
        return (
            f"reuse {reuse.describe()}  false hits on non-duplicates {false.describe()}  wrong {self.wrong}  "
            f"served wrong per question asked {per_question.describe()}"
        )


@dataclass
class Outcome:
    name: str
    halves: list[Half] = field(default_factory=lambda: [Half(), Half()])
    thresholds: list[tuple[int, float]] = field(default_factory=list)  # (pair index, threshold in use) after each move
    final_threshold: float = 0.0
    configured: float = 0.0
    flags: str = ""
    demoted: int = 0  # honest trails sent back to pending
    labels: int = 0
    moves: int = 0

    def lines(self) -> list[str]:
        out = [f"{self.name}:"]
        for i, half in enumerate(self.halves):
            out.append(f"  {'first' if i == 0 else 'second'} half: {half.describe()}")
        path = ", ".join(f"{t:.4f}@{i}" for i, t in self.thresholds[:12]) + (
            " ..." if len(self.thresholds) > 12 else ""
        )
        out.append(
            f"  threshold: configured {self.configured}, in use at the end {self.final_threshold} "
            f"({self.moves} moves: {path or 'none'}); labels {self.labels}; flags: {self.flags or 'none'}; "
            f"honest trails sent back to pending: {self.demoted}"
        )
        return out


def simulate(
    name: str,
    pairs: list[dict],
    flood_every: int = 0,
    pinned: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> Outcome:
    """Runs one stream on a fresh embedding scope with the shipped defaults.

    Args:
        flood_every: 0 for honest agents only; n for a flooding key that, after every n-th
            pair, asks a stored question again and reports the answer not helpful.
        pinned: the configured threshold pinned (learning off): the baseline of a stream.
    """
    scope = Scope.objects.create(
        scratch=True, slug=f"eval-learn-{uuid.uuid4().hex[:8]}", matcher="embedding", threshold_pinned=pinned
    )
    result = Outcome(name, configured=scope.embedding_threshold)
    try:
        Section.upsert(
            scope,
            {f"s-{i}": f"topic {i}" for i in range(len(pairs))} | {f"t-{i}": f"other {i}" for i in range(len(pairs))},
        )
        section_of: dict[int, str] = {}  # trail id -> the section it cites
        asked: list[str] = []
        last = scope.embedding_threshold
        for i, pair in enumerate(pairs):
            agent = HONEST_KEYS[i % len(HONEST_KEYS)]
            half = result.halves[0 if i < len(pairs) // 2 else 1]
            first = _ask_and_record(scope, pair["a"], f"s-{i}", agent, f"{name}-{i}-a", section_of)
            asked.append(pair["a"])
            answer_section = f"s-{i}" if pair["duplicate"] else f"t-{i}"
            served = _ask_and_record(
                scope, pair["b"], answer_section, HONEST_KEYS[(i + 1) % len(HONEST_KEYS)], f"{name}-{i}-b", section_of
            )
            half.asked += 2
            half.served_wrong += (first is not None and first != f"s-{i}") + (
                served is not None and served != answer_section
            )
            if pair["duplicate"]:
                half.duplicates += 1
                half.correct += served == answer_section
                half.wrong += served is not None and served != answer_section
            else:
                half.distinct += 1
                half.false += served is not None
            if flood_every and i % flood_every == 0:
                _flood(scope, asked)
            scope.refresh_from_db()
            now_in_use = matching_settings(scope).embedding_threshold
            if now_in_use != last:
                result.thresholds.append((i, now_in_use))
                last = now_in_use
            if (i + 1) % 500 == 0:
                progress(f"{name}: {i + 1:,}/{len(pairs):,} pairs, threshold in use {now_in_use}")
        scope.refresh_from_db()
        result.final_threshold = matching_settings(scope).embedding_threshold
        result.flags = scope.threshold_flags
        result.demoted = Trail.objects.filter(scope=scope, status=TrailStatus.PENDING).count()
        result.labels = MatchLabel.objects.filter(scope=scope).count()
        result.moves = ThresholdChange.objects.filter(scope=scope, kind=ThresholdChange.Kind.LEARNED).count()
        return result
    finally:
        drop_scope(scope)


def _ask_and_record(
    scope: Scope, question: str, answer_section: str, agent: str, session: str, section_of: dict[int, str]
) -> str | None:
    """An honest agent's turn: recall; judge a hit by its section; after a miss or a wrong
    hit, find the answer itself and record the path in the same session. Returns the
    section the recall served, or None for a miss."""
    answer = recall(scope, question, session=session)
    served = None
    if answer.trail is not None and answer.outcome.value != "miss":
        served = section_of.get(answer.trail.id) or _cited(answer.trail.id, section_of)
        give_feedback(scope, answer.recall_id, helpful=served == answer_section, reporter=agent)
        if served == answer_section:
            return served
    recorded = record(
        scope, RecordInput(query=question, cited=[answer_section], signal="accepted", session=session, reporter=agent)
    )
    section_of[recorded.trail.id] = answer_section
    return served


def _cited(trail_id: int, section_of: dict[int, str]) -> str:
    section = Citation.objects.filter(trail_id=trail_id).values_list("section_id", flat=True).first()
    section_of[trail_id] = section
    return section


def _flood(scope: Scope, asked: list[str]) -> None:
    """The flooding key asks stored questions again and reports every answer not helpful."""
    for question in asked[-3:]:
        answer = recall(scope, question)
        if answer.trail is not None and answer.outcome.value != "miss":
            give_feedback(scope, answer.recall_id, helpful=False, reason="flood", reporter=FLOOD_KEY)
