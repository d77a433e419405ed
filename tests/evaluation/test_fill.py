"""The vectorised fill writes the rows record would write: a benchmark on it measures the product's store."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone

from evaluation.fill import BlockSigner, store_block
from evaluation.scale import faq_sections_for, store_trails
from scopes.models import Scope
from trails.core.banding import scoped_keys
from trails.core.simhash import _hyperplanes
from trails.embedders import PrecomputedEmbedder, serving
from trails.embedders.hashing import Embedder as HashingEmbedder
from trails.models import BandKeys, Citation, Step, Trail, TrailSignal
from trails.serving.matching import sign, simhash_params
from trails.serving.recall import recall

WORDS = ["proxy", "cache", "timeout", "locale", "font", "printer", "intensive care", "ICU", "C++", "naïve"]


def questions(count: int, seed: int = 5) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    texts = [
        f"How do I set the {WORDS[i % len(WORDS)]} of machine {i} (not {WORDS[(i * 7) % len(WORDS)]})?"
        for i in range(count)
    ]
    vectors = rng.standard_normal((count, HashingEmbedder().dim)).astype(np.float32)
    # Some vectors lie on a hyperplane (within rounding): their bit is decided one by one, as record decides it.
    plane = _hyperplanes(simhash_params())[:, 0]
    for row in range(0, count, 10):
        vectors[row] -= (vectors[row] @ plane) / (plane @ plane) * plane
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return texts, vectors


@pytest.fixture
def embedding_scope(db):
    return Scope.objects.create(slug="fill", name="Fill", matcher="embedding")


def test_a_block_is_signed_as_record_signs_each_question(embedding_scope):
    texts, vectors = questions(300)
    with serving(PrecomputedEmbedder(HashingEmbedder(), texts, vectors)):
        signer = BlockSigner(embedding_scope)
        block = signer.sign(texts, vectors)
        # A second block meets band values the first one hashed (the signer keeps them).
        again = signer.sign(texts[::-1], vectors[::-1])
        assert np.array_equal(again.keys, block.keys[::-1])
        for i, text in enumerate(texts):
            one = sign(embedding_scope, text, "")
            assert tuple(block.keys[i]) == one.embedding_keys and not one.lexical_keys
            assert tuple(block.sketch[i]) == one.sketch


def test_the_fill_refuses_a_scope_that_matches_lexically(db):
    scope = Scope.objects.create(slug="words", name="Words", matcher="lexical")
    with pytest.raises(ValueError, match="embedding-only"):
        BlockSigner(scope)


def rows_of(scope: Scope) -> list[tuple]:
    """Every stored row of the scope's trails, in trail order, without ids and times."""
    rows = []
    for trail in Trail.objects.filter(scope=scope).order_by("id"):
        rows.append(
            (
                trail.query,
                trail.normalised_query,
                trail.status,
                trail.signal,
                trail.reason,
                trail.lexical_params,
                bytes(trail.lexical_signature),
                trail.band_layout,
                trail.embedding_model,
                bytes(trail.embedding),
                trail.expires_at - trail.created_at,
                trail.hit_count,
                trail.path_tokens,
                trail.idempotency_key,
                trail.partition,
                list(Step.objects.filter(trail=trail).values_list("position", "tool", "args", "section_ids")),
                list(
                    Citation.objects.filter(trail=trail)
                    .order_by("position")
                    .values_list("position", "section_id", "hash")
                ),
                list(TrailSignal.objects.filter(trail=trail).values_list("signal", "source", "by", "reason")),
                [
                    (scoped_keys(keys, scope.id), high, low)  # as the question has them: each scope salts its own
                    for keys, high, low in BandKeys.objects.filter(trail=trail).values_list(
                        "keys", "sketch_high", "sketch_low"
                    )
                ],
            )
        )
    return rows


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the vectorised fill writes with PostgreSQL's COPY")
def test_the_vectorised_fill_stores_the_rows_record_stores_and_recall_finds_them(embedding_scope):
    slow_scope = Scope.objects.create(slug="fill-slow", name="Fill (ORM)", matcher="embedding")
    texts, vectors = questions(60)
    current, slow_current = faq_sections_for(embedding_scope), faq_sections_for(slow_scope)
    section_ids = sorted(current)
    cited = [
        [section_ids[i % len(section_ids)], section_ids[(i * 3 + 1) % len(section_ids)]] for i in range(len(texts))
    ]
    with serving(PrecomputedEmbedder(HashingEmbedder(), texts, vectors)):
        signer = BlockSigner(embedding_scope)
        ids = store_block(signer, texts, vectors, signer.sign(texts, vectors), cited, current, timezone.now())
        store_trails(slow_scope, texts, vectors, slow_current, lambda i: cited[i])
        assert rows_of(embedding_scope) == rows_of(slow_scope)
        assert list(Trail.objects.filter(scope=embedding_scope).order_by("id").values_list("id", flat=True)) == ids
        result = recall(embedding_scope, texts[7])
    assert result.outcome.value == "prefetch" and result.trail.id == ids[7]
    assert [s["id"] for s in result.sections] == cited[7]


