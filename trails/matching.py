"""Signing a question for a scope's matchers, and scoring candidates against it.

The same functions serve record (what to store), recall (what to look up and
which candidate wins) and the reindex job.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from scopes.models import Scope
from trails.core.banding import band_keys
from trails.core.guard import check_pair, question_terms
from trails.core.lexical import jaccard_many, lexical_band_keys
from trails.core.minhash import MinHashSignature, minhash_query
from trails.core.simhash import EmbeddingVector, cosine_many, simhash_bits
from trails.embedders import get_embedder
from trails.models import Candidate


@dataclass(frozen=True)
class QuestionSignature:
    """Everything a scope's matchers need of one question."""

    text: str
    lexical: MinHashSignature
    embedding: EmbeddingVector | None
    keys: tuple[int, ...]


def embedding_namespace(partition: str, model: str) -> str:
    # Keys of another model never meet this model's: a model change needs a reindex.
    return f"{partition}\x00embedding:{model}"


def sign(scope: Scope, text: str, partition: str) -> QuestionSignature:
    """Signs a question for the scope's matchers and computes its band keys.

    Raises:
        ValueError: the question has no words.
    """
    # Synonyms become one term before signing: "intensive care" is signed as "icu".
    text = scope.lexicon.rewrite(text)
    lexical = minhash_query(text, scope.minhash_params)
    keys = lexical_band_keys(text, lexical.params, scope.band_layout, namespace=partition)
    embedding = None
    if scope.uses_embedding:
        embedder = get_embedder()
        embedding = EmbeddingVector(embedder.name, embedder.embed(text))
        keys += embedding_keys(scope, embedding, partition)
    return QuestionSignature(text, lexical, embedding, tuple(keys))


def embedding_keys(scope: Scope, embedding: EmbeddingVector, partition: str) -> list[int]:
    bits = simhash_bits(embedding.values, scope.simhash_params)
    return band_keys(bits, scope.embedding_layout, namespace=embedding_namespace(partition, embedding.model))


@dataclass(frozen=True)
class Match:
    """A candidate that passed a matcher's threshold and the guard."""

    trail: Candidate
    matcher: str
    similarity: float


def score_candidates(
    scope: Scope, question: QuestionSignature, candidates: Sequence[Candidate], guard: bool = True
) -> list[Match]:
    """Scores candidates with the scope's matchers; returns those that pass, best first
    (equal scores: the newest trail first).

    Lexical: word-shingle Jaccard at the scope's threshold in use, and the guard with every
    content term shared. Embedding: cosine at the scope's threshold, and the guard
    (numbers, negation, opposite terms, order of shared terms) with rewording free.
    A candidate embedded by another model is not compared by embedding. `guard=False`
    skips the guard; only the evaluation does that, to measure what the guard is worth.
    """
    count = len(candidates)
    jaccards = (
        jaccard_many(question.lexical, [c.lexical_signature for c in candidates], [c.lexical_params for c in candidates])
        if scope.uses_lexical
        else np.zeros(count)
    )
    cosines = np.full(count, -1.0)
    comparable = [
        i for i, c in enumerate(candidates)
        if question.embedding and c.embedding is not None and c.embedding_model == question.embedding.model
    ]
    if comparable and scope.uses_embedding:
        cosines[comparable] = cosine_many(
            question.embedding, [candidates[i].embedding for i in comparable], [candidates[i].embedding_model for i in comparable]
        )
    query_terms = question_terms(question.text, scope.lexicon)
    matches = []
    for i, candidate in enumerate(candidates):
        lexical_pass = scope.uses_lexical and jaccards[i] >= scope.lexical_threshold_in_use
        embedding_pass = scope.uses_embedding and cosines[i] >= scope.embedding_threshold_in_use
        if not (lexical_pass or embedding_pass):
            continue
        terms = question_terms(candidate.query, scope.lexicon)
        passed = []
        if embedding_pass and (not guard or check_pair(query_terms, terms, max_unshared_terms=None).allowed):
            passed.append(Match(candidate, "embedding", float(cosines[i])))
        if lexical_pass and (not guard or check_pair(query_terms, terms, max_unshared_terms=0).allowed):
            passed.append(Match(candidate, "lexical", float(jaccards[i])))
        if passed:
            # Where both pass, the stronger evidence is the one reported.
            matches.append(max(passed, key=lambda m: m.similarity))
    matches.sort(key=lambda m: (m.similarity, m.trail.id), reverse=True)
    return matches
