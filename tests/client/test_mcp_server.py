"""The MCP server end to end: the SDK's own client, over stdio and streamable HTTP, to a live ragtrail."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from scopes.models import ApiKey, Scope, Section
from tests.client.test_python_client import hung  # noqa: F401 -- a fixture: a server that never answers
from tests.conftest import VISITING
from trails.models import Trail, TrailStatus

TOOLS = {
    "ragtrail_recall",
    "ragtrail_second_chance",
    "ragtrail_record",
    "ragtrail_feedback",
    "ragtrail_get_section",
    "ragtrail_lookup_tool_result",
    "ragtrail_store_tool_result",
}
QUESTION = "What are the ICU visiting hours?"


@pytest.fixture
def granted(transactional_db):
    scope = Scope.objects.create(slug="hospital", matcher="lexical")
    Section.upsert(scope, VISITING)
    Scope.objects.create(slug="elsewhere", matcher="lexical")
    _, key = ApiKey.issue([scope], name="mcp test")
    return scope, key


def run_async(main) -> None:
    """Runs the client in a thread of its own: the browser tests' Playwright keeps an
    event loop on the main thread, where anyio.run would refuse to start."""
    failures: list[BaseException] = []

    def target() -> None:
        try:
            anyio.run(main)
        except BaseException as failure:  # re-raised in the test's thread
            failures.append(failure)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), "the MCP client did not finish in 120 s"
    if failures:
        raise failures[0]


def text_of(result) -> str:
    return "\n".join(block.text for block in result.content)


async def walk(client: Client, scope: Scope) -> None:
    """list tools -> recall (miss) -> malformed records -> record -> recall (prefetch) -> feedback, twice from one key."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == TOOLS
    for tool in tools.values():
        # A model reading only the tool list: every argument described; the scope fixed by the server.
        properties = tool.input_schema["properties"]
        assert "scope" not in properties, tool.name
        assert all(spec.get("description") for spec in properties.values()), (tool.name, properties)
    record_schema = tools["ragtrail_record"].input_schema
    assert "signal" in record_schema["required"]
    step = record_schema["$defs"]["StepInput"]
    assert set(step["properties"]) == {"tool", "args", "section_ids"} and step["required"] == ["tool"]
    missed = await client.call_tool("ragtrail_recall", {"query": QUESTION})
    assert not missed.is_error, text_of(missed)
    assert missed.structured_content["outcome"] == "miss" and "miss" in text_of(missed)
    # A scope without second chances: the miss does not send the model to a tool that cannot help.
    assert missed.structured_content["second_chance_possible"] is False
    assert "ragtrail_second_chance" not in text_of(missed) and "ragtrail_record" in text_of(missed)
    section = (await client.call_tool("ragtrail_get_section", {"section_id": "visiting/icu"})).structured_content
    # Malformed calls come back as tool errors naming the field, as the REST API names it.
    malformed = await client.call_tool(
        "ragtrail_record",
        {"query": QUESTION, "cited": ["visiting/icu"], "signal": "accepted", "steps": [{"args": {"q": "ICU"}}]},
    )
    assert malformed.is_error and "steps.0.tool" in text_of(malformed) and "Field required" in text_of(malformed)
    unsigned = await client.call_tool("ragtrail_record", {"query": QUESTION, "cited": ["visiting/icu"]})
    assert unsigned.is_error and "signal" in text_of(unsigned)
    unknown = await client.call_tool("ragtrail_record", {"query": QUESTION, "cited": ["no/such"], "signal": "accepted"})
    assert unknown.is_error and "422" in text_of(unknown) and "cited" in text_of(unknown)
    recorded = await client.call_tool(
        "ragtrail_record",
        {
            "query": QUESTION,
            "cited": ["visiting/icu"],
            "signal": "accepted",
            "hashes": {"visiting/icu": section["hash"]},
            "steps": [{"tool": "search", "args": {"q": "ICU visiting"}, "section_ids": ["visiting/icu"]}],
        },
    )
    assert recorded.structured_content["status"] == "active", text_of(recorded)
    for _ in range(2):
        hit = await client.call_tool("ragtrail_recall", {"query": "what are the ICU visiting hours"})
        assert hit.structured_content["outcome"] == "prefetch"
        # The agent reads the section's current text in the tool's text.
        assert VISITING["visiting/icu"] in text_of(hit) and "search" in text_of(hit)
        verdict = await client.call_tool(
            "ragtrail_feedback",
            {"recall_id": hit.structured_content["recall_id"], "helpful": False, "reason": "answered the ward"},
        )
    # One key's reports count once: the trail stays served until another key agrees.
    assert verdict.structured_content["trail_status"] == "active"
    assert (verdict.structured_content["false_hit_reports"], verdict.structured_content["false_hit_reporters"]) == (
        2,
        1,
    )
    after = await client.call_tool("ragtrail_recall", {"query": "what are the ICU visiting hours"})
    assert after.structured_content["outcome"] == "prefetch"
    # No argument reaches another scope: the schema has no scope, and an argument it lacks is refused, not ignored.
    refused = await client.call_tool("ragtrail_recall", {"query": QUESTION, "scope": "elsewhere"})
    assert refused.is_error and "scope: this tool takes no such argument" in text_of(refused)


