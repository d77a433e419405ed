"""The one NinjaAPI: version 1 of the JSON API, and its single error shape."""

from __future__ import annotations

import logging

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from infra import metrics
from infra.db_deadline import described, refused_by_the_database
from infra.errors import Refused, RequestRefused
from infra.strict_json import StrictJsonParser
from scopes.api import router as sections_router
from scopes.auth import ApiKeyAuth
from trails.api import router as trails_router

logger = logging.getLogger("ragtrail.api")

# Every refusal the API can answer, in the one error shape (infra.errors.RequestRefused).
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {
                    "type": "string",
                    "description": "what went wrong, e.g. invalid, not_found, conflict, overloaded",
                },
                "message": {"type": "string"},
                "field": {"type": "string", "description": "the field at fault, dotted (steps.0.args.n), where one is"},
            },
            "additionalProperties": True,
        }
    },
}
ERRORS_OF_EVERY_OPERATION = {
    "401": "no valid API key (Authorization: Bearer rt_…)",
    "404": "no such scope for this key, or no such object in it (never 403: a key cannot probe other scopes)",
    "422": "input the API refuses, naming the field",
    "500": "the server failed (the JSON shape still holds)",
    "503": "overloaded (code overloaded), a lock held past its wait limit (lock_wait), the request's database "
    "deadline passed (deadline) or the database is away (unavailable); Retry-After says when to try again",
}
ERRORS_OF_BODIES = {
    "400": "the body is not UTF-8 JSON",
    "413": "the body is larger than the server accepts",
    "415": "the body is not application/json",
}
# Operations that can answer 409, by (method, path suffix).
CONFLICTS = {
    ("post", "/trails"): "a sent hash is no longer the section's, or an idempotency key was reused with other input",
    (
        "post",
        "/feedback",
    ): "the vote or verdict does not apply now (a rejected trail, a recall judged already or a miss)",
    ("put", "/tool-results"): "a sent hash is no longer the section's",
    (
        "post",
        "/second-chance",
    ): "the recall was not a miss, a second chance was asked for it already, or its 15 minutes have passed",
}
# What the server refuses (422) that a JSON Schema cannot say: rules across fields and rules
# on stored state. Each is named by the field the refusal names, and listed in the operation's
# 422 description, so generated clients and schema-driven tests know what is accepted.
RULES_BEYOND_THE_SCHEMA = {
    ("put", "/sections"): {"sections": "each section id at most once in one request"},
    ("put", "/tool-policies"): {"policies": "each tool at most once in one request"},
    ("post", "/recall"): {
        "explain": "explain only with dry_run: true",
        "query": "the query has at least one word to match on",
    },
    ("post", "/trails"): {
        "query": "the query has at least one word to match on",
        "cited": "every cited section is in the scope's section store",
        "hashes": "hashes name only cited sections",
    },
    ("post", "/tool-results/lookup"): {
        "args": "a path argument of the tool's policy is a string",
        "caller": "a tool cached per caller needs a caller",
    },
    ("post", "/section-syncs"): {
        "sections": "each section id at most once; each section has its text or its hash; a scope that keeps "
        "texts needs the text of every section added or changed (hashes are enough for the rest, "
        "and for a dry run); 409 sync_running while another sync of the scope runs",
        "delete_missing": "removes at most half of the scope's sections unless allow_removing_most",
    },
    ("put", "/tool-results"): {
        "args": "a path argument of the tool's policy is a string",
        "caller": "a tool cached per caller needs a caller",
        "section_ids": "every listed section is in the scope's section store",
        "hashes": "hashes name only listed sections, and every listed section has its hash",
    },
}
# What every JSON body must be, whatever the operation (infra.strict_json).
RULES_OF_EVERY_BODY = (
    "objects and arrays nest at most 32 levels; no key twice in one object; numbers finite and "
    "integers within ±(2^53 − 1); no NUL (\\u0000) in any string or key"
)


