"""One strict reading of API request bodies, so both databases answer bad bytes alike.

PostgreSQL refuses NUL characters in text and JSON and lone UTF-16 surrogates, and JSON
has no NaN or Infinity; SQLite stores all of them. Such a body is refused here with
a 422 naming the field, before anything is written, on every backend. So is an object
with a key twice (which json.loads would settle silently, the last one winning), and a
body that is not `application/json` (415).
"""
from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from ninja.parser import Parser

from infra.errors import RequestRefused

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class BodyRefused(RequestRefused):
    """A body refused before ninja reads it: the API's one error shape, always naming a field."""

    def __init__(self, status: int, code: str, message: str, field: str) -> None:
        super().__init__(status, code, message, field)


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise BodyRefused(422, "invalid", f"key {key!r} appears more than once in one object", key)
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise BodyRefused(422, "invalid", f"{name} is not a JSON number", "body")


# How deep objects and arrays may nest in a body: the stores and every client read it
# without trouble, and a deeper body is refused before a recursive parser sees it.
MAX_DEPTH = 32
# Integers beyond this lose precision in JavaScript (and every JSON reader built on doubles):
# a value one client stores must read back the same in every other.
MAX_SAFE_INTEGER = 2**53 - 1


class _Unreadable:
    """A number other clients cannot read back (it overflows, or loses precision): held in
    place while parsing, so the check that follows can name its field."""

    def __init__(self, text: str, problem: str) -> None:
        self.text, self.problem = text, problem


def _number(text: str) -> Any:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        return _Unreadable(text, "overflows a 64-bit float (it would read back as Infinity)")
    return value


def _integer(text: str) -> Any:
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        return _Unreadable(text, f"is beyond ±{MAX_SAFE_INTEGER:,}, where JSON readers built on doubles lose precision")
    return value


def _too_deep(text: str) -> bool:
    """Whether objects and arrays nest deeper than MAX_DEPTH, by one pass over the text
    (no recursion: a body of 100,000 brackets is read like any other)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def _bad_text(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character"
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        return "contains a lone UTF-16 surrogate"
    return None


def check_text(value: Any, path: str = "") -> None:
    """Raises BodyRefused naming the first string (key or value) a database cannot store,
    or the first number another client could not read back."""
    if isinstance(value, _Unreadable):
        raise BodyRefused(422, "invalid", f"the number {value.text[:40]} {value.problem}", path or "body")
    if isinstance(value, str):
        problem = _bad_text(value)
        if problem:
            raise BodyRefused(422, "invalid", f"text {problem}", path or "body")
    elif isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            problem = _bad_text(key)
            if problem:
                raise BodyRefused(422, "invalid", f"a key {problem}", path or "body")
            check_text(item, where)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_text(item, f"{path}.{index}" if path else str(index))


def parse_strict(body: bytes) -> Any:
    """Parses a JSON body strictly.

    Raises:
        BodyRefused: 400 for bytes that are not JSON, 422 for duplicate keys, NaN or
        Infinity, numbers that overflow or lose precision, nesting deeper than MAX_DEPTH,
        NUL characters or lone surrogates (naming the field).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BodyRefused(400, "invalid_json", "the body is not UTF-8", "body") from None
    if _too_deep(text):
        raise BodyRefused(422, "too_deep", f"objects and arrays nest deeper than {MAX_DEPTH} levels", "body")
    try:
        value = json.loads(
            text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant, parse_float=_number, parse_int=_integer
        )
    except RecursionError:  # never past the depth check; refused all the same, never a 500
        raise BodyRefused(422, "too_deep", f"objects and arrays nest deeper than {MAX_DEPTH} levels", "body") from None
    except ValueError as problem:
        raise BodyRefused(400, "invalid_json", f"the body is not valid JSON: {problem}", "body") from None
    check_text(value)
    return value


class StrictJsonMiddleware:
    """Reads every API body once, strictly, before ninja sees it."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        if request.path.startswith("/api/") and request.method in BODY_METHODS:
            try:
                try:
                    body = request.body
                except RequestDataTooBig:
                    raise BodyRefused(413, "too_large", "request body is larger than the server accepts", "body") from None
                if body:
                    content_type = request.content_type or ""
                    if content_type != "application/json":
                        raise BodyRefused(415, "unsupported_media_type", "send the body as application/json", "Content-Type")
                    request.strict_json = parse_strict(body)
            except BodyRefused as refused:
                return refused.response()
        return self.get_response(request)


class StrictJsonParser(Parser):
    """Hands ninja the body the middleware already read."""

    def parse_body(self, request: HttpRequest) -> Any:
        if hasattr(request, "strict_json"):
            return request.strict_json
        return parse_strict(request.body)
