"""The one error the pipelines raise for input they refuse; the API renders it as JSON."""
from __future__ import annotations

from typing import Any


class RequestRefused(Exception):
    """Input that is refused, with the HTTP status, a code, the field at fault and a message."""

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
