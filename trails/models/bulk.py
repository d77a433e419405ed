"""The writer's bulk paths (part of trails.models.writes, which re-exports them): record's
inserts, re-signing, purges, the docs sync's flags, labels and the verdicts they imply,
recall-event retention, and the lab's bulk loads. The lock order is writes.py's."""

from __future__ import annotations

from datetime import datetime
from typing import Callable, Sequence

from django.db import connection, models, transaction
from django.dispatch import receiver as on_signal

from infra.guards import guard_on
from infra.statistics import analyse_after_large_write
from scopes.models import Scope, sections_changed
from trails.models import pauses
from trails.models.deletion import _delete_locked, delete_trails
from trails.models.gate import writer, writing
from trails.models.learning import MatchLabel
from trails.models.lifecycle import TrailSignal, TrailStatus
from trails.models.recalls import RecallEvent
from trails.models.trail import BandKeys, Citation, Step, Trail, delete_rows


@writer("labels")
def insert_labels(labels: Sequence[MatchLabel]) -> int:
    """Inserts labels, each unless its recall has one already (ON CONFLICT DO NOTHING: an
    agent's verdict and a rejection racing on one recall leave one label, and no error).

    Returns:
        How many were inserted.
    """
    if not labels:
        return 0
    fields = [f for f in MatchLabel._meta.concrete_fields if not f.primary_key]
    q = connection.ops.quote_name
    rows = ", ".join(["(" + ", ".join(["%s"] * len(fields)) + ")"] * len(labels))
    params = [f.get_db_prep_save(f.pre_save(label, True), connection) for label in labels for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {MatchLabel._meta.db_table} ({', '.join(q(f.column) for f in fields)}) "
            f"VALUES {rows} ON CONFLICT DO NOTHING",
            params,
        )
        return cursor.rowcount


# -- record, re-signing -------------------------------------------------------------------------


def insert_trails(
    all_rows: Sequence, band_keys: Callable[[object], list], before: Callable[[], None] | None = None
) -> None:
    """Inserts new trails with their steps, citations, record signals and band keys, in one
    transaction, a few statements in all (record, the demo, the benchmarks all come here).

    `all_rows` are record's TrailRows (trail, steps, citations, signals); `band_keys(rows)`
    gives one's key rows; `before` runs first in the transaction (record's share lock on the
    scope and its re-signing where a matching change committed meanwhile).
    """
    with transaction.atomic(), writing("record"):
        if before is not None:
            before()
        Trail.objects.bulk_create([rows.trail for rows in all_rows])
        for model, attribute in ((Step, "steps"), (Citation, "citations"), (TrailSignal, "signals")):
            children = [child for rows in all_rows for child in getattr(rows, attribute)]
            for child in children:
                # bulk_create filled in the trail ids after the children were built.
                child.trail_id = child.trail.id
            model.objects.bulk_create(children, batch_size=2000)
        keys = [row for rows in all_rows for row in band_keys(rows)]
        BandKeys.insert_many(keys)
        # A bulk record: the planner's counts are stale until its tables are analysed (a single one never is).
        written = {Trail._meta.db_table: len(all_rows), BandKeys._meta.db_table: len(keys)}
        for model, attribute in ((Step, "steps"), (Citation, "citations"), (TrailSignal, "signals")):
            written[model._meta.db_table] = sum(len(getattr(rows, attribute)) for rows in all_rows)
        analyse_after_large_write(written)


def lock_scope_for_signing(scope_id: int) -> Scope | None:
    """The scope as committed, its row held FOR SHARE until the transaction ends: a matching
    change waits for what is signed under it, or has committed and is read here."""
    if connection.vendor == "postgresql" and guard_on("signing-holds-the-scope-for-share"):
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT id FROM {Scope._meta.db_table} WHERE id = %s FOR SHARE", [scope_id])
    return Scope.objects.filter(pk=scope_id).first()


