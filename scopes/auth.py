"""Bearer-key authentication for the API, and the scope a key may use."""

from __future__ import annotations

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest
from ninja.security import HttpBearer

from infra import refusals
from infra.db_deadline import refused_by_the_database
from infra.errors import RequestRefused
from scopes.models import ApiKey, Scope


def key_of(request: HttpRequest, token: str | None = None) -> ApiKey | None:
    """The live key the request's bearer token names (read once a request: the middleware's
    check and the API's both ask), or None."""
    if token is None:
        kind, _, token = request.headers.get("Authorization", "").partition(" ")
        if kind.lower() != "bearer":
            return None
        token = token.strip()
    cached = getattr(request, "_ragtrail_key", None)
    if cached is not None and cached[0] == token:
        return cached[1]
    match = getattr(request, "resolver_match", None)
    key = ApiKey.objects.authenticate(token, scope_slug=match.kwargs.get("scope") if match else None) if token else None
    request._ragtrail_key = (token, key)
    return key


class ApiKeyAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> ApiKey | None:
        return key_of(request, token)


class KeyBeforeBodyMiddleware:
    """An API request with a body is authenticated, and its scope checked, before one byte of
    the body is read: an unauthenticated sender costs a key lookup, never the unpacking and
    parsing of up to the sync limit (infra.strict_json reads the body after this). The same
    401 and 404 the API answers; under gunicorn the connection is closed instead of drained."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func, view_args, view_kwargs):
        if not request.path.startswith("/api/") or request.method not in ("POST", "PUT", "PATCH"):
            return None
        try:
            key = key_of(request)
        except (OperationalError, InterfaceError) as problem:  # the API's own 503, before any body is read
            return refused_by_the_database(problem, f"{request.method} {request.path}")
        if key is None:
            refused = RequestRefused(
                401, "unauthorized", "a valid API key is required (Authorization: Bearer rt_…)", field="Authorization"
            ).response()
            refused["WWW-Authenticate"] = "Bearer"
        elif "scope" in view_kwargs and key.grants(view_kwargs["scope"]) is None:
            refused = RequestRefused(404, "not_found", "no such scope", field="scope").response()
        elif not key.writes_sections and writes_sections_route(request.path):
            refused = RequestRefused(403, "forbidden", NOT_A_SECTION_WRITER, field="Authorization").response()
        else:
            return None
        if request.META.get("SERVER_SOFTWARE", "").startswith("gunicorn") and request.META.get(
            "CONTENT_LENGTH"
        ) not in (None, "", "0"):
            refused["Connection"] = "close"  # gunicorn closes rather than read the unread body
        return refused


def granted_scope(request: HttpRequest, slug: str) -> Scope:
    """Returns the scope if the request's key grants it.

    Raises:
        RequestRefused: 404 whether the scope is missing or merely not granted, so
        a key cannot learn which scopes exist elsewhere.
    """
    scope = request.auth.grants(slug)
    if scope is None:
        raise RequestRefused(404, "not_found", "no such scope", field="scope")
    # Let in: its requests and refusals count for this scope and key from now on.
    refusals.admitted(scope.slug, request.auth.lookup)
    return scope


NOT_A_SECTION_WRITER = (
    "this key may not write sections or tool policies (its writes_sections is off): a docs-sync key "
    "writes them, an agent's key asks, records and reports"
)


def section_writer(request: HttpRequest, slug: str) -> Scope:
    """Returns the scope if the request's key grants it and may write its sections.

    Raises:
        RequestRefused: 404 as `granted_scope`; 403 where the key may not write sections (a
            trail whose sections all changed goes stale for good, so writing them is a docs
            key's, not every agent's).
    """
    scope = granted_scope(request, slug)
    if not request.auth.writes_sections:
        raise RequestRefused(403, "forbidden", NOT_A_SECTION_WRITER, field="Authorization")
    return scope


def writes_sections_route(path: str) -> bool:
    """Whether a PUT or POST to this API path writes sections or tool policies (its body then goes unread
    for a key that may not)."""
    return path.rstrip("/").endswith(("/sections", "/section-syncs", "/tool-policies"))


def reporter(request: HttpRequest) -> str:
    """Who an agent's request speaks for, where it judges or reports: its API key ("key:<lookup>").

    Sessions are not reporters: a key can name as many sessions as it likes, so trust
    (how many reporters agree, how far one may move a threshold) is counted per key."""
    return f"key:{request.auth.lookup}"