def test_stdio_server_runs_recall_record_recall_and_feedback(live_server, granted):
    scope, key = granted
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "ragtrail_client.mcp_server",
            "--base-url",
            live_server.url,
            "--scope",
            "hospital",
            "--recall-timeout",
            "10",
        ],
        env={"RAGTRAIL_API_KEY": key},
    )

    async def main():
        async with Client(params) as client:
            await walk(client, scope)

    run_async(main)
    assert Trail.objects.get().status == TrailStatus.ACTIVE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_http_server(
    live_server, *scope_option: str, deadlines: tuple[str, ...] = ("--recall-timeout", "10", "--timeout", "10")
):
    """The MCP server over HTTP against `live_server` (or a base URL), with long deadlines by
    default (a test's first call may load the model); pass () for the defaults an agent gets."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ragtrail_client.mcp_server",
            "--transport",
            "http",
            "--port",
            str(port),
            "--base-url",
            getattr(live_server, "url", live_server),
            *scope_option,
            *deadlines,
        ]
    )
    for _ in range(100):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    return process, f"http://127.0.0.1:{port}/mcp"


@pytest.fixture
def http_server(live_server):
    process, url = start_http_server(live_server, "--scope", "hospital")
    try:
        yield url
    finally:
        process.terminate()
        process.wait(10)


def test_an_http_server_without_scope_uses_each_keys_only_scope_and_offers_no_scope_argument(live_server, granted):
    scope, key = granted
    _, two = ApiKey.issue([scope, Scope.objects.create(slug="pharmacy", matcher="lexical")], name="two scopes")
    process, url = start_http_server(live_server)
    seen = {}

    async def main():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                await walk(client, scope)
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {two}"}, timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                seen["two"] = await client.call_tool("ragtrail_recall", {"query": QUESTION})

    try:
        run_async(main)
    finally:
        process.terminate()
        process.wait(10)
    assert seen["two"].is_error and "granted 2 scopes" in text_of(seen["two"]) and "--scope" in text_of(seen["two"])
    assert Trail.objects.get().status == TrailStatus.ACTIVE


def test_http_server_authenticates_with_the_callers_api_key(http_server, granted):
    scope, key = granted

    async def main():
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
            async with Client(streamable_http_client(http_server, http_client=http)) as client:
                await walk(client, scope)

    run_async(main)
    assert httpx2.post(http_server, json={}).status_code == 401
    assert Trail.objects.get().status == TrailStatus.ACTIVE


def test_http_server_with_a_wrong_key_serves_nothing(http_server, granted):
    async def main():
        async with httpx2.AsyncClient(headers={"Authorization": "Bearer rt_wrong"}, timeout=30) as http:
            async with Client(streamable_http_client(http_server, http_client=http)) as client:
                refused = await client.call_tool("ragtrail_recall", {"query": QUESTION})
                assert refused.is_error and "401" in text_of(refused)

    run_async(main)


def stdio_tools(live_server, key: str) -> dict:
    """The tool list a stdio server started without --scope offers for this key."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ragtrail_client.mcp_server", "--base-url", live_server.url, "--recall-timeout", "10"],
        env={"RAGTRAIL_API_KEY": key},
    )
    found = {}

    async def main():
        async with Client(params) as client:
            found.update({tool.name: tool.input_schema for tool in (await client.list_tools()).tools})
            found["recall result"] = await client.call_tool(
                "ragtrail_recall",
                {
                    "query": QUESTION,
                    **({"scope": "hospital"} if "scope" in found["ragtrail_recall"]["properties"] else {}),
                },
            )

    run_async(main)
    return found


