"""gunicorn's threaded worker, stamping when each request was queued for a thread.

Load shedding reads a request's wait before the app from X-Request-Start, which a proxy
stamps (infra/load_shedding.py). Served by gunicorn alone, nothing stamped it, and under
overload requests waited in the worker's queue for a thread far past their budget and were
then served late. This worker stamps the moment a connection with a request is handed to its
thread pool (a new connection, or a kept-alive one that became readable), so the same check
sheds with no proxy; a proxy's earlier stamp, when present, is kept.
"""
from __future__ import annotations

import time

from gunicorn.workers.gthread import ThreadWorker

HEADER = "X-REQUEST-START"


def stamp(headers: list[tuple[str, str]], queued_at: float | None) -> None:
    """Adds X-Request-Start (t=<seconds>) unless the request already carries one."""
    if queued_at is None or any(name.upper() == HEADER for name, _ in headers):
        return
    headers.append((HEADER, f"t={queued_at:.6f}"))


class StampingThreadWorker(ThreadWorker):
    def enqueue_req(self, conn):
        conn.queued_at = time.time()
        super().enqueue_req(conn)

    def handle_request(self, req, conn):
        stamp(req.headers, getattr(conn, "queued_at", None))
        return super().handle_request(req, conn)
