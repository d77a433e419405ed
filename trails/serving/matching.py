"""Signing a question for a scope's matchers, and scoring candidates against it.

The same functions serve record (what to store), recall (what to look up and
which candidate wins) and the reindex job.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np
from django.conf import settings

from scopes.models import Scope
from trails.core.banding import BandLayout, band_keys, layout_for_threshold
from trails.core.guard import EMPTY_LEXICON, Lexicon, QuestionTerms, check_pair, question_terms
from trails.core.lexical import jaccard_many, lexical_band_keys
from trails.core.minhash import MinHashParams, MinHashSignature, minhash_query
from trails.core.normalise import words
from trails.core.second_chance import SecondChanceRule
from trails.core.simhash import (
    EmbeddingVector,
    SimHashParams,
    bit_agreement,
    cosine_many,
    simhash_bits,
    sketch,
    sketch_distance_limit,
)
from trails.embedders import get_embedder
from trails.serving.candidates import Candidate, Lookup

# The embedding band layout is derived from a cosine floor this far under the threshold.
EMBEDDING_BAND_MARGIN = 0.04


@dataclass(frozen=True)
class MatchingSettings:
    """What a scope's matching fields mean: signature parameters, band layouts, the
    guard's lexicon and the thresholds in use."""

    minhash: MinHashParams
    lexical_layout: BandLayout
    embedding_layout: BandLayout
    lexicon: Lexicon
    # The configured thresholds, or those the scope's labels moved them to (within the
    # limits of trails.learning.shipped.limits_for, where the configured layout still finds
    # the candidates).
    lexical_threshold: float
    embedding_threshold: float
    # How near (in sketch bits) an embedding collision must be to be read, at that threshold.
    embedding_sketch_limit: int
    # How near the nearest collision must be for its path to come with the candidates: nine
    # in ten pairs at the threshold are nearer, and most misses' nearest farther.
    embedding_path_limit: int


def matching_settings(scope: Scope) -> MatchingSettings:
    """The scope's matching settings (computed once per distinct set of field values)."""
    return _matching_settings(
        scope.lexical_threshold,
        scope.band_count,
        scope.band_rows,
        scope.embedding_threshold,
        scope.synonyms,
        scope.learned_lexical_threshold,
        scope.learned_embedding_threshold,
        settings.RAGTRAIL_MINHASH_PERMUTATIONS,
        settings.RAGTRAIL_MINHASH_SEED,
        settings.RAGTRAIL_SIMHASH_BITS,
    )


@lru_cache(maxsize=1024)
def _matching_settings(
    lexical_threshold: float,
    band_count: int | None,
    band_rows: int | None,
    embedding_threshold: float,
    synonyms: str,
    learned_lexical: float | None,
    learned_embedding: float | None,
    permutations: int,
    seed: int,
    simhash_bits_count: int,
) -> MatchingSettings:
    minhash = MinHashParams(permutations, seed)
    if band_count and band_rows:
        lexical_layout = BandLayout(band_count, band_rows)  # the admin's override
    else:
        lexical_layout = layout_for_threshold(round(lexical_threshold, 4), minhash.num_perm)
    # SimHash bands from a cosine floor a little under the threshold, so that pairs at
    # the threshold are almost never missed (a false candidate costs one dot product,
    # a missed one a whole search).
    floor = max(0.5, embedding_threshold - EMBEDDING_BAND_MARGIN)
    embedding_layout = layout_for_threshold(round(bit_agreement(floor), 4), simhash_bits_count, 0.05)
    lexicon = Lexicon.from_groups(line.split(",") for line in synonyms.splitlines() if line.strip())
    # A learned threshold replaces the configured one (labels may lower it within the band
    # margin, so the configured layout still finds its candidates).
    embedding_in_use = learned_embedding if learned_embedding is not None else embedding_threshold
    return MatchingSettings(
        minhash,
        lexical_layout,
        embedding_layout,
        lexicon,
        learned_lexical if learned_lexical is not None else lexical_threshold,
        embedding_in_use,
        sketch_distance_limit(embedding_in_use),
        sketch_distance_limit(embedding_in_use, miss=0.1),
    )


