"""MinHash signatures of shingle sets, with their parameters carried along."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from .fold import FOLD_VERSION
from .normalise import shingles, stable_hash32

_MERSENNE_PRIME = np.uint64((1 << 61) - 1)
_MAX_HASH = np.uint64((1 << 32) - 1)


@dataclass(frozen=True)
class MinHashParams:
    """What a MinHash signature was made with; two signatures compare only if equal."""

    num_perm: int = 128
    seed: int = 1
    # The text fold the shingles were read with (`fold.FOLD_VERSION`): 1 is the fold before it had a number.
    fold: int = FOLD_VERSION

    def __post_init__(self) -> None:
        if self.num_perm < 16:
            raise ValueError(f"num_perm must be at least 16, got {self.num_perm}")

    @property
    def label(self) -> str:
        """Returns the text stored beside a signature, such as "minhash:128:1:fold3"."""
        base = f"minhash:{self.num_perm}:{self.seed}"
        return base if self.fold == 1 else f"{base}:fold{self.fold}"

    @classmethod
    def from_label(cls, label: str) -> "MinHashParams":
        """Parses a label made by `label` (one without a fold is of fold 1).

        Raises:
            ValueError: the label is not a MinHash label.
        """
        parts = label.split(":")
        fold = parts[3].removeprefix("fold") if len(parts) == 4 else "1"
        if (
            parts[0] != "minhash"
            or len(parts) not in (3, 4)
            or (len(parts) == 4 and not parts[3].startswith("fold"))
            or not all(p.isdigit() for p in (*parts[1:3], fold))
        ):
            raise ValueError(f"not a MinHash parameter label: {label!r}")
        return cls(num_perm=int(parts[1]), seed=int(parts[2]), fold=int(fold))

    def differs_only_in_fold(self, other: "MinHashParams") -> bool:
        """Whether the two differ in their fold alone (a signature from before a fold change)."""
        return self.fold != other.fold and (self.num_perm, self.seed) == (other.num_perm, other.seed)


_PERMUTATIONS: dict[MinHashParams, tuple[np.ndarray, np.ndarray]] = {}


def _permutations(params: MinHashParams) -> tuple[np.ndarray, np.ndarray]:
    cached = _PERMUTATIONS.get(params)
    if cached is None:
        # RandomState's stream is frozen by numpy's compatibility policy, so the
        # same seed gives the same permutations on every machine and version.
        generator = np.random.RandomState(params.seed)
        a = generator.randint(1, int(_MERSENNE_PRIME), size=params.num_perm, dtype=np.uint64)
        b = generator.randint(0, int(_MERSENNE_PRIME), size=params.num_perm, dtype=np.uint64)
        cached = _PERMUTATIONS[params] = (a, b)
    return cached


@dataclass(frozen=True)
class MinHashSignature:
    """A MinHash signature and the parameters that made it."""

    params: MinHashParams
    values: np.ndarray  # uint32, one value per permutation

    def to_bytes(self) -> bytes:
        """Returns the values as little-endian uint32 bytes, for storage."""
        return self.values.astype("<u4").tobytes()

    @classmethod
    def from_bytes(cls, params: MinHashParams, data: bytes) -> "MinHashSignature":
        """Rebuilds a stored signature.

        Raises:
            ValueError: the byte length does not match the parameters.
        """
        values = np.frombuffer(data, dtype="<u4")
        if values.shape[0] != params.num_perm:
            raise ValueError(f"stored signature has {values.shape[0]} values, parameters say {params.num_perm}")
        return cls(params, values)


def minhash_of_hashes(hashes: Iterable[int], params: MinHashParams) -> MinHashSignature:
    """Builds a signature from 32-bit shingle hashes.

    Raises:
        ValueError: there are no hashes (an empty set has no signature).
    """
    hv = np.fromiter(hashes, dtype=np.uint64)
    if hv.size == 0:
        raise ValueError("cannot sign an empty shingle set")
    return MinHashSignature(params, permuted_hashes(hv, params).min(axis=1).astype(np.uint32))


def permuted_hashes(hashes: np.ndarray, params: MinHashParams) -> np.ndarray:
    """Each 32-bit shingle hash (uint64 array) under each permutation: (num_perm, len(hashes)), below 2**32."""
    a, b = _permutations(params)
    # uint64 products wrap modulo 2**64 before the prime: deterministic, and the
    # same universal-hash family datasketch uses.
    with np.errstate(over="ignore"):
        return ((a[:, None] * hashes[None, :] + b[:, None]) % _MERSENNE_PRIME) & _MAX_HASH


def minhash_of_shingles(items: Iterable[str], params: MinHashParams) -> MinHashSignature:
    """Signs a set of shingles.

    Raises:
        ValueError: the set is empty.
    """
    return minhash_of_hashes((stable_hash32(s) for s in items), params)


def minhash_query(text: str, params: MinHashParams) -> MinHashSignature:
    """Signs a query's shingle set (see `normalise.shingles`).

    Raises:
        ValueError: the query has no words.
    """
    return minhash_of_shingles(shingles(text), params)
