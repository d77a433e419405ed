"""The API's one error type: every refusal owns its status, its headers and its JSON.

Domain code raises these (or a domain error that the API's edge turns into one);
every middleware and handler renders them through `response()`, so the error shape
is written once.
"""
from __future__ import annotations

from typing import Any

from django.http import JsonResponse


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

    def __init__(self, message: str = "the database is not answering; retry shortly") -> None:
        super().__init__(503, "unavailable", message)


def server_error(request, *args, **kwargs):
    """Django's handler of last resort: whatever raised, in whichever layer (a middleware
    before the API's own handlers see the request, say), an API path answers the one JSON
    error shape; other paths get Django's page."""
    if request.path.startswith("/api/"):
        return RequestRefused(500, "server_error", "the server failed to answer this request").response()
    from django.views.defaults import server_error as page  # noqa: PLC0415 -- only off the API

    return page(request, *args, **kwargs)
