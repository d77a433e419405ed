"""Shedding load: past capacity, an API request is answered 503 within its time budget
instead of waiting in a queue that grows without bound.

Two queues can grow. Before the app: the proxy's and gunicorn's (a request's wait there
is read from when gunicorn's worker queued it, and from the X-Request-Start header a proxy
stamps, as nginx does with `proxy_set_header X-Request-Start "t=${msec}";`, only where the
proxy's address is in RAGTRAIL_TRUSTED_PROXIES; the earlier of the two counts, and a stamp in
the future counts as now, so a client can neither forge its wait nor switch shedding off
with a clock that runs fast): a request whose wait there leaves too
little of its budget for the time such a request takes in the app (measured, but never
more than half the budget) is answered 503 before any work, so the 503 itself comes back
within the budget. And a queue that stands (no request of that budget reached the app
after a short wait for a while: CoDel, as in Maurer's "Fail at Scale") is drained by
refusing every request that waited longer than that short wait, so under a sustained
overload answers and 503s come back in a fraction of the budget instead of at its edge.
Inside the app: the embedding model, the one CPU-bound step, is entered by a few
requests at a time (`embedding_gate`); a request that cannot enter before its budget
runs out is answered 503 then. A 503 carries Retry-After; the
client library backs off, and an agent treats it as a miss.
"""

from __future__ import annotations

import re
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Iterator

from django.conf import settings

from infra import metrics
from infra.errors import Overloaded
from infra.queue_stamps import UNIX

_deadline: ContextVar[float | None] = ContextVar("ragtrail_deadline", default=None)

# The share of a budget kept for the part of a request's time the app cannot see: the
# kernel's accept queue before gunicorn stamps it, the network both ways, writing the
# answer. Spending the whole budget in the app put answers' p99 at 505 ms of a 500 ms budget
# measured from the client (3x capacity, gunicorn alone).
UNSEEN_SHARE = 0.1


def arrival(meta: dict, now: float, trusted: frozenset[str] | set[str]) -> float | None:
    """When a request was first queued, from stamps no client can forge: the worker's own
    (only under gunicorn, whose worker replaces any the client sent) and a trusted proxy's;
    the earlier, never later than now. None where neither is there."""
    stamps, gunicorn = [], meta.get("SERVER_SOFTWARE", "").startswith("gunicorn")
    if gunicorn:
        stamps.append(queued_since(meta.get("HTTP_X_RAGTRAIL_QUEUED_AT"), now))
    # gunicorn on a unix socket gives no peer address: the socket is the proxy's ("unix").
    if (meta.get("REMOTE_ADDR") or (UNIX if gunicorn else None)) in trusted:
        stamps.append(queued_since(meta.get("HTTP_X_REQUEST_START"), now))
    found = [min(stamp, now) for stamp in stamps if stamp is not None]
    return min(found) if found else None


def queued_since(header: str | None, now: float) -> float | None:
    """The wall-clock time a proxy received the request, from X-Request-Start ("t=…" or a
    bare number, in seconds, milliseconds or microseconds); None if absent or unreadable."""
    if not header:
        return None
    value = header.strip().removeprefix("t=")
    try:
        stamp = float(value)
    except ValueError:
        return None
    for scale in (1.0, 1e3, 1e6):
        # The unit whose reading lies within a day of now.
        if abs(stamp / scale - now) < 86_400:
            return stamp / scale
    return None


def budget_for(path: str) -> float | None:
    """The time budget (seconds) of an API path, or None for paths not shed."""
    if not path.startswith("/api/"):
        return None
    if any(pattern.search(path) for pattern in _recall_budget_paths(tuple(settings.RAGTRAIL_RECALL_BUDGET_PATHS))):
        return settings.RAGTRAIL_RECALL_BUDGET_MS / 1000.0
    return settings.RAGTRAIL_API_BUDGET_MS / 1000.0


@lru_cache(maxsize=4)
def _recall_budget_paths(patterns: tuple[str, ...]) -> list[re.Pattern]:
    return [re.compile(pattern) for pattern in patterns]


