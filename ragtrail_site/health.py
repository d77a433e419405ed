"""Liveness and readiness, for a load balancer, an orchestrator or systemd to poll.

Both are unauthenticated, cheap and outside the API: never counted as any tenant's traffic,
never shed, and exempt from the https redirect (a probe speaks plain http to the host).
"""

from __future__ import annotations

from django.core.cache import caches
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from trails import embedders


@never_cache
@require_GET
def live(request: HttpRequest) -> JsonResponse:
    """200 while the process answers at all: a restart is what helps when it does not."""
    return JsonResponse({"live": True})


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception:  # noqa: BLE001 -- any failure is "not ready"; the reason stays in the server's log
        return "not ready"


def _cache() -> str:
    try:
        caches["heartbeats"].get("rt:ready-probe")
        return "ok"
    except Exception:  # noqa: BLE001 -- as above
        return "not ready"


@never_cache
@require_GET
def ready(request: HttpRequest) -> JsonResponse:
    """200 once this process can serve recalls: the database and the shared cache answer and
    the embedding model is loaded; 503 else. Each check says only "ok" or "not ready": the
    probe is unauthenticated, so it names no exception or dependency detail."""
    checks = {
        "database": _database(),
        "cache": _cache(),
        "model": "ok" if embedders.loaded() else "not ready",
    }
    ready = all(value == "ok" for value in checks.values())
    return JsonResponse({"ready": ready, "checks": checks}, status=200 if ready else 503)
