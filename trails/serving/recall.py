"""The recall pipeline: candidates by band keys, guard, validation on read, answer, event."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from django.db import IntegrityError
from django.utils import timezone

from infra import metrics
from infra.errors import Invalid, NotFound
from scopes.models import Scope
from trails.core.validation import Outcome, SectionStatus, as_stored, validate
from trails.learning.embedder_calibration import check_calibrated
from trails.learning.feedback import research_key
from trails.learning.shipped import floor_for
from trails.models import (
    LoggedMiss,
    RecallEvent,
    Trail,
    forgotten_if_failed,
    logged_miss,
    logging_miss,
    pauses,
    write_recall_effects,
)
from trails.serving.answer import RecallResult, answer_match
from trails.serving.candidates import Candidate, add_paths
from trails.serving.candidates import candidates as read_candidates
from trails.serving.matching import (
    Match,
    QuestionSignature,
    Verdict,
    matching_settings,
    nearest_allowed,
    score_candidates,
    second_chance_cut,
    sign,
)
from trails.serving.second_chance import near_candidates

# A trail whose sections all changed is marked stale and the next candidate is
# tried; this bounds how many such trails one recall may step over.
MAX_VALIDATED_CANDIDATES = 3


def rank_candidates(
    scope: Scope,
    question: QuestionSignature,
    partition: str,
    now: datetime,
    verdicts: list[Verdict] | None = None,
    logged: LoggedMiss | None = None,
) -> tuple[list[Match], list[Candidate]]:
    """Returns the candidates that pass a matcher and the guard, best first, and those read
    (the read writing `logged`, the recall's event as a miss, where given)."""
    # Lexical lookups find about one candidate, so its path comes in the same read;
    # embedding lookups find tens, so `recall` reads the path of a winner when it gets to it.
    found = read_candidates(
        scope, partition, question.lookup(scope), now, with_paths=not scope.uses_embedding, logged=logged
    )
    passing = score_candidates(scope, question, found, verdicts=verdicts, limit=MAX_VALIDATED_CANDIDATES)
    return passing, found


def recall(
    scope: Scope,
    query: str,
    partition: str = "",
    token_budget: int | None = None,
    dry_run: bool = False,
    now: datetime | None = None,
    session: str | None = None,
    explain: bool = False,
    caller: str = "",
) -> RecallResult:
    """Finds the most similar recorded question in the scope and checks its sections now.

    Args:
        scope: the scope to look in; nothing outside it is read.
        query: the agent's question.
        partition: narrows matching to trails recorded with the same partition.
        token_budget: the most tokens of section text to return (default: the scope's).
        dry_run: answer as recall would, but mark nothing stale, count no hit, log no event.
        session: the caller's session id; a path then recorded for the same question in
            the same session, citing none of the sections served, labels this recall
            a false hit (the agent searched again).
        explain: also say why (RecallResult.explanation): each candidate read with its
            similarity and verdict, the thresholds, and for a miss what stopped it.
        caller: the asking API key's lookup, kept with the recall's event.

    Returns:
        prefetch with the sections' current text, hint with the valid and changed
        sections and where to start, or miss.

    Raises:
        Invalid: the query has no words.
        NotCalibrated: the scope matches by embedding with thresholds fitted for another embedder.
        EmbedderUnavailable: the embedder gave no vectors within its deadline.
    """
    started = time.perf_counter()
    now = now or timezone.now()
    budget = scope.token_budget if token_budget is None else token_budget
    check_calibrated(scope)
    try:
        question = sign(scope, query, partition, lexical_signature=False)
    except ValueError:
        raise Invalid("invalid", "query has no words to match on", field="query") from None

    verdicts: list[Verdict] | None = [] if explain else None
    keep_raw = scope.keep_raw_queries
    research = research_key(session, query) if session else ""
    # The event is written as a miss by the candidate read, so a miss takes one round trip; any other answer rewrites it.
    logged = (
        None
        if dry_run
        else logged_miss(
            scope=scope,
            query=query if keep_raw else "",
            partition=partition if keep_raw else "",
            research_key=research,
            caller=caller,
            now=now,
            elapsed_ms=(time.perf_counter() - started) * 1000.0,
        )
    )
    # A recall that fails after its read wrote the event as a miss, before its write settles it, leaves no event.
    with forgotten_if_failed(scope, logged):
        try:
            with logging_miss(logged):
                candidates, found = rank_candidates(scope, question, partition, now, verdicts, logged)
        except IntegrityError:
            if not scope_deleted(scope):
                raise
            raise NotFound("not_found", "no such scope", field="scope") from None
        read = len(found)
        result = RecallResult(Outcome.MISS, candidates=read)
        stale: list[Candidate] = []
        for match in candidates[:MAX_VALIDATED_CANDIDATES]:
            if not match.trail.has_paths:
                # One winner at a time: the best is nearly always valid, so one read, not three.
                add_paths(scope, [match.trail])
            current = match.trail.current
            if not scope.keeps_text:  # hashes only: nothing to re-hash or serve (as_stored); else the rows as read
                current = {k: as_stored(v.hash, v.text, False) for k, v in current.items()}
            validation = validate(match.trail.citations, current)
            if validation.outcome is Outcome.MISS:
                stale.append(match.trail)
                continue
            result = answer_match(match, validation, budget)
            result.candidates = read
            break
        else:
            if stale:
                result.trail, result.similarity, result.matcher = (
                    stale[0],
                    round(candidates[0].similarity, 4),
                    candidates[0].matcher,
                )
                result.matched_query = stale[0].query

        near = near_candidates(scope, question, found, candidates) if result.outcome is Outcome.MISS else []
        if verdicts is not None:
            serving = question.embedding.model if question.embedding else ""
            result.explanation = explanation(scope, result, verdicts, stale, read, serving, near)
        nearest = None
        if not dry_run and session and not candidates and found:
            # What a lower threshold would have served: the path this session records next
            # for the question says whether that would have been right (feedback.learn_from_research).
            # Only the floor: the ceiling (a walk over the calibration curve) is no business of recall.
            nearest = nearest_allowed(scope, question, found, floor_for("embedding", scope.embedding_threshold))
        if not dry_run:
            pauses.pause_point("recall:answered")
            logged_id = logged.public_id if logged is not None and logged.written else None
            if logged_id is not None and result.outcome is Outcome.MISS and not stale and not nearest and not near:
                recall_id = logged_id  # the read wrote this miss as it is
            else:
                try:
                    recall_id, served = write_recall_effects(
                        scope=scope,
                        outcome=result.outcome.value,
                        similarity=result.similarity,
                        latency_ms=(time.perf_counter() - started) * 1000.0,
                        trail_id=result.trail.id if result.trail else None,
                        hit=result.outcome is not Outcome.MISS,
                        stale_ids=[t.id for t in stale],
                        matcher=result.matcher,
                        query=query if keep_raw else "",
                        partition=partition if keep_raw else "",
                        now=now,
                        calls_saved=result.calls_saved,
                        tokens_saved=result.tokens_saved,
                        research_key=research,
                        nearest_trail_id=nearest.trail.id if nearest else None,
                        nearest_similarity=round(nearest.similarity, 4) if nearest else None,
                        caller=caller,
                        near_candidates=near or None,
                        logged=logged_id,
                    )
                except (IntegrityError, RecallEvent.DoesNotExist):
                    # The scope was deleted under the recall (with its event, or before the event could be written).
                    if not scope_deleted(scope):
                        raise
                    raise NotFound("not_found", "no such scope", field="scope") from None
                if not served:
                    # The trail was deleted (a purge, the sweep) before the event could name it: a miss.
                    result = RecallResult(Outcome.MISS, candidates=read, explanation=result.explanation)
    if not dry_run:
        result.recall_id = str(recall_id)
        result.second_chance_possible = result.outcome is Outcome.MISS and bool(near)
        metrics.RECALLS.labels(result.outcome.value, result.matcher or "none").inc()
        metrics.RECALL_LOOKUP_SECONDS.observe(time.perf_counter() - started)
        if stale:
            metrics.STALE_MARKS.inc(len(stale))
    return result


def scope_deleted(scope: Scope) -> bool:
    """Whether the scope is gone: a recall it was deleted under answers not found, never a 500."""
    return not Scope.objects.filter(pk=scope.pk).exists()


# The candidates an explanation lists, nearest first.
EXPLAINED_CANDIDATES = 10


def explanation(
    scope: Scope,
    result: RecallResult,
    verdicts: list[Verdict],
    stale: list[Candidate],
    read: int,
    serving: str = "",
    near: list[list] | None = None,
) -> dict[str, Any]:
    """Why a recall answered as it did, for an operator: the candidates read (nearest
    first) with their similarities and verdicts, the thresholds, and a summary."""
    matching = matching_settings(scope)
    stale_ids = {t.id for t in stale}

    ordered = sorted(verdicts, key=lambda v: v.nearest, reverse=True)
    rows = []
    for v in ordered[:EXPLAINED_CANDIDATES]:
        if v.trail.id in stale_ids:
            outcome = "stale: every cited section changed"
        elif result.trail is not None and v.trail.id == result.trail.id and result.outcome is not Outcome.MISS:
            outcome = "answered"
        else:
            outcome = v.outcome
        rows.append(
            {
                "trail_id": str(v.trail.public_id),
                "query": v.trail.query,
                "lexical": v.lexical,
                "embedding": v.embedding,
                "verdict": outcome,
            }
        )
    thresholds = {
        "lexical_threshold": matching.lexical_threshold if scope.uses_lexical else None,
        "embedding_threshold": matching.embedding_threshold if scope.uses_embedding else None,
    }
    if result.outcome is not Outcome.MISS:
        unchanged = sum(1 for s in result.sections if s["status"] == SectionStatus.VALID.value)
        summary = (
            f'Answered by "{result.matched_query}" at {result.similarity} ({result.matcher}); '
            f"{unchanged} of {len(result.sections)} cited sections unchanged."
        )
    elif not verdicts:
        summary = (
            "No stored question shares a band key with this one, so none was similar enough to be compared "
            "(band keys are drawn a little under the threshold)."
        )
    elif stale:
        summary = (
            f"{len(stale)} matching trail(s) were stale: every section they cite changed. "
            "A real recall marks them stale; they never come back."
        )
    elif refused := [v for v in ordered if v.refusal and not v.passed]:
        summary = f"{len(refused)} candidate(s) reached the threshold but the look-alike guard refused them: {refused[0].refusal}."
    else:
        best = ordered[0]
        by = (
            "embedding"
            if best.embedding is not None and (best.lexical is None or best.embedding >= best.lexical)
            else "lexical"
        )
        summary = (
            f"None of the {read} candidate(s) compared reached the threshold: the nearest scored "
            f"{best.nearest} by {by} (threshold {thresholds[by + '_threshold']})."
        )
    others = other_embedder_trails(scope, serving)
    if others:
        summary += (
            f" {others} trail(s) of this scope carry another embedder's vectors than the serving {serving}: "
            f"they are never compared by embedding; `manage.py reindex_scope --scope {scope.slug}` re-embeds them."
        )
    if result.outcome is Outcome.MISS and scope.uses_embedding:  # a lexical scope has no second chance to speak of
        summary += " " + second_chance_summary(scope, near or [], {v.trail.id: v.trail for v in verdicts})
    return {
        "matcher": scope.matcher,
        **thresholds,
        "candidates_read": read,
        "candidates": rows,
        "other_embedder_trails": others,
        "summary": summary,
    }


def other_embedder_trails(scope: Scope, serving: str) -> int:
    """How many of the scope's trails carry vectors of another embedder than the serving one."""
    if not serving or not scope.uses_embedding:
        return 0
    return Trail.objects.filter(scope=scope).exclude(embedding_model__in=["", serving]).count()


def second_chance_summary(scope: Scope, near: list[list], read: dict[int, Candidate]) -> str:
    """What a second chance could serve after this miss, in a sentence."""
    if not scope.second_chance:
        return "Second chances are off for this scope."
    cut = second_chance_cut(scope)
    if not near:
        return f"No candidate the guard allows reached the second chance's lower cut {cut:.4f}."
    trail_id, similarity = near[0]
    query = read[trail_id].query if trail_id in read else ""
    return (
        f'A second chance may serve "{query}" ({similarity:.4f}, lower cut {cut:.4f}) if the search the agent '
        f"makes now returns every section it cites among its first {scope.second_chance_top}."
    )
