"""The same sentence-transformers model run by ONNX Runtime: the default embedder.

One question through torch costs 8-12 ms of CPU on one thread; the same graph in ONNX Runtime
4.7 ms, with vectors equal to float precision (issue 13). A worker also no longer imports
torch, so it starts faster and holds less memory.

The ONNX graph is made from the model on disk (torch is needed for that step only), checked
against the sentence-transformers model on probe texts, and kept in RAGTRAIL_MODEL_CACHE under
a name derived from the model files' content, so a changed model is never served by an old
export. `manage.py export_model` makes it ahead of time (a deploy step); otherwise the first
process that needs it makes it, under a file lock so workers starting together make it once.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from .base import BaseEmbedder, unit_rows
from .sentence_transformer import BUNDLED, model_name, model_path

# Bumped when the exported graph changes, so older exports are not reused.
EXPORT_VERSION = 1
# An export is served only if its vectors agree with the model's this closely (issue 13: 1e-4).
MAX_COSINE_GAP = 1e-5
# The model's pooling and normalisation are part of the exported graph; these are the layouts
# the export reproduces. Anything else stays on the torch backend.
SUPPORTED_MODULES = [
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
]
# Texts the export is checked on: short and long (past the 256-token limit), cased, unicode,
# empty, and together in one padded batch.
PROBE_TEXTS = [
    "How do I copy an object in Python?",
    "What are the ICU visiting hours?",
    "why is python slow",
    "",
    "Ünïcödé ßtraße, 東京 and emoji 🙂 in one question?",
    "What is the difference between a list and a tuple, and when should I use each one in a large program? " * 30,
]


class ExportRefused(RuntimeError):
    """The model cannot be exported faithfully; use the torch backend for it."""


def export_path(model_dir: Path, cache_dir: Path) -> Path:
    """Where the export of this model lives: named by the content of every model file."""
    digest = hashlib.sha256(f"ragtrail-onnx-export-{EXPORT_VERSION}".encode())
    for path in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(model_dir)).encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return cache_dir / f"{model_dir.name}-{digest.hexdigest()[:16]}.onnx"


def max_seq_length(model_dir: Path) -> int:
    config = model_dir / "sentence_bert_config.json"
    return int(json.loads(config.read_text()).get("max_seq_length", 512)) if config.exists() else 512


def load_tokenizer(model_dir: Path):
    """The model's own fast tokenizer (tokenizer.json), set up as sentence-transformers calls it:
    truncated at the model's max_seq_length, padded to the longest text of a batch."""
    from tokenizers import Tokenizer

    path = model_dir / "tokenizer.json"
    if not path.exists():
        raise ExportRefused(f"{model_dir} has no tokenizer.json")
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.enable_truncation(max_length=max_seq_length(model_dir))
    special = model_dir / "special_tokens_map.json"
    pad_token = (json.loads(special.read_text()).get("pad_token") if special.exists() else None) or "[PAD]"
    if isinstance(pad_token, dict):
        pad_token = pad_token["content"]
    pad_id = tokenizer.token_to_id(pad_token)
    if pad_id is None:
        raise ExportRefused(f"{model_dir}'s tokenizer has no pad token {pad_token!r}")
    tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token)
    return tokenizer


def tokenize(tokenizer, texts: Sequence[str]) -> dict[str, np.ndarray]:
    # sentence-transformers strips every text before tokenizing it.
    encodings = tokenizer.encode_batch([str(t).strip() for t in texts])
    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
    }


def open_session(path: Path, threads: int):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    # No busy-waiting threads: workers share two cores with PostgreSQL and each other.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def input_names(session) -> frozenset[str]:
    """The inputs the graph takes (the tracer may drop one the model never reads)."""
    return frozenset(i.name for i in session.get_inputs())


def run(session, names: frozenset[str], tokenizer, texts: Sequence[str]) -> np.ndarray:
    inputs = tokenize(tokenizer, texts)
    return session.run(None, {name: value for name, value in inputs.items() if name in names})[0]