def second_chance_cut(scope: Scope) -> float:
    """The similarity a missed recall's near candidate needs for a second chance."""
    return SecondChanceRule(scope.second_chance_margin, scope.second_chance_top).lower_cut(
        matching_settings(scope).embedding_threshold
    )


@lru_cache(maxsize=256)
def _sketch_limit(cosine: float) -> int:
    return sketch_distance_limit(cosine)


def simhash_params() -> SimHashParams:
    """SimHash hyperplanes for the embedder in use (its dimension is read from the loaded model)."""
    return SimHashParams(
        dim=get_embedder().dim, bits=settings.RAGTRAIL_SIMHASH_BITS, seed=settings.RAGTRAIL_SIMHASH_SEED
    )


@dataclass(frozen=True)
class QuestionSignature:
    """Everything a scope's matchers need of one question."""

    text: str
    lexical: MinHashSignature | None  # None: not asked for (a recall that matches by embedding alone)
    embedding: EmbeddingVector | None
    lexical_keys: tuple[int, ...]
    embedding_keys: tuple[int, ...] = ()
    sketch: tuple[int, int] = (0, 0)  # of the embedding; (0, 0) without one
    # The guard's terms of the text without synonyms, where the lexical keys were made from them.
    plain_terms: QuestionTerms | None = None

    def guard_terms(self, lexicon: Lexicon) -> QuestionTerms:
        """The question's terms as the guard compares them under this lexicon."""
        if self.plain_terms is not None and not lexicon.canonical:
            return self.plain_terms
        return question_terms(self.text, lexicon)

    @property
    def keys(self) -> tuple[int, ...]:
        return self.lexical_keys + self.embedding_keys

    def lookup(self, scope: Scope) -> Lookup:
        """What the candidate read looks for: the band keys, and how near an embedding collision must be."""
        matching = matching_settings(scope)
        distance = matching.embedding_sketch_limit
        if scope.second_chance:  # its near candidates are read with the rest, down to the lower cut
            distance = max(distance, _sketch_limit(second_chance_cut(scope)))
        return Lookup(
            self.lexical_keys,
            self.embedding_keys,
            self.sketch,
            distance if self.embedding_keys else 0,
            path_distance=matching.embedding_path_limit if self.embedding_keys else -1,
        )


def embedding_namespace(partition: str, model: str) -> str:
    # Keys of another model never meet this model's: a model change needs a reindex.
    return f"{partition}\x00embedding:{model}"


def sign(scope: Scope, text: str, partition: str, lexical_signature: bool = True) -> QuestionSignature:
    """Signs a question for the scope's matchers and computes its band keys.

    `lexical_signature=False` skips the MinHash signature where the scope does not match
    lexically (a recall compares none then; a stored trail keeps one either way).

    Raises:
        ValueError: the question has no words.
    """
    matching = matching_settings(scope)
    # Synonyms become one term before signing: "intensive care" is signed as "icu".
    text = matching.lexicon.rewrite(text)
    lexical = minhash_query(text, matching.minhash) if lexical_signature or scope.uses_lexical else None
    # An embedding-only scope stores and reads no lexical keys: its lexical collisions
    # could only pass by cosine, which its own keys find (and they were half its rows).
    terms, keys = None, []
    if scope.uses_lexical:
        terms = question_terms(text, EMPTY_LEXICON)
        keys = lexical_band_keys(text, matching.minhash, matching.lexical_layout, namespace=partition, terms=terms)
    if not scope.uses_embedding:
        return QuestionSignature(text, lexical, None, tuple(keys), plain_terms=terms)
    if lexical is None and not words(text):
        raise ValueError("the question has no words")
    embedder = get_embedder()
    embedding = EmbeddingVector(embedder.name, embedder.embed(text))
    return QuestionSignature(
        text,
        lexical,
        embedding,
        tuple(keys),
        tuple(embedding_keys(scope, embedding, partition)),
        sketch(embedding.values, simhash_params()),
        plain_terms=terms,
    )


