"""ragtrail as an MCP server (the official `mcp` SDK), over stdio or streamable HTTP.

It runs beside the ragtrail site and calls its JSON API with the Python client, so it
is authenticated exactly as the API is: over stdio with the key in RAGTRAIL_API_KEY;
over HTTP with the MCP client's own `Authorization: Bearer rt_...` header, passed
through on every call (a request without one is refused with 401 before any tool
runs). A key sees only the scopes it is granted, as on the API.

The scope is never a free argument a model could invent: `--scope` fixes it; without it,
a stdio server asks the API which scopes its key is granted (waiting up to `--wait`
seconds for the API) and fixes the one, or offers exactly those as a choice, and refuses
to start when it cannot tell; an HTTP server (whose callers bring different keys) uses
each caller's key's only scope, and refuses a key granted several (run it with --scope).

Every tool call ends by the client's deadline (recall 1 s, the others 1.5 s): a hung or
stopped ragtrail costs a model no more, and the tool error says to go on without it.

Tool names start with `ragtrail_`, so an agent can mount this server beside others.

    ragtrail-mcp --base-url http://127.0.0.1:8000 --scope hospital              # stdio
    ragtrail-mcp --base-url http://127.0.0.1:8000 --transport http --port 8765  # HTTP, /mcp
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import time
import typing
from collections import OrderedDict
from typing import Annotated, Any, Literal, Optional

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError

from ragtrail_client.aio import AsyncRagtrailClient
from ragtrail_client.client import CALL_DEADLINE, RECALL_DEADLINE, RagtrailClient, RagtrailError, Recall, Step

INSTRUCTIONS = (
    "ragtrail remembers how earlier questions in this scope were answered. Call `ragtrail_recall` "
    "first: on a prefetch, answer from the sections it returns (they are current); on a hint, re-read "
    "the sections it names as changed; on a miss, search as usual, then, where the miss says so, call "
    "`ragtrail_second_chance` with the recall id and the section ids your search returned, best first: "
    "a path recorded for a nearly matching question may apply. When your answer has a positive "
    "signal (the user or a verifier accepted it), call `ragtrail_record` with the steps you took and "
    "the sections you cited; without one, record with signal `pending`, and an operator decides. If "
    "a recalled path did not help, call `ragtrail_feedback` with helpful=false."
)

SectionId = Annotated[str, Field(min_length=1, max_length=512)]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class StepInput(BaseModel):
    """One tool call on the way to the answer."""

    model_config = ConfigDict(extra="forbid")
    tool: Annotated[
        str, Field(min_length=1, max_length=200, description="The name of the tool you called, e.g. `search_docs`.")
    ]
    args: Annotated[dict[str, Any], Field(description="The arguments you called it with, as a JSON object.")] = {}
    section_ids: Annotated[
        list[SectionId],
        Field(max_length=100, description="Ids of the sections this call returned or opened (may be empty)."),
    ] = []


Signal = Literal["accepted", "user", "verifier", "pending"]
SIGNAL_MEANING = (
    "Who approved the answer this path led to, which decides whether it is served. "
    "`accepted`: the caller (your application) accepted the answer; `user`: the user gave a thumbs-up; "
    "`verifier`: an automatic verifier approved it. Each of these is served to later similar questions at once. "
    "`pending`: nobody has approved it yet; it is kept for an operator to approve and is not served until then. "
    "Choose `pending` unless you hold one of the three signals."
)


def recall_text(answer: Recall) -> str:
    """A recall written for an agent to read; a miss names ragtrail_second_chance only where
    the answer says a second chance is possible (`second_chance_possible`)."""
    if answer.outcome == "miss":
        then = (
            "search as usual, then call ragtrail_second_chance with this recall id and the section ids your search "
            "returned, and once answered, ragtrail_record"
            if answer.second_chance_possible and answer.recall_id
            else "search as usual, then call ragtrail_record"
        )
        return (
            f"ragtrail: miss (recall {answer.recall_id}). No recorded path for this question is valid now; "
            f"{then} with the steps you took and the sections your answer cites."
        )
    steps = "\n".join(
        f"{n}. {step.tool} {json.dumps(step.args, ensure_ascii=False)}"
        + (f" -> {', '.join(step.section_ids)}" if step.section_ids else "")
        for n, step in enumerate(answer.steps, 1)
    )
    header = (
        f"ragtrail: {answer.outcome} (recall {answer.recall_id}); a similar question was answered before: "
        f'"{answer.matched_query}" (similarity {answer.similarity:.2f}, {answer.matcher}).'
    )
    if answer.outcome == "hint":
        still = "\n\n".join(
            f"## {section.id} (unchanged)\n{section.text}" + (" [cut to the token budget]" if section.truncated else "")
            for section in answer.sections
            if section.status == "valid" and section.text
        )
        return f"{header}\n{answer.hint}\n\nThe path taken then:\n{steps}" + (
            f"\n\nThe sections still valid, as they read now:\n\n{still}" if still else ""
        )
    if answer.sections and all(section.text is None for section in answer.sections):
        # A scope that keeps hashes only: the agent reads the sections from its own index.
        listed = "\n".join(f"- {section.id} (sha256 {section.hash})" for section in answer.sections)
        return (
            f"{header}\nEvery cited section is unchanged since. This scope keeps no section text: read these "
            f"sections from your own index (their SHA-256 is what your copy must hash to), and answer from them.\n"
            f"{listed}" + (f"\n\nThe path taken then:\n{steps}" if steps else "")
        )
    sections = "\n\n".join(
        f"## {section.id}\n{section.text}" + (" [cut to the token budget]" if section.truncated else "")
        for section in answer.sections
    )
    return f"{header}\nEvery cited section is unchanged since; answer from them.\n\n{sections}" + (
        f"\n\nThe path taken then:\n{steps}" if steps else ""
    )


def second_chance_text(answer: Recall) -> str:
    """A second chance's answer written for an agent to read."""
    if answer.outcome == "miss":
        reason = answer.second_chance.reason if answer.second_chance else "none was given"
        return (
            f"ragtrail: no second chance (recall {answer.recall_id}): {reason}. Answer from your search, then call "
            "ragtrail_record with the steps you took and the sections your answer cites."
        )
    return (
        "ragtrail: second chance given. A nearly matching question's path cites only sections your search "
        "returned; they follow, current.\n" + recall_text(answer)
    )


