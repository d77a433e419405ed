"""gunicorn's threaded worker, stamping when each request was queued for a thread.

Load shedding reads a request's wait before the app from when it was queued
(infra/load_shedding.py). Served by gunicorn alone, nothing stamped it, and under overload
requests waited in the worker's queue for a thread far past their budget and were then
served late. This worker stamps the moment a connection with a request is handed to its
thread pool (a new connection, or a kept-alive one that became readable), in a header of its
own that it first strips from what the client sent, so the same check sheds with no proxy
and no client can forge its wait. A proxy's X-Request-Start is kept only from an address in
RAGTRAIL_TRUSTED_PROXIES ("unix": gunicorn's unix socket); from anyone else it is dropped (a stamp in the future read as no
wait at all, which is never shed).
"""

from __future__ import annotations

import os
import time

from gunicorn.workers.gthread import ThreadWorker

from infra.queue_stamps import OWN_STAMP, PROXY_STAMP, peer_of, trusted_proxies

TRUSTED = trusted_proxies(os.environ.get("RAGTRAIL_TRUSTED_PROXIES", ""))


def stamp(
    headers: list[tuple[str, str]], queued_at: float | None, peer: str | None = None, trusted: frozenset[str] = TRUSTED
) -> None:
    """Replaces whatever the client sent as this worker's stamp with the time the request was
    queued, and drops X-Request-Start unless the peer is a trusted proxy."""
    keep_proxy = peer is not None and peer in trusted
    headers[:] = [
        (name, value)
        for name, value in headers
        if name.upper() != OWN_STAMP and (keep_proxy or name.upper() != PROXY_STAMP)
    ]
    if queued_at is not None:
        headers.append((OWN_STAMP, f"t={queued_at:.6f}"))


class StampingThreadWorker(ThreadWorker):
    def enqueue_req(self, conn):
        conn.queued_at = time.time()
        super().enqueue_req(conn)

    def handle_request(self, req, conn):
        stamp(req.headers, getattr(conn, "queued_at", None), peer_of(getattr(conn, "client", None)))
        return super().handle_request(req, conn)
