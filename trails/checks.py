"""Django system checks: settings that would fail every recall are said at start
(`manage.py check`, `migrate`, `runserver`), not found at the first request."""

from __future__ import annotations

import importlib

from django.conf import settings
from django.core import checks


def embedder_settings(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """The configured embedder's module imports, and its `configuration_errors` (where it has
    them) find nothing wrong with the settings."""
    try:
        module = importlib.import_module(settings.RAGTRAIL_EMBEDDER)
    except ImportError as problem:
        return [
            checks.Error(
                f"RAGTRAIL_EMBEDDER ({settings.RAGTRAIL_EMBEDDER!r}) cannot be imported: {problem}",
                hint="name a module exposing Embedder, e.g. trails.embedders.onnx or trails.embedders.openai_compatible",
                id="trails.E001",
            )
        ]
    errors = getattr(module, "configuration_errors", lambda model: [])(settings.RAGTRAIL_EMBEDDING_MODEL)
    return [
        checks.Error(error, hint="docs/matching.md, 'Another embedding model'", id="trails.E002") for error in errors
    ]
