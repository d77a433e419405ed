"""Canonical keys for tool-result caching: same call, same key; different call, different key."""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, Mapping


@dataclass(frozen=True)
class ToolPolicy:
    """How one tool's results may be cached in a scope."""

    tool: str
    cacheable: bool
    ttl_s: int
    ignore_args: frozenset[str] = field(default_factory=frozenset)
    path_args: frozenset[str] = field(default_factory=frozenset)
    per_caller: bool = False


class KeyRefused(ValueError):
    """Input a tool-result key cannot be made from, naming the field at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def normalise_path(path: str) -> str:
    """Folds a relative path to one spelling: "./a/../b.py" and "b.py" are one path."""
    folded = posixpath.normpath(path.replace("\\", "/"))
    return folded[2:] if folded.startswith("./") else folded


def canonical_args(args: Mapping[str, Any], policy: ToolPolicy) -> str:
    """Returns the arguments as canonical JSON.

    Keys are sorted and types kept (1 and "1" differ); arguments the policy
    ignores are dropped; path arguments are normalised; every other argument,
    known or not, stays (limits, offsets and page tokens included).

    Raises:
        ValueError: a path argument is not a string.
    """
    kept: dict[str, Any] = {}
    for name, value in args.items():
        if name in policy.ignore_args:
            continue
        if name in policy.path_args:
            if not isinstance(value, str):
                raise KeyRefused("args", f"path argument {name!r} must be a string")
            value = normalise_path(value)
        kept[name] = value
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def tool_result_key(
    scope: str, policy: ToolPolicy, args: Mapping[str, Any], context: Mapping[str, Any], caller: str | None
) -> str:
    """Returns the cache key of a call: scope, tool, canonical arguments, context version, caller.

    `scope` is the scope's cache namespace (its id and random token), which no other
    scope, not even one created later with the same slug, ever shares.

    Raises:
        ValueError: the policy keys by caller and no caller was given, or an argument is malformed.
    """
    if policy.per_caller and not caller:
        raise KeyRefused("caller", f"tool {policy.tool!r} is cached per caller: a caller is required")
    parts = [
        scope,
        policy.tool,
        canonical_args(args, policy),
        json.dumps(context, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False),
        caller if policy.per_caller else "",
    ]
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()
    return f"rt:tool:{scope}:{digest}"
