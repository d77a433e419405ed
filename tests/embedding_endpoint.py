"""A stand-in OpenAI-compatible embeddings endpoint: a local HTTP server speaking
`POST /v1/embeddings` on a port the OS gives, for the endpoint embedder's tests and docs.

Its vectors are the hashing embedder's (deterministic, nearer for texts sharing words), sent
scaled (not of unit length) and in reverse order with their `index`, as the protocol allows.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from trails.embedders.hashing import Embedder as HashingEmbedder

KEY = "sk-stand-in"


class EmbeddingEndpoint:
    """The server, what it was asked (`requests`: each request's JSON body and headers) and
    how it misbehaves next (`fail`: statuses to answer first, one a request; `hang_s`; `mode`:
    "const" one vector for every text, "nan"/"inf"/"zero" such a vector first, "echo" a 401
    repeating the key it was sent, "trickle" the answer a few bytes at a time, "stall" half the answer then nothing for `stall_s`, "huge" a valid
    answer padded to 8 MB, "dim" vectors one dimension shorter, "full" the model's own
    dimensions whatever `dimensions` asks)."""

    def __init__(self, key: str = KEY) -> None:
        self.key, self.requests, self.fail, self.hang_s, self.mode = key, [], [], 0.0, ""
        self.stall_s = 2.0
        self._vectors = HashingEmbedder()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 -- the standard library's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append({"body": body, "headers": dict(self.headers), "path": self.path})
                if endpoint.hang_s:
                    time.sleep(endpoint.hang_s)
                if endpoint.fail:
                    return self.answer(endpoint.fail.pop(0), {"error": {"message": "the stand-in is busy"}})
                if endpoint.mode == "echo-all":  # what a chatty proxy says back: the path and every header
                    said = f"{self.path} with {self.headers.get('Authorization')}"
                    return self.answer(401, {"error": {"message": f"not allowed: {said}"}})
                if self.path.split("?")[0] != "/v1/embeddings":
                    return self.answer(404, {"error": {"message": f"no route {self.path}"}})
                if endpoint.mode in ("echo", "echo-far"):
                    sent = self.headers.get("Authorization", "")
                    said = (
                        ("." * 190 + " key: " + sent.removeprefix("Bearer ")) if endpoint.mode == "echo-far" else sent
                    )
                    return self.answer(401, {"error": {"message": f"Incorrect API key provided: {said}"}})
                if self.headers.get("Authorization") != f"Bearer {endpoint.key}":
                    return self.answer(401, {"error": {"message": "Incorrect API key provided"}})
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                vectors = endpoint._vectors.embed_many(texts) * 3.0
                if body.get("dimensions") and endpoint.mode != "full":
                    vectors = vectors[:, : body["dimensions"]]
                rows = [v.tolist() for v in vectors]
                if endpoint.mode == "const":
                    rows = [[1.0] * len(row) for row in rows]
                elif endpoint.mode in ("nan", "inf", "zero"):
                    rows[0][0] = {"nan": float("nan"), "inf": float("inf"), "zero": 0.0}[endpoint.mode]
                    if endpoint.mode == "zero":
                        rows[0] = [0.0] * len(rows[0])
                elif endpoint.mode == "dim":
                    rows = [row[:-1] for row in rows]
                data = [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)]
                payload = {"object": "list", "data": data[::-1], "model": body["model"]}
                if endpoint.mode == "huge":
                    payload["padding"] = "x" * 8_000_000
                self.answer(200, payload)

            def answer(self, status: int, payload: dict) -> None:
                content = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                try:
                    if endpoint.mode == "stall":  # half the answer, then nothing for hang_s
                        self.wfile.write(content[: len(content) // 2])
                        self.wfile.flush()
                        return time.sleep(endpoint.stall_s)
                    if endpoint.mode != "trickle":
                        return self.wfile.write(content)
                    for start in range(0, len(content), 64):  # each read is quick; the whole answer is not
                        self.wfile.write(content[start : start + 64])
                        self.wfile.flush()
                        time.sleep(0.02)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up reading, as it should

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
