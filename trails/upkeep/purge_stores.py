"""The records besides trails a purge checks and redacts: one `Store` per kind, each with its
rows, the field that may hold personal data, and how a matching value is written back.

A write re-reads the row (a conditional update on the value it read, or the store's own write
path), so a value written since the purge read it is cleaned as it is, never overwritten blind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from django.db.models import QuerySet

from scopes.models import Scope, Section, SectionSync
from scopes.revisions import SectionRevision
from scopes.syncs import SectionSyncJob
from trails.core import pii
from trails.models import RecallEvent, Trail, TrailSignal, writes

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


def _rewrite_section(scope: Scope, section_id: str, clean: Callable[[Any], Any]) -> bool:
    # The store's one write path: hashed, the old text kept (redacted next), citing trails flagged.
    text = Section.objects.filter(scope=scope, section_id=section_id).values_list("text", flat=True).first()
    if text is None or clean(text) == text:
        return False
    Section.upsert(scope, {section_id: clean(text)})
    return True


def _delete_revision(scope: Scope, key: int, clean: Callable[[Any], Any]) -> bool:
    deleted, _ = SectionRevision.objects.filter(id=key).delete()
    return bool(deleted)


def stores(scope: Scope, documents: bool = False) -> list[Store]:
    """Every store of a scope a purge checks besides trails, in the order it redacts them;
    with `documents` (an erasure: the built-in rules would find a docs page's own contact
    address), the section texts too, before their kept revisions (rewriting a section keeps
    its old text)."""
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
    return [
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
        # Free text an operator or a sync wrote: a trail's reason (written by older versions
        # with names in it) and what a docs sync said it read ("branch jane-roe-fixes").
        Store(
            "trail reasons",
            Trail.objects.filter(scope_id=scope_id).exclude(reason=""),
            "reason",
            _update(Trail, "reason"),
        ),
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
    ] + (in_documents if documents else [])


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
