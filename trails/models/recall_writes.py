"""Recall's writes: its event (written by the candidate read for a plain miss, else in one
statement with the hit or the stale marks), and a second chance's turn of a miss into a hit.
Part of the one writer (docs/consistency.md)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

from django.db import DatabaseError, connection, models, transaction
from django.db.models import F, Q

from infra.db_deadline import cleanup_seconds, cleanup_window, described
from infra.guards import guard_on
from infra.prepared import prepared_cursor
from scopes.models import Scope
from trails.core.second_chance import SECOND_CHANCE_MATCHER
from trails.models.gate import writing
from trails.models.lifecycle import mark_stale_statements
from trails.models.recalls import RecallEvent, RecallOutcome
from trails.models.trail import Trail, trails_partitioned

logger = logging.getLogger(__name__)


def _prep(model: type[models.Model], field: str, value):
    return model._meta.get_field(field).get_db_prep_value(value, connection)


@dataclass
class LoggedMiss:
    """A recall's event written as a miss by the statement that reads its candidates (PostgreSQL),
    where that read finds no trail it is likely to serve: such a miss then takes that one round
    trip, and anything else recall answers rewrites the event (`write_recall_effects` with
    `logged`). The event's latency runs to the end of the candidate read."""

    public_id: uuid.UUID
    insert: str  # the INSERT ... SELECT, reading `found` first; `cte` adds the condition
    params: list
    written: bool = False  # the read says it wrote the event
    backend_pid: int = 0  # the server process running the read (libpq forgets it once the connection breaks)

    def cte(self, unless: str) -> str:
        """The WITH item writing the event unless `unless` (SQL over `found`) holds."""
        return f"logged AS ({self.insert} WHERE NOT ({unless}) RETURNING 1)"


def logged_miss(
    *,
    scope: Scope,
    query: str,
    partition: str,
    research_key: str,
    caller: str,
    now: datetime,
    elapsed_ms: float,
) -> LoggedMiss | None:
    """The event of a recall about to read its candidates, as a miss, for the read to write
    (None on SQLite, which writes no rows from a WITH: recall writes its event after)."""
    if connection.vendor != "postgresql":
        return None
    public_id = uuid.uuid4()
    event = RecallEvent._meta.db_table
    # The read is its own transaction: as recall's other writes, its commit need not wait for the WAL flush.
    insert = (
        f"INSERT INTO {event} (public_id, scope_id, created_at, outcome, latency_ms, matcher, stale_marked, "
        "calls_saved, tokens_saved, query, partition, research_key, caller) "
        "SELECT CAST(%s AS UUID), CAST(%s AS BIGINT), CAST(%s AS TIMESTAMPTZ), CAST(%s AS VARCHAR), "
        "CAST(%s AS DOUBLE PRECISION) + 1000 * EXTRACT(EPOCH FROM clock_timestamp() - statement_timestamp()), "
        "'', 0, 0, 0, CAST(%s AS TEXT), CAST(%s AS VARCHAR), CAST(%s AS VARCHAR), CAST(%s AS VARCHAR) "
        "FROM (SELECT count(*), set_config('synchronous_commit', 'off', true) FROM found) read_first"
    )
    params = [
        public_id,
        scope.id,
        _prep(RecallEvent, "created_at", now),
        RecallOutcome.MISS.value,
        elapsed_ms,
        query,
        partition,
        research_key,
        caller[:16],
    ]
    connection.ensure_connection()
    return LoggedMiss(public_id, insert, params, backend_pid=connection.connection.info.backend_pid)


@contextmanager
def forgotten_if_failed(scope: Scope, event: LoggedMiss | None) -> Iterator[None]:
    """Deletes the event the candidate read wrote as a miss where recall raises within (from the read
    to the write that settles the event): a recall that failed leaves no event, as on SQLite (where
    recall writes its event last)."""
    try:
        yield
    except Exception:
        # Whatever `written` says: the read may have committed the event before its rows were read.
        if event is not None:
            _forget_failed_recall(scope, event)
        raise