def embedding_keys(scope: Scope, embedding: EmbeddingVector, partition: str) -> list[int]:
    bits = simhash_bits(embedding.values, simhash_params())
    return band_keys(
        bits, matching_settings(scope).embedding_layout, namespace=embedding_namespace(partition, embedding.model)
    )


@dataclass(frozen=True)
class Match:
    """A candidate that passed a matcher's threshold and the guard."""

    trail: Candidate
    matcher: str
    similarity: float


@dataclass(frozen=True)
class Verdict:
    """Why one candidate passed or not: what an operator reads in an explained recall."""

    trail: Candidate
    lexical: float | None  # estimated Jaccard, where the scope matches lexically
    embedding: float | None  # cosine, where the scope matches by embedding and the models agree
    passed: bool
    refusal: str = ""  # the guard's rule(s), where the threshold was reached but the guard said no

    @property
    def outcome(self) -> str:
        if self.passed:
            return "passed"
        return f"refused by the guard: {self.refusal}" if self.refusal else "below the threshold"

    @property
    def nearest(self) -> float:
        """The higher of its similarities (-1 where none was computed)."""
        return max(x for x in (self.embedding, self.lexical, -1.0) if x is not None)


def score_candidates(
    scope: Scope,
    question: QuestionSignature,
    candidates: Sequence[Candidate],
    guard: bool = True,
    verdicts: list[Verdict] | None = None,
    limit: int | None = None,
) -> list[Match]:
    """Scores candidates with the scope's matchers; returns those that pass, best first
    (equal scores: the newest trail first), or only the best `limit` of them.

    Lexical: word-shingle Jaccard at the scope's threshold in use, and the guard with every
    content term shared. Embedding: cosine at the scope's threshold, and the guard
    (numbers, negation, opposite terms, order of shared terms) with rewording free.
    A candidate embedded by another model is not compared by embedding. `guard=False`
    skips the guard; only the evaluation does that, to measure what the guard is worth.
    Given a `verdicts` list, a Verdict for every candidate is appended to it.
    """
    count = len(candidates)
    jaccards = (
        jaccard_many(
            question.lexical, [c.lexical_signature for c in candidates], [c.lexical_params for c in candidates]
        )
        if scope.uses_lexical
        else np.zeros(count)
    )
    cosines = np.full(count, -1.0)
    comparable = [
        i
        for i, c in enumerate(candidates)
        if question.embedding and c.embedding is not None and c.embedding_model == question.embedding.model
    ]
    if comparable and scope.uses_embedding:
        cosines[comparable] = cosine_many(
            question.embedding,
            [candidates[i].embedding for i in comparable],
            [candidates[i].embedding_model for i in comparable],
        )
    matching = matching_settings(scope)
    query_terms: QuestionTerms | None = None  # only once a candidate reaches a threshold

    def judged(i: int) -> tuple[Match | None, list[str]]:
        """The candidate's match where a matcher and the guard pass it, and the guard's refusals."""
        nonlocal query_terms
        candidate = candidates[i]
        refusals, passed = [], []
        if guard and query_terms is None:
            query_terms = question.guard_terms(matching.lexicon)
        terms = question_terms(candidate.query, matching.lexicon) if guard else None
        for matcher, passes, score, unshared in (
            ("embedding", embedding_passes[i], cosines[i], None),
            ("lexical", lexical_passes[i], jaccards[i], 0),
        ):
            if not passes:
                continue
            verdict = check_pair(query_terms, terms, max_unshared_terms=unshared) if guard else None
            if verdict is None or verdict.allowed:
                passed.append(Match(candidate, matcher, float(score)))
            else:
                refusals.append(verdict.reason)
        # Where both pass, the stronger evidence is the one reported.
        return (max(passed, key=lambda m: m.similarity) if passed else None), refusals

    lexical_passes = [scope.uses_lexical and jaccards[i] >= matching.lexical_threshold for i in range(count)]
    embedding_passes = [scope.uses_embedding and cosines[i] >= matching.embedding_threshold for i in range(count)]
    rank = lambda m: (m.similarity, m.trail.id)  # noqa: E731
    matches: list[Match] = []
    if verdicts is None and limit is not None:
        # Only the best few are wanted (recall validates at most three): judge candidates
        # from the highest score a matcher gives them down, and stop once `limit` matches
        # rank above anything left. A match never ranks above its highest score, so these
        # are the best `limit` that judging every candidate would give.
        bounds = sorted(
            (
                (
                    max(s for s, p in ((cosines[i], embedding_passes[i]), (jaccards[i], lexical_passes[i])) if p),
                    candidates[i].id,
                ),
                i,
            )
            for i in range(count)
            if lexical_passes[i] or embedding_passes[i]
        )
        for highest, i in reversed(bounds):
            if len(matches) >= limit and rank(matches[limit - 1]) >= highest:
                break
            match, _ = judged(i)
            if match is not None:
                matches.append(match)
                matches.sort(key=rank, reverse=True)
        return matches[:limit]
    for i, candidate in enumerate(candidates):
        match, refusals = judged(i) if lexical_passes[i] or embedding_passes[i] else (None, [])
        if match is not None:
            matches.append(match)
        if verdicts is not None:
            verdicts.append(
                Verdict(
                    candidate,
                    round(float(jaccards[i]), 4) if scope.uses_lexical else None,
                    # Uncompared candidates keep the -1.0 the array starts with.
                    round(float(cosines[i]), 4) if scope.uses_embedding and cosines[i] > -1.0 else None,
                    match is not None,
                    "; ".join(refusals),
                )
            )
    matches.sort(key=rank, reverse=True)
    return matches[:limit] if limit is not None else matches


