"""Unknown query parameters are refused on every API operation, as its OpenAPI document says.

ninja hands an operation only the query parameters it declares and drops the rest, so a
misspelt `?limt=5` was answered as if absent. The names each operation declares are read
once from the API's own OpenAPI document; any other name is a 422 naming it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from django.http import HttpRequest

from infra.errors import RequestRefused

# A Django route's converters (<path:section_id>) as OpenAPI writes them ({section_id}).
_CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")


@lru_cache(maxsize=1)
def declared() -> dict[tuple[str, str], frozenset[str]]:
    """(OpenAPI path, method) -> the query parameter names the operation declares."""
    from ragtrail_site.api import api  # the API module imports the routers, which this one must not precede

    names: dict[tuple[str, str], frozenset[str]] = {}
    for path, operations in api.get_openapi_schema()["paths"].items():
        for method, operation in operations.items():
            names[(path, method.upper())] = frozenset(
                p["name"] for p in operation.get("parameters", []) if p.get("in") == "query"
            )
    return names


class UnknownQueryParametersMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func, view_args, view_kwargs):
        if not request.path.startswith("/api/") or not request.GET or request.resolver_match is None:
            return None
        path = "/" + _CONVERTER.sub(r"{\1}", request.resolver_match.route)
        known = declared().get((path, request.method))
        if known is None:
            return None  # not an operation of the API document (its docs pages, the index)
        unknown = sorted(set(request.GET) - known)
        if unknown:
            allowed = ", ".join(sorted(known)) or "none"
            return RequestRefused(
                422,
                "invalid",
                f"unknown query parameter {unknown[0]!r} (this operation takes: {allowed})",
                field=unknown[0],
            ).response()
        return None