def _forget_failed_recall(scope: Scope, event: LoggedMiss) -> None:
    """Deletes a failed recall's event, in a database window of its own (the request's deadline may
    be what failed it) and on a new connection where the failure broke the request's. A database
    that is away keeps the event; the log says so, with the error's class and SQLSTATE only.

    A shut socket does not stop the statement on the server: the read may still be waiting (on a
    lock, say) and commit its event after this delete. Its backend is ended first, and waited for.
    """
    broken_backend = None
    if connection.in_atomic_block:
        info = getattr(connection.connection, "info", None)
        if connection.needs_rollback or (info is not None and info.transaction_status.name == "INERROR"):
            return  # the transaction is rolled back, the event with it
    elif connection.connection is not None and connection.connection.closed:
        broken_backend = event.backend_pid
        connection.close()  # the watchdog shut its socket: the next statement connects anew
    try:
        with cleanup_window(), writing("recall"):
            if broken_backend:
                with connection.cursor() as cursor:
                    # Its own connection's backend (same role); waits, within half the window, until it exited.
                    cursor.execute(
                        "SELECT pg_terminate_backend(%s, %s)", [broken_backend, int(cleanup_seconds() * 500)]
                    )
            RecallEvent.objects.filter(public_id=event.public_id, scope=scope).delete()
    except DatabaseError as problem:  # the first error is the one raised
        logger.warning("the miss event %s of a failed recall is kept: %s", event.public_id, described(problem))


@contextmanager
def logging_miss(event: LoggedMiss | None) -> Iterator[None]:
    """Lets the candidate read carry this event's write (the one writer's gate opened for it alone)."""
    if event is None:
        yield
        return
    with writing("recall"):
        yield


