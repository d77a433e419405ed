"""The one NinjaAPI: version 1 of the JSON API, and its single error shape."""
from __future__ import annotations

import logging

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from scopes.api import router as sections_router
from scopes.auth import ApiKeyAuth
from trails.api import router as trails_router
from ragtrail_site.strict_json import StrictJsonParser
from ragtrail_site.errors import RequestRefused, Unavailable

logger = logging.getLogger("ragtrail.api")

api = NinjaAPI(
    parser=StrictJsonParser(),
    title="ragtrail",
    version="1",
    description="Recall and record the paths agents took to answers, validated against the current sections.",
    auth=ApiKeyAuth(),
    urls_namespace="api-v1",
)
api.add_router("/scopes", sections_router)
api.add_router("/scopes", trails_router)


def _error(request: HttpRequest, status: int, code: str, message: str, field: str | None = None, **detail) -> HttpResponse:
    return RequestRefused(status, code, message, field, **detail).response()


@api.exception_handler(RequestRefused)
def refused(request: HttpRequest, exc: RequestRefused) -> HttpResponse:
    return exc.response()


def _field_of(loc: list) -> str:
    # ninja locates body errors as ["body", "<parameter>", field, ...]; the
    # parameter name is ours, not the caller's, so it is dropped.
    parts = [str(p) for p in loc]
    if parts and parts[0] == "body":
        parts = parts[2:]
    elif parts and parts[0] in {"path", "query"}:
        parts = parts[1:]
    return ".".join(parts) or "body"


@api.exception_handler(ValidationError)
def invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    problems = [{"field": _field_of(list(e.get("loc", []))), "message": e.get("msg", "invalid")} for e in exc.errors]
    first = problems[0] if problems else {"field": "body", "message": "invalid input"}
    return _error(request, 422, "invalid", first["message"], first["field"], problems=problems)


@api.exception_handler(AuthenticationError)
def unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    response = _error(request, 401, "unauthorized", "a valid API key is required (Authorization: Bearer rt_…)", "Authorization")
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(HttpError)
def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # ninja raises 400 "Cannot parse request body" for malformed JSON.
    code = "invalid_json" if exc.status_code == 400 else "http_error"
    return _error(request, exc.status_code, code, str(exc), "body" if exc.status_code == 400 else None)


@api.exception_handler(RequestDataTooBig)
def too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return _error(request, 413, "too_large", "request body is larger than the server accepts", "body")


@api.exception_handler(Http404)
def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return _error(request, 404, "not_found", "not found")


def _described(exc: Exception) -> str:
    """A database error's class and SQLSTATE, never its message."""
    state = getattr(exc.__cause__, "sqlstate", None)
    return type(exc).__name__ + (f" (SQLSTATE {state})" if state else "")


@api.exception_handler(Exception)
def server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """Every 5xx of the API in the one error shape: a database that is down, hung past its
    timeout or restarting answers 503 with Retry-After; anything else 500, logged."""
    # A refused connection, a statement or lock timeout (PostgreSQL's QueryCanceled) and
    # a socket shut by the deadline watchdog all arrive as one of these.
    # A driver's message may quote the request's values (a query, an e-mail): only the
    # error's class and SQLSTATE reach the log, which no purge can reach.
    if isinstance(exc, (OperationalError, InterfaceError)):
        logger.warning("database unavailable on %s %s: %s", request.method, request.path, _described(exc))
        return Unavailable().response()
    if isinstance(exc, DatabaseError):
        logger.error("database refused a write on %s %s: %s", request.method, request.path, _described(exc))
        return _error(request, 500, "server_error", "the server failed to answer this request")
    logger.exception("unhandled error on %s %s", request.method, request.path)
    return _error(request, 500, "server_error", "the server failed to answer this request")