def recall_structured(answer: Recall) -> dict[str, Any]:
    """A recall's structured content (RECALL_OUTPUT_SCHEMA)."""
    structured = {
        "outcome": answer.outcome,
        "recall_id": answer.recall_id,
        "trail_id": answer.trail_id,
        "matcher": answer.matcher,
        "similarity": answer.similarity,
        "matched_query": answer.matched_query,
        "hint": answer.hint,
        "sections": [{"id": s.id, "status": s.status, "text": s.text, "hash": s.hash} for s in answer.sections],
        "steps": [s.as_json() for s in answer.steps],
        "tokens": answer.tokens,
        "truncated": answer.truncated,
        "second_chance_possible": answer.second_chance_possible,
    }
    if answer.second_chance is not None:
        structured["second_chance"] = {"given": answer.second_chance.given, "reason": answer.second_chance.reason}
    return structured


def invalid_arguments(error: ValidationError) -> str:
    """A refusal of a tool's arguments as the REST API words one: the field, dotted, then what is wrong."""
    problems = []
    for problem in error.errors():
        field = ".".join(str(part) for part in problem.get("loc", ())) or "arguments"
        problems.append(f"{field}: {problem.get('msg', 'invalid')}")
    return (
        f"422 invalid: {problems[0]}"
        + (f" (and {len(problems) - 1} more: {'; '.join(problems[1:])})" if len(problems) > 1 else "")
        + (f" (field: {problems[0].split(':')[0]})")
    )


