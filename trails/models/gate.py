"""The one-writer gate: the rows a trail owns are written only inside `writing()`, which only
the writer's modules enter (docs/consistency.md, "How the one writer is enforced").

Where enforcement is on (DEBUG, and the tests: RAGTRAIL_ENFORCE_ONE_WRITER), every database
connection runs its statements through `refuse_outside_writer`: an INSERT, UPDATE or DELETE of
an owned table outside `writing()` raises `WriteOutsideWriter` before it reaches the database.
"""

from __future__ import annotations

import functools
import re
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

from infra.guards import guard_on

# The tables whose rows a trail owns (the trail's own, its path, keys, history, reports, the
# recall events that served it and the labels made of them).
OWNED_TABLES = frozenset(
    {
        "trails_trail",
        "trails_step",
        "trails_citation",
        "trails_bandkeys",
        "trails_trailsignal",
        "trails_trailreport",
        "trails_recallevent",
        "trails_matchlabel",
    }
)
# The modules that may enter `writing()`: the writer (tests/trails/test_one_writer.py checks it).
WRITER_MODULES = frozenset(
    {
        "trails.models.writes",
        "trails.models.verdicts",
        "trails.models.bulk",
        "trails.models.deletion",
        "trails.models.recalls",
        "trails.models.recall_writes",
        "trails.models.lifecycle",
        "trails.models.trail",
    }
)

# The table a statement writes, after an optional schema; comments are removed first.
_WRITE = re.compile(
    r"\b(?:INSERT\s+INTO|UPDATE(?:\s+ONLY)?|DELETE\s+FROM(?:\s+ONLY)?|MERGE\s+INTO(?:\s+ONLY)?"
    r"|COPY)\s+(?:\"?\w+\"?\s*\.\s*)?\"?(\w+)\"?",
    re.IGNORECASE,
)
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
_writer: ContextVar[str | None] = ContextVar("ragtrail_writer", default=None)


class WriteOutsideWriter(RuntimeError):
    """A statement wrote a row a trail owns from outside trails.models.writes."""


@contextmanager
def writing(what: str) -> Iterator[None]:
    """Lets this thread's statements write the rows a trail owns, for `what` (the writer only)."""
    token = _writer.set(what)
    try:
        yield
    finally:
        _writer.reset(token)


def writer(what: str):
    """A writer function's decorator: its statements may write the rows a trail owns."""

    def wrap(function):
        @functools.wraps(function)
        def inner(*args, **kwargs):
            with writing(what):
                return function(*args, **kwargs)

        return inner

    return wrap


def refuse_outside_writer(execute, sql, params, many, context):
    """A connection's execute wrapper: an owned table written outside `writing()` raises."""
    if _writer.get() is None and guard_on("one-writer-enforced"):
        text = sql.as_string(context["connection"].connection) if hasattr(sql, "as_string") else str(sql)
        for match in _WRITE.finditer(_COMMENTS.sub(" ", text)):
            if match.group(1).lower() in OWNED_TABLES:
                raise WriteOutsideWriter(
                    f"{match.group(1)} written outside the one writer (trails.models.writes): {text[:120]}"
                )
    return execute(sql, params, many, context)


def migrating(sender, **kwargs) -> None:
    """pre_migrate: a migration's data steps write as the schema's owner, not through the writer."""
    _writer.set("migrations")


def migrated(sender, **kwargs) -> None:
    """post_migrate: the writer's rule again."""
    _writer.set(None)


def enforce_on_new_connections(sender, connection, **kwargs) -> None:
    """Installs the wrapper on each new connection (connection_created)."""
    if refuse_outside_writer not in connection.execute_wrappers:
        connection.execute_wrappers.append(refuse_outside_writer)
