"""Requests refused with 503 over the last minutes, by cause, for the whole service, for each
scope and for each key in it: what the operator pages' verdict reads (the alerts read the same
events as `ragtrail_shed_total`, through Prometheus).

Every API request is tallied where metrics count it (`infra.metrics.MetricsMiddleware`), with
the cause its refusal was counted under (`shed`), straight into minute buckets in the shared
cache (Redis in production: one pipelined round trip), so every page reads the same whole
figures whichever process answered; a bucket outlives the window and then expires.

A request counts for a scope, and for its key there, only once the key check let it into that
scope (`admitted`): keyless and wrong-key traffic is the service's alone, so nobody without a
key can move a tenant's verdict. A request refused before its key was checked (queued past the
budget: the whole service is overloaded) is the service's refusal too, whoever sent it; so the
figures depend on no process's memory of whom it let in before.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

SLOT_S = 60
WINDOW_SLOTS = 5  # the verdict's window: the current minute and the four before it
# What each counted reason is, to an operator: capacity (queued, model busy) or the database.
CAUSES = {
    "queued past the budget": "queued past the budget",
    "model busy": "model busy",
    "lock wait": "database",
    "database deadline": "database",
    "database away": "database",
}
WHATS = ("requests", *sorted(set(CAUSES.values())), "other")
# Whose tally a key holds: the service's, a scope's, or a key's in a scope.
SERVICE = "service"
# A cache that failed is not asked again for this long: a request pays its socket timeout once.
AWAY_S = 60.0


def _scope(slug: str) -> str:
    return f"scope-{slug}"


def _key_in_scope(slug: str, key: str) -> str:
    return f"scope-{slug}-key-{key}"


_refused_for: ContextVar[str | None] = ContextVar("ragtrail_refused_for", default=None)
_admitted_to: ContextVar[tuple[str, str] | None] = ContextVar("ragtrail_admitted_to", default=None)
_away_until = [0.0]


def admitted(slug: str, key: str) -> None:
    """The key check let the current request into this scope, under this key (its lookup)."""
    _admitted_to.set((slug, key))


def refused(reason: str) -> None:
    """Remembers why the current request is refused (its tally reads it)."""
    _refused_for.set(reason)


def begin() -> tuple[object, object]:
    return _refused_for.set(None), _admitted_to.set(None)


def end(tokens: tuple[object, object]) -> tuple[str | None, tuple[str, str] | None]:
    """Why the request was refused, and the (scope, key) it was let into."""
    reason, let_in = _refused_for.get(), _admitted_to.get()
    _refused_for.reset(tokens[0])
    _admitted_to.reset(tokens[1])
    return reason, let_in


def whose(let_in: tuple[str, str] | None) -> list[str]:
    """The tallies a request counts in: the service's, and its scope's and key's where let in."""
    if let_in is None:
        return [SERVICE]
    return [SERVICE, _scope(let_in[0]), _key_in_scope(*let_in)]


def tally(names: list[str], status: int, reason: str | None, now: float | None = None) -> None:
    """One API request answered: counted under each name, by cause where refused."""
    now = time.time() if now is None else now
    if now < _away_until[0]:
        return
    slot = int(now // SLOT_S)
    cause = CAUSES.get(reason or "", "other") if status == 503 else None
    keys = [_key(slot, name, what) for name in names for what in ("requests", cause) if what]
    try:
        _add(keys)
    except Exception:  # noqa: BLE001 -- a cache that is away loses these counts, never a request
        _away_until[0] = time.time() + AWAY_S


def _key(slot: int, name: str, what: str) -> str:
    # Keys without spaces (memcached refuses them; Django warns for every backend).
    return f"rt:refusals:{slot}:{name}:{what.replace(' ', '-')}"


def _add(keys: list[str]) -> None:
    from django.core.cache import caches

    cache, ttl = caches["heartbeats"], SLOT_S * (WINDOW_SLOTS + 5)
    client = getattr(getattr(cache, "_cache", None), "get_client", None)
    if client is not None:  # Django's Redis backend: one round trip for every count
        names = [cache.make_and_validate_key(key) for key in keys]
        pipe = client(names[0], write=True).pipeline(transaction=False)
        for name in names:
            pipe.incr(name)
            pipe.expire(name, ttl)
        pipe.execute()
        return
    for key in keys:
        cache.add(key, 0, timeout=ttl)
        cache.incr(key)


def _read(names: list[str], now: float | None) -> dict[str, dict] | None:
    from django.core.cache import caches

    now = time.time() if now is None else now
    current = int(now // SLOT_S)
    slots = range(current - WINDOW_SLOTS + 1, current + 1)
    keys = {_key(s, name, what): (name, what) for s in slots for name in names for what in WHATS}
    try:
        found = caches["heartbeats"].get_many(list(keys))
    except Exception:  # noqa: BLE001 -- unknown, not an error page
        return None
    totals: dict[str, dict] = {name: {"requests": 0, "refused": {}} for name in names}
    for key, (name, what) in keys.items():
        n = int(found.get(key) or 0)
        if what == "requests":
            totals[name]["requests"] += n
        elif n:
            totals[name]["refused"][what] = totals[name]["refused"].get(what, 0) + n
    return totals


def window(slug: str, now: float | None = None) -> dict | None:
    """The last minutes' requests and refusals by cause, of this scope and of the service;
    None when the shared cache cannot be read (the verdict then says it does not know).

    Returns:
        {"minutes": 5, "scope": {"requests": n, "refused": {cause: n}}, "service": {...}}
    """
    totals = _read([_scope(slug), SERVICE], now)
    if totals is None:
        return None
    return {"minutes": WINDOW_SLOTS, "scope": totals[_scope(slug)], "service": totals[SERVICE]}


def by_key(slug: str, keys: list[str], now: float | None = None) -> dict[str, dict] | None:
    """The last minutes' requests and refusals by cause of each of these keys (lookups) in
    this scope, as `window` counts them; None when the shared cache cannot be read."""
    totals = _read([_key_in_scope(slug, key) for key in keys], now)
    return None if totals is None else {key: totals[_key_in_scope(slug, key)] for key in keys}
