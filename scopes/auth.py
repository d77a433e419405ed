"""Bearer-key authentication for the API, and the scope a key may use."""
from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer

from scopes.models import ApiKey, Scope
from infra.errors import RequestRefused


class ApiKeyAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        match = getattr(request, "resolver_match", None)
        return ApiKey.objects.authenticate(token, scope_slug=match.kwargs.get("scope") if match else None)


def granted_scope(request: HttpRequest, slug: str) -> Scope:
    """Returns the scope if the request's key grants it.

    Raises:
        RequestRefused: 404 whether the scope is missing or merely not granted, so
        a key cannot learn which scopes exist elsewhere.
    """
    scope = request.auth.grants(slug)
    if scope is None:
        raise RequestRefused(404, "not_found", "no such scope", field="scope")
    return scope


def reporter(request: HttpRequest) -> str:
    """Who an agent's request speaks for, where it judges or reports: its API key ("key:<lookup>").

    Sessions are not reporters: a key can name as many sessions as it likes, so trust
    (how many reporters agree, how far one may move a threshold) is counted per key."""
    return f"key:{request.auth.lookup}"
