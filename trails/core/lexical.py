"""The lexical matcher's two signatures: one to find candidates, one to score them."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .banding import BandLayout, band_keys
from .guard import EMPTY_LEXICON, Lexicon, QuestionTerms, content_shingles
from .minhash import MinHashParams, MinHashSignature, minhash_of_shingles


def lexical_band_keys(
    text: str,
    params: MinHashParams,
    layout: BandLayout,
    namespace: str = "",
    lexicon: Lexicon = EMPTY_LEXICON,
    terms: QuestionTerms | None = None,
) -> list[int]:
    """Band keys of the MinHash of a question's content shingles (see `guard.content_shingles`);
    `terms`, where given, are the text's `question_terms` under `lexicon` already."""
    return band_keys(minhash_of_shingles(content_shingles(text, lexicon, terms), params).values, layout, namespace)


def jaccard_many(query: MinHashSignature, stored: Sequence[bytes], stored_params: Sequence[str]) -> np.ndarray:
    """Estimates the Jaccard similarity of a query against many stored signatures at once.

    Args:
        query: the query's signature (of all its shingles).
        stored: stored signatures, as `MinHashSignature.to_bytes` wrote them.
        stored_params: the parameter label stored with each.

    Returns:
        One similarity per stored signature, in order; 0 for one signed under an older text
        fold (its words may read otherwise now), until it is re-signed.

    Raises:
        ValueError: a stored signature was made with other parameters than the query's.
    """
    if not stored:
        return np.zeros(0)
    # An empty signature is one not kept (a trail of a scope that did not match lexically
    # when it was signed, until re-signed): it resembles nothing.
    kept = [i for i, data in enumerate(stored) if data]
    older_fold = set()
    for label in {stored_params[i] for i in kept}:
        if label != query.params.label:
            if query.params.differs_only_in_fold(MinHashParams.from_label(label)):
                older_fold.add(label)
                continue
            raise ValueError(f"cannot compare MinHash signatures made with {query.params.label} and {label}")
    kept = [i for i in kept if stored_params[i] not in older_fold]
    similarities = np.zeros(len(stored))
    if kept:
        matrix = np.frombuffer(b"".join(stored[i] for i in kept), dtype="<u4").reshape(len(kept), query.params.num_perm)
        similarities[kept] = np.count_nonzero(matrix == query.values, axis=1) / query.params.num_perm
    return similarities