class RagtrailMCPServer(MCPServer):
    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        """Arguments the input schema refuses come back as a tool error naming the field,
        worded as the REST API words it (the SDK's own text is pydantic's, with the values).
        An argument the tool does not take is refused, not ignored: a model that invents a
        `scope` must learn that it cannot choose one."""
        schema = self._tool_input_schema(name) or {}
        unknown = sorted(set(arguments or {}) - set(schema.get("properties", {})))
        if schema and unknown:
            raise ToolError(
                f"Error executing tool {name}: 422 invalid: {unknown[0]}: this tool takes no such argument "
                f"(it takes {', '.join(schema.get('properties', {})) or 'none'}) (field: {unknown[0]})"
            )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            if isinstance(error.__cause__, ValidationError):
                raise ToolError(
                    f"Error executing tool {name}: {invalid_arguments(error.__cause__)}"
                ) from error.__cause__
            raise


def _scoped(fn, choice: tuple[str, ...] | None, fixed: str | None):
    """The tool function as a model sees it: with a known set of scopes, `scope` is one of
    them (required); otherwise there is no `scope` argument (fixed, or the key's only one)."""
    hints = typing.get_type_hints(fn, include_extras=True)  # this module's annotations are strings
    signature = inspect.signature(fn)
    parameters = [p.replace(annotation=hints[p.name]) for p in signature.parameters.values() if p.name != "scope"]
    annotations = {k: v for k, v in hints.items() if k != "scope"}
    if fixed is None and choice:
        scope_type = Annotated[
            Literal[choice], Field(description="The scope (tenant and document set) to use: one your key is granted.")
        ]
        parameters.append(inspect.Parameter("scope", inspect.Parameter.KEYWORD_ONLY, annotation=scope_type))
        annotations["scope"] = scope_type

    async def tool(**kwargs):
        kwargs.setdefault("scope", fixed)
        return await fn(**kwargs)

    # The description a model reads: the docstring without its source indentation.
    tool.__name__, tool.__doc__ = fn.__name__, inspect.cleandoc(fn.__doc__ or "")
    tool.__signature__ = signature.replace(
        parameters=sorted(parameters, key=lambda p: p.kind),
        return_annotation=hints.get("return", inspect.Signature.empty),
    )
    tool.__annotations__ = annotations
    return tool


