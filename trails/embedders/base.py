"""The embedder contract every backend follows."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np


class BaseEmbedder(ABC):
    """Turns texts into unit-length float32 vectors.

    Backends set `name` (stored with every vector, so vectors of different
    models are never compared) and `dim`, and implement `embed_many`.
    """

    name: str
    dim: int

    def __init__(self, model: str) -> None:
        self.model = model

    @abstractmethod
    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        """Returns an array of shape (len(texts), dim), each row of unit length."""

    def embed(self, text: str) -> np.ndarray:
        return self.embed_many([text])[0]


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32)
