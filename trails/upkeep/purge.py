"""Purging personal data from everything a caller can write into a trail or an event.

A caller writes a trail's query, partition, idempotency key, steps (tool names, their
arguments' keys and values, the section ids they returned) and cited section ids, and a
recall event's query and partition. A purge checks all of them: text is redacted where it can be (and
the trail re-signed, so matching follows the new text), and so are the reasons agents
give with feedback (on recall events and in trails' signal history); a trail whose section ids hold
the data is deleted, since a citation cannot be redacted without breaking the path.
Every purge also drops the scope's cached tool results, whose contents are opaque.

Resumable, and the same end state when rerun.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Iterable

from django.db import transaction
from django.db.models import Prefetch

from scopes.models import SectionSync
from trails import tool_results
from trails.core import pii
from trails.core.normalise import normalise_query
from trails.models import Citation, PiiPattern, PurgeRun, RecallEvent, Step, Trail, TrailSignal, pauses, writes
from trails.serving.record import SIGNED_FIELDS
from trails.upkeep.reindex import sign_one

# A previewed run holds its erasure subject until it is confirmed; unconfirmed, it is
# forgotten after this long (by the sweep).
PREVIEW_LIFETIME = timedelta(hours=1)


def purge_rules(run: PurgeRun) -> list[pii.Rule]:
    """Built-in rules and the scope's patterns, or only the subject for an erasure request."""
    if run.subject:
        return pii.rules_for(subject=run.subject, builtin=False)
    return scope_rules(run.scope_id)


def scope_rules(scope_id: int) -> list[pii.Rule]:
    """The built-in personal-data rules and the scope's own patterns."""
    return pii.rules_for(PiiPattern.objects.filter(scope_id=scope_id).values_list("name", "pattern"))


