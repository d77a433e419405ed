"""The records besides trails a purge checks and redacts: one `Store` per kind, each with its
rows, the field that may hold personal data, and how a matching value is written back.

A write re-reads the row (a conditional update on the value it read, or the store's own write
path), so a value written since the purge read it is cleaned as it is, never overwritten blind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from django.db import transaction
from django.db.models import QuerySet

from infra.guards import guard_on
from scopes.models import Scope, Section, SectionSync
from scopes.revisions import SectionRevision
from scopes.syncs import SectionSyncJob
from trails.core import pii
from trails.models import RecallEvent, Trail, TrailSignal, pauses, writes

# A store's writer: (scope, row key, clean) -> whether it changed the row; `clean` maps the
# value as the writer reads it to the value to write (the same value where nothing matches).
Write = Callable[[Scope, Any, Callable[[Any], Any]], bool]


@dataclass(frozen=True)
class Store:
    """A kind of record besides trails that can hold personal data: what an operator calls it,
    its rows, the field, how a matching value is cleaned (redacted unless said otherwise) and
    how it is written back (None: it cannot be changed here, and is said to be left)."""

    kind: str
    rows: QuerySet
    field: str
    write: Write | None
    key: str = "id"
    clean: Callable[[Any, list], Any] = pii.redact_json


def _update(model, field: str) -> Write:
    """A conditional update of one field: a value changed since it was read is read again."""

    def write(scope: Scope, key, clean: Callable[[Any], Any]) -> bool:
        return writes.redact_text(model, key, field, clean)

    return write


def _blank_if_holding(value: str, rules: list) -> str:
    """A built site's anchor holding a match, blanked: redacted, it would name no anchor of the page."""
    return "" if pii.holds(value, rules) else value


def clean_sync_request(request: dict, rules: list) -> dict:
    """A background sync's stored request with its texts and source redacted and an anchor
    holding a match blanked. Section ids and hashes are kept: a sync writes the ids the source
    holds (renamed there, and named as left by the check afterwards)."""

    def row(section: dict) -> dict:
        return {
            key: value
            if key in ("id", "hash")
            else _blank_if_holding(value, rules)
            if key == "anchor"
            else pii.redact_json(value, rules)
            for key, value in section.items()
        }

    return {
        key: [row(section) for section in value] if key == "sections" else pii.redact_json(value, rules)
        for key, value in request.items()
    }


def _clean_job_request(scope: Scope, key: int, clean: Callable[[Any], Any]) -> bool:
    """A sync job's request, cleaned unless a run holds the job (a running job read its request
    when claimed: it is left, and the check afterwards names it). The job's row is locked first:
    a claim (run_sync_job's conditional update of that row) waits, then reads the clean request."""
    pauses.pause_point("purge:sync-job-read")
    with transaction.atomic():
        jobs = SectionSyncJob.objects.filter(pk=key)
        if guard_on("purge-leaves-running-sync-jobs"):
            jobs = jobs.select_for_update().exclude(state=SectionSyncJob.State.RUNNING)
        request = jobs.values_list("request", flat=True).first()
        pauses.pause_point("purge:sync-job-locked")
        cleaned = request if request is None else clean(request)
        if cleaned == request:
            return False
        SectionSyncJob.objects.filter(pk=key).update(request=cleaned)
        return True


def _rewrite_section(scope: Scope, section_id: str, clean: Callable[[Any], Any]) -> bool:
    # The store's one write path: hashed, the old text kept (redacted next), citing trails flagged.
    with transaction.atomic():
        # Read under the row's lock: a sync committing meanwhile is read and cleaned, never overwritten.
        text = (
            Section.objects.select_for_update()
            .filter(scope=scope, section_id=section_id)
            .values_list("text", flat=True)
            .first()
        )
        pauses.pause_point("purge:section-read")
        cleaned = text if text is None else clean(text)
        if cleaned == text:
            return False
        Section.upsert(scope, {section_id: cleaned})
        return True


def _delete_revision(scope: Scope, key: int, clean: Callable[[Any], Any]) -> bool:
    deleted, _ = SectionRevision.objects.filter(id=key).delete()
    return bool(deleted)


