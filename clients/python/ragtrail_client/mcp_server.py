"""ragtrail as an MCP server (the official `mcp` SDK), over stdio or streamable HTTP.

It runs beside the ragtrail site and calls its JSON API with the Python client, so it
is authenticated exactly as the API is: over stdio with the key in RAGTRAIL_API_KEY;
over HTTP with the MCP client's own `Authorization: Bearer rt_...` header, passed
through on every call (a request without one is refused with 401 before any tool
runs). A key sees only the scopes it is granted, as on the API.

    ragtrail-mcp --base-url http://127.0.0.1:8000 --scope hospital              # stdio
    ragtrail-mcp --base-url http://127.0.0.1:8000 --transport http --port 8765  # HTTP, /mcp
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent

from ragtrail_client.client import RagtrailClient, RagtrailError, Recall, Step

INSTRUCTIONS = (
    "ragtrail remembers how earlier questions in this scope were answered. Call `recall` first: "
    "on a prefetch, answer from the sections it returns (they are current); on a hint, re-read the "
    "sections it names as changed; on a miss, search as usual. When your answer is accepted, call "
    "`record` with the sections you cited. If a recalled path did not help, call `feedback` with helpful=false."
)


def recall_text(answer: Recall) -> str:
    """A recall written for an agent to read."""
    if answer.outcome == "miss":
        return (f"ragtrail: miss (recall {answer.recall_id}). No recorded path for this question is valid now; "
                "search as usual, then call record with the sections your answer cites.")
    steps = "\n".join(
        f"{n}. {step.tool} {json.dumps(step.args, ensure_ascii=False)}" + (f" -> {', '.join(step.section_ids)}" if step.section_ids else "")
        for n, step in enumerate(answer.steps, 1)
    )
    header = (f"ragtrail: {answer.outcome} (recall {answer.recall_id}); a similar question was answered before: "
              f"\"{answer.matched_query}\" (similarity {answer.similarity:.2f}, {answer.matcher}).")
    if answer.outcome == "hint":
        return f"{header}\n{answer.hint}\n\nThe path taken then:\n{steps}"
    sections = "\n\n".join(
        f"## {section.id}\n{section.text}" + (" [cut to the token budget]" if section.truncated else "")
        for section in answer.sections
    )
    return (f"{header}\nEvery cited section is unchanged since; answer from them.\n\n{sections}"
            + (f"\n\nThe path taken then:\n{steps}" if steps else ""))


def build_server(base_url: str, api_key: str | None = None, scope: str | None = None, timeout: float = 10.0) -> MCPServer:
    """The MCP server for one ragtrail site; `api_key` is for stdio (HTTP callers bring their own)."""
    server = MCPServer(name="ragtrail", instructions=INSTRUCTIONS, version="0.1.0")

    def client_for(ctx: Context) -> RagtrailClient:
        key = api_key
        headers = ctx.headers or {}
        authorization = headers.get("authorization") or headers.get("Authorization") or ""
        if authorization.lower().startswith("bearer "):
            key = authorization[7:].strip()
        if not key:
            raise ToolError("no ragtrail API key: set RAGTRAIL_API_KEY (stdio) or send Authorization: Bearer rt_... (HTTP)")
        return RagtrailClient(base_url, key, scope, timeout=timeout)

    async def call(ctx: Context, method: str, *args: Any, **kwargs: Any) -> Any:
        client = client_for(ctx)
        try:
            # The client is synchronous; a thread keeps the event loop serving other sessions.
            return await anyio.to_thread.run_sync(lambda: getattr(client, method)(*args, **kwargs))
        except RagtrailError as error:
            raise ToolError(str(error)) from None
        except ValueError as error:
            raise ToolError(str(error)) from None

    @server.tool()
    async def recall(ctx: Context, query: str, scope: str | None = None, partition: str = "",
                     token_budget: int | None = None, session: str | None = None) -> CallToolResult:
        """Looks up the path recorded for the most similar question in the scope, checked
        against the sections now: prefetch (current section texts), hint or miss. Pass the
        same `session` (your run's id) to record, so a re-search teaches ragtrail."""
        answer: Recall = await call(ctx, "recall", query, partition=partition, token_budget=token_budget,
                                    session=session, scope=scope)
        structured = {
            "outcome": answer.outcome, "recall_id": answer.recall_id, "trail_id": answer.trail_id,
            "similarity": answer.similarity, "matched_query": answer.matched_query, "hint": answer.hint,
            "sections": [{"id": s.id, "status": s.status, "text": s.text} for s in answer.sections],
            "steps": [s.as_json() for s in answer.steps], "tokens": answer.tokens, "truncated": answer.truncated,
        }
        return CallToolResult(content=[TextContent(type="text", text=recall_text(answer))], structured_content=structured)

    @server.tool()
    async def record(ctx: Context, query: str, cited: list[str], hashes: dict[str, str] | None = None,
                     steps: list[dict[str, Any]] | None = None, signal: str = "accepted", partition: str = "",
                     session: str | None = None, scope: str | None = None) -> dict[str, Any]:
        """Records the path to an accepted answer: the question, the tool steps and the cited
        section ids with the hashes read (from get_section). Never the answer itself."""
        parsed = [Step(s["tool"], s.get("args", {}), tuple(s.get("section_ids", []))) for s in steps or []]
        recorded = await call(ctx, "record", query, cited, steps=parsed, hashes=hashes, signal=signal,
                              partition=partition, session=session, scope=scope)
        return {"trail_id": recorded.trail_id, "status": recorded.status, "reason": recorded.reason}

    @server.tool()
    async def feedback(ctx: Context, recall_id: str, helpful: bool, reason: str = "", scope: str | None = None) -> dict[str, Any]:
        """Says whether what a recall served helped. helpful=false reports a false hit: enough
        reports send the trail back to an operator for approval."""
        verdict = await call(ctx, "feedback", recall_id, helpful, reason, scope=scope)
        return {"recall_id": verdict.recall_id, "trail_status": verdict.trail_status,
                "false_hit_reports": verdict.false_hit_reports, "false_hit_reporters": verdict.false_hit_reporters}

    @server.tool()
    async def get_section(ctx: Context, section_id: str, scope: str | None = None) -> dict[str, Any]:
        """A section's current text and hash (the hash is what record wants)."""
        return await call(ctx, "get_section", section_id, scope=scope)

    @server.tool()
    async def lookup_tool_result(ctx: Context, tool: str, args: dict[str, Any], context: dict[str, Any] | None = None,
                                 caller: str | None = None, scope: str | None = None) -> dict[str, Any]:
        """A stored result of a read-only tool call, where the scope's policy caches that tool."""
        found = await call(ctx, "lookup_tool_result", tool, args, context=context, caller=caller, scope=scope)
        return {"hit": found.hit, "result": found.result, "age_s": found.age_s, "reason": found.reason}

    @server.tool()
    async def store_tool_result(ctx: Context, tool: str, args: dict[str, Any], result: Any,
                                context: dict[str, Any] | None = None, caller: str | None = None,
                                sections: dict[str, str] | None = None, scope: str | None = None) -> dict[str, Any]:
        """Stores a read-only tool's result; `sections` maps ids of sections it read to their hashes."""
        stored = await call(ctx, "store_tool_result", tool, args, result, context=context, caller=caller,
                            sections=sections, scope=scope)
        return {"stored": stored.stored, "ttl_s": stored.ttl_s, "reason": stored.reason}

    return server


class RequireBearer:
    """ASGI middleware: an HTTP request without a bearer key is refused with 401 before
    it reaches a tool (the key itself is checked by the API on every call)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if not headers.get(b"authorization", b"").lower().startswith(b"bearer "):
                body = json.dumps({"error": {"code": "unauthorized", "message": "send Authorization: Bearer rt_..."}}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(base_url: str, scope: str | None = None, timeout: float = 10.0):
    """The streamable HTTP app (at /mcp), each request authenticated by its own bearer key."""
    server = build_server(base_url, None, scope, timeout)
    return RequireBearer(server.streamable_http_app(stateless_http=True, json_response=True))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ragtrail-mcp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default=os.environ.get("RAGTRAIL_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--scope", default=os.environ.get("RAGTRAIL_SCOPE"), help="default scope of the tools")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--timeout", type=float, default=10.0)
    options = parser.parse_args(argv)
    if options.transport == "stdio":
        build_server(options.base_url, os.environ.get("RAGTRAIL_API_KEY"), options.scope, options.timeout).run("stdio")
        return
    import uvicorn

    uvicorn.run(http_app(options.base_url, options.scope, options.timeout), host=options.host, port=options.port, log_level="warning")


if __name__ == "__main__":
    main()