def test_a_key_of_one_scope_fixes_the_scope_and_a_key_of_several_offers_exactly_those(live_server, granted):
    scope, key = granted
    alone = stdio_tools(live_server, key)
    assert "scope" not in alone["ragtrail_recall"]["properties"] and not alone["recall result"].is_error
    both = Scope.objects.create(slug="pharmacy", matcher="lexical")
    _, two = ApiKey.issue([scope, both], name="two scopes")
    offered = stdio_tools(live_server, two)
    for name in TOOLS:
        schema = offered[name]
        assert "scope" in schema["required"], name
        assert schema["properties"]["scope"]["enum"] == ["hospital", "pharmacy"], name  # never "elsewhere"
    assert not offered["recall result"].is_error


def test_a_hashes_only_prefetch_tells_the_model_to_read_its_own_index():
    from ragtrail_client.client import Recall
    from ragtrail_client.mcp_server import recall_text

    answer = Recall.from_json(
        {
            "outcome": "prefetch",
            "recall_id": "r1",
            "trail_id": "t1",
            "matcher": "lexical",
            "similarity": 0.97,
            "matched_query": QUESTION,
            "sections": [{"id": "visiting/icu", "status": "valid", "text": None, "hash": "a" * 64, "new_field": 1}],
            "steps": [],
            "hint": None,
            "tokens": 0,
            "truncated": False,
        }
    )
    text = recall_text(answer)
    assert "read these sections from your own index" in text and f"visiting/icu (sha256 {'a' * 64})" in text


def test_a_miss_names_the_second_chance_tool_only_where_the_answer_says_it_is_possible():
    from ragtrail_client.client import Recall
    from ragtrail_client.mcp_server import recall_structured, recall_text

    miss = {"outcome": "miss", "recall_id": "r1", "sections": [], "steps": []}
    for said, named in (
        ({}, False),
        ({"second_chance_possible": False}, False),
        ({"second_chance_possible": True}, True),
    ):
        answer = Recall.from_json({**miss, **said})
        assert ("ragtrail_second_chance" in recall_text(answer)) is named, said
        assert recall_structured(answer)["second_chance_possible"] is named
    nameless = Recall.from_json({**miss, "recall_id": None, "second_chance_possible": True})
    assert "ragtrail_second_chance" not in recall_text(nameless)  # no recall id to give it


def test_a_stdio_server_with_its_scope_serves_while_ragtrail_hangs_and_every_call_fails_within_a_second_and_a_half(
    hung,
):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ragtrail_client.mcp_server", "--base-url", hung, "--scope", "s"],
        env={"RAGTRAIL_API_KEY": "rt_x"},
    )
    calls = {
        "ragtrail_recall": {"query": QUESTION},
        "ragtrail_record": {"query": QUESTION, "cited": ["s1"], "signal": "accepted"},
        "ragtrail_feedback": {"recall_id": "00000000-0000-0000-0000-000000000000", "helpful": False},
        "ragtrail_second_chance": {"recall_id": "00000000-0000-0000-0000-000000000000", "section_ids": ["s1"]},
        "ragtrail_get_section": {"section_id": "s1"},
        "ragtrail_lookup_tool_result": {"tool": "search", "args": {}},
    }
    timed: dict = {}

    async def main():
        async with Client(params) as client:
            for name, arguments in calls.items():
                started = time.perf_counter()
                answer = await client.call_tool(name, arguments)
                timed[name] = time.perf_counter() - started, answer

    run_async(main)
    for name, (seconds, answer) in timed.items():
        assert answer.is_error and "ragtrail is not reachable" in text_of(answer), name
        assert seconds < 1.6, (name, seconds)