def build_server(
    base_url: str,
    api_key: str | None = None,
    scope: str | None = None,
    timeout: float = CALL_DEADLINE,
    scope_choice: tuple[str, ...] | None = None,
    recall_timeout: float = RECALL_DEADLINE,
) -> MCPServer:
    """The MCP server for one ragtrail site; `api_key` is for stdio (HTTP callers bring their own).

    `scope` fixes the scope of every tool; `scope_choice` offers these scopes as the only
    values of a required `scope` argument; with neither, each call uses its key's only scope."""
    # WARNING, not the SDK's INFO: a host's log gets no line per request (main's --log-level says otherwise).
    server = RagtrailMCPServer(name="ragtrail", instructions=INSTRUCTIONS, version="0.3.0", log_level="WARNING")
    # One pool of connections for every call; a client per key, which keeps that key's scope
    # once looked up (a few hundred keys at most: the oldest are let go).
    pool = httpx.AsyncClient(follow_redirects=False)
    clients: OrderedDict[str, AsyncRagtrailClient] = OrderedDict()

    def client_for(ctx: Context) -> AsyncRagtrailClient:
        key = api_key
        headers = ctx.headers or {}
        authorization = headers.get("authorization") or headers.get("Authorization") or ""
        if authorization.lower().startswith("bearer "):
            key = authorization[7:].strip()
        if not key:
            raise ToolError(
                "no ragtrail API key: set RAGTRAIL_API_KEY (stdio) or send Authorization: Bearer rt_... (HTTP)"
            )
        client = clients.pop(key, None) or AsyncRagtrailClient(
            base_url, key, scope, timeout=timeout, recall_timeout=recall_timeout, http=pool
        )
        clients[key] = client
        while len(clients) > 256:
            clients.popitem(last=False)
        return client

    async def call(ctx: Context, method: str, *args: Any, **kwargs: Any) -> Any:
        client = client_for(ctx)
        try:
            return await getattr(client, method)(*args, **kwargs)
        except RagtrailError as error:
            if error.status == 0 and error.code in ("deadline", "unreachable"):
                raise ToolError(
                    f"ragtrail is not reachable at {base_url} ({error.message}); go on without it"
                ) from None
            raise ToolError(str(error)) from None
        except ValueError as error:
            raise ToolError(f"{error}; this server offers no scope argument: start it with --scope") from None

    def tool(fn, read_only: bool):
        server.tool(
            name=f"ragtrail_{fn.__name__}",
            annotations=ToolAnnotations(
                read_only_hint=read_only, destructive_hint=False, idempotent_hint=read_only, open_world_hint=False
            ),
        )(_scoped(fn, scope_choice, scope))

    async def recall(
        ctx: Context,
        query: Annotated[
            str, Field(min_length=1, max_length=2000, description="The user's question, as you would search for it.")
        ],
        partition: Annotated[
            str,
            Field(
                max_length=200,
                description="A sub-division of the scope (a product version, a language); empty for none. "
                "Recall only matches paths recorded under the same partition.",
            ),
        ] = "",
        token_budget: Annotated[
            Optional[Annotated[int, Strict()]],
            Field(
                ge=0,
                le=200_000,
                description="The most tokens of section text to return on a prefetch; omit for the scope's default.",
            ),
        ] = None,
        session: Annotated[
            Optional[str],
            Field(
                min_length=1,
                max_length=200,
                description="Your run's id. Pass the same one to ragtrail_record: if you then search again and cite "
                "other sections, ragtrail learns this recall was wrong.",
            ),
        ] = None,
        scope: Optional[str] = None,
    ) -> CallToolResult:
        """Call this first, before searching. Finds the path recorded for the most similar earlier
        question in this scope and checks every section it cited against the current text.
        Answers `prefetch` (every cited section unchanged: their current text is returned, answer
        from it), `hint` (some changed: which are still valid and where to start) or `miss`
        (search as usual). Never returns an earlier answer, only sections and steps."""
        answer: Recall = await call(
            ctx, "recall", query, partition=partition, token_budget=token_budget, session=session, scope=scope
        )
        return CallToolResult(
            content=[TextContent(type="text", text=recall_text(answer))], structured_content=recall_structured(answer)
        )

    async def second_chance(
        ctx: Context,
        recall_id: Annotated[
            str,
            Field(min_length=1, max_length=100, description="The recall id of the miss ragtrail_recall gave you."),
        ],
        section_ids: Annotated[
            list[SectionId],
            Field(
                max_length=50,
                description="The ids of the sections your own search returned for the question, best first, "
                "as your search tool gave them.",
            ),
        ],
        token_budget: Annotated[
            Optional[Annotated[int, Strict()]],
            Field(
                ge=0,
                le=200_000,
                description="The most tokens of section text to return; omit for the scope's default.",
            ),
        ] = None,
        scope: Optional[str] = None,
    ) -> CallToolResult:
        """Call this right after searching for a question ragtrail_recall answered with `miss`
        and whose miss names this tool (a second chance is possible), with that recall's id and
        the section ids your search returned, best first. Where a
        path recorded for a nearly matching question cites only sections among your first
        results, ragtrail serves it, checked against the current text (`prefetch`: answer from
        those sections; `hint`: some changed). Otherwise `miss`, with the reason: answer from
        your search. Once per recall, within 15 minutes of it; never after a prefetch or hint."""
        answer: Recall = await call(
            ctx, "second_chance", recall_id, section_ids, token_budget=token_budget, scope=scope
        )
        return CallToolResult(
            content=[TextContent(type="text", text=second_chance_text(answer))],
            structured_content=recall_structured(answer),
        )

    async def record(
        ctx: Context,
        query: Annotated[
            str, Field(min_length=1, max_length=2000, description="The question you answered, as the user asked it.")
        ],
        cited: Annotated[
            list[SectionId],
            Field(
                min_length=1,
                max_length=100,
                description="Ids of the sections your answer cites (as returned by your search or by ragtrail_get_section).",
            ),
        ],
        signal: Annotated[Signal, Field(description=SIGNAL_MEANING)],
        hashes: Annotated[
            dict[SectionId, Sha256],
            Field(
                description="For each cited section, the `hash` ragtrail_get_section or a prefetch gave you for the "
                "text you read (SHA-256 of its UTF-8 text). If a section changed since you read it, the record is "
                "refused, so a stale path is never kept. May be empty."
            ),
        ] = {},
        steps: Annotated[
            list[StepInput], Field(max_length=50, description="The tool calls you made to find the answer, in order.")
        ] = [],
        partition: Annotated[
            str, Field(max_length=200, description="The partition you recalled in; empty for none.")
        ] = "",
        session: Annotated[
            Optional[str],
            Field(min_length=1, max_length=200, description="The same run id you passed to ragtrail_recall."),
        ] = None,
        scope: Optional[str] = None,
    ) -> dict[str, Any]:
        """Call this after an answer, to keep the path to it: the question, the tool steps and the
        cited section ids with their hashes. Never the answer itself. `signal` says who approved
        the answer; only an approved path is served later (`pending` waits for an operator)."""
        parsed = [Step(s.tool, s.args, tuple(s.section_ids)) for s in steps]
        recorded = await call(
            ctx,
            "record",
            query,
            cited,
            steps=parsed,
            hashes=hashes,
            signal=signal,
            partition=partition,
            session=session,
            scope=scope,
        )
        return {"trail_id": recorded.trail_id, "status": recorded.status, "reason": recorded.reason}

    async def feedback(
        ctx: Context,
        recall_id: Annotated[
            str, Field(min_length=1, max_length=100, description="The recall id ragtrail_recall gave you.")
        ],
        # Strict: "no", 0 or "false" are refused, not read as false (each false is a report against a trail).
        helpful: Annotated[
            bool,
            Strict(),
            Field(description="false if what the recall served did not answer the question (a false hit)."),
        ],
        reason: Annotated[str, Field(max_length=500, description="Why, in a few words (shown to operators).")] = "",
        scope: Optional[str] = None,
    ) -> dict[str, Any]:
        """Say whether what a recall served helped. helpful=false reports a false hit: reports
        from enough different keys send the path back to an operator for approval."""
        verdict = await call(ctx, "feedback", recall_id, helpful, reason, scope=scope)
        return {
            "recall_id": verdict.recall_id,
            "trail_status": verdict.trail_status,
            "false_hit_reports": verdict.false_hit_reports,
            "false_hit_reporters": verdict.false_hit_reporters,
        }

    async def get_section(
        ctx: Context,
        section_id: Annotated[
            SectionId, Field(description="The section's id, e.g. `Doc/faq/general.rst#what-is-python`.")
        ],
        scope: Optional[str] = None,
    ) -> dict[str, Any]:
        """A section's current text and hash (the hash is what ragtrail_record wants)."""
        return await call(ctx, "get_section", section_id, scope=scope)

    async def lookup_tool_result(
        ctx: Context,
        tool: Annotated[
            str,
            Field(min_length=1, max_length=200, description="The name of the read-only tool you are about to call."),
        ],
        args: Annotated[dict[str, Any], Field(description="The arguments you would call it with.")],
        context: Annotated[
            dict[str, Any],
            Field(description="Anything else its result depends on (a user's locale, an index version)."),
        ] = {},
        caller: Annotated[
            Optional[str],
            Field(min_length=1, max_length=200, description="Whose call this is, for tools cached per caller."),
        ] = None,
        scope: Optional[str] = None,
    ) -> dict[str, Any]:
        """Before calling a read-only tool: a stored result of the same call, where the scope's
        policy caches that tool and the sections it read are unchanged. On a miss, call the tool."""
        found = await call(ctx, "lookup_tool_result", tool, args, context=context, caller=caller, scope=scope)
        return {"hit": found.hit, "result": found.result, "age_s": found.age_s, "reason": found.reason}

    async def store_tool_result(
        ctx: Context,
        tool: Annotated[
            str, Field(min_length=1, max_length=200, description="The name of the read-only tool you called.")
        ],
        args: Annotated[dict[str, Any], Field(description="The arguments you called it with.")],
        result: Annotated[Any, Field(description="What it returned (any JSON).")],
        context: Annotated[
            dict[str, Any], Field(description="The same context as for ragtrail_lookup_tool_result.")
        ] = {},
        caller: Annotated[
            Optional[str],
            Field(min_length=1, max_length=200, description="Whose call this was, for tools cached per caller."),
        ] = None,
        sections: Annotated[
            dict[SectionId, Sha256],
            Field(
                description="Ids of the sections the result was read from, each with the hash you read, so it is never served after one changes."
            ),
        ] = {},
        scope: Optional[str] = None,
    ) -> dict[str, Any]:
        """After calling a read-only tool: store its result for the same call later (where the
        scope's policy caches that tool)."""
        stored = await call(
            ctx,
            "store_tool_result",
            tool,
            args,
            result,
            context=context,
            caller=caller,
            sections=sections or None,
            scope=scope,
        )
        return {"stored": stored.stored, "ttl_s": stored.ttl_s, "reason": stored.reason}

    for fn, read_only in (
        (recall, False),
        (second_chance, False),
        (record, False),
        (feedback, False),
        (get_section, True),
        (lookup_tool_result, True),
        (store_tool_result, False),
    ):
        tool(fn, read_only)
    for registered in server._tool_manager.list_tools():
        # Advertised as enforced: an argument a tool does not take is refused (call_tool), not ignored.
        registered.parameters["additionalProperties"] = False
    server._tool_manager.get_tool("ragtrail_recall").fn_metadata.output_schema = RECALL_OUTPUT_SCHEMA
    server._tool_manager.get_tool("ragtrail_second_chance").fn_metadata.output_schema = RECALL_OUTPUT_SCHEMA
    return server


