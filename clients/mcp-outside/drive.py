"""Drives ragtrail's MCP server through langchain-mcp-adapters, as an agent framework would:
load the tools, walk recall -> bad record -> record -> recall, and print one JSON report.

    python drive.py stdio <python> <base-url> <api-key>
    python drive.py http <mcp-url> <api-key>

Run in its own venv (clients/mcp-outside/requirements.txt): it must not import anything of ragtrail.
"""

from __future__ import annotations

import asyncio
import json
import sys

from langchain_core.tools import ToolException
from langchain_mcp_adapters.client import MultiServerMCPClient

QUESTION = "What are the ICU visiting hours?"


async def walk(connection: dict) -> dict:
    client = MultiServerMCPClient({"ragtrail": connection}, handle_tool_errors=False)
    tools = {tool.name: tool for tool in await client.get_tools()}
    report: dict = {
        "tools": sorted(tools),
        "schemas": {
            name: tool.args_schema if isinstance(tool.args_schema, dict) else tool.args_schema.model_json_schema()
            for name, tool in tools.items()
        },
    }

    async def call(name: str, arguments: dict):
        try:
            return {"ok": await tools[name].ainvoke(arguments)}
        except ToolException as error:
            return {"error": str(error)}

    report["miss"] = await call("ragtrail_recall", {"query": QUESTION})
    report["malformed"] = await call(
        "ragtrail_record",
        {"query": QUESTION, "cited": ["visiting/icu"], "signal": "accepted", "steps": [{"args": {"q": "ICU"}}]},
    )
    section = await call("ragtrail_get_section", {"section_id": "visiting/icu"})
    report["section"] = section
    report["recorded"] = await call(
        "ragtrail_record",
        {
            "query": QUESTION,
            "cited": ["visiting/icu"],
            "signal": "accepted",
            "steps": [{"tool": "search", "args": {"q": "ICU visiting"}, "section_ids": ["visiting/icu"]}],
        },
    )
    report["hit"] = await call("ragtrail_recall", {"query": "Tell me the ICU visiting hours"})
    return report


def main(argv: list[str]) -> None:
    if argv[0] == "stdio":
        python, base_url, key = argv[1:4]
        connection = {
            "transport": "stdio",
            "command": python,
            "args": ["-m", "ragtrail_client.mcp_server", "--base-url", base_url, "--scope", "hospital"],
            "env": {"RAGTRAIL_API_KEY": key},
        }
    else:
        url, key = argv[1:3]
        connection = {"transport": "streamable_http", "url": url, "headers": {"Authorization": f"Bearer {key}"}}
    print(json.dumps(asyncio.run(walk(connection)), default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
