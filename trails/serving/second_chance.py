"""The second chance: a missed recall's near candidate served when the agent's own first
search returned every section it cites (docs/second-chance.md)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Sequence

from django.utils import timezone

from infra import metrics
from infra.errors import Conflict, Invalid, NotFound
from scopes.models import Scope
from trails.core.second_chance import (
    MAX_SEARCH_RESULTS,
    NEAR_CANDIDATES_KEPT,
    SECOND_CHANCE_MATCHER,
    NearCandidate,
    SecondChanceRule,
    choose,
)
from trails.core.validation import Outcome, as_stored, validate
from trails.models import RecallEvent, RecallOutcome, pauses, write_second_chance_effects
from trails.serving.answer import RecallResult, answer_match
from trails.serving.candidates import Candidate, servable_by_id
from trails.serving.matching import Match, QuestionSignature, matching_settings, near_allowed, second_chance_cut

# How long after its recall a second chance may be asked: the agent's first search, not a later day.
SECOND_CHANCE_WINDOW = timedelta(minutes=15)


def rule_for(scope: Scope) -> SecondChanceRule:
    # The search's first result must be cited: a search ranking another section first points elsewhere.
    return SecondChanceRule(margin=scope.second_chance_margin, top=scope.second_chance_top, first_cited=True)


def near_candidates(
    scope: Scope, question: QuestionSignature, found: Sequence[Candidate], passing: Sequence[Match]
) -> list[list]:
    """A miss's candidates at or above the lower cut that the guard allows, nearest first, as the
    event keeps them ([trail id, similarity]); none where the scope gives no second chance."""
    if not scope.second_chance or not scope.uses_embedding:
        return []
    served = {m.trail.id for m in passing}  # passed but stale: never a second chance
    near = near_allowed(
        scope,
        question,
        [c for c in found if c.id not in served],
        second_chance_cut(scope),
        keep=NEAR_CANDIDATES_KEPT,
        # Under the threshold a qualifier added ("reset my admin password") is the commonest look-alike.
        refuse_added_terms=True,
    )
    return [[m.trail.id, round(m.similarity, 4)] for m in near]


def second_chance(
    scope: Scope,
    recall_id: str,
    search_results: Sequence[str],
    caller: str = "",
    token_budget: int | None = None,
    now: datetime | None = None,
):
    """Serves a missed recall's near candidate whose cited sections the agent's search returned.

    Args:
        scope: the recall's scope.
        recall_id: the missed recall's id.
        search_results: the section ids the agent's own first search returned, best first.
        caller: the asking key's lookup; only the key that made the recall may ask.
        token_budget: as for recall.

    Returns:
        A RecallResult (prefetch or hint marked as a second chance, or a miss) whose
        `second_chance` says whether one was given and why.

    Raises:
        NotFound: no such recall of this scope and caller.
        Conflict: not a miss, asked before, or asked too late.
        Invalid: search results out of bounds.
    """
    now = now or timezone.now()
    event = _missed_recall(scope, recall_id, caller, now)
    results = list(dict.fromkeys(search_results))
    if len(results) > MAX_SEARCH_RESULTS:
        raise Invalid(
            "invalid", f"at most {MAX_SEARCH_RESULTS} search results", field="section_ids", limit=MAX_SEARCH_RESULTS
        )
    budget = scope.token_budget if token_budget is None else token_budget
    result = RecallResult(Outcome.MISS)
    stale: list[Candidate] = []
    if not scope.second_chance:
        reason = "second chances are off for this scope"
    elif not scope.uses_embedding:
        reason = "second chances need a scope that matches by embedding"
    else:
        near_ids = {int(trail_id): float(similarity) for trail_id, similarity in event.near_candidates or []}
        read = {c.id: c for c in servable_by_id(scope, list(near_ids), now)}
        near = [
            NearCandidate(i, near_ids[i], tuple(c.section_id for c in read[i].citations)) for i in near_ids if i in read
        ]
        threshold = matching_settings(scope).embedding_threshold
        while near_ids:
            if not near:
                reason = (
                    f"the recall kept {len(near_ids)} near candidate(s), none still servable "
                    "(every cited section changed, or stale, rejected, expired or deleted since)"
                )
                break
            decision = choose(near, results, rule_for(scope), threshold)
            reason = decision.reason
            if not decision.given:
                break
            candidate = read[decision.trail_id]
            current = candidate.current
            if not scope.keeps_text:
                current = {k: as_stored(v.hash, v.text, False) for k, v in current.items()}
            validation = validate(candidate.citations, current)
            if validation.outcome is Outcome.MISS:
                stale.append(candidate)
                near = [c for c in near if c.trail_id != candidate.id]
                continue
            result = answer_match(Match(candidate, SECOND_CHANCE_MATCHER, decision.similarity), validation, budget)
            # The agent made its first search and read its results: the path spares the calls after it, and
            # no tokens are counted as spared (which of the path's tokens were the search's is not known).
            result.calls_saved, result.tokens_saved = max(0, result.calls_saved - 1), 0
            break
        else:
            reason = "the recall kept no near candidate (none the guard allows at or above the lower cut)"
    pauses.pause_point("second-chance:decided")
    served = write_second_chance_effects(
        scope=scope,
        event_id=event.id,
        outcome=result.outcome.value,
        trail_id=result.trail.id if result.trail else None,
        similarity=result.similarity,
        calls_saved=result.calls_saved,
        tokens_saved=result.tokens_saved,
        stale_ids=[t.id for t in stale],
        reason=reason,
        now=now,
    )
    if served is None:
        if not RecallEvent.objects.filter(pk=event.id).exists():  # the scope (or the event's retention) went meanwhile
            raise NotFound("not_found", "no such recall", field="recall_id")
        raise Conflict("conflict", "a second chance was already asked for this recall", field="recall_id")
    if not served and result.outcome is not Outcome.MISS:
        # The trail was deleted (a purge, the sweep) before the event could name it: a miss.
        result, reason = RecallResult(Outcome.MISS), "the trail it would serve was deleted meanwhile"
    result.recall_id = str(event.public_id)
    result.second_chance = {"given": result.outcome is not Outcome.MISS, "reason": reason}
    metrics.SECOND_CHANCES.labels(result.outcome.value).inc()
    if stale:
        metrics.STALE_MARKS.inc(len(stale))
    return result


def _missed_recall(scope: Scope, recall_id: str, caller: str, now: datetime) -> RecallEvent:
    try:
        public_id = uuid.UUID(str(recall_id))
    except ValueError:
        raise NotFound("not_found", "no such recall", field="recall_id") from None
    event = (
        RecallEvent.objects.filter(scope=scope, public_id=public_id)
        .only("id", "public_id", "outcome", "created_at", "caller", "near_candidates", "second_chance_at")
        .first()
    )
    # Another key's recall is not found: a near candidate's path is the asking key's to try, no other's.
    if event is None or event.caller != caller[:16]:
        raise NotFound("not_found", "no such recall", field="recall_id")
    if event.second_chance_at is not None:
        raise Conflict("conflict", "a second chance was already asked for this recall", field="recall_id")
    if event.outcome != RecallOutcome.MISS:
        raise Conflict("conflict", "a second chance is for a missed recall; this one was answered", field="recall_id")
    if now - event.created_at > SECOND_CHANCE_WINDOW:
        raise Conflict(
            "conflict",
            f"a second chance is asked within {int(SECOND_CHANCE_WINDOW.total_seconds() // 60)} minutes of its recall",
            field="recall_id",
        )
    return event
