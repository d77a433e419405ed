"""`AsyncRagtrailClient`: the same calls as `RagtrailClient`, awaitable, for agents on asyncio.

Each call runs the synchronous client's in a worker thread (the standard library has no HTTP
client for asyncio), so the deadlines, retries and errors are the same ones: a recall still
ends within `recall_timeout` however the event loop is loaded, and the loop never blocks.
"""
from __future__ import annotations

import asyncio
import functools
from typing import Any

from ragtrail_client.client import RagtrailClient

# The calls a caller awaits; the attributes (base_url, scope, timeouts) are read as they are.
CALLS = ("scopes", "put_sections", "list_sections", "get_section", "delete_section", "recall", "explain", "record",
         "feedback", "vote", "get_trail", "get_tool_policies", "put_tool_policies", "lookup_tool_result",
         "store_tool_result", "tool_result_stats")


class AsyncRagtrailClient:
    """Takes what RagtrailClient takes; every call of it is a coroutine here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sync = RagtrailClient(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name not in CALLS:
            return getattr(self.sync, name)
        call = getattr(self.sync, name)

        @functools.wraps(call)
        async def awaited(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(call, *args, **kwargs)

        return awaited
