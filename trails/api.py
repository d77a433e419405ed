"""Recall, record and trail endpoints."""

from __future__ import annotations

import logging
import uuid

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest
from ninja import Router, Status

from infra.errors import RequestRefused
from scopes.auth import granted_scope, reporter, section_writer
from scopes.models import SectionSyncJob
from trails import tool_results
from trails.core.hint import RecordedStep
from trails.core.lifecycle import Actor
from trails.learning.feedback import give_feedback
from trails.models import ActionRefused, ToolPolicy, Trail, writes
from trails.schemas import (
    FeedbackIn,
    RecallFeedbackIn,
    RecallFeedbackOut,
    RecallIn,
    RecallOut,
    RecordIn,
    RecordOut,
    SecondChanceIn,
    SectionSyncIn,
    SectionSyncJobOut,
    SectionSyncOut,
    ToolLookupIn,
    ToolLookupOut,
    ToolPoliciesIn,
    ToolPoliciesOut,
    ToolStoreIn,
    ToolStoreOut,
    TrailOut,
)
from trails.serving.recall import recall
from trails.serving.record import RecordInput, record
from trails.serving.second_chance import second_chance
from trails.upkeep.sync import queue_sync_job, source_sections, sync_sections

logger = logging.getLogger(__name__)
router = Router(tags=["trails"])


@router.post("/{scope}/recall", response=RecallOut)
def recall_endpoint(request: HttpRequest, scope: str, payload: RecallIn):
    if payload.explain and not payload.dry_run:
        raise RequestRefused(422, "invalid", "explain works on a dry run only: send dry_run: true", field="explain")
    result = recall(
        granted_scope(request, scope),
        payload.query,
        partition=payload.partition,
        token_budget=payload.token_budget,
        dry_run=payload.dry_run,
        session=payload.session,
        explain=payload.explain,
        caller=request.auth.lookup,
    )
    request.ragtrail_outcome = result.outcome.value  # for the access log line (infra.metrics)
    return result


@router.post("/{scope}/recalls/{recall_id}/second-chance", response=RecallOut)
def second_chance_endpoint(request: HttpRequest, scope: str, recall_id: str, payload: SecondChanceIn):
    """After a miss, the section ids the agent's own first search returned: a near candidate of
    that recall whose cited sections are all among the first few is served as a hit (matcher
    "second-chance"), validated on read as any hit. Once per recall, by the key that made it,
    within 15 minutes; `second_chance.reason` says why one was or was not given."""
    result = second_chance(
        granted_scope(request, scope),
        recall_id,
        payload.section_ids,
        caller=request.auth.lookup,
        token_budget=payload.token_budget,
    )
    request.ragtrail_outcome = result.outcome.value  # for the access log line (infra.metrics)
    return result


@router.post("/{scope}/trails", response={200: RecordOut, 201: RecordOut})
def record_endpoint(request: HttpRequest, scope: str, payload: RecordIn):
    result = record(
        granted_scope(request, scope),
        RecordInput(
            query=payload.query,
            partition=payload.partition,
            steps=[RecordedStep(s.tool, s.args, s.section_ids) for s in payload.steps],
            cited=list(payload.cited),
            hashes=dict(payload.hashes),
            signal=None if payload.signal == "pending" else payload.signal,
            answer=payload.answer,
            idempotency_key=payload.idempotency_key,
            session=payload.session,
            reporter=reporter(request),
        ),
    )
    trail = result.trail
    body = {
        "trail_id": str(trail.public_id),
        "status": trail.status,
        "reason": trail.reason or None,
        "refreshed": result.refreshed or None,
    }
    # A replayed idempotency key, or the same question with the same sections recorded again,
    # answers 200 with the trail the scope holds: nothing new was created.
    return Status(201 if result.created else 200, body)


def _trail(request: HttpRequest, scope: str, trail_id: str) -> Trail:
    try:
        public_id = uuid.UUID(trail_id)
    except ValueError:
        raise RequestRefused(404, "not_found", "no such trail", field="trail_id") from None
    trail = Trail.objects.filter(scope=granted_scope(request, scope), public_id=public_id).first()
    if trail is None:
        raise RequestRefused(404, "not_found", "no such trail", field="trail_id")
    return trail


def _trail_json(trail: Trail) -> dict:
    return {
        "trail_id": str(trail.public_id),
        "query": trail.query,
        "partition": trail.partition,
        "status": trail.display_status,
        "signal": trail.signal,
        "reason": trail.reason,
        "steps": trail.recorded_steps(),
        "cited": [{"id": c.section_id, "hash": c.recorded_hash} for c in trail.core_citations()],
        "created_at": trail.created_at.isoformat(),
        "expires_at": trail.expires_at.isoformat(),
        "hit_count": trail.hit_count,
        "last_hit_at": trail.last_hit_at.isoformat() if trail.last_hit_at else None,
        "section_changed_at": trail.section_changed_at.isoformat() if trail.section_changed_at else None,
    }


@router.get("/{scope}/trails/{trail_id}", response=TrailOut)
def get_trail(request: HttpRequest, scope: str, trail_id: str):
    return _trail_json(_trail(request, scope, trail_id))


@router.post("/{scope}/trails/{trail_id}/feedback", response=TrailOut)
def feedback(request: HttpRequest, scope: str, trail_id: str, payload: FeedbackIn):
    trail = _trail(request, scope, trail_id)
    try:
        writes.act(trail, payload.vote, Actor.AGENT, by=reporter(request))
    except ActionRefused as refusal:
        raise RequestRefused(409, "conflict", str(refusal), field="vote") from None
    return _trail_json(trail)


