"""Planner statistics gathered by the product itself after a large write, not left to autovacuum.

Autovacuum analyses a table once a tenth of it changed, but only when its next round comes and
one table at a time; until then a store that has just grown (a bulk record, a sync, a re-signing)
is planned with statistics from before. Recall's reads are shaped to need none
(trails/serving/candidates.py); the operator pages and the upkeep jobs still plan by them.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings
from django.db import connection, transaction


def due_for_analysis(written: Mapping[str, int]) -> list[str]:
    """The tables whose rows written reach `RAGTRAIL_ANALYZE_FRACTION` of the rows their statistics
    count (and at least `RAGTRAIL_ANALYZE_MIN_ROWS`); a table never analysed counts none."""
    if connection.vendor != "postgresql":
        return []
    floor = settings.RAGTRAIL_ANALYZE_MIN_ROWS
    tables = [table for table, rows in written.items() if rows >= floor]
    if not tables:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, GREATEST(reltuples, 0) FROM pg_class WHERE oid = ANY(ARRAY(SELECT to_regclass(t) FROM unnest(CAST(%s AS TEXT[])) t))",
            [tables],
        )
        counted = dict(cursor.fetchall())
    return [t for t in tables if written[t] >= settings.RAGTRAIL_ANALYZE_FRACTION * counted.get(t, 0)]


def analyse_after_large_write(written: Mapping[str, int]) -> list[str]:
    """Runs ANALYZE, once the caller's transaction commits (at once outside one), on each table
    `due_for_analysis` names; gives those tables.

    Args:
        written: rows written (inserted or rewritten) by table name.
    """
    due = due_for_analysis(written)
    if due:
        transaction.on_commit(lambda: _analyse(due))
    return due


def _analyse(tables: list[str]) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        # A sample of 30,000 rows a table: longer than a request's statement timeout on a cold disk.
        cursor.execute("SET LOCAL statement_timeout = 0")
        for table in tables:
            cursor.execute(f"ANALYZE {connection.ops.quote_name(table)}")
