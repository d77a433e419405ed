"""Embedding recall reads the nearest collisions only, and still answers with the best trail.

Band collisions grow with the store; the candidate read drops those whose sketch is far
from the query's and keeps the nearest servable ones. These tests build crowds of
same-topic trails around a question and check what recall answers, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Sequence

import numpy as np
import pytest
from django.apps import apps
from django.conf import settings
from django.db import connection

from scopes.models import Scope, Section
from tests.bypass import around_the_writer
from trails.core.banding import scope_salt
from trails.core.simhash import encode_vector
from trails.embedders import serving
from trails.embedders.base import BaseEmbedder
from trails.models import BandKeys, Trail
from trails.serving.recall import recall
from trails.serving.record import RecordInput, record

QUESTION = "how do i reset my password"


class VectorEmbedder(BaseEmbedder):
    """Gives each text the vector the test chose for it."""

    dim = 384

    def __init__(self) -> None:
        super().__init__("vectors")
        self.name = "vectors-384"
        self.vectors: dict[str, np.ndarray] = {}
        rng = np.random.RandomState(11)
        self.query = self._unit(rng.standard_normal(self.dim))
        self.rng = rng

    @staticmethod
    def _unit(v: np.ndarray) -> np.ndarray:
        return (v / np.linalg.norm(v)).astype(np.float32)

    def at_cosine(self, text: str, cosine: float) -> str:
        u = self.rng.standard_normal(self.dim)
        u -= (u @ self.query) * self.query
        self.vectors[text] = self._unit(cosine * self.query + np.sqrt(1 - cosine**2) * self._unit(u))
        return text

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.query if t == QUESTION else self.vectors[t] for t in texts])


@pytest.fixture
def crowd(db):
    scope = Scope.objects.create(slug="crowd", matcher="embedding", embedding_threshold=0.95)
    Section.upsert(scope, {"s": "Passwords are reset from the account page."})
    embedder = VectorEmbedder()
    with serving(embedder):
        yield scope, embedder


def store(scope: Scope, text: str, signal: str | None = "accepted") -> Trail:
    return record(scope, RecordInput(query=text, cited=["s"], signal=signal)).trail


def test_the_best_trail_is_found_in_a_crowd_of_same_topic_trails(crowd):
    scope, embedder = crowd
    cosines = np.linspace(0.80, 0.94, 150)
    for i, cosine in enumerate(cosines):
        store(scope, embedder.at_cosine(f"topic question {i}", float(cosine)))
    best = store(scope, embedder.at_cosine("what is the way to reset a password", 0.97))
    result = recall(scope, QUESTION, dry_run=True)
    assert result.outcome.value == "prefetch" and result.trail.id == best.id
    assert round(result.similarity, 2) == 0.97
    assert result.candidates <= settings.RAGTRAIL_EMBEDDING_NEAREST


def test_trails_that_cannot_be_served_do_not_crowd_out_one_that_can(crowd):
    scope, embedder = crowd
    for i in range(settings.RAGTRAIL_EMBEDDING_NEAREST + 8):  # nearer than the servable one, but pending
        store(scope, embedder.at_cosine(f"pending question {i}", 0.99), signal=None)
    best = store(scope, embedder.at_cosine("what is the way to reset a password", 0.96))
    result = recall(scope, QUESTION, dry_run=True)
    assert result.outcome.value == "prefetch" and result.trail.id == best.id


def test_far_collisions_are_not_read(crowd):
    scope, embedder = crowd
    for i in range(40):
        store(scope, embedder.at_cosine(f"far question {i}", 0.6))
    assert recall(scope, QUESTION, dry_run=True).candidates == 0


def test_key_rows_of_the_earlier_layout_become_one_row_a_trail_in_the_migration(crowd):
    """Stores of the earlier layout (a row per band key) are moved by migration 0013: the
    trail is found by recall afterwards, by the same keys."""
    scope, embedder = crowd
    # No word shared with the question: only the embedding keys can find it.
    trail = store(scope, embedder.at_cosine("forgotten credentials, what now", 0.97))
    row = BandKeys.objects.get(trail=trail)
    salt = scope_salt(scope.id)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMPORARY TABLE trails_bandkey (id INTEGER PRIMARY KEY, trail_id BIGINT, scope_id BIGINT, key BIGINT, "
            "sketch_high BIGINT, sketch_low BIGINT)"
        )
        for position, key in enumerate(row.keys):
            cursor.execute(
                "INSERT INTO trails_bandkey VALUES (%s, %s, %s, %s, %s, %s)",
                [position + 1, trail.id, scope.id, key ^ salt, row.sketch_high, row.sketch_low],
            )
    with around_the_writer():
        BandKeys.objects.filter(trail=trail).delete()
    assert recall(scope, QUESTION, dry_run=True).outcome.value == "miss"
    try:
        migration = importlib.import_module("trails.migrations.0013_band_keys_one_row_a_trail")
        with around_the_writer():  # a migration writes as the schema's owner
            migration.move_keys(apps, SimpleNamespace(connection=connection))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE trails_bandkey")
    moved = BandKeys.objects.get(trail=trail)
    assert (moved.keys, moved.sketch_high, moved.sketch_low) == (row.keys, row.sketch_high, row.sketch_low)
    assert recall(scope, QUESTION, dry_run=True).trail.id == trail.id


def test_a_stored_embedding_lies_in_its_trails_row_not_out_of_line(crowd):
    """A candidate read fetches the trail's page alone: no TOAST index probe and page for its vector."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("TOAST is PostgreSQL's (as in CI)")
    scope, embedder = crowd
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltoastrelid::regclass::text FROM pg_class WHERE relname = %s", [Trail._meta.db_table])
        toast = cursor.fetchone()[0]
        count = f"SELECT count(*) FROM {toast}"
        cursor.execute(count)
        before = cursor.fetchone()[0]
        trails = [store(scope, embedder.at_cosine(f"stored question {i}", 0.9)) for i in range(20)]
        cursor.execute(count)
        assert cursor.fetchone()[0] == before
        cursor.execute(
            f"SELECT count(*) FROM {Trail._meta.db_table} WHERE id = ANY(%s) AND length(embedding) = %s",
            [[t.id for t in trails], len(encode_vector(np.zeros(embedder.dim)))],
        )
        assert cursor.fetchone()[0] == 20  # stored whole, in the compact format


