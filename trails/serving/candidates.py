"""Reading the trails a recall may answer with: the candidate SQL, on the hot path.

One statement reads the servable trails sharing a band key with the query, their
signatures and (optionally) their paths: citations joined to the section store as it
is now, and steps. It is SQL because the ORM spent longer compiling the query than the
database spent answering it; tests/trails/test_candidates.py checks it against the ORM
query it replaces, and tests/trails/test_recall_plan.py checks its PostgreSQL plan.

The three row kinds share one UNION ALL; each is decoded into its own named row type.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple, Sequence

from django.conf import settings
from django.db import connection

from infra.prepared import prepared_cursor
from scopes.models import Scope, Section
from trails.core.banding import scoped_keys
from trails.core.hint import RecordedStep
from trails.core.validation import Citation as CoreCitation
from trails.core.validation import CurrentSection
from trails.models import BandKeys, Citation, LoggedMiss, Step, Trail, TrailStatus, trails_partitioned


@dataclass
class Candidate:
    """A trail recall may answer with: its question, signatures, and its path as the store holds it now."""

    id: int
    public_id: uuid.UUID
    query: str
    lexical_params: str
    lexical_signature: bytes
    embedding_model: str = ""
    embedding: bytes | None = None
    path_tokens: int = 0
    citations: list[CoreCitation] = field(default_factory=list)
    current: dict[str, CurrentSection] = field(default_factory=dict)
    steps: list[RecordedStep] = field(default_factory=list)
    has_paths: bool = False  # citations and steps read (an embedding lookup reads them for winners only)


class TrailRow(NamedTuple):
    trail_id: int
    public_id: str
    query: str
    lexical_params: str
    embedding_model: str | None
    path_tokens: str
    lexical_signature: bytes
    embedding: bytes | None


class CitationRow(NamedTuple):
    trail_id: int
    position: int
    section_id: str
    recorded_hash: str
    current_hash: str | None  # None: the section is gone from the store
    current_text: str | None


class StepRow(NamedTuple):
    trail_id: int
    position: int
    tool: str
    args_json: str
    section_ids_json: str


# The UNION ALL's columns: kind, trail id, position, then five of text and two of bytes.
# Each kind's SELECT lists its own fields in these slots; `decode` names them again.
# A LOGGED row (no fields) says the read wrote the recall's event.
TRAIL, CITATION, STEP, LOGGED = 0, 1, 2, 3

# How many of the nearest embedding collisions (by sketch) come with their paths where they lie
# within the path distance: the winner is the second nearest often enough that a third round trip
# (add_paths) sat in the tail.
NEAREST_PATHS = 2


def decode(row: tuple) -> TrailRow | CitationRow | StepRow:
    kind, trail_id, position, c1, c2, c3, c4, c5, b1, b2 = row
    if kind == TRAIL:
        return TrailRow(
            trail_id, c1, c2, c3, c4, c5, bytes(b1) if b1 is not None else b"", bytes(b2) if b2 is not None else None
        )
    if kind == CITATION:
        return CitationRow(trail_id, position, c1, c2, c3, c5)
    return StepRow(trail_id, position, c1, c2, c3)


@dataclass(frozen=True)
class Lookup:
    """What one candidate read looks for."""

    lexical_keys: Sequence[int]
    embedding_keys: Sequence[int] = ()
    sketch: tuple[int, int] = (0, 0)
    # Embedding collisions farther than this from `sketch` (in bits) are not read.
    max_distance: int = 0
    # Embedding collisions read at most, nearest sketch first. Past ~100k trails most
    # collisions are same-topic questions under the threshold.
    nearest: int = field(default_factory=lambda: settings.RAGTRAIL_EMBEDDING_NEAREST)
    # The nearest embedding collision's path comes in the same read where it lies within
    # this many bits (negative: never); a miss's nearest is mostly farther.
    path_distance: int = -1


def candidates(
    scope: Scope,
    partition: str,
    lookup: Lookup,
    now: datetime,
    with_paths: bool = True,
    logged: LoggedMiss | None = None,
) -> list[Candidate]:
    """Servable trails of the scope and partition sharing a band key with the query.

    Lexical collisions are all read. Embedding collisions are read only where their
    sketch lies within `lookup.max_distance` bits of the query's, and then only the
    `lookup.nearest` nearest servable ones: the band-key index answers both, so the
    trails read stay few however many trails the scope holds. Never a scan over the
    scope's trails. Without paths (as with embeddings), `add_paths` reads them for the
    few that win, but for the `NEAREST_PATHS` nearest embedding collisions (by sketch) that lie
    within `lookup.path_distance` bits: their paths come in the same read, as the winner is nearly
    always among them, and a hit then needs no second read. With `logged` (PostgreSQL), the same
    statement writes the recall's event as a miss.
    """
    if not lookup.lexical_keys and not lookup.embedding_keys:
        return []
    bands, trails = BandKeys._meta.db_table, Trail._meta.db_table
    servable = [scope.id, partition, TrailStatus.ACTIVE.value, now]
    where_servable = "t.scope_id = %s AND t.partition = %s AND t.status = %s AND t.expires_at > %s"
    # Each part returns the found trails' columns, not only their ids: the row the
    # servability filter fetched is the one decoded, not looked up again by key.
    columns = trail_columns(with_lexical=scope.uses_lexical)
    high, low = lookup.sketch
    lexical_keys, embedding_keys = (
        scoped_keys(lookup.lexical_keys, scope.id),
        scoped_keys(lookup.embedding_keys, scope.id),
    )
    # Only where the embedding part is the whole read: a trail found both ways would come
    # twice out of the UNION were one part to carry a distance.
    nearest_paths = not with_paths and bool(embedding_keys) and not lexical_keys and lookup.path_distance >= 0
    parts, params = [], []
    if connection.vendor == "postgresql":
        # Keys travel as array parameters, so the statement text is the same on every
        # recall and can be prepared (planning took longer than running it). Key rows are
        # found through the inverted index on their keys, trails then by id (trail_probe),
        # filtered after (OFFSET 0 keeps each subquery apart): without statistics (a scope
        # grown since the last ANALYZE) the planner otherwise walked every trail of the
        # scope, 21.9 s for one recall. Every subquery names the scope's id itself, so on
        # tables partitioned by scope each reads one partition (pruning does not reach
        # through OFFSET 0 from a condition outside; tests/evaluation/test_partitioned.py).
        # Each key is looked up on its own (a LATERAL per key): the planner then weighs one
        # key's rows, which it puts at 0.5 % of the table (the keys column keeps no statistics,
        # as its elements are near unique), and always takes the index; given all keys at once,
        # with statistics, it guessed 12 % and read the whole table.
        by_id = trail_probe("n.trail_id")

        def sharing(columns_read: str) -> str:
            return (
                f"unnest(CAST(%s AS BIGINT[])) k(key) CROSS JOIN LATERAL (SELECT {columns_read} FROM {bands} "
                "WHERE scope_id = %s AND keys @> ARRAY[k.key] OFFSET 0) b"
            )

        if lexical_keys:
            parts.append(
                f"SELECT {columns} FROM (SELECT DISTINCT b.trail_id FROM {sharing('trail_id')}) n "
                f"CROSS JOIN LATERAL {by_id} t "
                f"WHERE {where_servable}"
            )
            params += [bigint_array(lexical_keys), scope.id, scope.id, *servable]
        if embedding_keys:
            # Embedding and lexical keys never equal each other (their namespaces differ), so
            # a shared embedding key is an embedding collision.
            distance = "bit_count(CAST(b.sketch_high # %s AS BIT(64))) + bit_count(CAST(b.sketch_low # %s AS BIT(64)))"
            with_distance = ", n.distance" if nearest_paths else ""
            parts.append(
                f"SELECT * FROM (SELECT {columns}{with_distance} FROM (SELECT DISTINCT b.trail_id, {distance} AS distance "
                f"FROM {sharing('trail_id, sketch_high, sketch_low')} WHERE {distance} <= %s ORDER BY 2, 1 DESC) n "
                f"CROSS JOIN LATERAL {by_id} t "
                f"WHERE {where_servable} ORDER BY n.distance, n.trail_id DESC LIMIT %s) nearest"
            )
            params += [
                high,
                low,
                bigint_array(embedding_keys),
                scope.id,
                high,
                low,
                lookup.max_distance,
                scope.id,
                *servable,
                lookup.nearest,
            ]
    else:
        # SQLite has no inverted index: the scope's key rows are read through the scope
        # index and their keys unpacked (a laptop's store). CROSS JOIN keeps its planner
        # driving from the key rows. The distance is a registered function (trails.apps),
        # SQLite having no popcount.
        def sharing(keys: list[int]) -> str:
            return f"EXISTS (SELECT 1 FROM json_each(b.keys) k WHERE k.value IN ({', '.join(['%s'] * len(keys))}))"

        if lexical_keys:
            parts.append(
                f"SELECT {columns} FROM {bands} b CROSS JOIN {trails} t WHERE b.scope_id = %s "
                f"AND {sharing(lexical_keys)} AND t.id = b.trail_id AND {where_servable}"
            )
            params += [scope.id, *lexical_keys, *servable]
        if embedding_keys:
            distance = "ragtrail_sketch_distance(b.sketch_high, b.sketch_low, %s, %s)"
            with_distance = f", {distance} AS distance" if nearest_paths else ""
            parts.append(
                f"SELECT * FROM (SELECT {columns}{with_distance} FROM {bands} b CROSS JOIN {trails} t "
                f"WHERE b.scope_id = %s AND {sharing(embedding_keys)} "
                f"AND {distance} <= %s AND t.id = b.trail_id AND {where_servable} "
                f"ORDER BY {distance}, t.id DESC LIMIT %s)"
            )
            params += [
                *([high, low] if nearest_paths else []),
                scope.id,
                *embedding_keys,
                high,
                low,
                lookup.max_distance,
                *servable,
                high,
                low,
                lookup.nearest,
            ]
    # UNION (not ALL): a trail found both ways is read once.
    return _read(
        " UNION ".join(parts),
        params,
        scope.id,
        with_trails=True,
        with_paths=with_paths,
        nearest_path_within=lookup.path_distance if nearest_paths else None,
        logged=logged,
    )


def bigint_array(values: Sequence[int]) -> str:
    """An array parameter as PostgreSQL's literal, for a CAST to BIGINT[]: psycopg's list
    dumper checks each element with a regular expression (a tenth of a millisecond a recall)."""
    return "{" + ",".join(map(str, values)) + "}"


def servable_by_id(scope: Scope, ids: Sequence[int], now: datetime) -> list[Candidate]:
    """These trails of the scope, where still servable now, with their paths (a second chance's near candidates)."""
    if not ids:
        return []
    columns = trail_columns(with_lexical=False)
    servable = [TrailStatus.ACTIVE.value, now]
    where_servable = "t.status = %s AND t.expires_at > %s"
    if connection.vendor == "postgresql":
        found = (
            f"SELECT {columns} FROM unnest(CAST(%s AS BIGINT[])) f(id) CROSS JOIN LATERAL {trail_probe('f.id')} t "
            f"WHERE {where_servable}"
        )
        params = [list(ids), scope.id, *servable]
    else:
        found = (
            f"SELECT {columns} FROM {Trail._meta.db_table} t WHERE t.scope_id = %s "
            f"AND t.id IN ({', '.join(['%s'] * len(ids))}) AND {where_servable}"
        )
        params = [scope.id, *ids, *servable]
    return _read(found, params, scope.id, with_trails=True, with_paths=True)


def trail_probe(trail_id: str) -> str:
    """A subquery reading the trail `trail_id` names if it is the scope's (whose id is its one
    parameter), through an index that finds exactly that row whatever the statistics say.

    On the plain table that is the primary key alone, the scope checked outside (OFFSET 0): given
    both, without statistics of a new scope the planner took a scope index and read the scope's
    every trail. On a table partitioned by scope the key is (id, scope) and the scope goes inside, so
    the probe reads one partition.
    """
    trails = Trail._meta.db_table
    if trails_partitioned():
        return f"(SELECT * FROM {trails} WHERE scope_id = %s AND id = {trail_id} OFFSET 0)"
    return f"(SELECT * FROM (SELECT * FROM {trails} WHERE id = {trail_id} OFFSET 0) by_id WHERE scope_id = %s OFFSET 0)"


def trail_columns(with_lexical: bool) -> str:
    """What the candidate read returns of each trail, in TrailRow's order after the id."""
    # A scope that does not match lexically never compares signatures: not sent.
    signature = "t.lexical_signature" if with_lexical else "CAST(NULL AS BYTEA)"
    return (
        "t.id, CAST(t.public_id AS TEXT) AS public_id, t.query, t.lexical_params, t.embedding_model, "
        f"CAST(t.path_tokens AS TEXT) AS path_tokens, {signature} AS lexical_signature, t.embedding"
    )


def add_paths(scope: Scope, found: Sequence[Candidate]) -> None:
    """Reads the citations (with the sections as they are now) and steps of these candidates of the scope."""
    if not found:
        return
    postgres = connection.vendor == "postgresql"
    ids = [c.id for c in found]
    if postgres:
        sql, params = (
            f"SELECT t.id FROM unnest(CAST(%s AS BIGINT[])) f(id) CROSS JOIN LATERAL {trail_probe('f.id')} t",
            [ids],
        )
    else:
        sql = f"SELECT t.id FROM {Trail._meta.db_table} t WHERE t.scope_id = %s AND t.id IN ({', '.join(['%s'] * len(ids))})"
        params = [scope.id, *ids]
    _read(
        sql,
        params + [scope.id] if postgres else params,
        scope.id,
        with_trails=False,
        with_paths=True,
        into={c.id: c for c in found},
    )


def _read(
    found: str,
    params: list,
    scope_id: int,
    with_trails: bool,
    with_paths: bool,
    into: dict[int, Candidate] | None = None,
    nearest_path_within: int | None = None,
    logged: LoggedMiss | None = None,
) -> list[Candidate]:
    """Reads the trails `found` selects (with `trail_columns` where `with_trails`) and their paths,
    each table by the scope's id as well as the trail's. With `nearest_path_within` (bits;
    `found` then has a `distance` column), only the paths of the `NEAREST_PATHS` nearest found
    trails that lie that near."""
    citation, step, section = (m._meta.db_table for m in (Citation, Step, Section))
    postgres = connection.vendor == "postgresql"
    nearest_only = nearest_path_within is not None

    # The nearest as the read ranks them (distance, then the newer trail).
    pathed = (
        f"(SELECT id FROM found WHERE distance <= %s ORDER BY distance, id DESC LIMIT {NEAREST_PATHS}) f"
        if nearest_only
        else "found f"
    )

    def per_found(table: str, alias: str, column: str) -> str:
        # On PostgreSQL each table is probed by key for each found id (a LATERAL that
        # OFFSET 0 keeps from being flattened), whatever row counts stale statistics
        # suggest; a hash join over a table the statistics think small reads all of it. The
        # scope is checked outside the probe (a second OFFSET 0), so only the trail's index
        # can serve it: without statistics, ANDed with the scope's index, it read every citation of the scope.
        if postgres:
            return (
                f"{pathed} CROSS JOIN LATERAL (SELECT * FROM (SELECT * FROM {table} WHERE {column} = f.id OFFSET 0) "
                f"by_trail WHERE scope_id = %s OFFSET 0) {alias}"
            )
        return f"{pathed} JOIN {table} {alias} ON {alias}.{column} = f.id AND {alias}.scope_id = %s"

    current_section = (
        f"LEFT JOIN LATERAL (SELECT hash, text FROM {section} WHERE scope_id = c.scope_id AND section_id = c.section_id OFFSET 0) s ON TRUE"
        if postgres
        else f"LEFT JOIN {section} s ON s.scope_id = c.scope_id AND s.section_id = c.section_id"
    )
    parts = []
    if with_trails:
        parts.append(
            # A trail row's position slot holds its distance where there is one.
            f"SELECT {TRAIL}, f.id, {'f.distance' if nearest_only else 0}, f.public_id, f.query, f.lexical_params, "
            "f.embedding_model, f.path_tokens, f.lexical_signature, f.embedding FROM found f"
        )
    if with_paths or nearest_only:
        parts.append(
            f"SELECT {CITATION}, c.trail_id, c.position, c.section_id, c.hash, s.hash, NULL, s.text, NULL, NULL "
            f"FROM {per_found(citation, 'c', 'trail_id')} {current_section}"
        )
        parts.append(
            f"SELECT {STEP}, p.trail_id, p.position, p.tool, CAST(p.args AS TEXT), CAST(p.section_ids AS TEXT), "
            f"NULL, NULL, NULL, NULL FROM {per_found(step, 'p', 'trail_id')}"
        )
    also = ""
    if logged is not None:  # its CTE comes after `found`'s
        # Written here only where no trail read is likely to be served: a hit rewrites it, so
        # a read that looks like a hit leaves the event to the write after it.
        likely = "SELECT 1 FROM found WHERE distance <= %s" if nearest_only else "SELECT 1 FROM found"
        also = ", " + logged.cte(f"EXISTS ({likely})")
        params = params + logged.params + ([nearest_path_within] if nearest_only else [])
        parts.append(f"SELECT {LOGGED}, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM logged")
    if with_paths or nearest_only:  # the citations' and the steps' (distance and) scope
        params = params + ([nearest_path_within, scope_id] * 2 if nearest_only else [scope_id] * 2)
    materialized = "MATERIALIZED " if postgres else ""
    sql = f"WITH found AS {materialized}({found}){also} " + " UNION ALL ".join(parts) + " ORDER BY 1, 2, 3"
    # A candidate's embedding is 1.5 kB; in text it crossed as 3 kB of hex.
    with prepared_cursor(binary=True) as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    result: dict[int, Candidate] = into if into is not None else {}
    distances: dict[int, int] = {}
    for raw in rows:
        if raw[0] == LOGGED:
            logged.written = True
            continue
        row = decode(raw)
        if isinstance(row, TrailRow):
            if nearest_only:
                distances[row.trail_id] = raw[2]
            result[row.trail_id] = Candidate(
                row.trail_id,
                uuid.UUID(row.public_id),
                row.query,
                row.lexical_params,
                row.lexical_signature,
                row.embedding_model or "",
                row.embedding,
                path_tokens=int(row.path_tokens or 0),
            )
        elif isinstance(row, CitationRow):
            candidate = result[row.trail_id]
            candidate.citations.append(CoreCitation(row.section_id, row.recorded_hash))
            if row.current_hash is not None:
                candidate.current[row.section_id] = CurrentSection(row.current_hash, row.current_text)
        else:
            result[row.trail_id].steps.append(
                RecordedStep(row.tool, json.loads(row.args_json), tuple(json.loads(row.section_ids_json)))
            )
    if with_paths:
        for candidate in result.values():
            candidate.has_paths = True
    elif nearest_only and distances:
        nearest = sorted(distances, key=lambda trail_id: (distances[trail_id], -trail_id))[:NEAREST_PATHS]
        for trail_id in nearest:
            result[trail_id].has_paths = distances[trail_id] <= nearest_path_within
    return list(result.values())
