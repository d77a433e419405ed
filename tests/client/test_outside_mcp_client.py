"""The MCP server through a client this repo did not write: langchain-mcp-adapters on mcp 1.x
(clients/mcp-outside/, in a venv of its own), over stdio and streamable HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.test_mcp_server import TOOLS, granted, http_server  # noqa: F401 -- fixtures
from trails.models import Trail, TrailStatus

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE_PYTHON = ROOT / ".venv-mcp-outside" / "bin" / "python"
DRIVER = ROOT / "clients" / "mcp-outside" / "drive.py"


@pytest.fixture
def outside_python() -> Path:
    if not OUTSIDE_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{OUTSIDE_PYTHON} is missing: `make test` makes it from clients/mcp-outside/requirements.txt")
        pytest.skip("no .venv-mcp-outside (make test makes it)")
    return OUTSIDE_PYTHON


def drive(outside_python: Path, *args: str) -> dict:
    # The driver's environment carries nothing of ragtrail's venv: it imports only its own packages.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(outside_python), str(DRIVER), *args], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def check(report: dict) -> None:
    assert set(report["tools"]) == TOOLS
    record = report["schemas"]["ragtrail_record"]
    assert "signal" in record["required"] and "scope" not in record["properties"]
    assert report["miss"]["ok"] and "miss" in str(report["miss"]["ok"])
    # The model reads which field was wrong, worded as the REST API words it.
    assert "steps.0.tool" in report["malformed"]["error"] and "Field required" in report["malformed"]["error"]
    assert "active" in str(report["recorded"]["ok"])
    assert "prefetch" in str(report["hit"]["ok"])


def test_langchain_mcp_adapters_over_stdio(live_server, granted, outside_python):  # noqa: F811
    _, key = granted
    check(drive(outside_python, "stdio", sys.executable, live_server.url, key))
    assert Trail.objects.get().status == TrailStatus.ACTIVE


def test_langchain_mcp_adapters_over_streamable_http(http_server, granted, outside_python):  # noqa: F811
    _, key = granted
    check(drive(outside_python, "http", http_server, key))
    assert Trail.objects.get().status == TrailStatus.ACTIVE