_TEXT_OR_NULL = {"type": ["string", "null"]}
# What ragtrail_recall's structured content holds, for a client that reads it instead of the text.
RECALL_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "outcome": {"enum": ["prefetch", "hint", "miss"]},
        "recall_id": _TEXT_OR_NULL,
        "trail_id": _TEXT_OR_NULL,
        "matcher": {"enum": ["lexical", "embedding", "second-chance", None]},
        "matched_query": _TEXT_OR_NULL,
        "hint": _TEXT_OR_NULL,
        "similarity": {"type": ["number", "null"]},
        "sections": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "status"],
                "properties": {
                    "id": {"type": "string"},
                    "status": {"enum": ["valid", "changed", "deleted"]},
                    "text": _TEXT_OR_NULL,
                    "hash": _TEXT_OR_NULL,
                },
            },
        },
        "steps": {"type": "array", "items": {"type": "object", "required": ["tool", "args", "section_ids"]}},
        "tokens": {"type": "integer"},
        "truncated": {"type": "boolean"},
        # On a miss: whether ragtrail_second_chance may serve a near miss's path (call it only then).
        "second_chance_possible": {"type": "boolean"},
        # ragtrail_second_chance's only: whether one was given, and why.
        "second_chance": {
            "type": "object",
            "required": ["given", "reason"],
            "properties": {"given": {"type": "boolean"}, "reason": {"type": "string"}},
        },
    },
    "required": ["outcome", "recall_id", "sections", "steps", "tokens", "truncated"],
}


