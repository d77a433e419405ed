"""A client-side deadline on the database calls of API requests.

PostgreSQL's statement_timeout is enforced by the server; a server that hangs (stopped,
swapping, a frozen VM) enforces nothing, and a request waited as long as the pause lasted
while gunicorn killed its workers. Here one watchdog thread per process shuts the socket of
any call past its deadline: the call fails at once with an OperationalError, which the API
answers as a 503 with Retry-After, and Django drops the broken connection.

The deadline is the request's, not each call's: every call gets what is left of
RAGTRAIL_DB_DEADLINE_S since the request began (a slow connect included), and a call
starting after it is refused at once, so a paused database answers within the deadline
however many calls the request makes.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.shortcuts import render

from infra import metrics
from infra.errors import database_refusal

# When the current API request's database time runs out (monotonic seconds).
_request_deadline: ContextVar[float | None] = ContextVar("ragtrail_db_deadline", default=None)


class Watchdog:
    """Shuts the sockets of watched calls that outlive their deadline."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int]] = []
        self._active: set[int] = set()
        self._ids = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, fd: int, seconds: float) -> int:
        token = next(self._ids)
        with self._wake:
            self._active.add(token)
            entry = (time.monotonic() + seconds, token, fd)
            heapq.heappush(self._heap, entry)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="db-deadline", daemon=True)
                self._thread.start()
            # Every deadline is as long as the others, so a new one is the earliest only
            # when nothing else is watched: wake the thread then, not on every statement.
            if self._heap[0] is entry:
                self._wake.notify()
        return token

    def release(self, token: int) -> None:
        with self._wake:
            self._active.discard(token)

    def _run(self) -> None:
        while True:
            with self._wake:
                while self._heap and self._heap[0][1] not in self._active:
                    heapq.heappop(self._heap)  # finished in time
                if not self._heap:
                    self._wake.wait()
                    continue
                deadline, token, fd = self._heap[0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._wake.wait(delay)
                    continue
                heapq.heappop(self._heap)
                self._active.discard(token)
            try:
                # A duplicate of the descriptor, shut down: the connection's own socket
                # sees end of input, and the waiting call raises.
                with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as stuck:
                    stuck.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed meanwhile


WATCHDOG = Watchdog()


def _with_deadline(execute, sql, params, many, context):
    raw = getattr(context["connection"], "connection", None)
    pgconn = getattr(raw, "pgconn", None)
    if pgconn is None:
        return execute(sql, params, many, context)
    deadline = _request_deadline.get()
    left = settings.RAGTRAIL_DB_DEADLINE_S if deadline is None else deadline - time.monotonic()
    if left <= 0:
        raise OperationalError("the request's database deadline has passed")
    token = WATCHDOG.watch(pgconn.socket, left)
    try:
        return execute(sql, params, many, context)
    finally:
        WATCHDOG.release(token)


def refused_by_the_database(problem: Exception, where: str = ""):
    """The API's 503 for a database that is away, past a lock wait or past the request's
    deadline, counted as shed (by cause) and as a store error; the log gets the error's class
    and SQLSTATE only (a driver's message may quote the request's values)."""
    refusal = database_refusal(problem, deadline_passed())
    metrics.STORE_ERRORS.labels("database", refusal.code).inc()
    metrics.shed({"lock_wait": "lock wait", "deadline": "database deadline"}.get(refusal.code, "database away"))
    logging.getLogger("ragtrail.api").warning(
        "database refused (%s) on %s: %s", refusal.code, where, described(problem)
    )
    return refusal.response()


def described(problem: Exception) -> str:
    """A database error's class and SQLSTATE, never its message (a driver's message may quote
    the request's values, which no purge could reach in a log)."""
    state = getattr(problem.__cause__, "sqlstate", None) or getattr(problem, "sqlstate", None)
    return type(problem).__name__ + (f" (SQLSTATE {state})" if state else "")


# A cleanup after a failed call gets this share of RAGTRAIL_DB_DEADLINE_S of its own: a DELETE by
# key takes milliseconds where the database answers at all, and a paused one delays the answer by no more.
CLEANUP_SHARE = 0.25


def cleanup_seconds() -> float:
    """How long a cleanup's window lasts."""
    return settings.RAGTRAIL_DB_DEADLINE_S * CLEANUP_SHARE


@contextmanager
def cleanup_window() -> Iterator[None]:
    """The database calls within get a deadline of their own, whatever is left of the request's:
    for undoing what a request that then failed (its deadline spent, say) had written."""
    if _request_deadline.get() is None:
        yield
        return
    token = _request_deadline.set(time.monotonic() + cleanup_seconds())
    try:
        yield
    finally:
        _request_deadline.reset(token)


def deadline_passed() -> bool:
    """Whether the current request's database deadline has run out (a call then failed
    because the watchdog shut its socket, not because the database went away)."""
    deadline = _request_deadline.get()
    return deadline is not None and time.monotonic() >= deadline


class DatabaseDeadlineMiddleware:
    """Puts the deadline on every database call of an API request (PostgreSQL only)."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/api/") and connection.vendor == "postgresql":
            token = _request_deadline.set(time.monotonic() + settings.RAGTRAIL_DB_DEADLINE_S)
            try:
                with connection.execute_wrapper(_with_deadline):
                    return self.get_response(request)
            finally:
                _request_deadline.reset(token)
        return self.get_response(request)


class DatabaseRefusalPageMiddleware:
    """An operator page whose database work was refused (a lock held past its wait limit,
    a statement past its timeout, the database away) answers a styled 503 page naming the
    cause, never Django's bare 500. (The API answers the same causes as JSON.)"""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if request.path.startswith("/api/") or not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        refusal = database_refusal(exception, deadline_passed())
        response = render(request, "503.html", {"code": refusal.code, "message": refusal.message}, status=503)
        for name, value in refusal.headers.items():
            response[name] = value
        return response
