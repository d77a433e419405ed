"""What each web and worker process holds of stored text in memory, forgotten after a purge.

A process keeps recent questions' vectors (the embedder's cache, keyed by the question's
folded words), recent texts' token counts, and (without Redis) cached tool results. A
finished purge is the signal to drop them: each process reads the newest finished purge
from the database at most every RAGTRAIL_FORGET_CHECK_SECONDS, at the start of a request or
a task, and forgets everything when it changed. The database is the one store every process
shares with or without Redis.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from trails.core import budget

_forgetters: list[Callable[[], None]] = []
_lock = threading.Lock()
_seen: list[object] = [None, 0.0]  # the newest finished purge seen, when it was read


def forgets(forget: Callable[[], None]) -> Callable[[], None]:
    """Registers what a process forgets after a purge (a cache's clear)."""
    _forgetters.append(forget)
    return forget


forgets(budget.forget)


def forget_here() -> None:
    """Forgets, in this process, everything registered."""
    for forget in _forgetters:
        forget()


def newest_purge() -> object:
    """The id of the newest finished purge (None: none yet)."""
    from trails.models import PurgeRun

    return (
        PurgeRun.objects.filter(state=PurgeRun.State.DONE, finished_at__isnull=False)
        .order_by("-finished_at", "-id")
        .values_list("id", flat=True)
        .first()
    )


def check(**kwargs) -> None:
    """Forgets what this process holds if a purge finished since it last looked (throttled)."""
    from django.conf import settings

    now = time.monotonic()
    if now - _seen[1] < settings.RAGTRAIL_FORGET_CHECK_SECONDS:
        return
    with _lock:
        if now - _seen[1] < settings.RAGTRAIL_FORGET_CHECK_SECONDS:
            return
        _seen[1] = now
        try:
            newest = newest_purge()
        except Exception:  # noqa: BLE001 -- a database away is the request's problem, not this check's
            return
        if newest != _seen[0]:
            _seen[0] = newest
            forget_here()
