"""A large write gathers the planner's statistics itself, once it commits, instead of waiting
for autovacuum's round; a small one leaves them to autovacuum."""

from __future__ import annotations

import pytest
from django.db import connection

from evaluation.questions import QuestionMaker
from scopes.models import Scope, Section
from tests.trails.test_recall_plan import save_accepted
from trails.models import BandKeys, Citation, Trail
from trails.upkeep.reindex import reindex_scope


def counted(table: str) -> float:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [table])
        return cursor.fetchone()[0]


def record_many(scope: Scope, count: int, seed: int) -> None:
    maker = QuestionMaker(seed=seed)
    save_accepted(scope, (maker.question() for _ in range(count)))


@pytest.fixture
def scope(db, settings):
    if connection.vendor != "postgresql":
        pytest.skip("ANALYZE and pg_class are PostgreSQL's (as in CI)")
    settings.RAGTRAIL_ANALYZE_MIN_ROWS = 50
    settings.RAGTRAIL_ANALYZE_FRACTION = 0.1
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = 0")
        for model in (Trail, BandKeys, Citation):
            cursor.execute(f"ANALYZE {model._meta.db_table}")  # what the statistics knew before
    scope = Scope.objects.create(slug="bulk", matcher="lexical")
    Section.upsert(scope, {"s": "a section"})
    return scope


def test_a_bulk_record_has_the_tables_it_grew_analysed_once_it_commits(scope, django_capture_on_commit_callbacks):
    before = Trail.objects.count()
    with django_capture_on_commit_callbacks(execute=False) as waiting:
        record_many(scope, 200, seed=1)
    assert counted(Trail._meta.db_table) == before  # not before the commit
    for callback in waiting:
        callback()
    assert counted(Trail._meta.db_table) == before + 200
    assert counted(Citation._meta.db_table) == Citation.objects.count()
    assert counted(BandKeys._meta.db_table) == BandKeys.objects.count()


def test_a_write_small_beside_the_table_leaves_the_statistics_to_autovacuum(scope, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        record_many(scope, 600, seed=1)
    grown = counted(Trail._meta.db_table)
    with django_capture_on_commit_callbacks(execute=True) as ran:
        record_many(scope, 55, seed=2)  # past the floor, under a tenth of the table
    assert not ran and counted(Trail._meta.db_table) == grown


def test_re_signing_a_large_scope_has_its_key_rows_analysed(scope, django_capture_on_commit_callbacks):
    before = counted(BandKeys._meta.db_table)
    with django_capture_on_commit_callbacks(execute=False):
        record_many(scope, 120, seed=3)  # its own analysis never runs
    assert counted(BandKeys._meta.db_table) == before
    with django_capture_on_commit_callbacks(execute=True) as ran:
        reindex_scope(scope)
    assert ran and counted(BandKeys._meta.db_table) == before + 120 == BandKeys.objects.count()
