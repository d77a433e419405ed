"""The TypeScript client in Chromium: a browser's fetch refuses to be called as another object's method."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "typescript"
TSC = CLIENT / "node_modules" / ".bin" / "tsc"
MISS = {"outcome": "miss", "recall_id": None, "trail_id": None, "matcher": None, "similarity": None}
MISS |= {"matched_query": None, "sections": [], "steps": [], "hint": None, "tokens": 0, "truncated": False}


class ClientAndApi(SimpleHTTPRequestHandler):
    """The client's built files, and a recall that misses, from one origin."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        raw = json.dumps(MISS).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.mark.skipif(
    not TSC.exists() and not os.environ.get("CI"),
    reason="needs the TypeScript client's packages: `npm ci` in clients/typescript (make test and .ci/run do)",
)
def test_the_typescript_client_calls_fetch_as_a_browser_requires(page):
    built = subprocess.run([str(TSC), "-p", str(CLIENT)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(ClientAndApi, directory=str(CLIENT)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        page.goto(url + "/package.json")
        outcomes = page.evaluate(
            """async (url) => {
                const { RagtrailClient } = await import("/dist/src/index.js");
                const said = [];
                for (const options of [{}, { fetch: window.fetch }]) {
                    const client = new RagtrailClient(url, { apiKey: "rt_x", scope: "s", ...options });
                    try { said.push((await client.recall("q")).outcome); } catch (e) { said.push(e.message); }
                }
                return said;
            }""",
            url,
        )
    finally:
        server.shutdown()
    assert outcomes == ["miss", "miss"]
