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
    how it misbehaves next (`fail`: statuses to answer first, one a request; `hang_s`)."""

    def __init__(self, key: str = KEY) -> None:
        self.key, self.requests, self.fail, self.hang_s = key, [], [], 0.0
        self._vectors = HashingEmbedder()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 -- the standard library's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append({"body": body, "headers": dict(self.headers)})
                if endpoint.hang_s:
                    time.sleep(endpoint.hang_s)
                if endpoint.fail:
                    return self.answer(endpoint.fail.pop(0), {"error": {"message": "the stand-in is busy"}})
                if self.path != "/v1/embeddings":
                    return self.answer(404, {"error": {"message": f"no route {self.path}"}})
                if self.headers.get("Authorization") != f"Bearer {endpoint.key}":
                    return self.answer(401, {"error": {"message": "Incorrect API key provided"}})
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                vectors = endpoint._vectors.embed_many(texts) * 3.0
                if body.get("dimensions"):
                    vectors = vectors[:, : body["dimensions"]]
                data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
                self.answer(200, {"object": "list", "data": data[::-1], "model": body["model"]})

            def answer(self, status: int, payload: dict) -> None:
                content = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
