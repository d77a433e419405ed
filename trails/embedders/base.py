"""The embedder contract every backend follows.

A backend is a module named by RAGTRAIL_EMBEDDER that exposes a class `Embedder`, built once
per process with the RAGTRAIL_EMBEDDING_MODEL setting as its only argument, subclassing
`BaseEmbedder`. tests/trails/test_embedders.py runs one contract test class against every
backend shipped here; a backend of your own passes it by subclassing `EmbedderContract`.
A backend module may also expose `configuration_errors(model) -> list[str]`, what the settings
get wrong for it: `manage.py check` (and so `migrate` and `runserver`) says them at start.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

from infra.errors import StoreUnavailable


class EmbedderUnavailable(StoreUnavailable):
    """The embedder could not give vectors in time (an endpoint down, hung, refusing the key);
    recall and record answer 503 with this code and message, and nothing is written."""

    def __init__(self, message: str) -> None:
        super().__init__("embedder_unavailable", message)


class BaseEmbedder(ABC):
    """Turns texts into unit-length float32 vectors.

    The contract, as recall, record, reindex and calibration rely on it:

    - `name`: the name stored with every vector and in every band key's namespace. Vectors of
      two names are never compared, and thresholds are calibrated per name
      (`manage.py calibrate_embedder`), so a name must change whenever the vectors would: the
      model, its version, its dimensions, its quantization.
    - `dim`: the length of every vector (SimHash hyperplanes are drawn for it).
    - `embed_many(texts)`: an array of shape (len(texts), dim), float32, each row of unit
      length, in the order of `texts`; no texts give a (0, dim) array. A text gets the same
      vector alone, in a batch and asked again (to 1e-6 cosine): stored and asked vectors are
      compared with each other.
    - Failures to reach a model that is elsewhere raise `EmbedderUnavailable` within the
      backend's own deadline, never hang a request.
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
