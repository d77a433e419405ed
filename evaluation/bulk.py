"""Deleting a whole scope's rows in bulk (benchmark and evaluation scopes)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction

from scopes.models import Scope, Section
from trails.models import (
    BandKeys,
    Citation,
    MatchLabel,
    RecallEvent,
    Step,
    ThresholdChange,
    Trail,
    TrailReport,
    TrailSignal,
    delete_rows,
    writes,
)


@contextmanager
def without_statement_timeout() -> Iterator[None]:
    """Lifts the service's statement timeout on this connection for a bulk job, and puts it back.

    A bulk job is not a request: deleting, filling or vacuuming a million trails takes longer
    than the 5 s a request may. Set for the session, not a transaction: VACUUM runs outside one.
    """
    postgres = connection.vendor == "postgresql"
    if postgres:
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = 0")
    try:
        yield
    finally:
        if postgres:
            with connection.cursor() as cursor:
                cursor.execute("RESET statement_timeout")  # back to the connection's own


@contextmanager
def bulk_transaction() -> Iterator[None]:
    """A transaction whose statements the service's statement timeout does not cancel (PostgreSQL);
    the lifted timeout ends with it, whatever happens inside."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL statement_timeout = 0")
        yield


def drop_scope(scope: Scope) -> None:
    """Deletes a scope with all its rows, by scope, in bulk: for benchmark and evaluation
    scopes, whose millions of rows row-by-row cascades would take minutes over."""
    writes.bulk_load(lambda: _drop(scope))


def _drop(scope: Scope) -> None:
    trails = Trail.objects.filter(scope=scope)
    with without_statement_timeout():
        for queryset in (
            MatchLabel.objects.filter(scope=scope),
            ThresholdChange.objects.filter(scope=scope),
            RecallEvent.objects.filter(scope=scope),
            BandKeys.objects.filter(scope=scope),
            Citation.objects.filter(scope=scope),
            Step.objects.filter(trail__in=trails),
            TrailSignal.objects.filter(trail__in=trails),
            TrailReport.objects.filter(trail__in=trails),
            trails,
            Section.objects.filter(scope=scope),
        ):
            delete_rows(queryset)
        scope.delete()