# How many of a miss's nearest candidates the guard is asked about.
NEAREST_JUDGED = 3


def nearest_allowed(
    scope: Scope, question: QuestionSignature, candidates: Sequence[Candidate], floor: float
) -> Match | None:
    """A miss's nearest candidate by embedding at or above `floor` that the guard allows:
    what a lower threshold would have served. None where there is none, or the scope
    does not match by embedding."""
    allowed = near_allowed(scope, question, candidates, floor, keep=1)
    return allowed[0] if allowed else None


def near_allowed(
    scope: Scope,
    question: QuestionSignature,
    candidates: Sequence[Candidate],
    floor: float,
    keep: int = 3,
    refuse_added_terms: bool = False,
) -> list[Match]:
    """Up to `keep` of a miss's candidates by embedding at or above `floor` that the guard allows,
    nearest first, of the NEAREST_JUDGED nearest; none where the scope does not match by embedding.
    `refuse_added_terms`: the guard also refuses a narrower or wider question (guard.check_pair)."""
    if not scope.uses_embedding or question.embedding is None:
        return []
    comparable = [c for c in candidates if c.embedding is not None and c.embedding_model == question.embedding.model]
    if not comparable:
        return []
    cosines = cosine_many(
        question.embedding, [c.embedding for c in comparable], [c.embedding_model for c in comparable]
    )
    lexicon = matching_settings(scope).lexicon
    query_terms = question.guard_terms(lexicon)
    allowed: list[Match] = []
    for i in np.argsort(-cosines, kind="stable")[:NEAREST_JUDGED]:
        if cosines[i] < floor or len(allowed) >= keep:
            break
        terms = question_terms(comparable[i].query, lexicon)
        verdict = check_pair(query_terms, terms, max_unshared_terms=None, refuse_added_terms=refuse_added_terms)
        if verdict.allowed:
            allowed.append(Match(comparable[i], "embedding", float(cosines[i])))
    return allowed
