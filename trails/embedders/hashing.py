"""A deterministic embedder with no model: hashed words and character trigrams.

For fast unit tests of banding and storage; it knows nothing of meaning.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from trails.core.normalise import stable_hash32, words

from .base import BaseEmbedder, unit_rows


class Embedder(BaseEmbedder):
    dim = 384

    def __init__(self, model: str = "hashing") -> None:
        super().__init__(model)
        self.name = f"hashing-{self.dim}"

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        matrix = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            tokens = words(text)
            features = tokens + [f"{w[i : i + 3]}" for w in tokens for i in range(max(1, len(w) - 2))]
            for feature in features:
                h = stable_hash32(feature)
                matrix[row, h % self.dim] += 1.0 if (h >> 16) & 1 else -1.0
        return unit_rows(matrix)
