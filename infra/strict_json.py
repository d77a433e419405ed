"""One strict reading of API request bodies, so both databases answer bad bytes alike.

PostgreSQL refuses NUL characters in text and JSON and lone UTF-16 surrogates, and JSON
has no NaN or Infinity; SQLite stores all of them. Such a body is refused here with
a 422 naming the field, before anything is written, on every backend. So is an object
with a key twice (which json.loads would settle silently, the last one winning), and a
body that is not `application/json` (415). A body sent with `Content-Encoding: gzip` is
unpacked first, never past the size limit (a small bomb cannot fill memory); a body over the
limit answers 413 naming the limit and the setting that moves it.
"""

from __future__ import annotations

import json
import re
import zlib
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


# How deep objects and arrays may nest in a body: the stores and every client read it
# without trouble, and a deeper body is refused before a recursive parser sees it.
MAX_DEPTH = 32
# Integers beyond this lose precision in JavaScript (and every JSON reader built on doubles):
# a value one client stores must read back the same in every other.
MAX_SAFE_INTEGER = 2**53 - 1


class _Unreadable:
    """A number other clients cannot read back (NaN or Infinity, or one that overflows or loses
    precision): held in place while parsing, so the check that follows can name its field."""

    def __init__(self, message: str) -> None:
        self.message = message


def _number(text: str) -> Any:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        return _Unreadable(f"the number {text[:40]} overflows a 64-bit float (it would read back as Infinity)")
    return value


def _integer(text: str) -> Any:
    # Over 16 digits is past 2**53 whatever they are; Python refuses to convert over 4,300 at all.
    value = int(text) if len(text.lstrip("-")) <= 16 else MAX_SAFE_INTEGER + 1
    if abs(value) > MAX_SAFE_INTEGER:
        return _Unreadable(
            f"the number {text[:40]} is beyond ±{MAX_SAFE_INTEGER:,}, where JSON readers built on doubles lose precision"
        )
    return value


def _no_constant(name: str) -> Any:
    return _Unreadable(f"{name} is not a JSON number (JSON has no NaN or Infinity)")


# A JSON string (skipped whole, in C) or one bracket: what the depth check reads.
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _too_deep(text: str) -> bool:
    """Whether objects and arrays nest deeper than MAX_DEPTH, by one pass over the text
    (no recursion: a body of 100,000 brackets is read like any other)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    depth = 0
    for found in _STRING_OR_BRACKET.finditer(text):
        ch = found.group()
        if ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif ch in "]}":
            depth -= 1
    return False


_SURROGATE = re.compile("[\ud800-\udfff]")


def _bad_text(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character"
    if _SURROGATE.search(text):
        return "contains a lone UTF-16 surrogate"
    return None


def check_text(value: Any, path: str = "") -> None:
    """Raises BodyRefused naming the first string (key or value) a database cannot store,
    or the first number another client could not read back."""
    if isinstance(value, _Unreadable):
        raise BodyRefused(422, "invalid", value.message, path or "body")
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
            text,
            object_pairs_hook=_no_duplicate_keys,
            parse_constant=_no_constant,
            parse_float=_number,
            parse_int=_integer,
        )
    except RecursionError:  # never past the depth check; refused all the same, never a 500
        raise BodyRefused(422, "too_deep", f"objects and arrays nest deeper than {MAX_DEPTH} levels", "body") from None
    except ValueError as problem:
        raise BodyRefused(400, "invalid_json", f"the body is not valid JSON: {problem}", "body") from None
    check_text(value)
    return value


def _too_large(limit: int, setting: str, unpacked: bool = False) -> BodyRefused:
    return BodyRefused(
        413,
        "too_large",
        f"the request body{' (unpacked)' if unpacked else ''} is larger than the "
        f"{limit:,} bytes this server accepts here ({setting})",
        "body",
    )


def _gunzip(body: bytes, limit: int, setting: str) -> bytes:
    """Unpacks every member of a gzip body (as gzip itself does: a body of several members is
    their texts one after another), never past the limit in all."""
    parts: list[bytes] = []
    size, rest = 0, body
    while True:
        unpacker = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            unpacked = unpacker.decompress(rest, limit - size + 1)
        except zlib.error as problem:
            raise BodyRefused(
                400, "invalid_body", f"the body is not gzip data: {problem}", "Content-Encoding"
            ) from None
        size += len(unpacked)
        if size > limit or unpacker.unconsumed_tail:
            raise _too_large(limit, setting, unpacked=True)
        if not unpacker.eof:
            raise BodyRefused(400, "invalid_body", "the gzip data ends early", "Content-Encoding")
        parts.append(unpacked)
        rest = unpacker.unused_data
        if not rest:
            return b"".join(parts)


def read_body(request: HttpRequest) -> bytes:
    """The body as sent (unpacked if gzip), within the path's size limit.

    Raises:
        BodyRefused: 413 over the limit, 415 for an encoding other than gzip, 400 for bad gzip.
    """
    from django.conf import settings

    large = any(re.search(pattern, request.path) for pattern in getattr(settings, "RAGTRAIL_SYNC_BODY_PATHS", []))
    if large:
        limit, setting = settings.RAGTRAIL_MAX_SYNC_BODY_BYTES, "RAGTRAIL_MAX_SYNC_BODY_BYTES"
        raw = request.read(limit + 1)
        if len(raw) > limit:
            raise _too_large(limit, setting)
        request._body = raw  # read past Django's general limit, on purpose: request.body now returns it
    else:
        limit, setting = settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "RAGTRAIL_MAX_BODY_BYTES"
        try:
            raw = request.body
        except RequestDataTooBig:
            raise _too_large(limit, setting) from None
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return raw
    if encoding in ("gzip", "x-gzip"):
        return _gunzip(raw, limit, setting)
    raise BodyRefused(
        415, "unsupported_media_type", f"Content-Encoding {encoding!r}: send gzip or none", "Content-Encoding"
    )


class StrictJsonMiddleware:
    """Reads every API body once, strictly, before ninja sees it: after the URL is resolved
    and the key checked (scopes.auth.KeyBeforeBodyMiddleware, listed before this one), so
    nobody unauthenticated makes the server read, unpack or parse a body. Text a database
    cannot store in the path or the query string is refused here too, naming where."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        if request.path.startswith("/api/"):
            problem = _bad_text(request.path)
            if problem:
                return BodyRefused(400, "invalid", f"the path {problem}", "path").response()
            for name, values in request.GET.lists():
                for value in (name, *values):
                    problem = _bad_text(value)
                    if problem:
                        return BodyRefused(422, "invalid", f"the query parameter {problem}", name).response()
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func, view_args, view_kwargs):
        if request.path.startswith("/api/") and request.method in BODY_METHODS:
            try:
                body = read_body(request)
                if body:
                    content_type = request.content_type or ""
                    if content_type != "application/json":
                        raise BodyRefused(
                            415, "unsupported_media_type", "send the body as application/json", "Content-Type"
                        )
                    request.strict_json = parse_strict(body)
            except BodyRefused as refused:
                return refused.response()
        return None


class StrictJsonParser(Parser):
    """Hands ninja the body the middleware already read."""

    def parse_body(self, request: HttpRequest) -> Any:
        if hasattr(request, "strict_json"):
            return request.strict_json
        return parse_strict(request.body)
