"""Operator pages sent gzip-compressed where the browser takes it, with Django's own
GZipMiddleware and its BREACH mitigation (random bytes in each gzip header, since Django
4.2). API answers are left as they are: they are small, recall is the hot path, and an
agent's client may not unpack them."""

from __future__ import annotations

from django.middleware.gzip import GZipMiddleware


class HtmlGZipMiddleware(GZipMiddleware):
    def process_response(self, request, response):
        if not response.get("Content-Type", "").startswith("text/html"):
            return response
        return super().process_response(request, response)
