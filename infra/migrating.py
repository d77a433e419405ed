"""Helpers that migrations share."""

from __future__ import annotations


def no_statement_timeout(apps, schema_editor) -> None:
    """Lifts the service's statement timeout for the rest of a migration (RunPython, both ways).

    The connection's 5 s default would stop a rewrite of a large store's rows part way; a
    migration is one transaction on PostgreSQL, so SET LOCAL holds to its end.
    """
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET LOCAL statement_timeout = 0")
