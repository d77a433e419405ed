"""`AsyncRagtrailClient`: the same calls as `RagtrailClient`, awaitable, for agents on asyncio.

It sends them with httpx's asynchronous client (a pool of its own, no threads), decides
retries and errors as the synchronous client does (`Calls`), and holds each call to its
deadline by cancelling it there: a recall ends within `recall_timeout` whatever the server
or the network does.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import httpx

from ragtrail_client.client import CALL_DEADLINE, RECALL_DEADLINE, Call, Calls, RagtrailError, T


class AsyncRagtrailClient(Calls):
    """Takes what RagtrailClient takes (an `httpx.AsyncClient` as `http=` to share one);
    every call is a coroutine returning what RagtrailClient's returns. Close it with
    `await client.aclose()` or use it in an `async with` block."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        scope: str | None = None,
        *,
        timeout: float = CALL_DEADLINE,
        recall_timeout: float = RECALL_DEADLINE,
        retries: int = 3,
        backoff: float = 0.2,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(
            base_url, api_key, scope, timeout=timeout, recall_timeout=recall_timeout, retries=retries, backoff=backoff
        )
        self._owned = http is None
        self.http: httpx.AsyncClient = http or httpx.AsyncClient(follow_redirects=False)

    async def aclose(self) -> None:
        if self._owned:
            await self.http.aclose()

    async def __aenter__(self) -> "AsyncRagtrailClient":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()

    async def _send(self, call: Call[T]) -> T:
        budget = self._budget(call)
        deadline = anyio.current_time() + budget
        try:
            with anyio.fail_after(budget):
                lookup = self._scope_lookup(call)
                scope = await self._attempt_all(lookup, deadline, budget) if lookup else (call.scope or self.scope)
                return await self._attempt_all(call, deadline, budget, scope)
        except TimeoutError:
            raise self._deadline_error(budget) from None

    async def _attempt_all(self, call: Call[T], deadline: float, budget: float, scope: str | None = None) -> T:
        data = json.dumps(call.body).encode() if call.body is not None else None
        headers = dict(self.headers, **({"Content-Type": "application/json"} if data is not None else {}))
        error: RagtrailError | None = None
        for attempt in range(self._attempts(call)):
            try:
                response = await self.http.request(
                    call.method,
                    self.base_url + call.path(scope),
                    content=data,
                    headers=headers,
                    timeout=httpx.Timeout(None),
                )
                outcome = self._answered(call, response, response.content, attempt, _monotonic_deadline(deadline))
            except httpx.HTTPError as problem:
                outcome = self._failed(call, problem, attempt, _monotonic_deadline(deadline), budget)
            if outcome.error is None:
                return outcome.result
            error = outcome.error
            if outcome.retry_after is None:
                raise error
            await anyio.sleep(outcome.retry_after)
        assert error is not None
        raise error


def _monotonic_deadline(deadline: float) -> float:
    """The deadline on time.monotonic's clock (what `Calls` decides waits by), from anyio's."""
    return time.monotonic() + (deadline - anyio.current_time())
