"""Recall's candidate read starts from the band keys whatever PostgreSQL's statistics say.

A scope that grew after the last ANALYZE (autovacuum off, or a new tenant inside a big
table) once got a plan that walked every trail of the scope: 21.9 s for one recall.
These tests count the rows the plan reads, not its time, so they hold on a noisy box.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.utils import timezone

from evaluation.questions import QuestionMaker
from scopes.models import Scope, Section
from trails.core.hint import RecordedStep
from trails.models import BandKeys, Citation, Step, Trail
from trails.serving.candidates import add_paths
from trails.serving.candidates import candidates as read_candidates
from trails.serving.matching import sign
from trails.serving.record import RecordInput, TrailRows

TRAILS = 3000


def index_names(table: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", [table])
        return {name for (name,) in cursor.fetchall()}


def rows_read(plan: dict, table: str, indexes: set[str] | None = None) -> int:
    """Rows a plan node tree examined in `table` or its index entries a bitmap scan read
    (returned or filtered away), over all loops."""
    indexes = index_names(table) if indexes is None else indexes
    total = 0
    if plan.get("Relation Name") == table or (
        plan.get("Node Type") == "Bitmap Index Scan" and plan.get("Index Name") in indexes
    ):
        per_loop = (
            plan.get("Actual Rows", 0)
            + plan.get("Rows Removed by Filter", 0)
            + plan.get("Rows Removed by Index Recheck", 0)
        )
        total += per_loop * plan.get("Actual Loops", 1)
    for child in plan.get("Plans", []):
        total += rows_read(child, table, indexes)
    return total


def fill(scope: Scope, questions: list[str]) -> None:
    Section.upsert(scope, {"s": "a section"})
    save_accepted(scope, questions)


def save_accepted(scope: Scope, questions) -> None:
    """Records each question as an accepted one-step path citing the scope's section "s", in one bulk write."""
    current = {s.section_id: s for s in Section.objects.filter(scope=scope)}
    now = timezone.now()
    TrailRows.save_all(
        [
            TrailRows.build(
                scope,
                RecordInput(query=q, cited=["s"], steps=[RecordedStep("search", {"q": q}, ["s"])], signal="accepted"),
                current,
                "",
                now,
            )
            for q in questions
        ]
    )


@pytest.fixture
def grown_scope(db):
    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's (as in CI)")
    with connection.cursor() as cursor:
        # The test's transaction ends by checking 3,000 trails' deferred foreign keys: on a busy
        # machine that took longer than the service's 5 s statement timeout. Time is not tested here.
        cursor.execute("SET LOCAL statement_timeout = 0")
        for model in (Trail, BandKeys, Citation, Step):
            cursor.execute(f"ANALYZE {model._meta.db_table}")  # the last ANALYZE: before the scope grew
    scope = Scope.objects.create(slug="grown", matcher="lexical")
    maker = QuestionMaker(seed=3)
    questions = [maker.question() for _ in range(TRAILS)]
    fill(scope, questions)
    scope.asked = questions[1234]
    return scope


def candidate_statement(scope: Scope, query: str) -> tuple[str, list]:
    captured = []

    def capture(execute, sql, params, many, context):
        captured.append((sql, params))
        return execute(sql, params, many, context)

    question = sign(scope, query, "")
    with connection.execute_wrapper(capture):
        found = read_candidates(scope, "", question.lookup(scope), timezone.now())
    assert found, "the stored question must be found"
    return captured[-1]


@pytest.mark.parametrize("plan_mode", ["force_custom_plan", "force_generic_plan"])
def test_candidate_read_touches_a_few_trails_not_the_scope_without_fresh_statistics(grown_scope, plan_mode):
    sql, params = candidate_statement(grown_scope, grown_scope.asked)
    import psycopg

    with connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL plan_cache_mode = {plan_mode}")
    # A server-binding cursor, as recall uses: the generic plan is the one a prepared statement runs.
    server = psycopg.Cursor(connection.connection)
    server.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql.replace("%s", "%s"), params)
    plan = server.fetchone()[0]
    plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    trails_read = rows_read(plan, Trail._meta.db_table)
    keys_read = rows_read(plan, BandKeys._meta.db_table)
    assert trails_read <= 50, f"{trails_read} trail rows read of {TRAILS}: {json.dumps(plan)[:3000]}"
    assert keys_read <= 500, f"{keys_read} band-key rows read: {json.dumps(plan)[:4000]}"
    assert rows_read(plan, Citation._meta.db_table) <= 50 and rows_read(plan, Step._meta.db_table) <= 50


def test_path_read_of_a_winner_probes_its_citations_not_the_scopes_without_fresh_statistics(grown_scope):
    # An embedding scope reads the winner's path on its own (add_paths): one trail's rows, not the scope's.
    found = read_candidates(
        grown_scope, "", sign(grown_scope, grown_scope.asked, "").lookup(grown_scope), timezone.now()
    )
    captured = []

    def capture(execute, sql, params, many, context):
        captured.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        add_paths(grown_scope, found[:1])
    sql, params = captured[-1]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    assert rows_read(plan, Citation._meta.db_table) <= 5, json.dumps(plan)[:3000]
    assert rows_read(plan, Step._meta.db_table) <= 5, json.dumps(plan)[:3000]


def trail_rows_fetched() -> int:
    """Trail rows this transaction has read so far, by any scan."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables WHERE relname = %s",
            [Trail._meta.db_table],
        )
        return cursor.fetchone()[0]


@pytest.mark.parametrize("answer", ["a hit", "a stale trail"])
def test_recalls_writes_read_a_few_trails_not_the_scope_without_fresh_statistics(grown_scope, answer):
    from trails.serving.recall import recall

    if answer == "a stale trail":
        Section.upsert(grown_scope, {"s": "another text"})  # every trail cites it: the one matched is stale on read
    before = trail_rows_fetched()
    result = recall(grown_scope, grown_scope.asked)
    read = trail_rows_fetched() - before
    assert (result.outcome.value == "miss") == (answer == "a stale trail")
    assert read <= 50, f"{read} trail rows read of {TRAILS} for {answer}"