class RequireBearer:
    """ASGI middleware: an HTTP request without a bearer key is refused with 401 before
    it reaches a tool (the key itself is checked by the API on every call)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            if not headers.get(b"authorization", b"").lower().startswith(b"bearer "):
                body = json.dumps(
                    {"error": {"code": "unauthorized", "message": "send Authorization: Bearer rt_..."}}
                ).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(
    base_url: str, scope: str | None = None, timeout: float = CALL_DEADLINE, recall_timeout: float = RECALL_DEADLINE
):
    """The streamable HTTP app (at /mcp), each request authenticated by its own bearer key."""
    server = build_server(base_url, None, scope, timeout, recall_timeout=recall_timeout)
    return RequireBearer(server.streamable_http_app(stateless_http=True, json_response=True))


class CannotStart(SystemExit):
    """The server cannot tell which scopes its tools may use: it does not start."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"ragtrail-mcp: {reason}")


def granted_scopes(base_url: str, api_key: str, wait: float) -> tuple[str, ...]:
    """The key's scopes, asking again for up to `wait` seconds while the API is away.

    Raises:
        CannotStart: the API did not answer in time, refused the key, or grants it no scope.
    """
    give_up = time.monotonic() + wait
    with RagtrailClient(base_url, api_key, retries=0) as probe:
        while True:
            try:
                granted = tuple(s["slug"] for s in probe.scopes())
                break
            except RagtrailError as error:
                if error.status != 0 or error.code not in ("deadline", "unreachable") or time.monotonic() >= give_up:
                    raise CannotStart(
                        f"the key's scopes could not be read from {base_url} ({error}); start it once "
                        "ragtrail answers, or with --scope"
                    ) from None
                time.sleep(min(0.5, max(0.0, give_up - time.monotonic())))
    if not granted:
        raise CannotStart("the key is granted no scope")
    return granted


