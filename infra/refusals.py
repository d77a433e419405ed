"""Requests refused with 503 over the last minutes, by cause, for the whole service and for
each scope: what the operator pages' verdict reads (the alerts read the same events as
`ragtrail_shed_total`, through Prometheus).

Every API request is tallied where metrics count it (`infra.metrics.MetricsMiddleware`), with
the cause its refusal was counted under (`shed`). A process adds its tallies to minute buckets
in the shared cache (Redis in production) at most every few seconds, so every process and the
pages see the sum; a bucket outlives the window and then expires. Per scope, only scopes a
key was let into in this process are tallied: a refused request is not authenticated, and a
slug an attacker makes up must not make a key.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from contextvars import ContextVar

SLOT_S = 60
WINDOW_SLOTS = 5  # the verdict's window: the current minute and the four before it
FLUSH_S = 5.0
# What each counted reason is, to an operator: capacity (queued, model busy) or the database.
CAUSES = {
    "queued past the budget": "queued past the budget",
    "model busy": "model busy",
    "lock wait": "database",
    "database deadline": "database",
    "database away": "database",
}
# Whose tally a key holds: the service's, or a scope's (a slug is letters, digits, - and _).
SERVICE = "service"


def _scope(slug: str) -> str:
    return f"scope-{slug}"


_refused_for: ContextVar[str | None] = ContextVar("ragtrail_refused_for", default=None)
_lock = threading.Lock()
_pending: Counter = Counter()
_last_flush = [0.0]
# Scopes a key was let into (scopes.auth tells): bounded by the scopes that exist.
_known: set[str] = set()
KNOWN_AT_MOST = 100_000


def scope_seen(slug: str) -> None:
    """A key was let into this scope: its refusals are tallied under it from now on."""
    if slug not in _known:
        if len(_known) >= KNOWN_AT_MOST:
            _known.clear()
        _known.add(slug)


def refused(reason: str) -> None:
    """Remembers why the current request is refused (its tally reads it)."""
    _refused_for.set(reason)


def begin() -> object:
    return _refused_for.set(None)


def end(token: object) -> str | None:
    reason = _refused_for.get()
    _refused_for.reset(token)
    return reason


def tally(slug: str | None, status: int, reason: str | None, now: float | None = None) -> None:
    """One API request answered: counted for the service and its scope, by cause where refused."""
    now = time.time() if now is None else now
    slot = int(now // SLOT_S)
    cause = CAUSES.get(reason or "", "other") if status == 503 else None
    who = [SERVICE]
    if slug and slug in _known:
        who.append(_scope(slug))
    with _lock:
        for name in who:
            _pending[(slot, name, "requests")] += 1
            if cause:
                _pending[(slot, name, cause)] += 1
        due = now - _last_flush[0] >= FLUSH_S
        if due:
            flushing = dict(_pending)
            _pending.clear()
            _last_flush[0] = now
    if due:
        _flush(flushing)


def _key(slot: int, name: str, what: str) -> str:
    # Keys without spaces (memcached refuses them; Django warns for every backend).
    return f"rt:refusals:{slot}:{name}:{what.replace(' ', '-')}"


def _flush(counts: dict) -> None:
    from django.core.cache import caches

    cache = caches["heartbeats"]
    try:
        for (slot, name, what), n in counts.items():
            key = _key(slot, name, what)
            cache.add(key, 0, timeout=SLOT_S * (WINDOW_SLOTS + 5))
            cache.incr(key, n)
    except Exception:  # noqa: BLE001 -- a cache that is away loses these counts, never a request
        # and is not asked again for a minute: a request pays its socket timeout once, not every flush.
        _last_flush[0] = time.time() + 55.0


def window(slug: str, now: float | None = None) -> dict | None:
    """The last minutes' requests and refusals by cause, of this scope and of the service;
    None when the shared cache cannot be read (the verdict then says it does not know).

    Returns:
        {"minutes": 5, "scope": {"requests": n, "refused": {cause: n}}, "service": {...}}
    """
    from django.core.cache import caches

    now = time.time() if now is None else now
    current = int(now // SLOT_S)
    slots = range(current - WINDOW_SLOTS + 1, current + 1)
    whats = ("requests", *sorted(set(CAUSES.values())), "other")
    keys = {_key(s, name, what): (name, what) for s in slots for name in (_scope(slug), SERVICE) for what in whats}
    try:
        found = caches["heartbeats"].get_many(list(keys))
    except Exception:  # noqa: BLE001 -- unknown, not an error page
        return None
    with _lock:  # this process's own counts not yet added to the cache
        unflushed = {_key(*k): n for k, n in _pending.items() if k[0] in slots}
    totals = {name: {"requests": 0, "refused": Counter()} for name in (_scope(slug), SERVICE)}
    for key, (name, what) in keys.items():
        n = int(found.get(key) or 0) + unflushed.get(key, 0)
        if what == "requests":
            totals[name]["requests"] += n
        elif n:
            totals[name]["refused"][what] += n
    shape = lambda t: {"requests": t["requests"], "refused": dict(t["refused"])}  # noqa: E731
    return {"minutes": WINDOW_SLOTS, "scope": shape(totals[_scope(slug)]), "service": shape(totals[SERVICE])}
