"""Deleting trails: the rows they own go with them, the recall events and labels that outlive
them are unlinked, and a condition (the sweep's expiry) is re-checked under each trail's lock.
Part of the writes (trails.models.writes calls and re-exports these; the lock order is its)."""

from __future__ import annotations

from datetime import datetime
from typing import Callable, Iterable

from django.db import transaction
from django.db.models import Q

from infra.guards import guard_on
from trails.models import pauses
from trails.models.gate import writer, writing
from trails.models.learning import MatchLabel
from trails.models.lifecycle import TrailReport, TrailSignal, expired, expiring
from trails.models.recalls import RecallEvent
from trails.models.trail import BandKeys, Citation, Step, Trail, delete_rows


@writer("delete")
def delete_trails(ids: Iterable[int], only_if: Q | None = None) -> int:
    """Deletes these trails (those still matching `only_if`, re-checked under their locks:
    a condition on the trail's own columns, no subquery) with their rows; their recall
    events and labels stay, unlinked.

    Returns:
        How many trails were deleted.
    """
    ids = sorted(set(ids))
    if not ids:
        return 0
    with transaction.atomic():
        wanted = Trail.objects.filter(id__in=ids)
        if only_if is not None:
            wanted = wanted.filter(only_if)
        # FOR UPDATE re-reads each row once its lock is had: one renewed meanwhile no longer matches.
        locked = list(wanted.select_for_update(of=("self",)).order_by("id").values_list("id", flat=True))
        pauses.pause_point("delete:locked")
        return _delete_locked(locked)


@writer("delete")
def _delete_locked(ids: list[int]) -> int:
    """Deletes trails whose rows this transaction holds, their recall events and labels first unlinked."""
    if not ids:
        return 0
    RecallEvent.objects.filter(trail_id__in=ids).update(trail=None)
    RecallEvent.objects.filter(nearest_trail_id__in=ids).update(nearest_trail=None)
    MatchLabel.objects.filter(trail_id__in=ids).update(trail=None)
    for model in (BandKeys, Citation, Step, TrailSignal, TrailReport):
        delete_rows(model.objects.filter(trail_id__in=ids))
    return delete_rows(Trail.objects.filter(id__in=ids))


@writer("sweep")
def sweep_expired_trails(now: datetime, batch_size: int = 5000) -> int:
    """Deletes the trails past their expiry, in batches of ids, each its own transaction;
    each trail deleted only if it is still expired under its lock (the table's expiry rule).

    Returns:
        How many were deleted.
    """
    deleted, after_id = 0, 0
    while True:
        ids = list(
            expiring(Trail.objects.filter(id__gt=after_id), now)
            .order_by("id")
            .values_list("id", flat=True)[:batch_size]
        )
        if not ids:
            return deleted
        pauses.pause_point("sweep:read")
        deleted += delete_trails(ids, only_if=expired(now))
        after_id = ids[-1]


def delete_scope(scope, cascade: Callable[[], tuple], batch_size: int = 1000) -> tuple:
    """Deletes a scope: its trails through the deletion path in batches (each its own
    transaction, locked in id order), its recall events and labels in batches, then the scope
    and what else it holds by `cascade` (Django's). Returns what `cascade` returns."""
    while guard_on("scope-deletion-through-the-deletion-path"):
        ids = list(Trail.objects.filter(scope_id=scope.pk).order_by("id").values_list("id", flat=True)[:batch_size])
        if not ids:
            break
        delete_trails(ids)
    with writing("delete scope"):
        for model in (MatchLabel, RecallEvent):
            while True:
                with transaction.atomic():
                    ids = list(model.objects.filter(scope_id=scope.pk).values_list("id", flat=True)[:batch_size])
                    if not ids:
                        break
                    delete_rows(model.objects.filter(id__in=ids))
        with transaction.atomic():
            if guard_on("scope-deletion-locks-the-scope"):
                # A record holds the scope's row FOR SHARE until it commits: after this lock none can add a trail,
                # and those that committed during the batches go here, not into a cascade that trips on them.
                type(scope).objects.select_for_update().filter(pk=scope.pk).first()
                late = list(Trail.objects.filter(scope_id=scope.pk).order_by("id").values_list("id", flat=True))
                if late and guard_on("scope-deletion-through-the-deletion-path"):
                    delete_trails(late)
                for model in (MatchLabel, RecallEvent):
                    delete_rows(model.objects.filter(scope_id=scope.pk))
            pauses.pause_point("delete-scope:locked")
            return cascade()
