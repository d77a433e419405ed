"""Cursors whose statements PostgreSQL can prepare: for the few queries every recall runs."""
from __future__ import annotations

from django.db import connection
from django.db.backends.utils import CursorWrapper


def prepared_cursor() -> CursorWrapper:
    """A cursor on Django's connection (same transaction). On PostgreSQL it binds on the
    server, so psycopg prepares a statement after its fifth run and PostgreSQL plans it
    once; Django's own cursor binds on the client and plans every run."""
    if connection.vendor != "postgresql":
        return connection.cursor()
    import psycopg

    connection.ensure_connection()
    return CursorWrapper(psycopg.Cursor(connection.connection), connection)
