"""The tool-result cache: read-only tool calls reused inside and across trajectories."""

from __future__ import annotations

import json
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache

from infra import metrics
from infra.errors import Conflict, Invalid, StoreUnavailable, TooLarge
from scopes.models import Scope, Section
from trails import memory
from trails.core import toolkey
from trails.models import ToolPolicy

try:
    from redis.exceptions import RedisError

    # A Redis that is down or past its socket timeout: tool-result calls degrade to a
    # miss / not stored ("cache_unavailable") instead of failing the agent's request.
    CACHE_ERRORS: tuple[type[Exception], ...] = (RedisError, OSError)
except ImportError:  # pragma: no cover - redis is in requirements.txt
    CACHE_ERRORS = (OSError,)

UNAVAILABLE = "cache_unavailable"
OUTCOMES = ("hit", "miss", "refused", "stale")
UNLISTED = "*"  # the counter bucket of tools without a policy

# Policies by (scope id, policy version): a scope row is read on every request
# anyway, so a changed version is seen at once without a cache round trip.
_POLICIES: dict[tuple[int, str], dict[str, toolkey.ToolPolicy]] = {}


def policies_for(scope: Scope) -> dict[str, toolkey.ToolPolicy]:
    """Returns the scope's tool policies by tool name."""
    cache_key = (scope.id, scope.tool_policy_version)
    found = _POLICIES.get(cache_key)
    if found is None:
        found = {p.tool: p.as_rule() for p in ToolPolicy.objects.filter(scope=scope)}
        if len(_POLICIES) > 10_000:
            _POLICIES.clear()
        _POLICIES[cache_key] = found
    return found


def replace_policies(scope: Scope, policies: list[dict[str, Any]]) -> list[ToolPolicy]:
    """Replaces the scope's tool policies; entries of tools no longer cacheable become unreachable."""
    created = ToolPolicy.objects.replace(scope, policies)
    scope.tool_policy_version = Scope.objects.values_list("tool_policy_version", flat=True).get(pk=scope.pk)
    return created


def namespace(scope: Scope) -> str:
    """The scope's part of every cache key: its id and random token, never its slug."""
    return f"{scope.id}:{scope.cache_token}"


def _count(scope: Scope, tool: str, outcome: str) -> None:
    # Tools named by a policy are a set operators configure; any other name is one bucket.
    bucket = tool if tool in policies_for(scope) else UNLISTED
    metrics.TOOL_LOOKUPS.labels(bucket, outcome).inc()
    try:
        _increment(scope, bucket, outcome)
    except CACHE_ERRORS:
        pass  # a counter is not worth failing the call for


def _increment(scope: Scope, bucket: str, outcome: str) -> None:
    key = f"rt:toolstat:{namespace(scope)}:{bucket}:{outcome}"
    client = getattr(cache, "_cache", None)
    if hasattr(client, "get_client"):
        # One INCR on Redis; Django's generic incr checks existence first (two round trips).
        made = cache.make_and_validate_key(key)
        client.get_client(made, write=True).incr(made)
        return
    if not cache.add(key, 1, timeout=None):
        cache.incr(key)


def lookup_counts(scope: Scope) -> dict[str, dict[str, int]]:
    """Returns {tool: {outcome: count}} for the scope's tools and the unlisted bucket."""
    tools = [*policies_for(scope), UNLISTED]
    keys = {f"rt:toolstat:{namespace(scope)}:{t}:{o}": (t, o) for t in tools for o in OUTCOMES}
    try:
        values = cache.get_many(list(keys))
    except CACHE_ERRORS:
        raise StoreUnavailable(UNAVAILABLE, "the tool-result cache is not answering; retry shortly") from None
    counts: dict[str, dict[str, int]] = {t: dict.fromkeys(OUTCOMES, 0) for t in tools}
    for key, value in values.items():
        tool, outcome = keys[key]
        counts[tool][outcome] = int(value)
    return counts


def _rule_and_key(
    scope: Scope, tool: str, args: dict, context: dict, caller: str | None
) -> tuple[toolkey.ToolPolicy | None, str | None, str]:
    rule = policies_for(scope).get(tool)
    if rule is None:
        return None, None, "no policy for this tool: it is not cached"
    if not rule.cacheable:
        return rule, None, "the tool's policy says it is not cacheable"
    try:
        return rule, toolkey.tool_result_key(namespace(scope), rule, args, context, caller), ""
    except toolkey.KeyRefused as problem:
        raise Invalid("invalid", str(problem), field=problem.field) from None


