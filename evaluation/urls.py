"""The service's URLs plus two floors that benchmark_http measures recall against, on the same
gunicorn workers (DJANGO_SETTINGS_MODULE=evaluation.settings; never in production):

- POST /api/v1/bench/{scope}/trivial: the same stack as recall (Django, ninja, the strict JSON
  body, RecallIn, the key check for the scope, recall's time budget for shedding load) and
  nothing else: the framework's floor.
- POST /api/v1/bench/{scope}/embed: that, plus the serving embedder on the query: the model alone.
"""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from ragtrail_site.api import api
from scopes.auth import granted_scope
from trails.embedders import get_embedder
from trails.schemas import RecallIn

router = Router(tags=["benchmark"])


@router.post("/{scope}/trivial")
def trivial(request: HttpRequest, scope: str, payload: RecallIn) -> dict:
    granted_scope(request, scope)
    return {"ok": True}


@router.post("/{scope}/embed")
def embed_only(request: HttpRequest, scope: str, payload: RecallIn) -> dict:
    granted_scope(request, scope)
    get_embedder().embed(payload.query)
    return {"ok": True}


# Before ragtrail_site.urls reads api.urls: the router is then part of the one API.
api.add_router("/bench", router)

from ragtrail_site.urls import handler400, handler404, handler500, urlpatterns  # noqa: E402

__all__ = ["urlpatterns", "handler400", "handler404", "handler500"]