@pytest.mark.parametrize("server", ["hung", "stopped"])
def test_an_http_server_as_the_readme_starts_it_answers_within_a_second_and_a_half_when_ragtrail_is_away(hung, server):
    base_url = hung if server == "hung" else "http://127.0.0.1:9"
    process, url = start_http_server(base_url, "--scope", "s", deadlines=())
    timed: dict = {}

    async def main():
        async with httpx2.AsyncClient(headers={"Authorization": "Bearer rt_x"}, timeout=30) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                for name, arguments in (
                    ("ragtrail_recall", {"query": QUESTION}),
                    ("ragtrail_get_section", {"section_id": "s1"}),
                ):
                    started = time.perf_counter()
                    answer = await client.call_tool(name, arguments)
                    timed[name] = time.perf_counter() - started, answer

    try:
        run_async(main)
    finally:
        process.terminate()
        process.wait(10)
    for name, (seconds, answer) in timed.items():
        assert answer.is_error and "ragtrail is not reachable" in text_of(answer), name
        assert seconds < 1.6, (name, seconds)


@pytest.mark.parametrize("server", ["hung", "stopped"])
def test_a_stdio_server_without_scope_refuses_to_start_when_it_cannot_read_the_keys_scopes(hung, server):
    """Never a free `scope` argument: without --scope the server must know the key's scopes."""
    base_url = hung if server == "hung" else "http://127.0.0.1:9"
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ragtrail_client.mcp_server", "--base-url", base_url, "--wait", "1"],
        env={"RAGTRAIL_API_KEY": "rt_x", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "the key's scopes could not be read" in done.stderr and "--scope" in done.stderr, (
        done.stderr
    )
    assert time.perf_counter() - started < 15


def test_tool_arguments_are_strict_and_descriptions_dedented():
    """ "no" or 0 is no boolean (a false helpful is a report against a trail), "5" no integer;
    neither reaches ragtrail (here: nothing listens, and the refusal names the field)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ragtrail_client.mcp_server", "--base-url", "http://127.0.0.1:9", "--scope", "s"],
        env={"RAGTRAIL_API_KEY": "rt_x"},
    )
    seen: dict = {}

    async def main():
        async with Client(params) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            seen["description"] = tools["ragtrail_recall"].description
            seen["schema"] = {
                "input": tools["ragtrail_recall"].input_schema,
                "output": tools["ragtrail_recall"].output_schema,
            }
            for value in ("no", 0, "false"):
                seen[f"helpful={value!r}"] = await client.call_tool(
                    "ragtrail_feedback", {"recall_id": "00000000-0000-0000-0000-000000000000", "helpful": value}
                )
            seen["token_budget='5'"] = await client.call_tool(
                "ragtrail_recall", {"query": QUESTION, "token_budget": "5"}
            )

    run_async(main)
    assert "\n        " not in seen.pop("description")
    schema = seen.pop("schema")
    assert schema["input"]["additionalProperties"] is False and schema["output"]["required"][0] == "outcome"
    for name, answer in seen.items():
        assert answer.is_error and "422 invalid" in text_of(answer) and "not reachable" not in text_of(answer), name


def test_the_tools_examples_name_sections_the_demo_holds():
    import inspect
    import json
    import re
    from pathlib import Path

    from ragtrail_client import mcp_server

    demo = {
        json.loads(line)["id"]
        for line in (Path(__file__).resolve().parents[2] / "scopes" / "fixtures" / "python-faq" / "sections-old.jsonl")
        .read_text()
        .splitlines()
    }
    examples = re.findall(r"`([^`\s]+#[^`\s]+)`", inspect.getsource(mcp_server))
    assert examples and set(examples) <= demo, set(examples) - demo


@pytest.mark.parametrize("level", [None, "info"], ids=["default", "--log-level info"])
def test_the_stdio_server_logs_no_line_per_request_unless_asked(live_server, granted, tmp_path, level):
    """A host (an IDE, an agent runner) keeps the server's stderr as its log: by default only warnings."""
    from mcp.client.stdio import stdio_client

    _, key = granted
    option = ("--recall-timeout", "10", *(("--log-level", level) if level else ()))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ragtrail_client.mcp_server", "--base-url", live_server.url, "--scope", "hospital", *option],
        # The client under test where PYTHONPATH names it (the SDK passes on only a few variables).
        env={"RAGTRAIL_API_KEY": key, **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}},
    )
    log = tmp_path / "stderr.log"
    answers = []

    async def main():
        with log.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                answers.append(await client.call_tool("ragtrail_recall", {"query": QUESTION}))

    run_async(main)
    assert not answers[0].is_error and answers[0].structured_content["outcome"] == "miss"
    said = log.read_text()
    assert ("HTTP Request: POST" in said) == (level == "info"), said