def resign(
    scope_id: int,
    trail_ids: Sequence[int],
    signer: Callable[[Scope, Trail], list],
    fields: Sequence[str],
    servable_only: bool = False,
) -> int:
    """Signs these trails afresh under the scope's settings as committed: the scope's row
    FOR SHARE, then the trails FOR UPDATE in id order, re-read (with `servable_only`, those
    still active or pending); `signer(scope, trail)` sets `fields` and returns the band-key
    rows that replace the trail's. Returns how many were signed."""
    with transaction.atomic(), writing("re-sign"):
        scope = lock_scope_for_signing(scope_id)
        if scope is None:
            return 0
        wanted = Trail.objects.filter(scope_id=scope_id, id__in=sorted(set(trail_ids)))
        if servable_only:
            wanted = wanted.filter(status__in=[TrailStatus.ACTIVE, TrailStatus.PENDING])
        trails = list(
            wanted.select_for_update(of=("self",)).order_by("id").only("id", "scope_id", "query", "partition")
        )
        if not trails:
            return 0
        BandKeys.objects.filter(trail_id__in=[t.id for t in trails]).delete()
        keys = [row for trail in trails for row in signer(scope, trail)]
        Trail.objects.bulk_update(trails, list(fields))
        BandKeys.insert_many(keys)
        return len(trails)


# -- purges ---------------------------------------------------------------------------------------


def purge_trails(
    scope_id: int,
    trail_ids: Sequence[int],
    decide: Callable[[Trail], str],
    redact: Callable[[Trail], list],
    signer: Callable[[Scope, Trail], list],
    signed_fields: Sequence[str],
) -> tuple[int, int]:
    """A purge's batch: the scope's row FOR SHARE, then every trail of the batch FOR UPDATE in
    id order, re-read with its steps and citations; `decide(trail)` ("delete", "redact" or
    "") is asked under the locks, `redact(trail)` sets the redacted fields and returns the
    steps it changed; the redacted trails are signed afresh. A trail deleted meanwhile is
    skipped. Call inside the transaction that advances the run. Returns (deleted, redacted)."""
    with transaction.atomic(), writing("purge"):
        if guard_on("purge-locks-in-id-order"):
            scope = lock_scope_for_signing(scope_id)
            locked = _lock_with_paths(scope_id, trail_ids)
            pauses.pause_point("purge:locked")
            doomed = [t.id for t in locked if decide(t) == "delete"]
            dirty = [t for t in locked if t.id not in doomed and decide(t) == "redact"]
        else:  # the order before: deletions first (the higher ids among them), then the redactions
            scope = Scope.objects.filter(pk=scope_id).first()
            read = _with_paths(Trail.objects.filter(scope_id=scope_id, id__in=list(trail_ids)))
            doomed = [t.id for t in read if decide(t) == "delete"]
            delete_trails(doomed)
            pauses.pause_point("purge:locked")
            dirty = [t for t in read if t.id not in doomed and decide(t) == "redact"]
        steps = [step for trail in dirty for step in redact(trail)]
        Trail.objects.bulk_update(dirty, ["query", "normalised_query", "partition", "idempotency_key"])
        Step.objects.bulk_update(steps, ["tool", "args"])
        deleted = _delete_locked(doomed) if guard_on("purge-locks-in-id-order") else len(doomed)
        if dirty and scope is not None:
            BandKeys.objects.filter(trail_id__in=[t.id for t in dirty]).delete()
            keys = [row for trail in dirty for row in signer(scope, trail)]
            Trail.objects.bulk_update(dirty, list(signed_fields))
            BandKeys.insert_many(keys)
        return deleted, len(dirty)


def _with_paths(trails: models.QuerySet) -> list[Trail]:
    return list(
        trails.order_by("id").prefetch_related(
            models.Prefetch("steps", queryset=Step.objects.order_by("position")),
            models.Prefetch("citations", queryset=Citation.objects.only("id", "trail_id", "section_id")),
        )
    )


def _lock_with_paths(scope_id: int, trail_ids: Sequence[int]) -> list[Trail]:
    """The scope's trails of these ids, locked in id order, re-read with steps and citations."""
    ids = list(
        Trail.objects.filter(scope_id=scope_id, id__in=sorted(set(trail_ids)))
        .select_for_update(of=("self",))
        .order_by("id")
        .values_list("id", flat=True)
    )
    return _with_paths(Trail.objects.filter(scope_id=scope_id, id__in=ids))


