"""The ONNX embedder with its weights quantized to int8 (ONNX Runtime's dynamic quantization):
about twice as fast a question on this CPU, with vectors that are not the float model's.

Not the default. Its vectors differ from the float model's (a cosine of 0.97 at the median on
Quora questions), so it has its own model name: a scope's stored vectors are never compared
across the two, and a threshold fitted on one does not carry to the other. Whether it is good
enough is judged by calibrated rates, not by vectors: `manage.py benchmark_model_path`.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from . import onnx
from .base import unit_rows
from .sentence_transformer import BUNDLED, model_name, model_path

QUANTIZATION_VERSION = 1


def ensure_quantized(model_dir: Path, cache_dir: Path) -> Path:
    """The int8 graph of the checked float export, made once (under the export's lock)."""
    source = onnx.ensure_export(model_dir, cache_dir)
    target = source.with_name(f"{source.stem}-int8-v{QUANTIZATION_VERSION}.onnx")
    if target.exists():
        return target
    with open(cache_dir / ".export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            from onnxruntime.quantization import QuantType, quantize_dynamic

            partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
            try:
                quantize_dynamic(str(source), str(partial), weight_type=QuantType.QInt8)
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
    return target


class Embedder(onnx.Embedder):
    def __init__(self, model: str = BUNDLED) -> None:
        from django.conf import settings

        model_dir = Path(model_path(model))
        self._quantized = ensure_quantized(model_dir, Path(settings.RAGTRAIL_MODEL_CACHE))
        super().__init__(model)
        self.name = f"{model_name(model)}-int8"

    def _graph(self, model_dir: Path, cache_dir: Path) -> Path:
        return self._quantized

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        # Dynamic quantization scales activations by the whole batch's range, padding
        # included: batched, a text's vector moved by up to 0.006 cosine with its
        # neighbours. Stored and asked vectors must agree, so every text runs alone.
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.concatenate(
            [unit_rows(onnx.run(self._session, self._inputs, self._tokenizer, [text])) for text in texts]
        )
