"""Deleting a whole scope's rows in bulk (benchmark and evaluation scopes)."""
from __future__ import annotations

from django.db import connection

from scopes.models import Scope, Section
from trails.models.learning import MatchLabel, ThresholdChange
from trails.models.recalls import RecallEvent
from trails.models.trail import BandKey, Citation, Step, Trail, TrailReport, TrailSignal, delete_rows


def drop_scope(scope: Scope) -> None:
    """Deletes a scope with all its rows, by scope, in bulk: for benchmark and evaluation
    scopes, whose millions of rows row-by-row cascades would take minutes over."""
    trails = Trail.objects.filter(scope=scope)
    postgres = connection.vendor == "postgresql"
    if postgres:
        with connection.cursor() as cursor:
            # Bulk deletes of a whole scope may take longer than the request budget.
            cursor.execute("SET statement_timeout = 0")
    try:
        for queryset in (
            MatchLabel.objects.filter(scope=scope),
            ThresholdChange.objects.filter(scope=scope),
            RecallEvent.objects.filter(scope=scope),
            BandKey.objects.filter(scope=scope),
            Citation.objects.filter(scope=scope),
            Step.objects.filter(trail__in=trails),
            TrailSignal.objects.filter(trail__in=trails),
            TrailReport.objects.filter(trail__in=trails),
            trails,
            Section.objects.filter(scope=scope),
        ):
            delete_rows(queryset)
        scope.delete()
    finally:
        if postgres:
            with connection.cursor() as cursor:
                cursor.execute("RESET statement_timeout")  # back to the connection's own

