"""Embedders, chosen by the RAGTRAIL_EMBEDDER setting: a module exposing a class named `Embedder`.

The model is loaded once per process (`get_embedder`), never per request.
"""
from __future__ import annotations

import importlib
from functools import lru_cache

from .base import BaseEmbedder


@lru_cache(maxsize=4)
def load_embedder(module: str, model: str) -> BaseEmbedder:
    """Returns the embedder of a backend module, built once per process for each model."""
    return importlib.import_module(module).Embedder(model)


def get_embedder() -> BaseEmbedder:
    """Returns the embedder the settings name."""
    from django.conf import settings

    return load_embedder(settings.RAGTRAIL_EMBEDDER, settings.RAGTRAIL_EMBEDDING_MODEL)