def _strings(value: Any) -> Iterable[str]:
    """Every string in a JSON value, object keys included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _redact_json(value: Any, rules: list[pii.Rule]) -> Any:
    if isinstance(value, str):
        return pii.redact(value, rules)
    if isinstance(value, dict):
        redacted: dict[str, Any] = {}
        for key, item in value.items():
            new_key = pii.redact(key, rules)
            # Two keys redacted alike would overwrite each other; number them instead.
            while new_key in redacted:
                new_key += "'"
            redacted[new_key] = _redact_json(item, rules)
        return redacted
    if isinstance(value, list):
        return [_redact_json(item, rules) for item in value]
    return value


def trails_to_check(scope_id: int, ids: Iterable[int] | None = None, after_id: int = 0, limit: int | None = None):
    trails = (
        Trail.objects.filter(scope_id=scope_id)
        .order_by("id")
        .only("id", "public_id", "scope_id", "query", "partition", "idempotency_key")
        .prefetch_related(
            Prefetch("steps", queryset=Step.objects.order_by("position")),
            Prefetch("citations", queryset=Citation.objects.only("id", "trail_id", "section_id")),
        )
    )
    if ids is not None:
        trails = trails.filter(id__in=list(ids))
    if after_id:
        trails = trails.filter(id__gt=after_id)
    return trails[:limit] if limit else trails


def _trail_texts(trail: Trail) -> list[str]:
    """Every caller-written text of a trail (steps and citations prefetched), section ids included."""
    texts = [trail.query, trail.partition, trail.idempotency_key or ""]
    for step in trail.steps.all():
        texts.append(step.tool)
        texts.extend(_strings(step.args))
        texts.extend(step.section_ids)
    texts.extend(c.section_id for c in trail.citations.all())
    return texts


def findings(trail: Trail, rules: list[pii.Rule]) -> tuple[set[str], bool]:
    """Names of the rules matching any caller-written field of a trail, and whether the
    data sits in a section id (the trail must then go rather than be redacted).

    `trail` needs its steps and citations prefetched.
    """
    names: set[str] = set()
    texts = [trail.query, trail.partition, trail.idempotency_key or ""]
    for step in trail.steps.all():
        texts.append(step.tool)
        texts.extend(_strings(step.args))
    for text in texts:
        names.update(name for name, _, _ in pii.find(text, rules))
    in_ids = False
    ids = [c.section_id for c in trail.citations.all()] + [i for step in trail.steps.all() for i in step.section_ids]
    for section_id in ids:
        found = pii.find(section_id, rules)
        if found:
            in_ids = True
            names.update(name for name, _, _ in found)
    return names, in_ids


def preview(run: PurgeRun, limit: int = 50) -> tuple[int, list[tuple[str, str, list[str]]]]:
    """Finds the trails a run would touch and stores them on the run (which must be
    saved), so that confirming it purges exactly this set.

    Returns:
        How many trails match, and some (trail id, query, names of the rules that matched,
        each match in its context).
    """
    rules = purge_rules(run)
    matched, shown = [], []
    for trail in trails_to_check(run.scope_id).iterator(chunk_size=500):
        names, _ = findings(trail, rules)
        if names:
            matched.append(trail.id)
            if len(shown) < limit:
                contexts = [shown_text for text in _trail_texts(trail) for shown_text in pii.in_context(text, rules)]
                shown.append((str(trail.public_id), trail.query, sorted(names), contexts[:5]))
    run.trail_ids, run.total = matched, len(matched)
    return len(matched), shown


def preview_records(run: PurgeRun) -> dict[str, int]:
    """Every kind of record the run would touch, counted: the previewed trails (`run.total`,
    from preview) and the others."""
    return records_matching(run.scope_id, purge_rules(run), trails=run.total)


def run_purge(run_id: int, batch_size: int = 500) -> PurgeRun:
    """Runs (or resumes) a purge: the previewed trails, or (not previewed) every trail of
    the scope; then the scope's recall-event queries and cached tool results.

    Each batch of trails is redacted or deleted in the same transaction that advances
    the run's checkpoint, so a crash loses at most the batch in flight and a rerun
    finishes the work.

    Returns:
        The run, done.
    """
    claimed = PurgeRun.objects.filter(
        id=run_id, state__in=[PurgeRun.State.PREVIEWED, PurgeRun.State.QUEUED, PurgeRun.State.RUNNING]
    ).update(state=PurgeRun.State.RUNNING)
    run = PurgeRun.objects.select_related("scope").get(id=run_id)
    if not claimed:
        return run
    rules = purge_rules(run)
    if run.trail_ids is None and run.total == 0:
        run.total = Trail.objects.filter(scope=run.scope).count()
        run.save(update_fields=["total"])
    targets = sorted(run.trail_ids) if run.trail_ids is not None else None
    while True:
        if targets is None:
            batch = list(
                Trail.objects.filter(scope_id=run.scope_id, id__gt=run.last_trail_id)
                .order_by("id")
                .values_list("id", flat=True)[:batch_size]
            )
        else:  # the previewed ids, those deleted since included: the checkpoint moves past them too
            batch = [i for i in targets if i > run.last_trail_id][:batch_size]
        if not batch:
            break

        def decide(trail: Trail) -> str:
            names, in_ids = findings(trail, rules)
            if names and (in_ids or run.action == PurgeRun.Action.DELETE):
                return "delete"
            return "redact" if names else ""

        pauses.pause_point("purge:read")
        with transaction.atomic():
            # Through the writer: the batch's trails locked in id order, decided again under the locks.
            deleted, redacted = writes.purge_trails(
                run.scope_id,
                batch,
                decide,
                lambda trail: _redact_trail(trail, rules),
                sign_one,
                SIGNED_FIELDS,
            )
            run.last_trail_id, run.processed = batch[-1], run.processed + len(batch)
            run.matched += deleted + redacted
            run.save(update_fields=["last_trail_id", "processed", "matched"])
    # Raw queries of recall events (kept only where a scope allows) and agents' feedback
    # reasons are redacted too.
    for _, model, rows, field in other_records(run.scope_id):
        for row_id, text in rows.values_list("id", field).iterator():
            if pii.redact(text, rules) != text:
                writes.redact_text(model, row_id, field, lambda text: pii.redact(text, rules))
    tool_results.forget_scope(run.scope)
    # What still matches, checked while the subject is known (it is forgotten at the end).
    run.left = {kind: n for kind, n in records_matching(run.scope_id, rules).items() if n}
    run.finish()
    return run


# The records besides trails a purge redacts: (what an operator calls them, model, rows, field).
def other_records(scope_id: int):
    return (
        ("recall queries", RecallEvent, RecallEvent.objects.filter(scope_id=scope_id).exclude(query=""), "query"),
        (
            "recall partitions",
            RecallEvent,
            RecallEvent.objects.filter(scope_id=scope_id).exclude(partition=""),
            "partition",
        ),
        (
            "feedback reasons",
            RecallEvent,
            RecallEvent.objects.filter(scope_id=scope_id).exclude(feedback_reason=""),
            "feedback_reason",
        ),
        (
            "trail history reasons",
            TrailSignal,
            TrailSignal.objects.filter(trail__scope_id=scope_id).exclude(reason=""),
            "reason",
        ),
        # Free text an operator or a sync wrote: a trail's reason (written by older versions
        # with names in it) and what a docs sync said it read ("branch jane-roe-fixes").
        ("trail reasons", Trail, Trail.objects.filter(scope_id=scope_id).exclude(reason=""), "reason"),
        ("docs sync sources", SectionSync, SectionSync.objects.filter(scope_id=scope_id).exclude(source=""), "source"),
    )


def records_matching(scope_id: int, rules: list[pii.Rule], trails: int | None = None) -> dict[str, int]:
    """How many of each kind of record in the scope hold a match: trails (unless counted
    already, as a preview has), then the others."""
    if trails is None:
        trails = sum(1 for trail in trails_to_check(scope_id).iterator(chunk_size=500) if findings(trail, rules)[0])
    counts = {"trails": trails}
    for kind, _, rows, field in other_records(scope_id):
        counts[kind] = sum(1 for text in rows.values_list(field, flat=True).iterator() if pii.find(text, rules))
    return counts


def _redact_trail(trail: Trail, rules: list[pii.Rule]) -> list[Step]:
    """Redacts a trail's caller-written fields in place (steps prefetched); returns its steps."""
    trail.query = pii.redact(trail.query, rules)
    trail.normalised_query = normalise_query(trail.query)
    trail.partition = pii.redact(trail.partition, rules)
    if trail.idempotency_key and pii.find(trail.idempotency_key, rules):
        trail.idempotency_key = None
    steps = list(trail.steps.all())
    for step in steps:
        step.tool, step.args = pii.redact(step.tool, rules), _redact_json(step.args, rules)
    return steps


def forget_unconfirmed_previews(now: datetime) -> int:
    """Deletes previews never confirmed (they hold an erasure subject) and fails runs
    that were queued or running for a day without progress, forgetting their subject.

    Returns:
        How many runs were deleted or failed.
    """
    deleted, _ = PurgeRun.objects.filter(state=PurgeRun.State.PREVIEWED, created_at__lt=now - PREVIEW_LIFETIME).delete()
    failed = 0
    for run in PurgeRun.objects.filter(
        state__in=[PurgeRun.State.QUEUED, PurgeRun.State.RUNNING], created_at__lt=now - timedelta(days=1)
    ):
        run.fail("did not finish within a day; start it again")
        failed += 1
    return deleted + failed