class ServiceTime:
    """A moving average of how long requests of one budget stay in the app once started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds = 0.0

    def add(self, seconds: float) -> None:
        with self._lock:
            self.seconds = seconds if self.seconds == 0.0 else 0.95 * self.seconds + 0.05 * seconds

    def headroom(self, budget: float) -> float:
        """What a request must have left of its budget to be started. Capped at half the
        budget: with no queue, a request is always started, whatever slow ones came before."""
        return min(self.seconds, budget / 2)


class QueueWatch:
    """Tells a standing queue from a passing burst by the waits requests report on arrival.

    A burst makes some requests wait, then the queue empties and a short wait is seen
    again. A standing queue (offered load above capacity) shows no short wait for
    `interval` seconds; while it stands, the longest wait allowed is `target`, so the queue
    drains at the rate of quick refusals rather than of answers. It stands until a wait of
    under a quarter of the target shows the queue nearly empty: requests let through at
    the target itself prove nothing.
    """

    def __init__(self, target: float, interval: float) -> None:
        self.target, self.interval = target, interval
        self._long_since: float | None = None  # since when every wait seen was over the target
        self._last_seen = float("-inf")
        self.standing = False

    def allowed_wait(self, waited: float, longest: float, now: float) -> float:
        if now - self._last_seen > self.interval:
            # Quiet for a while: what was seen before says nothing of the queue now.
            self._long_since, self.standing = None, False
        self._last_seen = now
        if waited <= (self.target / 4 if self.standing else self.target):
            self._long_since, self.standing = None, False
        elif self._long_since is None:
            self._long_since = now
        elif now - self._long_since > self.interval:
            self.standing = True
        return self.target if self.standing else longest


@lru_cache(maxsize=None)
def queue_watch(budget: float) -> QueueWatch:
    """The process's watch over the queue of requests with this budget: the target is 30 %
    of the budget, the interval twice it. (A fifth of the budget also shed at 16 clients
    just at capacity, a bounded queue, not an overload.)"""
    return QueueWatch(0.3 * budget, 2 * budget)


@lru_cache(maxsize=None)
def service_time(budget: float) -> ServiceTime:
    """The process's moving average for requests with this budget."""
    return ServiceTime()


class LoadSheddingMiddleware:
    """Sets each API request's deadline, and answers 503 at once where too little of it is left."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        budget = budget_for(request.path)
        if budget is None:
            return self.get_response(request)
        now = time.time()
        arrived = arrival(request.META, now, settings.RAGTRAIL_TRUSTED_PROXIES)
        waited = max(0.0, now - arrived) if arrived is not None else 0.0
        served = service_time(budget)
        usable = budget * (1.0 - UNSEEN_SHARE)
        longest = queue_watch(budget).allowed_wait(waited, usable - served.headroom(usable), time.monotonic())
        if arrived is not None:
            metrics.QUEUE_WAIT.observe(waited)
        if waited > 0 and waited >= longest:
            metrics.shed("queued past the budget")
            return Overloaded(f"the request waited {waited * 1000:.0f} ms in a queue; retry shortly").response()
        started = time.monotonic()
        token = _deadline.set(started + usable - waited)
        try:
            response = self.get_response(request)
        finally:
            _deadline.reset(token)
        if response.status_code != 503:  # refusals are quick: they would hide what serving takes
            served.add(time.monotonic() - started)
        return response


def remaining() -> float | None:
    """Seconds left of the current request's budget (None outside a budgeted request)."""
    deadline = _deadline.get()
    return None if deadline is None else deadline - time.monotonic()


class Gate:
    """At most `permits` callers inside at once. A caller that would wait past its deadline,
    judged by the callers ahead of it and how long one stays inside, is refused at once:
    a wait it cannot win would only hold a server thread the queue behind it needs."""

    def __init__(self, permits: int) -> None:
        self.permits = permits
        self._semaphore = threading.BoundedSemaphore(permits)
        self._lock = threading.Lock()
        self._waiting = 0
        self._held_s = 0.0  # a moving average of the time one caller stays inside

    def expected_time_through(self) -> float:
        """Until a caller arriving now would be through: the callers ahead, then its own turn."""
        with self._lock:
            return (self._waiting // self.permits + 2) * self._held_s

    @contextmanager
    def entered(self, what: str) -> Iterator[None]:
        # A free gate is entered whatever the clock says (a slow first call, such as the
        # model loading, is no queue); only a wait is bounded by the budget.
        if not self._semaphore.acquire(blocking=False):
            left = remaining()
            if left is None:
                self._semaphore.acquire()
            else:
                if left <= 0 or self.expected_time_through() > left:
                    metrics.shed("model busy")
                    raise Overloaded(f"{what} is busy past this request's time budget; retry shortly")
                with self._lock:
                    self._waiting += 1
                try:
                    entered = self._semaphore.acquire(timeout=left)
                finally:
                    with self._lock:
                        self._waiting -= 1
                if not entered:
                    metrics.shed("model busy")
                    raise Overloaded(f"{what} is busy past this request's time budget; retry shortly")
        started = time.monotonic()
        try:
            yield
        finally:
            held = time.monotonic() - started
            with self._lock:
                self._held_s = held if self._held_s == 0.0 else 0.9 * self._held_s + 0.1 * held
            self._semaphore.release()


@lru_cache(maxsize=1)
def embedding_gate() -> Gate:
    """The process's gate in front of the embedding model."""
    return Gate(settings.RAGTRAIL_EMBEDDING_CONCURRENCY)
