"""Signing a question for a scope's matchers, and scoring candidates against it.

The same functions serve record (what to store), recall (what to look up and
which candidate wins) and the reindex job.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scopes.models import Scope
from trails.core.banding import band_keys
from trails.core.guard import check_pair, question_terms
from trails.core.lexical import jaccard_many, lexical_band_keys
from trails.core.minhash import MinHashSignature, minhash_query
from trails.core.simhash import EmbeddingVector, cosine_many, simhash_bits
from trails.embedders import get_embedder


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

    index: int
    matcher: str
    score: float


def score_candidates(
    scope: Scope, question: QuestionSignature, texts: list[str], signatures: list[bytes], signature_params: list[str],
    embeddings: list[bytes | None], embedding_models: list[str],
) -> list[Match]:
    """Scores candidates with the scope's matchers; returns those that pass, best first.

    Lexical: word-shingle Jaccard at the scope's threshold, and the guard with every
    content term shared. Embedding: cosine at the scope's threshold, and the guard
    (numbers, negation, opposite terms, order of shared terms) with rewording free.
    A candidate embedded by another model is not compared by embedding.
    """
    jaccards = jaccard_many(question.lexical, signatures, signature_params) if scope.uses_lexical else np.zeros(len(texts))
    comparable = [i for i, model in enumerate(embedding_models) if question.embedding and embeddings[i] is not None and model == question.embedding.model]
    cosines = np.full(len(texts), -1.0)
    if comparable and scope.uses_embedding:
        cosines[comparable] = cosine_many(question.embedding, [embeddings[i] for i in comparable], [embedding_models[i] for i in comparable])
    query_terms = question_terms(question.text, scope.lexicon)
    matches = []
    for i, text in enumerate(texts):
        lexical_pass = scope.uses_lexical and jaccards[i] >= scope.lexical_threshold
        embedding_pass = scope.uses_embedding and cosines[i] >= scope.embedding_threshold
        if not (lexical_pass or embedding_pass):
            continue
        terms = question_terms(text, scope.lexicon)
        passed = []
        if embedding_pass and check_pair(query_terms, terms, max_unshared_terms=None).allowed:
            passed.append(Match(i, "embedding", float(cosines[i])))
        if lexical_pass and check_pair(query_terms, terms, max_unshared_terms=0).allowed:
            passed.append(Match(i, "lexical", float(jaccards[i])))
        if passed:
            # Where both pass, the stronger evidence is the one reported.
            matches.append(max(passed, key=lambda m: m.score))
    matches.sort(key=lambda m: m.score, reverse=True)
    return matches
