"""Embedders, chosen by the RAGTRAIL_EMBEDDER setting: a module exposing a class named `Embedder`.

The model is loaded once per process (`get_embedder`), never per request.
"""
from __future__ import annotations

import importlib
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator, Sequence

import numpy as np

from .base import BaseEmbedder


@lru_cache(maxsize=4)
def load_embedder(module: str, model: str) -> BaseEmbedder:
    """Returns the embedder of a backend module, built once per process for each model."""
    return importlib.import_module(module).Embedder(model)


_override: list[BaseEmbedder] = []


def get_embedder() -> BaseEmbedder:
    """Returns the embedder the settings name (or the one `serving` put in place)."""
    if _override:
        return _override[-1]
    from django.conf import settings

    return load_embedder(settings.RAGTRAIL_EMBEDDER, settings.RAGTRAIL_EMBEDDING_MODEL)


class PrecomputedEmbedder(BaseEmbedder):
    """The same model's vectors, computed for many texts in one batch.

    Benchmarks embed each distinct text once this way; a text outside the batch
    is embedded by the model as usual.
    """

    def __init__(self, inner: BaseEmbedder, texts: Sequence[str], vectors: np.ndarray | None = None) -> None:
        """`vectors`, where given, are the texts' vectors already (made by `inner`'s model)."""
        super().__init__(inner.model)
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        if vectors is None and texts:
            vectors = inner.embed_many(list(texts))
        self.vectors = dict(zip(texts, vectors)) if texts else {}

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self.vectors]
        if missing:
            self.vectors.update(zip(missing, self.inner.embed_many(missing)))
        return np.stack([self.vectors[t] for t in texts])


@contextmanager
def serving(embedder: BaseEmbedder) -> Iterator[BaseEmbedder]:
    """Makes `get_embedder` return this embedder inside the block."""
    _override.append(embedder)
    try:
        yield embedder
    finally:
        _override.pop()
