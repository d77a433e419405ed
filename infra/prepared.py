"""Cursors whose statements PostgreSQL can prepare: for the few queries every recall runs."""

from __future__ import annotations

from django.db import connection
from django.db.backends.utils import CursorWrapper


def prepared_cursor(binary: bool = False) -> CursorWrapper:
    """A cursor on Django's connection (same transaction). On PostgreSQL it binds on the
    server, so psycopg prepares a statement after its fifth run and PostgreSQL plans it
    once; Django's own cursor binds on the client and plans every run.

    `binary` asks PostgreSQL for results in binary: bytea then arrives as its bytes, not
    as hex text twice their size for the server to write and the client to parse. Only
    for statements whose rows are read as they come (no Django field converters run here).
    """
    if connection.vendor != "postgresql":
        return connection.cursor()
    import psycopg

    connection.ensure_connection()
    cursor = psycopg.Cursor(connection.connection)
    if binary:
        cursor.format = psycopg.pq.Format.BINARY
    return CursorWrapper(cursor, connection)
