"""Section content hashes: the section store's contract, which recall validates against.

Plain Python (no Django), so the pure validation core uses the same function.
"""

from __future__ import annotations

import hashlib


def section_hash(text: str) -> str:
    """Returns the SHA-256 of a section's UTF-8 text as 64 hex digits."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