def lookup(scope: Scope, tool: str, args: dict, context: dict, caller: str | None = None) -> dict[str, Any]:
    """Returns a cached result of this call, if one may be served.

    Returns:
        {"hit": True, "result", "age_s"}, or {"hit": False, "reason"}.
    """
    rule, key, reason = _rule_and_key(scope, tool, args, context, caller)
    if key is None:
        _count(scope, tool, "refused")
        return {"hit": False, "reason": reason}
    try:
        entry = cache.get(key)
    except CACHE_ERRORS:
        metrics.STORE_ERRORS.labels("cache", "unavailable").inc()
        return {"hit": False, "reason": UNAVAILABLE}
    if entry is None:
        _count(scope, tool, "miss")
        return {"hit": False, "reason": "not cached"}
    if entry["sections"]:
        current = Section.objects.current(scope, entry["sections"])
        if any(
            section_id not in current or current[section_id].hash != recorded
            for section_id, recorded in entry["sections"].items()
        ):
            try:
                cache.delete(key)
            except CACHE_ERRORS:
                pass  # it is checked again on every read, and expires with its TTL
            _count(scope, tool, "stale")
            return {"hit": False, "reason": "a section the result lists has changed since it was stored"}
    _count(scope, tool, "hit")
    return {"hit": True, "result": entry["result"], "age_s": round(time.time() - entry["stored_at"], 3)}


def store(
    scope: Scope,
    tool: str,
    args: dict,
    context: dict,
    result: Any,
    caller: str | None = None,
    section_ids: list[str] | None = None,
    hashes: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Stores a tool's result if its policy allows.

    A result that lists sections must say which version of each it was computed
    from (`hashes`, as the section store returned them): the result's text is what
    a hit serves, so it is stored only if those are the sections' current versions.

    Returns:
        {"stored": True, "ttl_s"} or {"stored": False, "reason"}.

    Raises:
        TooLarge: a result over the size limit. Invalid: listed
        sections missing from the store, hashes missing or naming unlisted sections,
        or a missing caller; 409 when a hash is not the section's current one.
    """
    rule, key, reason = _rule_and_key(scope, tool, args, context, caller)
    if key is None:
        return {"stored": False, "reason": reason}
    size = len(json.dumps(result, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    limit = settings.RAGTRAIL_TOOL_RESULT_MAX_BYTES
    if size > limit:
        raise TooLarge("too_large", f"result is {size} bytes; the limit is {limit}", field="result")
    sections = _sections_read(scope, section_ids or [], hashes or {})
    try:
        cache.set(key, {"result": result, "stored_at": time.time(), "sections": sections}, timeout=rule.ttl_s)
    except CACHE_ERRORS:
        return {"stored": False, "reason": UNAVAILABLE}
    return {"stored": True, "ttl_s": rule.ttl_s}


def _sections_read(scope: Scope, section_ids: list[str], hashes: dict[str, str]) -> dict[str, str]:
    """{section id: hash} of the versions a result was computed from, checked against the store now."""
    unlisted = [s for s in hashes if s not in section_ids]
    if unlisted:
        raise Invalid(
            "invalid", "hashes name sections that are not in section_ids", field="hashes", section_ids=unlisted
        )
    if not section_ids:
        return {}
    current = Section.objects.current(scope, section_ids)
    missing = [s for s in section_ids if s not in current]
    if missing:
        raise Invalid(
            "unknown_section",
            "listed sections are not in the scope's section store",
            field="section_ids",
            section_ids=missing,
        )
    unstated = [s for s in section_ids if s not in hashes]
    if unstated:
        raise Invalid(
            "invalid",
            "every listed section needs the hash of the version the result was computed from",
            field="hashes",
            section_ids=unstated,
        )
    changed = [s for s in section_ids if current[s].hash != hashes[s]]
    if changed:
        raise Conflict(
            "section_changed",
            "the result was computed from a version of these sections that has since changed",
            field="hashes",
            section_ids=changed,
        )
    return {s: hashes[s] for s in section_ids}


def forget_scope(scope: Scope) -> int:
    """Deletes every cached result and counter of a scope (a purge, a deleted scope).

    Returns:
        How many entries were deleted (-1 where the backend cannot list keys and the
        whole cache was cleared instead).
    """
    prefixes = [cache.make_key(f"rt:tool:{namespace(scope)}:"), cache.make_key(f"rt:toolstat:{namespace(scope)}:")]
    client = getattr(cache, "_cache", None)
    if hasattr(client, "get_client"):  # Redis
        redis = client.get_client(prefixes[0], write=True)
        deleted = 0
        for prefix in prefixes:
            batch = []
            for key in redis.scan_iter(match=prefix + "*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    deleted += redis.delete(*batch)
                    batch = []
            if batch:
                deleted += redis.delete(*batch)
        return deleted
    if isinstance(client, dict):  # this process's memory (LocMemCache)
        doomed = [key for key in list(client) if any(key.startswith(p) for p in prefixes)]
        for key in doomed:
            cache.delete(key.split(":", 2)[2])
        return len(doomed)
    cache.clear()
    return -1


@memory.forgets
def forget_local() -> None:
    """Drops the tool results this process's own memory holds (no Redis: every process has its own)."""
    client = getattr(cache, "_cache", None)
    if isinstance(client, dict):
        prefix = cache.make_key("rt:tool")
        for key in [key for key in list(client) if key.startswith(prefix)]:
            cache.delete(key.split(":", 2)[2])