@router.post("/{scope}/recalls/{recall_id}/feedback", response=RecallFeedbackOut)
def recall_feedback(request: HttpRequest, scope: str, recall_id: str, payload: RecallFeedbackIn):
    """An agent's verdict on what a recall served. "Not helpful" on a prefetch or hint is a
    reported false hit: once the scope's number of different keys (at least two) have
    reported it, the trail goes back to pending. Every verdict labels the recall for the
    scope's threshold, counted per key."""
    event = give_feedback(
        granted_scope(request, scope), recall_id, payload.helpful, payload.reason, reporter=reporter(request)
    )
    trail = (
        Trail.objects.filter(pk=event.trail_id)
        .only("public_id", "status", "false_hit_reports", "false_hit_reporters")
        .first()
    )
    return {
        "recall_id": str(event.public_id),
        "helpful": event.helpful,
        "trail_id": str(trail.public_id) if trail else None,
        "trail_status": trail.status if trail else None,
        "false_hit_reports": trail.false_hit_reports if trail else None,
        "false_hit_reporters": trail.false_hit_reporters if trail else None,
    }


@router.get("/{scope}/tool-policies", response=ToolPoliciesOut, tags=["tool results"])
def get_tool_policies(request: HttpRequest, scope: str):
    policies = ToolPolicy.objects.filter(scope=granted_scope(request, scope)).order_by("tool")
    return {"policies": list(policies.values("tool", "cacheable", "ttl_s", "ignore_args", "path_args", "per_caller"))}


@router.put("/{scope}/tool-policies", response=ToolPoliciesOut, tags=["tool results"])
def put_tool_policies(request: HttpRequest, scope: str, payload: ToolPoliciesIn):
    # A policy decides which results every caller is served from the cache: a docs key's act, as sections are.
    tool_results.replace_policies(section_writer(request, scope), [p.model_dump() for p in payload.policies])
    return get_tool_policies(request, scope)


@router.post("/{scope}/tool-results/lookup", response=ToolLookupOut, tags=["tool results"])
def lookup_tool_result(request: HttpRequest, scope: str, payload: ToolLookupIn):
    return tool_results.lookup(
        granted_scope(request, scope), payload.tool, payload.args, payload.context, payload.caller
    )


@router.put("/{scope}/tool-results", response=ToolStoreOut, tags=["tool results"])
def store_tool_result(request: HttpRequest, scope: str, payload: ToolStoreIn):
    return tool_results.store(
        granted_scope(request, scope),
        payload.tool,
        payload.args,
        payload.context,
        payload.result,
        payload.caller,
        list(payload.section_ids),
        dict(payload.hashes),
    )


@router.get("/{scope}/tool-results/stats", response=dict[str, dict[str, int]], tags=["tool results"])
def tool_result_stats(request: HttpRequest, scope: str):
    return tool_results.lookup_counts(granted_scope(request, scope))


@router.post("/{scope}/section-syncs", response={200: SectionSyncOut, 202: SectionSyncJobOut}, tags=["sections"])
def sync(request: HttpRequest, scope: str, payload: SectionSyncIn):
    """A sync from docs CI: the full set of sections the source holds now. Only what
    changed is written (one transaction); the answer says what changed and how the served
    trails move, as `manage.py sync_sections` prints it. With `background`, or past
    RAGTRAIL_SYNC_INLINE_SECTIONS sections, a job: 202 and a status URL. The body may be sent gzip-compressed (`Content-Encoding: gzip`)."""
    granted = section_writer(request, scope)
    for index, section in enumerate(payload.sections):
        if (section.text is None) == (section.hash is None):
            raise RequestRefused(
                422, "invalid", "each section needs its text or its hash, not both", field=f"sections.{index}"
            )
    if payload.background or len(payload.sections) > settings.RAGTRAIL_SYNC_INLINE_SECTIONS:
        job = SectionSyncJob.objects.create(
            scope=granted,
            by=reporter(request),
            request=payload.model_dump(
                include={"sections", "delete_missing", "dry_run", "allow_removing_most", "source", "list_all"},
                exclude_none=True,
            ),
        )
        transaction.on_commit(lambda: queue_sync_job(job.pk))
        return Status(202, _job_out(job))
    summary = sync_sections(
        granted,
        source_sections([s.model_dump(exclude_none=True) for s in payload.sections]),
        delete_missing=payload.delete_missing,
        dry_run=payload.dry_run,
        by=reporter(request),
        source=payload.source,
        allow_removing_most=payload.allow_removing_most,
    )
    return summary.as_json(complete=payload.list_all)


@router.get("/{scope}/section-syncs/jobs/{job_id}", response=SectionSyncJobOut, tags=["sections"])
def sync_job(request: HttpRequest, scope: str, job_id: uuid.UUID):
    """A background sync: queued, running, done (with its summary) or failed (with its error)."""
    job = SectionSyncJob.objects.filter(scope=granted_scope(request, scope), public_id=job_id).first()
    if job is None:
        raise RequestRefused(404, "not_found", "no such sync job", field="job_id")
    return _job_out(job)


def _job_out(job: SectionSyncJob) -> dict:
    return {
        "job_id": job.public_id,
        "state": job.state,
        "created_at": job.created_at,
        "finished_at": job.finished_at,
        "status_url": f"/api/v1/scopes/{job.scope.slug}/section-syncs/jobs/{job.public_id}",
        "summary": job.summary,
        "error": job.error,
    }