def fill_with_indexes_built_after(scope: Scope) -> tuple[list[str], dict]:
    """Fills 40 trails with the indexes dropped and built after; checks the indexes are as
    before and recall finds a trail; gives what the fill said and the builds' timings."""
    from evaluation.scale import TRAIL_TABLES, indexes_built_after

    def indexes() -> set[tuple[str, str]]:
        with connection.cursor() as cursor:
            # A partial index's condition reads back reworded (the same condition): compared up to it.
            cursor.execute(
                "SELECT indexname, regexp_replace(indexdef, ' WHERE .*', '') FROM pg_indexes "
                "WHERE schemaname = 'public' AND tablename = ANY(%s)",
                [list(TRAIL_TABLES)],
            )
            return set(cursor.fetchall())

    before, said = indexes(), []
    texts, vectors = questions(40)
    current = faq_sections_for(scope)
    with serving(PrecomputedEmbedder(HashingEmbedder(), texts, vectors)):
        with indexes_built_after(said.append, workers=2, maintenance_work_mem="64MB") as built:
            during = indexes()
            signer = BlockSigner(scope)
            ids = store_block(
                signer,
                texts,
                vectors,
                signer.sign(texts, vectors),
                [[sorted(current)[0]]] * len(texts),
                current,
                timezone.now(),
            )
        # The inverted index of band keys was gone during the fill, the primary keys and unique ones stayed.
        assert "bandkeys_keys_gin" not in {name for name, _ in during}
        assert {name for name, _ in during} >= {name for name, definition in before if "UNIQUE" in definition}
        assert indexes() == before
        result = recall(scope, texts[3])
    assert result.outcome.value == "prefetch" and result.trail.id == ids[3]
    assert set(built["indexes"]) == {name for name, _ in before} - {name for name, _ in during}
    return said, built


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the indexes are PostgreSQL's")
def test_a_fill_with_indexes_built_after_leaves_every_index_as_it_was_and_recall_finds_the_trails(embedding_scope):
    # Inside the test's transaction the builds run on its connection, one after another.
    said, _ = fill_with_indexes_built_after(embedding_scope)
    assert said[0].startswith("  ") and "built again on 1 connection " in said[-1] and "bandkeys_keys_gin" in said[-1]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the indexes are PostgreSQL's")
@pytest.mark.django_db(transaction=True)
def test_indexes_built_on_two_connections_at_once_come_back_as_they_were(embedding_scope):
    said, built = fill_with_indexes_built_after(embedding_scope)
    assert "built again on 2 connections" in said[-1]
    # Every dropped index was built (checked in the helper), each timed.
    assert all(seconds >= 0 for seconds in built["indexes"].values()) and built["seconds"] >= max(
        built["indexes"].values()
    )