def write_recall_effects(
    *,
    scope: Scope,
    outcome: str,
    similarity: float | None,
    latency_ms: float,
    trail_id: int | None,
    hit: bool,
    stale_ids: Sequence[int],
    matcher: str | None,
    query: str,
    now: datetime,
    partition: str = "",
    calls_saved: int = 0,
    tokens_saved: int = 0,
    research_key: str = "",
    nearest_trail_id: int | None = None,
    nearest_similarity: float | None = None,
    caller: str = "",
    near_candidates: list[list] | None = None,
    logged: uuid.UUID | None = None,
) -> tuple[uuid.UUID, bool]:
    """Marks trails stale, counts the hit and logs the recall event, in one transaction,
    the trails it touches locked first in id order (docs/consistency.md). With `logged` (the
    public id of the event the candidate read wrote as a miss: `logged_miss`), that event is
    rewritten with what recall answered instead of a new one written.

    Returns:
        The event's public id (the recall id), and whether the trail served still existed
        (a trail deleted meanwhile makes the recall a miss).

    Raises:
        RecallEvent.DoesNotExist: the logged event is gone (its scope was deleted meanwhile).
    """
    public_id = logged or uuid.uuid4()
    trail, event = Trail._meta.db_table, RecallEvent._meta.db_table
    served = trail_id if hit else None
    if (
        not stale_ids
        and nearest_trail_id is None
        and not near_candidates
        and connection.vendor == "postgresql"
        and (trail_id is None if served is None else guard_on("recall-of-a-deleted-trail-is-a-miss"))
    ):
        stored = _write_plain(
            scope=scope,
            public_id=public_id,
            logged=logged is not None,
            served=served,
            outcome=outcome,
            similarity=similarity,
            latency_ms=latency_ms,
            matcher=matcher or "",
            now=now,
            calls_saved=calls_saved,
            tokens_saved=tokens_saved,
            query=query,
            partition=partition,
            research_key=research_key,
            caller=caller,
        )
        return public_id, stored == outcome
    locked = sorted({*stale_ids, *([served] if served is not None else [])})
    statements: list[tuple[str, list]] = []
    if locked and connection.vendor == "postgresql":
        # One lock order with every other write: the trails it touches, by id, before any update (SQLite writes one at a time).
        marks = ", ".join(["%s"] * len(locked))
        if trails_partitioned():
            lock = f"SELECT id FROM {trail} WHERE scope_id = %s AND id IN ({marks}) ORDER BY id FOR NO KEY UPDATE"
            lock_params = [scope.id, *locked]
        else:
            # By primary key, the scope checked apart (as the hit's count): with the statistics of before a
            # new scope grew, a scope index was taken and every trail of the scope read (35 ms at 100k).
            lock = (
                f"SELECT id FROM (SELECT id, scope_id FROM {trail} WHERE id IN ({marks}) OFFSET 0) t "
                "WHERE scope_id = %s ORDER BY id FOR NO KEY UPDATE"
            )
            lock_params = [*locked, scope.id]
        statements.append((lock, lock_params))
    if stale_ids:
        statements += mark_stale_statements(trail, scope.id, stale_ids, _prep(Trail, "stale_at", now))
    if served is not None:
        where, found = _one_trail(scope, served)
        statements.append(
            (
                f"UPDATE {trail} SET hit_count = hit_count + 1, last_hit_at = %s WHERE {where}",
                [_prep(Trail, "last_hit_at", now), *found],
            )
        )
    exists, found_by = _trail_id_if_there(scope)
    if guard_on("recall-of-a-deleted-trail-is-a-miss"):
        trail_sql, trail_params = exists, found_by(trail_id)
        nearest_sql, nearest_params = exists, found_by(nearest_trail_id)
        outcome_sql = f"CASE WHEN CAST(%s AS BIGINT) IS NOT NULL AND {exists} IS NULL THEN %s ELSE %s END"
        outcome_params = [served, *found_by(served), RecallOutcome.MISS.value, outcome]
    else:
        trail_sql, trail_params, nearest_sql, nearest_params = "%s", [trail_id], "%s", [nearest_trail_id]
        outcome_sql, outcome_params = "%s", [outcome]
    if logged is not None:
        statements.append(
            (
                f"UPDATE {event} SET outcome = {outcome_sql}, similarity = %s, latency_ms = %s, trail_id = {trail_sql}, "
                "matcher = %s, stale_marked = %s, calls_saved = %s, tokens_saved = %s, "
                f"nearest_trail_id = {nearest_sql}, nearest_similarity = %s, near_candidates = %s "
                "WHERE public_id = %s AND scope_id = %s RETURNING outcome",
                [
                    *outcome_params,
                    similarity,
                    latency_ms,
                    *trail_params,
                    matcher or "",
                    len(stale_ids),
                    calls_saved,
                    tokens_saved,
                    *nearest_params,
                    nearest_similarity,
                    _prep(RecallEvent, "near_candidates", near_candidates),
                    _prep(RecallEvent, "public_id", public_id),
                    scope.id,
                ],
            )
        )
    else:
        statements.append(
            (
                f"INSERT INTO {event} (public_id, scope_id, created_at, outcome, similarity, latency_ms, trail_id, matcher, "
                "stale_marked, calls_saved, tokens_saved, query, partition, research_key, nearest_trail_id, nearest_similarity, caller, "
                "near_candidates) "
                f"VALUES (%s, %s, %s, {outcome_sql}, %s, %s, {trail_sql}, %s, %s, %s, %s, %s, %s, %s, {nearest_sql}, %s, %s, %s) "
                "RETURNING outcome",
                [
                    _prep(RecallEvent, "public_id", public_id),
                    scope.id,
                    _prep(RecallEvent, "created_at", now),
                    *outcome_params,
                    similarity,
                    latency_ms,
                    *trail_params,
                    matcher or "",
                    len(stale_ids),
                    calls_saved,
                    tokens_saved,
                    query,
                    partition,
                    research_key,
                    *nearest_params,
                    nearest_similarity,
                    caller[:16],
                    _prep(RecallEvent, "near_candidates", near_candidates),
                ],
            )
        )
    with writing("recall"):
        if connection.vendor == "postgresql":
            # One round trip: psycopg's client-side binding (Django's default) sends the
            # statements as one query string, which PostgreSQL runs as one transaction.
            # These writes are bookkeeping: a crash may lose the last few hits and events,
            # and a lost stale mark is found again by the next recall, which validates on
            # read; so the commit need not wait for the WAL flush.
            with connection.cursor() as cursor:
                cursor.execute(
                    "SET LOCAL synchronous_commit TO OFF; " + "; ".join(sql for sql, _ in statements),
                    [p for _, params in statements for p in params],
                )
                while cursor.nextset():
                    pass  # to the last statement's result: the event's outcome
                row = cursor.fetchone()
        else:
            with transaction.atomic(), connection.cursor() as cursor:
                for sql, params in statements:
                    cursor.execute(sql, params)
                row = cursor.fetchone()
    if row is None:
        raise RecallEvent.DoesNotExist(f"recall {public_id} has no event (its scope was deleted)")
    return public_id, row[0] == outcome


