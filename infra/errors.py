"""Errors: what a domain rule refuses (no HTTP), and the API's one error type.

Domain code (record, recall, feedback, tool results) raises a `Refused` kind: invalid,
not found, conflict, too large, unavailable. The API's edge chooses the HTTP status
(`RequestRefused.of`); middleware and handlers raise `RequestRefused`, which owns its
status, headers and JSON and renders through `response()`, so the shape is written once.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import JsonResponse


def quoted(value: str) -> str:
    """A value for an error message, in double quotes, its characters as written: Python's repr
    turns a no-break space or a zero-width joiner in a name into `\\xa0`, which a purge's
    matcher then cannot find."""
    return json.dumps(value, ensure_ascii=False)


class Refused(Exception):
    """A domain rule's refusal: its kind is its class; a code, a message and the field at fault."""

    def __init__(self, code: str, message: str, field: str | None = None, **detail: Any) -> None:
        super().__init__(message)
        self.code, self.message, self.field, self.detail = code, message, field, detail


class Invalid(Refused):
    """Input that cannot be what it claims (no words to match, an unknown section)."""


class NotFound(Refused):
    """No such object in the caller's scope (or another scope's: the caller cannot tell)."""


class Conflict(Refused):
    """Input that contradicts the state now (a changed section, a reused idempotency key)."""


class TooLarge(Refused):
    """Input past a size limit."""


class StoreUnavailable(Refused):
    """A store the rule needs is not answering."""


class RequestRefused(Exception):
    """Input that is refused, with the HTTP status, a code, the field at fault and a message."""

    # Headers every refusal of this kind carries (Retry-After on a 503, say).
    headers: dict[str, str] = {}

    def __init__(self, status: int, code: str, message: str, field: str | None = None, **detail: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.detail = detail

    def as_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        error.update(self.detail)
        return {"error": error}

    # The HTTP status of each kind of domain refusal, chosen here, at the edge.
    STATUS_OF = {Invalid: 422, NotFound: 404, Conflict: 409, TooLarge: 413, StoreUnavailable: 503}

    @classmethod
    def of(cls, refusal: Refused) -> "RequestRefused":
        """The API's answer to a domain refusal."""
        status = next(code for kind, code in cls.STATUS_OF.items() if isinstance(refusal, kind))
        return cls(status, refusal.code, refusal.message, refusal.field, **refusal.detail)

    def response(self) -> JsonResponse:
        """The JSON response, with its headers and a Content-Length (middleware that answers
        before the rest of the stack would otherwise have its body sent chunked)."""
        response = JsonResponse(self.as_json(), status=self.status)
        for name, value in self.headers.items():
            response[name] = value
        response["Content-Length"] = str(len(response.content))
        return response


class Overloaded(RequestRefused):
    """The request could not be served within its time budget: a short wait may do."""

    headers = {"Retry-After": "1"}

    def __init__(self, message: str) -> None:
        super().__init__(503, "overloaded", message)


class Unavailable(RequestRefused):
    """A store the request needs (the database) is not answering."""

    headers = {"Retry-After": "5"}

    def __init__(
        self, message: str = "the database is not answering; retry shortly", code: str = "unavailable"
    ) -> None:
        super().__init__(503, code, message)


class LockWait(Unavailable):
    """Another change held a row this request must change past the lock wait limit."""

    headers = {"Retry-After": "1"}

    def __init__(self) -> None:
        super().__init__(
            "another change to the same trail or scope held it past the lock wait limit; "
            "nothing was changed: retry shortly",
            code="lock_wait",
        )


class DeadlinePassed(Unavailable):
    """The request's database work ran past its deadline (statement timeout or the watchdog):
    a database that hangs may take a while, so the wait asked for is the same as when it is away."""

    def __init__(self) -> None:
        super().__init__("the database did not finish this request within its deadline; retry shortly", code="deadline")


# PostgreSQL's SQLSTATEs of a wait on another transaction's lock: lock_not_available (lock_timeout),
# deadlock_detected, serialization_failure.
LOCK_STATES = frozenset({"55P03", "40P01", "40001"})
DEADLINE_STATES = frozenset({"57014"})  # query_canceled: the statement_timeout


def database_refusal(problem: Exception, deadline_passed: bool = False) -> Unavailable:
    """What a request answers for a database error it could not get past: a lock wait, the
    request's deadline, or the database being away, each its own 503 (code and message)."""
    state = getattr(problem.__cause__, "sqlstate", None) or getattr(problem, "sqlstate", None)
    if state in LOCK_STATES:
        return LockWait()
    if state in DEADLINE_STATES or deadline_passed:
        return DeadlinePassed()
    return Unavailable()


def server_error(request, *args, **kwargs):
    """Django's handler of last resort: whatever raised, in whichever layer (a middleware
    before the API's own handlers see the request, say), an API path answers the one JSON
    error shape; other paths get Django's page."""
    if request.path.startswith("/api/"):
        return RequestRefused(500, "server_error", "the server failed to answer this request").response()
    from django.views.defaults import server_error as page  # noqa: PLC0415 -- only off the API

    return page(request, *args, **kwargs)


def api_not_found() -> JsonResponse:
    """The API's 404 for a path no route matches, wherever it is answered (handler404, or the
    middleware below for the router's and DEBUG's own pages)."""
    return RequestRefused(404, "not_found", "no such endpoint or object").response()


def page_not_found(request, exception=None, *args, **kwargs):
    """A path no route matches (a trail id with a slash, a misspelt endpoint): under /api/
    the one JSON error shape, as the OpenAPI document declares for 404; Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return api_not_found()
    from django.views.defaults import page_not_found as page  # noqa: PLC0415 -- only off the API

    return page(request, exception, *args, **kwargs)


def bad_request(request, exception=None, *args, **kwargs):
    """Django's own 400 (a request it judges suspicious before any view): JSON under /api/."""
    if request.path.startswith("/api/"):
        return RequestRefused(400, "bad_request", "the request is malformed").response()
    from django.views.defaults import bad_request as page  # noqa: PLC0415 -- only off the API

    return page(request, exception, *args, **kwargs)


class JsonApiErrorsMiddleware:
    """Under /api/, a 404 or 405 answered in HTML (the router's wrong method; with DEBUG on,
    Django's page for a path no route matches) answers the one JSON error shape instead."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if (
            response.status_code not in (404, 405)
            or not (request.path == "/api" or request.path.startswith("/api/"))
            or response.get("Content-Type", "").startswith("application/json")
        ):
            return response
        if response.status_code == 404:
            return api_not_found()
        allowed = response.get("Allow", "")
        refused = RequestRefused(
            405, "method_not_allowed", f"{request.method} is not allowed here (allowed: {allowed})"
        )
        answer = refused.response()
        answer["Allow"] = allowed
        return answer
