"""SimHash of embeddings: seeded random hyperplanes, bits cut into bands for indexed lookup."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SimHashParams:
    """What SimHash bits were made with; bits compare only if these are equal."""

    dim: int
    bits: int = 512
    seed: int = 1

    @property
    def label(self) -> str:
        return f"simhash:{self.dim}:{self.bits}:{self.seed}"


_PLANES: dict[SimHashParams, np.ndarray] = {}


def _hyperplanes(params: SimHashParams) -> np.ndarray:
    planes = _PLANES.get(params)
    if planes is None:
        # RandomState's normal stream is frozen across numpy versions and machines.
        planes = _PLANES[params] = (
            np.random.RandomState(params.seed).standard_normal((params.dim, params.bits)).astype(np.float32)
        )
    return planes


def simhash_bits(vector: np.ndarray, params: SimHashParams) -> np.ndarray:
    """Returns one 0/1 byte per hyperplane: which side of it the vector lies on.

    Raises:
        ValueError: the vector's dimension is not the parameters' dimension.
    """
    if vector.shape != (params.dim,):
        raise ValueError(f"vector has shape {vector.shape}, SimHash parameters expect ({params.dim},)")
    return (vector.astype(np.float32) @ _hyperplanes(params) >= 0).astype(np.uint8)


def bit_agreement(cosine: float) -> float:
    """Probability that one random hyperplane puts two vectors of this cosine on the same side."""
    return 1.0 - math.acos(max(-1.0, min(1.0, cosine))) / math.pi


@dataclass(frozen=True)
class EmbeddingVector:
    """A unit-length embedding and the model that made it."""

    model: str
    values: np.ndarray  # float32

    def to_bytes(self) -> bytes:
        """The vector as a trail stores it (`STORED_FORMAT`)."""
        return encode_vector(self.values)

    @classmethod
    def from_bytes(cls, model: str, data: bytes) -> "EmbeddingVector":
        return cls(model, decode_vector(data))

    def cosine(self, other: "EmbeddingVector") -> float:
        """Cosine similarity of two unit vectors.

        Raises:
            ValueError: the vectors come from different models.
        """
        if self.model != other.model:
            raise ValueError(f"cannot compare embeddings from model {self.model!r} and model {other.model!r}")
        return float(np.dot(self.values, other.values))


def cosine_many(query: EmbeddingVector, stored: list[bytes], models: list[str]) -> np.ndarray:
    """Cosine of a query against many stored unit vectors.

    Raises:
        ValueError: a stored vector was made by another model, or has another dimension.
    """
    if not stored:
        return np.zeros(0)
    for model in set(models):
        if model != query.model:
            raise ValueError(f"cannot compare embeddings from model {query.model!r} and model {model!r}")
    return decode_vectors(stored, query.values.shape[0]) @ query.values.astype(np.float32)


# How a stored embedding's bytes begin. Float32 vectors (4 bytes a value, what trails stored
# first) have no marker: their length is a multiple of 4, a marked vector's never is.
FLOAT16 = 0x02  # then 2 bytes a value
INT8 = 0x01  # then the scale as float32, then 1 byte a value
STORED_FORMAT = INT8


def encode_vector(values: np.ndarray, stored_format: int = STORED_FORMAT) -> bytes:
    """A unit vector as a trail stores it: float16 (768 bytes for 384 values, cosines within
    1e-3 of float32's) or int8 with one scale (389 bytes)."""
    values = np.asarray(values, dtype=np.float32)
    if stored_format == FLOAT16:
        return bytes([FLOAT16]) + values.astype("<f2").tobytes()
    if stored_format == INT8:
        scale = float(np.abs(values).max()) / 127.0 or 1.0
        quantized = np.clip(np.rint(values / scale), -127, 127).astype(np.int8)
        return bytes([INT8]) + np.float32(scale).astype("<f4").tobytes() + quantized.tobytes()
    raise ValueError(f"unknown stored vector format {stored_format}")


def decode_vectors(stored: list[bytes], dim: int) -> np.ndarray:
    """Stored vectors as a float32 matrix, a row each. Rows all in one format (what a scope
    holds) are decoded at once: recall scores up to 16 candidates on every lookup.

    Raises:
        ValueError: a vector is not stored as one, or has another dimension than `dim`.
    """
    stored = [bytes(data) for data in stored]
    if all(len(data) == 4 * dim for data in stored):  # float32 rows, stored before the compact formats
        return np.frombuffer(b"".join(stored), dtype="<f4").reshape(len(stored), dim)
    if all(len(data) == 5 + dim and data[0] == INT8 for data in stored):
        rows = np.frombuffer(b"".join(stored), dtype=np.uint8).reshape(len(stored), 5 + dim)
        scales = rows[:, 1:5].copy().view("<f4")
        return _unit_rows(rows[:, 5:].view(np.int8).astype(np.float32) * scales)
    rows = [decode_vector(data) for data in stored]
    if any(row.shape != (dim,) for row in rows):
        raise ValueError("stored embeddings do not have the query's dimension")
    return np.stack(rows)


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def decode_vector(data: bytes) -> np.ndarray:
    """A stored vector as float32, whichever format it was stored in (a compact one renormalised
    to unit length, so a cosine stays a dot product).

    Raises:
        ValueError: the bytes are no stored vector.
    """
    data = bytes(data)
    if len(data) % 4 == 0:
        return np.frombuffer(data, dtype="<f4")
    if data[0] == FLOAT16 and len(data) % 2 == 1:
        values = np.frombuffer(data, dtype="<f2", offset=1).astype(np.float32)
    elif data[0] == INT8 and len(data) > 5:
        scale = np.frombuffer(data, dtype="<f4", count=1, offset=1)[0]
        values = np.frombuffer(data, dtype=np.int8, offset=5).astype(np.float32) * scale
    else:
        raise ValueError(f"not a stored vector ({len(data)} bytes)")
    return _unit_rows(values[None, :])[0]


# The sketch: 128 more SimHash bits from hyperplanes of their own, kept beside every band
# key so that the database can drop a band collision by its Hamming distance before it
# reads the trail. Band collisions grow with the store (at 1M trails of real-looking
# questions, 824 per lookup under the 30x17 layout); trails that close to the query do not.
SKETCH_BITS = 128
SKETCH_SEED_OFFSET = 1_000_003  # other hyperplanes than the bands'


def sketch_params(params: SimHashParams) -> SimHashParams:
    return SimHashParams(dim=params.dim, bits=SKETCH_BITS, seed=params.seed + SKETCH_SEED_OFFSET)


def sketch(vector: np.ndarray, params: SimHashParams) -> tuple[int, int]:
    """The vector's 128 sketch bits as two signed 64-bit integers (they fit a BIGINT column)."""
    bits = simhash_bits(vector, sketch_params(params))
    high, low = (int.from_bytes(np.packbits(half).tobytes(), "big", signed=True) for half in (bits[:64], bits[64:]))
    return high, low


def sketch_distance(a: tuple[int, int], b: tuple[int, int]) -> int:
    """Hamming distance of two sketches."""
    return sum(((x ^ y) & 0xFFFF_FFFF_FFFF_FFFF).bit_count() for x, y in zip(a, b))


def sketch_distance_limit(cosine: float, miss: float = 1e-4) -> int:
    """The smallest Hamming distance that a pair at this cosine exceeds with probability at most `miss`.

    Each sketch bit differs with probability acos(cosine)/pi, independently, so the
    distance is binomial; a pair more similar than `cosine` exceeds the limit less often.
    """
    p = 1.0 - bit_agreement(cosine)
    tail = 1.0
    for limit in range(SKETCH_BITS + 1):
        tail -= math.comb(SKETCH_BITS, limit) * p**limit * (1.0 - p) ** (SKETCH_BITS - limit)
        if tail <= miss:
            return limit
    return SKETCH_BITS