def test_a_hit_on_the_nearest_trail_is_served_from_one_read(crowd):
    scope, embedder = crowd
    for i in range(5):
        store(scope, embedder.at_cosine(f"topic question {i}", 0.85 + i * 0.01))
    best = store(scope, embedder.at_cosine("what is the way to reset a password", 0.98))
    statements = []
    with connection.execute_wrapper(
        lambda execute, sql, params, many, context: statements.append(sql) or execute(sql, params, many, context)
    ):
        result = recall(scope, QUESTION)
    assert result.outcome.value == "prefetch" and result.trail.id == best.id
    assert [s["text"] for s in result.sections] == ["Passwords are reset from the account page."]
    assert [step["tool"] for step in result.steps] == [step.tool for step in best.steps.all()]
    # The candidates and the nearest one's path came in one statement: no second read for the winner.
    paths_read = [sql for sql in statements if "trails_citation" in sql]
    assert len(paths_read) == 1 and "trails_bandkeys" in paths_read[0]


def test_when_the_nearest_trail_went_stale_the_next_one_is_served_with_its_own_path(crowd):
    scope, embedder = crowd
    Section.upsert(scope, {"a": "The old password page."})
    nearest = record(
        scope, RecordInput(query=embedder.at_cosine("reset a password please", 0.995), cited=["a"], signal="accepted")
    ).trail
    other = store(scope, embedder.at_cosine("what is the way to reset a password", 0.96))
    Section.upsert(scope, {"a": "The password page moved."})
    result = recall(scope, QUESTION)
    assert result.outcome.value == "prefetch" and result.trail.id == other.id
    assert [(s["id"], s["text"]) for s in result.sections] == [("s", "Passwords are reset from the account page.")]
    nearest.refresh_from_db()
    assert nearest.status == "stale"


def test_a_winner_second_nearest_by_sketch_comes_with_its_path_in_the_read(crowd):
    """The read brings the paths of the two nearest collisions by sketch: where the better trail
    by cosine is the second nearest by sketch, a hit still takes no third statement."""
    from trails.core.simhash import sketch, sketch_distance
    from trails.serving.matching import matching_settings, simhash_params

    scope, embedder = crowd
    params, limit = simhash_params(), matching_settings(scope).embedding_path_limit
    asked = sketch(embedder.query, params)
    for _ in range(500):  # vectors whose sketches rank them the other way round from their cosines
        nearer = embedder.at_cosine("what is the way to reset a password", 0.965)
        better = embedder.at_cosine("how might i reset a password", 0.985)
        near, far = (sketch_distance(asked, sketch(embedder.vectors[t], params)) for t in (nearer, better))
        if near < far <= limit:
            break
    else:
        pytest.fail("no pair of vectors ranked the other way by their sketches")
    store(scope, nearer)
    best = store(scope, better)
    statements: list[str] = []

    def capture(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        result = recall(scope, QUESTION, dry_run=True)
    assert result.outcome.value == "prefetch" and result.trail.id == best.id
    reads = [s for s in statements if s.lstrip().startswith("WITH found")]
    assert len(reads) == 1, reads  # no second read for the winner's path
