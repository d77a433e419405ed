"""Purging personal data from stored queries: resumable, and the same end state when rerun."""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from trails.core import pii
from trails.core.normalise import normalise_query
from trails.reindex import resign
from trails.models import PiiPattern, PurgeRun, RecallEvent, Trail


def purge_rules(run: PurgeRun) -> list[pii.Rule]:
    """Built-in rules and the scope's patterns, or only the subject for an erasure request."""
    if run.subject:
        return pii.rules_for(subject=run.subject, builtin=False)
    return pii.rules_for(PiiPattern.objects.filter(scope=run.scope).values_list("name", "pattern"))


def preview(run: PurgeRun, limit: int = 50) -> tuple[int, list[tuple[str, str, list[str]]]]:
    """Counts the trails a run would touch; returns some (trail id, query, names of the rules that matched)."""
    rules = purge_rules(run)
    matched, shown = 0, []
    for public_id, query in Trail.objects.filter(scope=run.scope).values_list("public_id", "query").iterator():
        names = sorted({name for name, _, _ in pii.find(query, rules)})
        if names:
            matched += 1
            if len(shown) < limit:
                shown.append((str(public_id), query, names))
    return matched, shown


def run_purge(run_id: int, batch_size: int = 500) -> PurgeRun:
    """Runs (or resumes) a purge over its scope's trails and recall events.

    Each batch of trails is redacted (and re-signed, so matching follows the new
    text) or deleted in the same transaction that advances the run's checkpoint,
    so a crash loses at most the batch in flight and a rerun finishes the work.

    Returns:
        The run, done.
    """
    claimed = PurgeRun.objects.filter(id=run_id, state__in=[PurgeRun.State.QUEUED, PurgeRun.State.RUNNING]).update(
        state=PurgeRun.State.RUNNING
    )
    run = PurgeRun.objects.select_related("scope").get(id=run_id)
    if not claimed:
        return run
    rules = purge_rules(run)
    if run.total == 0:
        run.total = Trail.objects.filter(scope=run.scope).count()
        run.save(update_fields=["total"])
    while True:
        batch = list(Trail.objects.filter(scope=run.scope, id__gt=run.last_trail_id).order_by("id").only("id", "query", "partition")[:batch_size])
        if not batch:
            break
        hits = [t for t in batch if pii.find(t.query, rules)]
        with transaction.atomic():
            if run.action == PurgeRun.Action.DELETE:
                Trail.delete_by_ids([t.id for t in hits])
            else:
                _redact_trails(run, hits, rules)
            run.last_trail_id, run.processed, run.matched = batch[-1].id, run.processed + len(batch), run.matched + len(hits)
            run.save(update_fields=["last_trail_id", "processed", "matched"])
    # Raw queries of recall events (kept only where a scope allows) are redacted too.
    for event in RecallEvent.objects.filter(scope=run.scope).exclude(query="").only("id", "query").iterator():
        cleaned = pii.redact(event.query, rules)
        if cleaned != event.query:
            RecallEvent.objects.filter(id=event.id).update(query=cleaned)
    run.state, run.finished_at, run.subject = PurgeRun.State.DONE, timezone.now(), ""
    run.save(update_fields=["state", "finished_at", "subject"])
    return run


def _redact_trails(run: PurgeRun, trails: list[Trail], rules: list[pii.Rule]) -> None:
    for trail in trails:
        trail.query = pii.redact(trail.query, rules)
        trail.normalised_query = normalise_query(trail.query)
    Trail.objects.bulk_update(trails, ["query", "normalised_query"])
    resign(run.scope, trails)