def stdio_server(
    base_url: str,
    api_key: str | None,
    scope: str | None,
    timeout: float = CALL_DEADLINE,
    recall_timeout: float = RECALL_DEADLINE,
    wait: float = 5.0,
) -> MCPServer:
    """The stdio server for one key: its scope fixed by --scope, or by the key where the key
    is granted one; a key granted several offers exactly those. Without --scope it starts
    only once it knows the key's scopes (the API answered within `wait` seconds)."""
    if not api_key:
        raise CannotStart("set RAGTRAIL_API_KEY to a ragtrail API key")
    choice: tuple[str, ...] | None = None
    if scope is None:
        granted = granted_scopes(base_url, api_key, wait)
        if len(granted) == 1:
            scope = granted[0]
        else:
            choice = granted
    return build_server(base_url, api_key, scope, timeout, scope_choice=choice, recall_timeout=recall_timeout)


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragtrail-mcp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default=os.environ.get("RAGTRAIL_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--scope", default=os.environ.get("RAGTRAIL_SCOPE"), help="the scope of every tool")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--timeout", type=float, default=CALL_DEADLINE, help="each call's overall deadline, retries included (s)"
    )
    parser.add_argument(
        "--recall-timeout",
        type=float,
        default=RECALL_DEADLINE,
        help="recall's overall deadline (s): past it the model searches as it would without ragtrail",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=5.0,
        help="stdio without --scope: how long to wait for the API to say the key's scopes before refusing to start (s)",
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default="warning",
        help="what the server logs to stderr (info adds a line per HTTP request to ragtrail)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    options = argument_parser().parse_args(argv)
    logging.basicConfig(level=options.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    if options.transport == "stdio":
        stdio_server(
            options.base_url,
            os.environ.get("RAGTRAIL_API_KEY"),
            options.scope,
            options.timeout,
            options.recall_timeout,
            options.wait,
        ).run("stdio")
        return
    import uvicorn

    uvicorn.run(
        http_app(options.base_url, options.scope, options.timeout, options.recall_timeout),
        host=options.host,
        port=options.port,
        log_level=options.log_level,
    )


if __name__ == "__main__":
    main()
