"""A copy of the store's two largest tables hash-partitioned by scope, beside the store as it is,
so recall can be timed on both in one process (`benchmark_partitioned`).

The copy lives in its own schema under the same table names: a connection whose search_path
starts with that schema reads the partitioned trails and band keys, and every other table
(citations, steps, sections, history) from the public schema, so recall runs unchanged. The
copies are what docs/scaling.md describes: `PARTITION BY HASH (scope_id)`, the primary keys
with the scope's id after the row's, unique indexes with the scope's id in front (PostgreSQL requires a partitioned
table's unique keys to hold the partition key), every other index as the table has it, no
foreign keys pointing at them. The trigram index on the questions (the operator pages'
search) is left out: recall never reads it, and on ten million trails it is the slowest to build.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.utils import load_backend

from evaluation.bulk import without_statement_timeout
from trails.models import BandKeys, Trail, writes

PARTITIONED = (Trail, BandKeys)
SCHEMA = "partitioned_by_scope"


def _indexes(cursor, table: str) -> list[tuple[str, str]]:
    cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = %s", [table])
    return cursor.fetchall()


def partitioned_definition(indexdef: str, schema: str) -> str:
    """The public table's index as the partitioned copy has it: on the copy, and unique only with the scope's id."""
    definition = indexdef.replace(" ON public.", f" ON {schema}.", 1)
    if definition.startswith("CREATE UNIQUE INDEX"):
        columns = re.search(r"USING \w+ \((.*?)\)(?: WHERE|$| WITH)", definition).group(1)
        if "scope_id" not in [c.strip() for c in columns.split(",")]:
            definition = definition.replace(f"({columns})", f"(scope_id, {columns})", 1)
    return definition


def copy_partitioned(partitions: int, say: Callable[[str], None], schema: str = SCHEMA) -> dict[str, float]:
    """Builds (again) the partitioned copies of the trails and band-key tables from every row the store holds.

    Rows first, indexes after (as a restore does), then VACUUM ANALYZE as the store's tables
    had. Returns seconds spent by step."""
    spent: dict[str, float] = {}
    with without_statement_timeout(), connection.cursor() as cursor:
        cursor.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        cursor.execute(f"CREATE SCHEMA {schema}")
        for model in PARTITIONED:
            table = model._meta.db_table
            cursor.execute("SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [f"public.{table}"])
            options = cursor.fetchone()[0] or []
            storage = f" WITH ({', '.join(options)})" if options else ""
            cursor.execute(
                f"CREATE TABLE {schema}.{table} (LIKE public.{table} INCLUDING DEFAULTS INCLUDING STORAGE) "
                "PARTITION BY HASH (scope_id)"
            )
            for remainder in range(partitions):
                cursor.execute(
                    f"CREATE TABLE {schema}.{table}_{remainder} PARTITION OF {schema}.{table} "
                    f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {remainder}){storage}"
                )
            started = time.perf_counter()
            writes.bulk_load(lambda: cursor.execute(f"INSERT INTO {schema}.{table} SELECT * FROM public.{table}"))
            spent[f"{table} rows"] = time.perf_counter() - started
            say(
                f"  {table}: {cursor.rowcount:,} rows copied into {partitions} partitions ({spent[f'{table} rows']:.0f} s)"
            )
            started = time.perf_counter()
            for name, indexdef in _indexes(cursor, table):
                if "gin_trgm_ops" in indexdef:
                    continue
                if name.endswith("_pkey"):
                    # The row's id first: with the scope first, the planner ANDed each key's
                    # inverted-index lookup with every primary-key entry of the scope (77 ms
                    # a recall at 100,000 trails a scope, against 3 ms).
                    key = model._meta.pk.column
                    cursor.execute(f"ALTER TABLE {schema}.{table} ADD PRIMARY KEY ({key}, scope_id)")
                else:
                    cursor.execute(partitioned_definition(indexdef, schema))
            if model is BandKeys:
                # As the store's: the keys column keeps no statistics (migration 0013).
                cursor.execute(f"ALTER TABLE {schema}.{table} ALTER COLUMN keys SET STATISTICS 0")
            spent[f"{table} indexes"] = time.perf_counter() - started
            say(f"  {table}: indexes built ({spent[f'{table} indexes']:.0f} s)")
        started = time.perf_counter()
        for model in PARTITIONED:
            cursor.execute(f"VACUUM ANALYZE {schema}.{model._meta.db_table}")
        spent["vacuum analyze"] = time.perf_counter() - started
    return spent


def partitioned_bytes(schema: str = SCHEMA) -> dict[str, int]:
    """Bytes on disk of each copy (every partition with its indexes) and of the public table it copies
    (without the index the copy leaves out)."""
    sizes = {}
    with connection.cursor() as cursor:
        for model in PARTITIONED:
            table = model._meta.db_table
            cursor.execute(
                "SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree(%s::regclass)",
                [f"{schema}.{table}"],
            )
            parted = int(cursor.fetchone()[0])
            cursor.execute(
                "SELECT pg_total_relation_size(%s::regclass) - coalesce((SELECT sum(pg_relation_size(format('public.%%I', indexname)::regclass)) "
                "FROM pg_indexes WHERE schemaname = 'public' AND tablename = %s AND indexdef LIKE '%%gin_trgm_ops%%'), 0)",
                [f"public.{table}", table],
            )
            sizes[table] = {"partitioned": parted, "unpartitioned": int(cursor.fetchone()[0])}
    return sizes


def drop_partitioned(schema: str = SCHEMA) -> None:
    with without_statement_timeout(), connection.cursor() as cursor:
        cursor.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def connection_reading(schema: str):
    """A new connection like Django's default one, whose unqualified table names resolve in `schema` first."""
    settings_dict = copy.deepcopy(connections.settings[DEFAULT_DB_ALIAS])
    options = settings_dict.setdefault("OPTIONS", {})
    options["options"] = f"{options.get('options', '')} -c search_path={schema},public".strip()
    return load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, DEFAULT_DB_ALIAS)


@contextmanager
def as_default(wrapper) -> Iterator[None]:
    """Django's default connection is `wrapper` inside (the ORM and raw cursors alike)."""
    previous = connections[DEFAULT_DB_ALIAS]
    connections[DEFAULT_DB_ALIAS] = wrapper
    try:
        yield
    finally:
        connections[DEFAULT_DB_ALIAS] = previous
