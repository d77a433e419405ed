"""LSH banding: band layout from a threshold, and band keys for indexed lookup."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class BandLayout:
    """How a signature of `bands * rows` values is cut into bands."""

    bands: int
    rows: int

    def __post_init__(self) -> None:
        if self.bands < 1 or self.rows < 1:
            raise ValueError(f"bands and rows must be positive, got {self.bands}x{self.rows}")

    @property
    def label(self) -> str:
        return f"{self.bands}x{self.rows}"

    @classmethod
    def from_label(cls, label: str) -> "BandLayout":
        bands, _, rows = label.partition("x")
        if not bands.isdigit() or not rows.isdigit():
            raise ValueError(f"not a band layout label: {label!r}")
        return cls(int(bands), int(rows))

    def collision_probability(self, similarity: float | np.ndarray) -> float | np.ndarray:
        """Probability that two items of this similarity share at least one band (the S-curve
        `layout_for_threshold` fits to a threshold); elementwise over an array."""
        return 1.0 - (1.0 - similarity**self.rows) ** self.bands


def _integrate(values: np.ndarray, xs: np.ndarray) -> float:
    return float(np.sum((values[1:] + values[:-1]) * np.diff(xs)) / 2.0)


@lru_cache(maxsize=256)
def layout_for_threshold(threshold: float, num_values: int, false_positive_weight: float = 0.5) -> BandLayout:
    """Chooses bands and rows for a similarity threshold.

    Minimises the weighted area of false positives (similarity below the
    threshold that still collides) and false negatives (above it that does not),
    as datasketch's MinHashLSH does.

    Args:
        threshold: the similarity at which items should start to collide, in (0, 1).
        num_values: the signature length; bands * rows never exceeds it.
        false_positive_weight: weight of false positives; false negatives get the rest.

    Returns:
        The best layout.

    Raises:
        ValueError: the threshold is outside (0, 1).
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be between 0 and 1, got {threshold}")
    below = np.linspace(0.0, threshold, 200)
    above = np.linspace(threshold, 1.0, 200)
    best: tuple[float, BandLayout] | None = None
    for bands in range(1, num_values + 1):
        for rows in range(1, num_values // bands + 1):
            layout = BandLayout(bands, rows)
            fp = _integrate(layout.collision_probability(below), below)
            fn = _integrate(1.0 - layout.collision_probability(above), above)
            error = false_positive_weight * fp + (1.0 - false_positive_weight) * fn
            if best is None or error < best[0]:
                best = (error, layout)
    assert best is not None
    return best[1]


def band_keys(values: np.ndarray, layout: BandLayout, namespace: str = "") -> list[int]:
    """Cuts a signature into bands and hashes each band to a signed 64-bit key.

    The namespace (a partition, say) and the layout are part of every key, so
    keys made in different partitions or with different layouts never meet.

    Args:
        values: the signature values; at least `layout.bands * layout.rows`.
        layout: the band layout.
        namespace: text folded into every key.

    Returns:
        One key per band, in band order, each fitting a database BIGINT.

    Raises:
        ValueError: the signature is shorter than the layout needs.
    """
    needed = layout.bands * layout.rows
    if values.shape[0] < needed:
        raise ValueError(f"layout {layout.label} needs {needed} values, signature has {values.shape[0]}")
    prefix = band_prefix(namespace, layout)
    raw = np.ascontiguousarray(values[:needed]).tobytes()
    width = len(raw) // needed * layout.rows
    return [band_key(prefix, band, raw[band * width : (band + 1) * width]) for band in range(layout.bands)]


def band_prefix(namespace: str, layout: BandLayout) -> bytes:
    """What every key of this namespace and layout is hashed after."""
    return f"{namespace}\x00{layout.label}\x00".encode("utf-8")


def band_key(prefix: bytes, band: int, band_bytes: bytes) -> int:
    """One band's key: its values' bytes hashed after the prefix and the band's number."""
    digest = hashlib.blake2b(prefix + band.to_bytes(2, "big") + band_bytes, digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


_MASK64 = (1 << 64) - 1


def scope_salt(scope_id: int) -> int:
    """A scope's own 64-bit mask (SplitMix64 of its id), as a signed BIGINT.

    Keys are stored XOR this mask, so one scope's keys never equal another's: the keys of
    all scopes share one inverted index, and a lookup reads only its own scope's entries
    (unsalted, every scope asking the same model the same kind of question would read
    every other scope's collisions and drop them after).
    """
    z = (scope_id + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    z ^= z >> 31
    return z - (1 << 64) if z >= 1 << 63 else z


def scoped_keys(keys: "list[int] | tuple[int, ...]", scope_id: int) -> list[int]:
    """Band keys as a scope stores and looks them up (each XOR the scope's salt)."""
    salt = scope_salt(scope_id)
    return [key ^ salt for key in keys]