def export(model_dir: Path, target: Path) -> None:
    """Exports the model to `target`, checked against sentence-transformers on PROBE_TEXTS.

    Raises ExportRefused when the model's layout is not one the graph reproduces or the
    vectors disagree; nothing is written then.
    """
    modules = json.loads((model_dir / "modules.json").read_text()) if (model_dir / "modules.json").exists() else []
    if [m.get("type") for m in modules] != SUPPORTED_MODULES:
        raise ExportRefused(f"{model_dir} is not Transformer → Pooling → Normalize")
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode_") and v}
    if modes != {"pooling_mode_mean_tokens"}:
        raise ExportRefused(f"{model_dir} pools with {sorted(modes)}, not the mean of tokens")

    import torch
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # a bar of loaded weights on every first run says nothing
    model = SentenceTransformer(str(model_dir), device="cpu")
    transformer = model[0].auto_model.eval()

    class MeanPooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask, token_type_ids):
            tokens = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            )[0]
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    tokenizer = load_tokenizer(model_dir)
    sample = {k: torch.from_numpy(v) for k, v in tokenize(tokenizer, PROBE_TEXTS[:2]).items()}
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        with warnings.catch_warnings():
            # The tracer's notes on shapes: the check below is what tells a faithful export.
            warnings.simplefilter("ignore")
            torch.onnx.export(
                MeanPooled().eval(),
                (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"]),
                str(partial),
                input_names=["input_ids", "attention_mask", "token_type_ids"],
                output_names=["sentence_embedding"],
                dynamic_axes={
                    name: {0: "batch", 1: "tokens"} for name in ("input_ids", "attention_mask", "token_type_ids")
                }
                | {"sentence_embedding": {0: "batch"}},
                opset_version=17,
                dynamo=False,
            )
        session = open_session(partial, 1)
        names = input_names(session)
        expected = model.encode(PROBE_TEXTS, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
        for got in (
            run(session, names, tokenizer, PROBE_TEXTS),
            np.concatenate([run(session, names, tokenizer, [t]) for t in PROBE_TEXTS]),
        ):
            gap = float(np.max(1 - np.sum(unit_rows(got) * unit_rows(expected), axis=1)))
            if not gap <= MAX_COSINE_GAP:
                raise ExportRefused(f"the export's vectors differ from the model's by {gap:.2e} cosine")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def ensure_export(model_dir: Path, cache_dir: Path) -> Path:
    """The checked export of the model, made once if it is not there yet."""
    target = export_path(model_dir, cache_dir)
    if target.exists():
        return target
    if importlib.util.find_spec("torch") is None or importlib.util.find_spec("sentence_transformers") is None:
        # A production install has no torch: the export is made once elsewhere and copied in.
        raise ExportRefused(
            f"no ONNX export of {model_dir.name} at {target}, and this install cannot make one (no torch): run "
            "`manage.py export_model` once with requirements/export.txt installed, with the same RAGTRAIL_MODEL_CACHE"
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a worker starting beside this one waits, then finds it made
        if not target.exists():
            export(model_dir, target)
    return target


class Embedder(BaseEmbedder):
    def __init__(self, model: str = BUNDLED) -> None:
        super().__init__(model)
        from django.conf import settings

        model_dir = Path(model_path(model))
        self._tokenizer = load_tokenizer(model_dir)
        path = self._graph(model_dir, Path(settings.RAGTRAIL_MODEL_CACHE))
        # One intra-op thread per process by default: under gunicorn every worker runs its own
        # session, and a thread per core in each oversubscribed the CPU (issue 12).
        self._session = open_session(path, max(1, settings.RAGTRAIL_MODEL_THREADS))
        self._inputs = input_names(self._session)
        self.dim = int(self._session.get_outputs()[0].shape[-1])
        self.name = model_name(model)

    def _graph(self, model_dir: Path, cache_dir: Path) -> Path:
        return ensure_export(model_dir, cache_dir)

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Batches of similar lengths pad less: sort, run in slices, put back in order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), 32):
            chunk = order[start : start + 32]
            vectors[chunk] = run(self._session, self._inputs, self._tokenizer, [texts[i] for i in chunk])
        return unit_rows(vectors)
