"""A request body must say its length: a chunked one without Content-Length is answered 411.

Django reads a body by its Content-Length, so a chunked body (which has none) was read as
empty and the API answered "Field required". The documented deployment puts nginx in front,
which reads a chunked body whole and passes it on with its length; a client that reaches the
app another way (gunicorn on its socket, `make run`) is told to send the length instead.
"""

from __future__ import annotations

from django.http import HttpRequest

from infra.errors import RequestRefused


class LengthRequiredMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and request.META.get("CONTENT_LENGTH") in (None, ""):
            refused = RequestRefused(
                411,
                "length_required",
                "send the body with a Content-Length (a chunked body is read only through the proxy in front)",
                field="Content-Length",
            ).response()
            refused["Connection"] = "close"  # the unread body is not drained
            return refused
        return self.get_response(request)
