"""`cached_tool`: an agent's read-only tool, looked up in ragtrail before it is called."""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Callable, Mapping, TypeVar

from ragtrail_client.client import RagtrailClient, RagtrailError

F = TypeVar("F", bound=Callable[..., Any])


class UncachedToolWarning(UserWarning):
    """A decorated tool is called every time: the scope has no policy that caches it."""


def cached_tool(
    client: RagtrailClient,
    tool: str,
    *,
    context: Mapping[str, Any] | None = None,
    caller: str | None = None,
    sections: Callable[[Any], Mapping[str, str]] | None = None,
    scope: str | None = None,
) -> Callable[[F], F]:
    """Wraps a tool function: a stored result is returned without calling it; on a miss
    the tool runs and its result is stored (where the scope's policy allows).

    The key is the tool's name and its arguments by parameter name (defaults
    included), with `context`. Results travel as JSON, so a tuple comes back as a list.
    `sections(result)` maps the ids of sections the result was read from to their
    hashes, so ragtrail never serves it after one of them changed.

    Nothing is cached until the scope's tool policy names the tool (`put_tool_policies`);
    until then every call runs the tool, and the first one warns (`UncachedToolWarning`).
    ragtrail being down (no answer, or a 5xx after retries) never fails the agent: the
    tool is simply called. Refusals (4xx) are raised, since they are the caller's bug.

        @cached_tool(client, "search")
        def search(query: str, k: int = 5) -> list[dict]: ...
    """

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)
        warned = []

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            try:
                found = client.lookup_tool_result(tool, arguments, context=context, caller=caller, scope=scope)
                if found.hit:
                    return found.result
                if not warned and found.reason and ("no policy" in found.reason or "not cacheable" in found.reason):
                    warned.append(True)
                    warnings.warn(
                        f"ragtrail does not cache tool {tool!r}: {found.reason}. Set a policy with "
                        "RagtrailClient.put_tool_policies([{'tool': ..., 'cacheable': True, 'ttl_s': ...}]).",
                        UncachedToolWarning,
                        stacklevel=2,
                    )
            except RagtrailError as error:
                if 0 < error.status < 500:
                    raise
            result = fn(*args, **kwargs)
            read = sections(result) if sections else None
            try:
                client.store_tool_result(
                    tool, arguments, result, context=context, caller=caller, sections=read, scope=scope
                )
            except RagtrailError as error:
                if 0 < error.status < 500:
                    raise
            return result

        return wrapper  # type: ignore[return-value]

    return decorate