def stores(scope: Scope, documents: bool = False) -> list[Store]:
    """Every store of a scope a purge checks besides trails, in the order it redacts them;
    with `documents` (an erasure: the built-in rules would find a docs page's own contact
    address), the requests of background syncs not yet run and the section texts too, before
    their kept revisions (rewriting a section keeps its old text)."""
    scope_id = scope.pk
    in_documents = [
        Store(
            "section texts",
            Section.objects.filter(scope_id=scope_id).exclude(text=""),
            "text",
            _rewrite_section if scope.keeps_text else None,
            key="section_id",
        ),
        # An id is the source's path and heading: renamed at the source, never here.
        Store("section ids (rename at the source)", Section.objects.filter(scope_id=scope_id), "section_id", None),
        # A link to a blanked anchor falls back to the id's fragment (GET .../sections/<id> says which).
        Store(
            "section anchors",
            Section.objects.filter(scope_id=scope_id).exclude(anchor=""),
            "anchor",
            _update(Section, "anchor"),
            clean=_blank_if_holding,
        ),
        Store(
            "kept section revisions",
            SectionRevision.objects.filter(scope_id=scope_id).exclude(text=""),
            "text",
            _update(SectionRevision, "text"),
        ),
        # A revision is kept for the trails citing its id; those trails were deleted above.
        Store(
            "kept revisions' section ids",
            SectionRevision.objects.filter(scope_id=scope_id),
            "section_id",
            _delete_revision,
        ),
    ]
    before_jobs = [
        Store(
            "recall queries",
            RecallEvent.objects.filter(scope_id=scope_id).exclude(query=""),
            "query",
            _update(RecallEvent, "query"),
        ),
        Store(
            "recall partitions",
            RecallEvent.objects.filter(scope_id=scope_id).exclude(partition=""),
            "partition",
            _update(RecallEvent, "partition"),
        ),
        Store(
            "feedback reasons",
            RecallEvent.objects.filter(scope_id=scope_id).exclude(feedback_reason=""),
            "feedback_reason",
            _update(RecallEvent, "feedback_reason"),
        ),
        Store(
            "trail history reasons",
            TrailSignal.objects.filter(trail__scope_id=scope_id).exclude(reason=""),
            "reason",
            _update(TrailSignal, "reason"),
        ),
        # Free text an operator wrote (older versions wrote names into a trail's reason).
        Store(
            "trail reasons",
            Trail.objects.filter(scope_id=scope_id).exclude(reason=""),
            "reason",
            _update(Trail, "reason"),
        ),
    ]
    # Before the syncs and sections: a job seen finished here has committed what it wrote there.
    jobs = SectionSyncJob.objects.filter(scope_id=scope_id).exclude(request={})
    in_sync_jobs = [
        Store(
            "docs sync job requests",
            jobs.exclude(state=SectionSyncJob.State.RUNNING),
            "request",
            _clean_job_request,
            clean=clean_sync_request,
        ),
        Store(
            "running docs sync jobs (purge again once they end)",
            jobs.filter(state=SectionSyncJob.State.RUNNING),
            "request",
            None,
        ),
    ]
    after_jobs = [
        # What a docs sync said it read ("branch jane-roe-fixes").
        Store(
            "docs sync sources",
            SectionSync.objects.filter(scope_id=scope_id).exclude(source=""),
            "source",
            _update(SectionSync, "source"),
        ),
        # What a sync did, by section id (a file or heading may name a person).
        Store(
            "docs sync summaries",
            SectionSync.objects.filter(scope_id=scope_id).exclude(summary={}),
            "summary",
            _update(SectionSync, "summary"),
        ),
        Store(
            "docs sync job summaries",
            SectionSyncJob.objects.filter(scope_id=scope_id, summary__isnull=False),
            "summary",
            _update(SectionSyncJob, "summary"),
        ),
        # Why a job failed (a refusal quotes a section id).
        Store(
            "docs sync job errors",
            SectionSyncJob.objects.filter(scope_id=scope_id, error__isnull=False),
            "error",
            _update(SectionSyncJob, "error"),
        ),
    ]
    return before_jobs + (in_sync_jobs if documents else []) + after_jobs + (in_documents if documents else [])


def redact_store(scope: Scope, store: Store, rules: list) -> tuple[int, int]:
    """Redacts one store's matching rows (each value folded once as read); returns (checked, changed)."""
    checked = changed = 0
    for key, value in store.rows.values_list(store.key, store.field).iterator():
        checked += 1
        if store.write is None or not pii.holds(value, rules):
            continue
        changed += store.write(scope, key, lambda current: store.clean(current, rules))
    return checked, changed


def count_matching(store: Store, rules: list) -> int:
    """How many of a store's rows hold a match."""
    return sum(1 for value in store.rows.values_list(store.field, flat=True).iterator() if pii.holds(value, rules))