def write_second_chance_effects(
    *,
    scope: Scope,
    event_id: int,
    outcome: str,
    trail_id: int | None,
    similarity: float | None,
    calls_saved: int,
    tokens_saved: int,
    stale_ids: Sequence[int],
    reason: str,
    now: datetime,
) -> bool | None:
    """A missed recall's second chance, once: marks stale the near candidates whose sections all
    changed, counts the hit, and turns the event into the hit (matcher "second-chance"), the
    trails locked first in id order (docs/consistency.md).

    Returns:
        None where a second chance was already asked for this recall; else whether the trail
        served still existed (a trail deleted meanwhile leaves the recall a miss).
    """
    served = trail_id if outcome != RecallOutcome.MISS else None
    locked = sorted({*stale_ids, *([served] if served is not None else [])})
    with writing("recall"), transaction.atomic():
        # The lock order: the trails by id, then the recall (docs/consistency.md).
        present = set(
            Trail.objects.select_for_update(no_key=True)
            .filter(scope=scope, pk__in=locked)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        once = Q(second_chance_at__isnull=True, outcome=RecallOutcome.MISS)
        event = (
            RecallEvent.objects.select_for_update()
            .filter(Q(pk=event_id, scope=scope) & (once if guard_on("second-chance-once-per-recall") else Q()))
            .only("id")
            .first()
        )
        if event is None:
            return None
        if stale_ids:
            with connection.cursor() as cursor:
                for sql, params in mark_stale_statements(
                    Trail._meta.db_table, scope.id, list(stale_ids), _prep(Trail, "stale_at", now)
                ):
                    cursor.execute(sql, params)
        fields = {
            "second_chance_at": now,
            "second_chance_reason": reason[:300],
            "stale_marked": F("stale_marked") + len(stale_ids),
        }
        if served is not None and served not in present:
            fields["second_chance_reason"] = "the trail it would serve was deleted meanwhile"
        if served is not None and served in present:
            Trail.objects.filter(scope=scope, pk=served).update(hit_count=F("hit_count") + 1, last_hit_at=now)
            fields.update(
                outcome=outcome,
                trail_id=served,
                similarity=similarity,
                matcher=SECOND_CHANCE_MATCHER,
                calls_saved=calls_saved,
                tokens_saved=tokens_saved,
            )
        RecallEvent.objects.filter(pk=event_id).update(**fields)
    return served is None or served in present


def _trail_id_if_there(scope: Scope) -> tuple[str, Callable[[int | None], list]]:
    """A scalar subquery giving a trail's id where it is still the scope's (else NULL), and its
    parameters for a trail id. On the plain PostgreSQL table by primary key alone, the scope
    checked apart: given both, the statistics of before a new scope grew drew a scope index and
    every trail of the scope was read (35-40 ms at 100k); a partitioned table reads one partition."""
    trail = Trail._meta.db_table
    if connection.vendor == "postgresql" and not trails_partitioned():
        sql = f"(SELECT id FROM (SELECT id, scope_id FROM {trail} WHERE id = %s OFFSET 0) t WHERE scope_id = %s)"
        return sql, lambda trail_id: [trail_id, scope.id]
    return f"(SELECT id FROM {trail} WHERE scope_id = %s AND id = %s)", lambda trail_id: [scope.id, trail_id]


def _one_trail(scope: Scope, trail_id: int) -> tuple[str, list]:
    """The WHERE of a write to this trail of the scope, and its parameters (as `_trail_id_if_there` finds it)."""
    if connection.vendor == "postgresql" and not trails_partitioned():
        found, params = _trail_id_if_there(scope)
        return f"id = {found}", params(trail_id)
    return "scope_id = %s AND id = %s", [scope.id, trail_id]


def _write_plain(
    *,
    scope: Scope,
    public_id: uuid.UUID,
    logged: bool,
    served: int | None,
    outcome: str,
    similarity: float | None,
    latency_ms: float,
    matcher: str,
    now: datetime,
    calls_saved: int,
    tokens_saved: int,
    query: str,
    partition: str,
    research_key: str,
    caller: str,
) -> str:
    """The common recall's writes (a hit's one trail counted, or a plain miss; nothing stale,
    no near candidate kept) as one statement PostgreSQL plans once: the served trail's hit
    counted (its row lock the only one taken), then the event written, or rewritten where the
    candidate read logged it, naming the trail only where the count found it (a trail deleted
    meanwhile makes the recall a miss). Gives the outcome stored.

    Raises:
        RecallEvent.DoesNotExist: the logged event is gone (its scope was deleted meanwhile).
    """
    trail, event = Trail._meta.db_table, RecallEvent._meta.db_table
    # Bookkeeping, as the other recall writes: the commit need not wait for the WAL flush.
    quick = "WITH quick AS (SELECT set_config('synchronous_commit', 'off', true)), "
    if served is None:
        counted = (
            quick + "answer AS (SELECT CAST(NULL AS BIGINT) AS trail_id, CAST(%s AS VARCHAR) AS outcome FROM quick) "
        )
        params: list = [outcome]
    else:
        where, found = _one_trail(scope, served)
        counted = quick + (
            f"counted AS (UPDATE {trail} SET hit_count = hit_count + 1, last_hit_at = %s WHERE {where} RETURNING id), "
            "answer AS (SELECT counted.id AS trail_id, CASE WHEN counted.id IS NULL THEN %s ELSE %s END AS outcome "
            "FROM quick LEFT JOIN counted ON TRUE) "
        )
        params = [_prep(Trail, "last_hit_at", now), *found, RecallOutcome.MISS.value, outcome]
    if logged:
        sql = counted + (
            f"UPDATE {event} e SET outcome = a.outcome, similarity = %s, latency_ms = %s, trail_id = a.trail_id, "
            "matcher = %s, calls_saved = %s, tokens_saved = %s FROM answer a "
            "WHERE e.public_id = %s AND e.scope_id = %s RETURNING e.outcome"
        )
        params += [similarity, latency_ms, matcher, calls_saved, tokens_saved, public_id, scope.id]
    else:
        sql = counted + (
            f"INSERT INTO {event} (public_id, scope_id, created_at, outcome, similarity, latency_ms, trail_id, matcher, "
            "stale_marked, calls_saved, tokens_saved, query, partition, research_key, caller) "
            "SELECT %s, %s, %s, a.outcome, %s, %s, a.trail_id, %s, 0, %s, %s, %s, %s, %s, %s FROM answer a RETURNING outcome"
        )
        params += [
            public_id,
            scope.id,
            _prep(RecallEvent, "created_at", now),
            similarity,
            latency_ms,
            matcher,
            calls_saved,
            tokens_saved,
            query,
            partition,
            research_key,
            caller[:16],
        ]
    with writing("recall"), prepared_cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        raise RecallEvent.DoesNotExist(f"recall {public_id} has no event (its scope was deleted)")
    return row[0]
