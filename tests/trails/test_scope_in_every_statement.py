"""Every statement recall and record send about a scope's rows names the scope, so the
tables that hold them can be partitioned by scope in PostgreSQL (or distributed by it with
Citus): a statement without the scope's id would read every partition (or every shard). On
such tables the trail probes take their scoped form (trails_partitioned), which is read here."""

from __future__ import annotations

import re

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections

from trails.models import BandKeys, Citation, RecallEvent, Step, Trail, TrailSignal
from trails.models import trail as trail_module

# The tables partitioned (or distributed) by scope, and what each statement must say of it.
SCOPED_TABLES = {model._meta.db_table for model in (Trail, BandKeys, Citation, Step, TrailSignal, RecallEvent)}


def statements_of(action) -> list[str]:
    sent: list[str] = []

    def capture(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        action()
    return sent


def unscoped(statements: list[str]) -> list[str]:
    """The statements touching a scoped table without a scope condition on it (or, for an
    INSERT, without the scope column)."""
    found = []
    for sql in statements:
        tables = {t for t in SCOPED_TABLES if re.search(rf'\b"?{t}"?\b', sql)}
        if not tables or sql.lstrip().upper().startswith(("SAVEPOINT", "RELEASE", "ROLLBACK")):
            continue
        if sql.lstrip().upper().startswith("INSERT"):
            if "scope_id" not in sql:
                found.append(sql)
            continue
        # Each mention of a scoped table must come with a scope condition in the statement: one
        # per table read (a join's other side may carry it: t.scope_id, b.scope_id, c.scope_id...).
        conditions = len(re.findall(r'scope_id"?\s*=', sql))
        mentions = sum(len(re.findall(rf'\b(?:FROM|JOIN|UPDATE)\s+"?{t}"?', sql)) for t in tables)
        if conditions < mentions:
            found.append(sql)
    return found


@pytest.mark.parametrize("matcher", ["lexical", "embedding", "both"])
def test_recall_and_record_name_the_scope_in_every_statement_about_its_rows(api, scope, sections, matcher, monkeypatch):
    # As sent to tables partitioned by scope (on the plain table a trail is probed by its key alone).
    monkeypatch.setitem(trail_module._partitioned, connections[DEFAULT_DB_ALIAS], True)
    scope.matcher = matcher
    scope.save()
    query = "What are the ICU visiting hours?"
    steps = [{"tool": "search", "args": {"q": "icu visiting"}, "section_ids": ["visiting/icu"]}]
    recorded = statements_of(
        lambda: api.record("hospital", query=query, cited=["visiting/icu"], steps=steps, signal="accepted")
    )
    recalled = statements_of(lambda: api.recall("hospital", query=query))
    again = statements_of(
        lambda: api.record("hospital", query=query, cited=["visiting/icu"], signal="accepted")
    )  # the twin path
    assert api.recall("hospital", query=query).json()["outcome"] == "prefetch"
    assert not unscoped(recorded), "\n\n".join(unscoped(recorded))
    assert not unscoped(recalled), "\n\n".join(unscoped(recalled))
    assert not unscoped(again), "\n\n".join(unscoped(again))
