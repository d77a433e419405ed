"""Embedders, chosen by the RAGTRAIL_EMBEDDER setting: a module exposing a class named `Embedder`.

The model is loaded once per process (`get_embedder`), never per request.
"""

from __future__ import annotations

import importlib
import threading
import time
import weakref
from collections import OrderedDict
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import lru_cache
from typing import Callable, Iterator, Sequence

import numpy as np

from trails import memory
from trails.core.normalise import QUESTION_FORM, question_form

from .base import BaseEmbedder

# How a call into the model is entered: the site sets a gate when its app is ready
# (ragtrail_site.apps), bounding how many requests run the model at once and refusing
# those that would wait past their budget. The embedders know nothing of requests.
_inference_gate: list[Callable[[str], AbstractContextManager]] = []


# Where load and inference times go (the site's metrics, set at app ready); nowhere by default.
_timings: dict[str, Callable[[float], None]] = {}


def report_timings_to(load: Callable[[float], None], inference: Callable[[float], None]) -> None:
    _timings.update(load=load, inference=inference)


def _observe_load(seconds: float) -> None:
    if "load" in _timings:
        _timings["load"](seconds)


def _observe_inference(seconds: float) -> None:
    if "inference" in _timings:
        _timings["inference"](seconds)


def enter_inference_through(gate: Callable[[str], AbstractContextManager]) -> None:
    """Sets what every call into a model is entered through (the last call wins)."""
    _inference_gate[:] = [gate]


def _entered(what: str) -> AbstractContextManager:
    return _inference_gate[0](what) if _inference_gate else nullcontext()


# The (module, model) pairs this process has loaded: what readiness asks, without loading one.
_loaded: set[tuple[str, str]] = set()


def loaded() -> bool:
    """Whether the embedder the settings name is loaded in this process (never loads it)."""
    from django.conf import settings

    return bool(_override) or (settings.RAGTRAIL_EMBEDDER, settings.RAGTRAIL_EMBEDDING_MODEL) in _loaded


@lru_cache(maxsize=4)
def load_embedder(module: str, model: str) -> BaseEmbedder:
    """Returns the embedder of a backend module, built once per process for each model,
    behind the process's cache of recent questions."""
    from django.conf import settings

    started = time.perf_counter()
    embedder = CachedEmbedder(importlib.import_module(module).Embedder(model), settings.RAGTRAIL_EMBEDDING_CACHE_SIZE)
    _observe_load(time.perf_counter() - started)
    _loaded.add((module, model))
    return embedder


_CACHED: "weakref.WeakSet[CachedEmbedder]" = weakref.WeakSet()


@memory.forgets
def forget_vectors() -> None:
    for embedder in list(_CACHED):
        embedder.forget()


class CachedEmbedder(BaseEmbedder):
    """A model behind a per-process cache of text → vector, entered through the load gate.

    The model reads a question in its normalised form (`question_form`: the words lexical
    matching shingles, case, punctuation and Unicode variants folded), which is also the
    cache key: agents ask the same questions again and again, and a repeat, however it is
    punctuated, costs a dictionary read instead of 5-15 ms of CPU. The form is part of
    the name stored with every vector, so vectors of raw text are never compared with these.
    """

    def __init__(self, inner: BaseEmbedder, size: int) -> None:
        super().__init__(inner.model)
        self.inner, self.dim, self.size = inner, inner.dim, size
        self.name = f"{inner.name}+{QUESTION_FORM}"
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        _CACHED.add(self)

    def forget(self) -> None:
        """Drops every cached vector (a purge may have erased their questions)."""
        with self._lock:
            self._vectors.clear()

    def key(self, text: str) -> str:
        return question_form(text)

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        keys = [self.key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for key in keys:
                vector = self._vectors.get(key)
                if vector is not None:
                    self._vectors.move_to_end(key)
                    found[key] = vector
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            with _entered("the embedding model"):
                started = time.perf_counter()
                vectors = self.inner.embed_many(missing)
                _observe_inference(time.perf_counter() - started)
            vectors.setflags(write=False)  # shared between requests: nobody may change one
            found.update(zip(missing, vectors))
            with self._lock:
                for key, vector in zip(missing, vectors):
                    self._vectors[key] = vector
                while len(self._vectors) > self.size:
                    self._vectors.popitem(last=False)
        return np.stack([found[k] for k in keys])


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


def standing_in() -> bool:
    """Whether an embedder put in place by `serving` answers instead of the configured one."""
    return bool(_override)


@contextmanager
def serving(embedder: BaseEmbedder) -> Iterator[BaseEmbedder]:
    """Makes `get_embedder` return this embedder inside the block (benchmarks, the evaluation
    and tests: recall does not ask whether thresholds were fitted for it)."""
    _override.append(embedder)
    try:
        yield embedder
    finally:
        _override.pop()