def _refusals(method: str, path: str) -> str:
    rules = [
        f"`{field}`: {rule}"
        for (verb, end), by_field in RULES_BEYOND_THE_SCHEMA.items()
        if verb == method and path.endswith(end)
        for field, rule in by_field.items()
    ]
    if method in ("post", "put", "patch"):
        rules.append(f"`body`: {RULES_OF_EVERY_BODY}")
    if not rules:
        return ERRORS_OF_EVERY_OPERATION["422"]
    return ERRORS_OF_EVERY_OPERATION["422"] + ". Beyond the schema: " + "; ".join(rules) + "."


class RagtrailApi(NinjaAPI):
    def get_openapi_schema(self, *args, **kwargs):
        """ninja's schema, with every error response the API answers and its JSON shape, so
        generated clients and schema-driven tests know each refusal."""
        schema = super().get_openapi_schema(*args, **kwargs)
        schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
        error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                errors = dict(ERRORS_OF_EVERY_OPERATION)
                if method in ("post", "put", "patch"):
                    errors.update(ERRORS_OF_BODIES)
                errors["422"] = _refusals(method, path)
                errors.update(
                    {"409": why for (verb, end), why in CONFLICTS.items() if method == verb and path.endswith(end)}
                )
                responses = operation.setdefault("responses", {})
                for status, description in errors.items():
                    responses.setdefault(status, {"description": description, "content": error})
        return schema


api = RagtrailApi(
    parser=StrictJsonParser(),
    title="ragtrail",
    version="1",
    description="Recall and record the paths agents took to answers, validated against the current sections.",
    auth=ApiKeyAuth(),
    urls_namespace="api-v1",
)
api.add_router("/scopes", sections_router)
api.add_router("/scopes", trails_router)


@api.get("/", auth=None, tags=["index"], summary="Where things are", response={200: dict})
def index(request: HttpRequest) -> dict:
    """The API's address answers with where to go from it (no key needed: it says nothing of
    any scope)."""
    base = request.build_absolute_uri("/api/v1/")
    return {
        "name": "ragtrail",
        "version": api.version,
        "links": {
            "docs": f"{base}docs",
            "openapi": f"{base}openapi.json",
            "scopes": f"{base}scopes",
            # Templates: {scope} is one of the slugs `scopes` lists.
            "recall": f"{base}scopes/{{scope}}/recall",
            "record": f"{base}scopes/{{scope}}/trails",
        },
        "authentication": "Authorization: Bearer rt_… (a key from manage.py create_api_key or Django admin)",
    }


def _error(
    request: HttpRequest, status: int, code: str, message: str, field: str | None = None, **detail
) -> HttpResponse:
    return RequestRefused(status, code, message, field, **detail).response()


@api.exception_handler(RequestRefused)
def refused(request: HttpRequest, exc: RequestRefused) -> HttpResponse:
    return exc.response()


@api.exception_handler(Refused)
def refused_by_a_rule(request: HttpRequest, exc: Refused) -> HttpResponse:
    return RequestRefused.of(exc).response()


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
    response = _error(
        request, 401, "unauthorized", "a valid API key is required (Authorization: Bearer rt_…)", "Authorization"
    )
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


@api.exception_handler(Exception)
def server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    """Every 5xx of the API in the one error shape: a database that is down, hung past its
    timeout or restarting answers 503 with Retry-After; anything else 500, logged."""
    # A refused connection, a statement or lock timeout (PostgreSQL's QueryCanceled) and
    # a socket shut by the deadline watchdog all arrive as one of these.
    # A driver's message may quote the request's values (a query, an e-mail): only the
    # error's class and SQLSTATE reach the log, which no purge can reach.
    if isinstance(exc, (OperationalError, InterfaceError)):
        return refused_by_the_database(exc, f"{request.method} {request.path}")
    if isinstance(exc, DatabaseError):
        metrics.STORE_ERRORS.labels("database", "refused").inc()
        logger.error("database refused a write on %s %s: %s", request.method, request.path, described(exc))
        return _error(request, 500, "server_error", "the server failed to answer this request")
    logger.exception("unhandled error on %s %s", request.method, request.path)
    return _error(request, 500, "server_error", "the server failed to answer this request")
