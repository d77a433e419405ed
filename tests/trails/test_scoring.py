"""Recall judges only as many candidates as it needs: the best few are the best few of all."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from scopes.models import Scope
from trails.core.guard import EMPTY_LEXICON, question_terms
from trails.core.minhash import minhash_query
from trails.core.simhash import EmbeddingVector
from trails.serving.candidates import Candidate
from trails.serving.matching import QuestionSignature, matching_settings, score_candidates

QUERY = "How do I renew a passport for my child in 2024?"
# Rewordings the guard lets through, and look-alikes it refuses (another year, a negation).
TEXTS = [
    "How do I renew a passport for my child in 2024?",
    "How can I renew a passport for my child in 2024?",
    "How do I renew my child's passport in 2024?",
    "How do I renew a passport for my child in 2025?",
    "How do I not renew a passport for my child in 2024?",
    "Renew a passport for my child in 2024: how?",
    "How do I renew a passport for a child in 2024?",
]


def signed(scope: Scope, text: str, vector: np.ndarray) -> tuple:
    params = matching_settings(scope).minhash
    return minhash_query(text, params), EmbeddingVector("test-model", vector.astype(np.float32))


@pytest.mark.parametrize("matcher", ["embedding", "lexical", "both"])
def test_the_best_few_judged_lazily_are_the_best_few_of_all_candidates(db, matcher):
    scope = Scope.objects.create(
        slug=f"scoring-{matcher}", matcher=matcher, embedding_threshold=0.95, lexical_threshold=0.5
    )
    rng = np.random.default_rng(5)
    base = rng.standard_normal(384)
    base /= np.linalg.norm(base)
    lexical, embedding = signed(scope, QUERY, base)
    question = QuestionSignature(QUERY, lexical, embedding, (), plain_terms=question_terms(QUERY, EMPTY_LEXICON))
    for trial in range(25):
        candidates = []
        for i in range(40):
            text = TEXTS[rng.integers(len(TEXTS))]
            # Cosines from 0.9 to 1.0 around the query, some tied with another candidate's.
            noise = rng.standard_normal(384)
            noise -= (noise @ base) * base
            noise /= np.linalg.norm(noise)
            cosine = float(rng.choice([0.9, 0.95, 0.96, 0.97, 0.99, 1.0]) if i % 3 else rng.uniform(0.9, 1.0))
            vector = cosine * base + np.sqrt(max(0.0, 1 - cosine**2)) * noise
            sig, vec = signed(scope, text, vector / np.linalg.norm(vector))
            candidates.append(
                Candidate(
                    trial * 100 + i, uuid.uuid4(), text, sig.params.label, sig.to_bytes(), "test-model", vec.to_bytes()
                )
            )
        every = score_candidates(scope, question, candidates)
        assert len(every) >= 5, "the fixture must give matches to rank"
        for limit in (1, 2, 3, 5):
            best = score_candidates(scope, question, candidates, limit=limit)
            assert [(m.trail.id, m.matcher, m.similarity) for m in best] == [
                (m.trail.id, m.matcher, m.similarity) for m in every[:limit]
            ]
        # The guard still refuses the look-alikes among them.
        assert all("2025" not in m.trail.query and " not " not in m.trail.query for m in every)