def redact_text(model: type[models.Model], row_id: int, field: str, redact: Callable[[str], str]) -> bool:
    """Redacts one text field of a row (a reason, a recall's query, a history row's words) by a
    conditional update on the text it read: one changed meanwhile is read again, never
    overwritten blind. Returns whether it changed the row."""
    limit = getattr(model._meta.get_field(field), "max_length", None)
    with writing("purge"):
        for _ in range(5):
            text = model.objects.filter(pk=row_id).values_list(field, flat=True).first()
            if text is None:
                return False
            cleaned = redact(text)
            if cleaned == text:
                return False
            # "[redacted]" may be longer than what it replaced: cut to the column, or the erasure stops there.
            cleaned = cleaned[:limit] if limit and isinstance(cleaned, str) else cleaned
            pauses.pause_point("redact:read")
            rows = model.objects.filter(pk=row_id)
            if guard_on("redaction-is-a-conditional-update"):
                rows = rows.filter(**{field: text})
            if rows.update(**{field: cleaned}):
                return True
        return False


# -- docs syncs, recall events: flags, implied verdicts, retention ---------------------------------


@writer("docs-sync flag")
def flag_trails_citing(scope: Scope, section_ids: Sequence[str], now: datetime) -> int:
    """Flags the active trails of a scope that cite any of these sections (a flag for
    operators, not a status: recall still validates on read). Reads the (scope, section_id)
    index of citations; locks the trails in id order and flags, by a conditional update,
    those still active and unflagged. Returns how many were newly flagged."""
    if not section_ids:
        return 0
    citing = Citation.objects.filter(scope=scope, section_id__in=list(section_ids)).values("trail_id")
    with transaction.atomic():
        ids = list(
            Trail.objects.filter(id__in=citing, scope_id=scope.pk, section_changed_at__isnull=True)
            .select_for_update(of=("self",))
            .order_by("id")
            .values_list("id", flat=True)
        )
        pauses.pause_point("flag:locked")
        flagged = Trail.objects.filter(id__in=ids, section_changed_at__isnull=True)
        if guard_on("docs-sync-flags-only-active-trails"):
            flagged = flagged.filter(status=TrailStatus.ACTIVE)
        return flagged.update(section_changed_at=now)


@on_signal(sections_changed, dispatch_uid="trails.flag_trails_citing")
def _flag_trails_citing_changed_sections(
    sender, scope: Scope, section_ids: Sequence[str], at: datetime, **kwargs
) -> None:
    # Once the section write commits, in a short transaction of its own (a sync never holds trails' rows).
    ids = list(section_ids)
    transaction.on_commit(lambda: flag_trails_citing(scope, ids, at), robust=True)


@writer("verdict")
def implied_verdict(label: MatchLabel, event_id: int | None, false_hit: bool, reason: str, now: datetime) -> bool:
    """A re-search's label and, where it says the recall served a false hit, the verdict it
    implies on the recall (only one with no verdict yet: a conditional update). Returns
    whether the label was made."""
    with transaction.atomic():
        made = insert_labels([label]) > 0
        if made and false_hit and event_id is not None:
            RecallEvent.objects.filter(pk=event_id, feedback_at__isnull=True).update(
                helpful=False, feedback_reason=reason, feedback_at=now
            )
    return made


@writer("retention")
def forget_recall_events(ids: Sequence[int]) -> int:
    """Deletes these recall events (past their scope's retention), their labels kept unlinked.
    Returns how many were deleted."""
    with transaction.atomic():
        # A label outlives its recall (it holds no text): the scope's evidence keeps its size.
        MatchLabel.objects.filter(recall_event_id__in=ids).update(recall_event=None)
        return delete_rows(RecallEvent.objects.filter(id__in=ids))


@writer("bulk load")
def bulk_load(load: Callable[[], None]) -> None:
    """The evaluation's bulk loader (COPY of millions of rows, evaluation/scale.py) with the
    gate open: a named door for the lab, never called by the service."""
    load()


@writer("re-sign")
def refold(relabelled: Sequence[Trail], refolded: Sequence[Trail]) -> None:
    """A text fold's catch-up: the fold label of trails whose words it leaves as they were, and
    the normalised text of the others (then signed afresh through `resign`)."""
    with transaction.atomic():
        Trail.objects.bulk_update(relabelled, ["lexical_params"])
        Trail.objects.bulk_update(refolded, ["normalised_query"])
