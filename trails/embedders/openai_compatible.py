"""An embedder on an OpenAI-compatible `POST /v1/embeddings` endpoint (OpenAI, Azure's
compatible route, vLLM, text-embeddings-inference, Ollama, LiteLLM and most hosted providers).

Settings: RAGTRAIL_EMBEDDING_URL (the endpoint's base, e.g. https://api.openai.com/v1),
RAGTRAIL_EMBEDDING_MODEL (the model as the endpoint names it), RAGTRAIL_EMBEDDING_API_KEY,
RAGTRAIL_EMBEDDING_DIMENSIONS (sent as `dimensions` where set), RAGTRAIL_EMBEDDING_BATCH,
RAGTRAIL_EMBEDDING_TIMEOUT_MS (one question's deadline, retries included, inside recall's
budget), RAGTRAIL_EMBEDDING_BATCH_TIMEOUT_MS (a batch's, for reindex and calibration) and
RAGTRAIL_EMBEDDING_RETRIES. docs/matching.md, "Another embedding model", says how to switch.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from typing import Sequence
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import httpx
import numpy as np
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from .base import BaseEmbedder, EmbedderUnavailable, unit_rows

logger = logging.getLogger(__name__)

# Answers worth another attempt: rate limited, or the endpoint briefly away.
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
# The first wait between attempts (doubled each time), cut to the time left.
BACKOFF_S = 0.05
# An answer's size cap: bytes a float takes in JSON at most (with its separator), the
# dimensions assumed before the first answer tells them, and room for the envelope.
BYTES_PER_FLOAT = 32
DIM_BEFORE_FIRST_ANSWER = 8192
ENVELOPE_BYTES = 64 * 1024
# An error answer is read this far only: its message is all that is kept.
ERROR_BYTES = 4096
ERROR_CHARS = 300  # of an error message, once redacted
# A bearer token in anything the endpoint sends back.
BEARER = re.compile(r"Bearer\s+\S+", re.IGNORECASE)
BASIC = re.compile(r"Basic\s+\S+", re.IGNORECASE)


class Unreadable(Exception):
    """The answer could not be read whole within the deadline or the size cap."""


def configuration_errors(model: str) -> list[str]:
    """What the settings get wrong for this backend, a sentence each (empty where nothing):
    `manage.py check` says them at start (trails/checks.py), and `Embedder` refuses them."""
    errors = []
    if not model or model.startswith("bundled:"):
        errors.append("RAGTRAIL_EMBEDDING_MODEL must name the model the endpoint serves (e.g. text-embedding-3-small)")
    if not settings.RAGTRAIL_EMBEDDING_URL.startswith(("http://", "https://")):
        errors.append("RAGTRAIL_EMBEDDING_URL must be the endpoint's http(s) base, e.g. https://api.openai.com/v1")
    timeout, budget = settings.RAGTRAIL_EMBEDDING_TIMEOUT_MS, settings.RAGTRAIL_RECALL_BUDGET_MS
    if timeout <= 0:
        errors.append(f"RAGTRAIL_EMBEDDING_TIMEOUT_MS ({timeout}) must be a positive number of milliseconds")
    elif timeout >= budget:
        errors.append(
            f"RAGTRAIL_EMBEDDING_TIMEOUT_MS ({timeout}) must be under RAGTRAIL_RECALL_BUDGET_MS ({budget}): a recall "
            "embeds its question within its budget, so every recall would fail; lower the first, or raise the second "
            "above it with room for the rest of a recall (the defaults, 300 and 500, leave 200 ms)"
        )
    return errors


class Embedder(BaseEmbedder):
    def __init__(self, model: str) -> None:
        super().__init__(model)
        errors = configuration_errors(model)
        if errors:
            raise ImproperlyConfigured(errors[0])
        parts = urlsplit(settings.RAGTRAIL_EMBEDDING_URL)
        path = parts.path.rstrip("/")
        path = path if path.endswith("/embeddings") else f"{path}/embeddings"  # before the query, not after it
        self.url = urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
        # What errors and logs name: the endpoint without credentials or query (a proxy's password, a `?key=`).
        host = f"{parts.hostname}:{parts.port}" if parts.port else (parts.hostname or "")
        self.shown_url = urlunsplit((parts.scheme, host, path, "", ""))
        # Each as sent and as an endpoint may echo it: raw, percent-decoded, and in a Basic header.
        userinfo = [part for part in (parts.username, parts.password) if part]
        self._secrets = [
            *userinfo,
            *(unquote(part) for part in userinfo),
            *(value for _, value in parse_qsl(parts.query) if len(value) >= 6),  # not `api-version=1`'s 1
            parts.query,
        ]
        self.batch = max(1, settings.RAGTRAIL_EMBEDDING_BATCH)
        self.timeout_s = settings.RAGTRAIL_EMBEDDING_TIMEOUT_MS / 1000
        self.batch_timeout_s = max(self.timeout_s, settings.RAGTRAIL_EMBEDDING_BATCH_TIMEOUT_MS / 1000)
        self.retries = max(0, settings.RAGTRAIL_EMBEDDING_RETRIES)
        self.dimensions = settings.RAGTRAIL_EMBEDDING_DIMENSIONS or None
        headers = {"Content-Type": "application/json"}
        self._key = settings.RAGTRAIL_EMBEDDING_API_KEY
        self._secrets += [self._key] if self._key else []
        if self._key:
            headers["Authorization"] = f"Bearer {settings.RAGTRAIL_EMBEDDING_API_KEY}"
        self._client = httpx.Client(headers=headers, follow_redirects=False, trust_env=False)
        self._dim: int | None = self.dimensions
        self._lock = threading.Lock()

    @property
    def name(self) -> str:  # type: ignore[override]
        """The model and the dimensions the endpoint answers (asked for, else learnt from its
        first answer): either changes the vectors."""
        return f"{self.model}-{self.dim}d"

    @property
    def dim(self) -> int:  # type: ignore[override]
        """The vectors' length: the dimensions asked for, else learnt from the first answer."""
        if self._dim is None:
            self.embed_many(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # One question (recall, record) gets the short deadline; batches (reindex, calibration) the long one.
        timeout = self.timeout_s if len(texts) == 1 else self.batch_timeout_s
        rows = [
            self._request(list(texts[start : start + self.batch]), timeout)
            for start in range(0, len(texts), self.batch)
        ]
        return unit_rows(np.concatenate(rows))

    def _request(self, texts: list[str], timeout: float) -> np.ndarray:
        """One batch's vectors, attempts and waits within `timeout` seconds in all."""
        body: dict = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.dimensions:
            body["dimensions"] = self.dimensions
        deadline = time.monotonic() + timeout
        problem = ""
        for attempt in range(self.retries + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                with self._client.stream("POST", self.url, json=body, timeout=httpx.Timeout(left)) as answer:
                    ok = answer.status_code == 200
                    content = _read(answer, deadline, self._cap(len(texts)) if ok else ERROR_BYTES, timeout, ok)
            except httpx.TimeoutException:
                problem = f"no answer within {timeout * 1000:.0f} ms"
                break  # the deadline is spent: another attempt could not finish in it
            except Unreadable as error:
                problem = str(error)
                break
            except httpx.TransportError as error:
                problem = f"{type(error).__name__}: {error}"
            else:
                if ok:
                    return self._vectors(content, len(texts))
                problem = f"HTTP {answer.status_code}: {_error_message(content)}"
                if answer.status_code not in RETRY_STATUSES:
                    break  # a wrong key, model or request: asking again gives the same answer
            time.sleep(max(0.0, min(BACKOFF_S * 2**attempt, deadline - time.monotonic())))
        problem = self._redact(problem)
        logger.warning("embedding endpoint %s failed: %s", self.shown_url, problem)
        raise EmbedderUnavailable(f"the embedding endpoint {self.shown_url} failed: {problem}")

    def _cap(self, count: int) -> int:
        """The most bytes an answer of `count` vectors may take."""
        return count * (self._dim or self.dimensions or DIM_BEFORE_FIRST_ANSWER) * BYTES_PER_FLOAT + ENVELOPE_BYTES

    def _redact(self, text: str) -> str:
        """The text without the API key, the URL's password or query, or any bearer token the endpoint
        echoed; whole before it is cut to length, so no cut leaves most of a secret."""
        for secret in sorted({s for s in self._secrets if s}, key=len, reverse=True):
            text = text.replace(secret, "[redacted]")
        return BASIC.sub("Basic [redacted]", BEARER.sub("Bearer [redacted]", text))[:ERROR_CHARS]

    def _vectors(self, content: bytes, count: int) -> np.ndarray:
        try:
            data = sorted(json.loads(content)["data"], key=lambda item: item["index"])
            matrix = np.asarray([item["embedding"] for item in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError) as error:
            raise EmbedderUnavailable(
                self._redact(f"the embedding endpoint {self.shown_url} answered no embeddings list: {error}")
            ) from None
        if matrix.ndim != 2 or matrix.shape[0] != count:
            raise EmbedderUnavailable(
                f"the embedding endpoint {self.shown_url} answered {matrix.shape[0] if matrix.ndim else 0} vectors for {count} texts"
            )
        with np.errstate(all="ignore"):
            norms = np.linalg.norm(matrix.astype(np.float64), axis=1)
        if not (np.isfinite(matrix).all() and (norms > 0).all()):
            raise EmbedderUnavailable(
                f"the embedding endpoint {self.shown_url} answered a malformed vector (not finite, or all zeros)"
            )
        if self.dimensions and matrix.shape[1] != self.dimensions:
            raise EmbedderUnavailable(
                f"the embedding endpoint {self.shown_url} answered vectors of {matrix.shape[1]} dimensions for {self.model}, "
                f"not the {self.dimensions} RAGTRAIL_EMBEDDING_DIMENSIONS asks for: the provider ignored the requested "
                f"dimensions; set RAGTRAIL_EMBEDDING_DIMENSIONS={matrix.shape[1]} (the provider's size) or leave it unset, "
                "then restart the service and run manage.py calibrate_embedder"
            )
        with self._lock:
            if self._dim is None:
                self._dim = int(matrix.shape[1])
        if matrix.shape[1] != self._dim:
            raise EmbedderUnavailable(
                f"the embedding endpoint {self.shown_url} now answers vectors of {matrix.shape[1]} dimensions for "
                f"{self.model}, not the {self._dim} its vectors are named for ({self.name}): vectors of the two are "
                "never compared; restart the service to name the new ones, then run manage.py calibrate_embedder"
            )
        return matrix


def _read(answer: httpx.Response, deadline: float, cap: int, timeout: float, whole: bool) -> bytes:
    """The answer's body, read a chunk at a time: stops at the deadline (each read alone is
    bounded by httpx, the whole only by this clock) and at `cap` bytes (an error's first bytes
    are kept; a success past it is refused)."""
    declared = answer.headers.get("Content-Length", "")
    if whole and declared.isdigit() and int(declared) > cap:
        raise Unreadable(f"an answer of {int(declared):,} bytes, over the {cap:,} bytes its vectors could take")
    content = bytearray()
    # A read that stalls mid-answer would wait for httpx's per-read timeout: the socket is shut at the deadline.
    watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), _shut, [answer])
    watchdog.daemon = True
    watchdog.start()
    try:
        for chunk in answer.iter_bytes():
            content += chunk
            if len(content) > cap:
                if not whole:
                    break
                raise Unreadable(f"an answer over the {cap:,} bytes its vectors could take")
            if time.monotonic() > deadline:
                raise Unreadable(f"no whole answer within {timeout * 1000:.0f} ms")
    except httpx.TransportError:
        if time.monotonic() >= deadline:
            raise Unreadable(f"no whole answer within {timeout * 1000:.0f} ms") from None
        raise
    finally:
        watchdog.cancel()
    return bytes(content[:cap])


def _shut(answer: httpx.Response) -> None:
    """Ends a read blocked on the answer's socket (its connection is not reused)."""
    stream = answer.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed


def _error_message(content: bytes) -> str:
    """The endpoint's own error message where it gives one (OpenAI's `{"error": {"message"}}`)."""
    text = content.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        return text
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", error))
    return str(error or text)
