"""A store whose trails and band keys are hash-partitioned by scope answers recall as the
store does, and recall's statements reach one partition of each: the scope they name is
enough to prune (docs/scaling.md)."""

from __future__ import annotations

import json

import pytest
from django.db import connection

from evaluation.partitioned import (
    SCHEMA,
    as_default,
    connection_reading,
    copy_partitioned,
    drop_partitioned,
    partitioned_bytes,
    partitioned_definition,
)
from evaluation.scale import faq_sections_for, store_trails
from scopes.models import Scope
from tests.evaluation.test_fill import questions
from trails.embedders import PrecomputedEmbedder, serving
from trails.embedders.hashing import Embedder as HashingEmbedder
from trails.models import BandKeys, Trail
from trails.serving.recall import recall

PARTITIONS = 4

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="partitioning is PostgreSQL's")


def relations_run(plan: dict) -> set[str]:
    """Tables a plan's nodes read in at least one loop (a pruned partition is not among them)."""
    found = set()
    if plan.get("Relation Name") and plan.get("Actual Loops", 0) > 0:
        found.add(plan["Relation Name"])
    for child in plan.get("Plans", []):
        found |= relations_run(child)
    return found


@pytest.fixture(params=["embedding", "both"])
def tenants(request, transactional_db):
    """Three scopes holding the same 40 questions (so every key collides across scopes but for the salt), copied into partitions.
    A scope matching both ways reads lexical collisions too: their part of the read must prune as well."""
    texts, vectors = questions(40)
    scopes = [Scope.objects.create(slug=f"tenant-{n}", name=f"Tenant {n}", matcher=request.param) for n in range(3)]
    with serving(PrecomputedEmbedder(HashingEmbedder(), texts, vectors)):
        for scope in scopes:
            current = faq_sections_for(scope)
            section_ids = sorted(current)
            store_trails(scope, texts, vectors, current, lambda i: [section_ids[i % len(section_ids)]])
    copy_partitioned(PARTITIONS, lambda line: None)
    partitioned = connection_reading(SCHEMA)
    try:
        yield scopes, texts, vectors, partitioned
    finally:
        partitioned.close()
        drop_partitioned()


def test_the_copy_holds_every_row_split_by_scope(tenants):
    scopes, *_ = tenants
    with connection.cursor() as cursor:
        for model in (Trail, BandKeys):
            table = model._meta.db_table
            cursor.execute(f"SELECT scope_id, count(*) FROM {SCHEMA}.{table} GROUP BY 1 ORDER BY 1")
            assert cursor.fetchall() == [(s.id, 40) for s in scopes]
            # Each scope's rows lie in one partition.
            cursor.execute(f"SELECT scope_id, count(DISTINCT tableoid) FROM {SCHEMA}.{table} GROUP BY 1")
            assert all(n == 1 for _, n in cursor.fetchall())
            cursor.execute(
                "SELECT partstrat FROM pg_partitioned_table WHERE partrelid = %s::regclass", [f"{SCHEMA}.{table}"]
            )
            assert cursor.fetchone() == ("h",)
    sizes = partitioned_bytes()
    assert set(sizes) == {Trail._meta.db_table, BandKeys._meta.db_table}
    # Every partition counted, with its indexes: four heaps and their indexes at least, whatever
    # space earlier tests left in the public tables.
    assert all(size["unpartitioned"] > 0 and size["partitioned"] >= 4 * 2 * 8192 for size in sizes.values()), sizes


def test_recall_through_the_partitioned_copy_answers_as_the_store_does_and_reads_one_partition_of_each(tenants):
    scopes, texts, vectors, partitioned = tenants
    scope = scopes[1]
    statements = []

    def capture(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with serving(PrecomputedEmbedder(HashingEmbedder(), texts, vectors)):
        for text in texts[:8]:
            plain = recall(scope, text)
            with as_default(partitioned), partitioned.execute_wrapper(capture):
                split = recall(scope, text)
            assert plain.outcome.value == split.outcome.value == "prefetch"
            assert split.trail.id == plain.trail.id
            assert Trail.objects.get(id=split.trail.id).scope_id == scope.id
    candidate_reads = [
        (sql, params)
        for sql, params in statements
        if BandKeys._meta.db_table in sql and sql.lstrip().startswith("WITH found")
    ]
    assert candidate_reads, "recall read candidates through the partitioned copy"
    sql, params = candidate_reads[-1]
    import psycopg

    with as_default(partitioned):
        for mode in ("force_custom_plan", "force_generic_plan"):
            with partitioned.cursor() as cursor:
                cursor.execute(f"SET plan_cache_mode = {mode}")
            server = psycopg.Cursor(partitioned.connection)
            server.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            plan = server.fetchone()[0]
            plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
            read = relations_run(plan)
            for table in (Trail._meta.db_table, BandKeys._meta.db_table):
                parts = {name for name in read if name.startswith(f"{table}_")}
                assert len(parts) == 1, f"{mode}: {table} partitions read: {sorted(parts)} ({json.dumps(plan)[:3000]})"


def test_a_unique_index_of_the_copy_holds_the_scope():
    assert (
        partitioned_definition(
            "CREATE UNIQUE INDEX trails_trail_public_id_key ON public.trails_trail USING btree (public_id)", "s"
        )
        == "CREATE UNIQUE INDEX trails_trail_public_id_key ON s.trails_trail USING btree (scope_id, public_id)"
    )
    partial = (
        "CREATE UNIQUE INDEX trail_idempotency_key_unique_in_scope ON public.trails_trail USING btree "
        "(scope_id, idempotency_key) WHERE (idempotency_key IS NOT NULL)"
    )
    assert partitioned_definition(partial, "s") == partial.replace("ON public.", "ON s.")
    gin = "CREATE INDEX bandkeys_keys_gin ON public.trails_bandkeys USING gin (keys) WITH (fastupdate=off)"
    assert partitioned_definition(gin, "s") == gin.replace("ON public.", "ON s.")
