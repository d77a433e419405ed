"""Re-signing a scope's trails after its matcher, threshold, lexicon or embedding model changed."""
from __future__ import annotations

from typing import Callable

from django.db import transaction

from scopes.models import Scope
from trails.matching import matching_settings, sign
from trails.models import BandKey, Trail, TrailStatus
from trails.record import band_key_rows


def resign(scope: Scope, trails: list[Trail]) -> None:
    """Signs these trails' current query text afresh and replaces their band keys.

    Call inside a transaction; `trails` need id, query and partition loaded.
    """
    BandKey.objects.filter(trail__in=trails).delete()
    keys = []
    for trail in trails:
        question = sign(scope, trail.query, trail.partition)
        trail.lexical_params = question.lexical.params.label
        trail.lexical_signature = question.lexical.to_bytes()
        trail.band_layout = matching_settings(scope).lexical_layout.label
        trail.embedding_model = question.embedding.model if question.embedding else ""
        trail.embedding = question.embedding.to_bytes() if question.embedding else None
        keys.extend(band_key_rows(trail, question))
    Trail.objects.bulk_update(trails, ["lexical_params", "lexical_signature", "band_layout", "embedding_model", "embedding"])
    BandKey.insert_many(keys)


def reindex_scope(
    scope: Scope, batch_size: int = 500, after_id: int = 0, progress: Callable[[int, int], None] | None = None
) -> int:
    """Recomputes signatures, embeddings and band keys of a scope's servable trails.

    Works in batches by id, each in its own transaction, so an interrupted run
    resumes with `after_id` set to the last id it reported; running it twice
    leaves the same rows.

    Returns:
        How many trails were re-signed.
    """
    done = 0
    while True:
        batch = list(
            Trail.objects.filter(scope=scope, id__gt=after_id, status__in=[TrailStatus.ACTIVE, TrailStatus.PENDING])
            .order_by("id")
            .only("id", "scope_id", "query", "partition")[:batch_size]
        )
        if not batch:
            return done
        with transaction.atomic():
            resign(scope, batch)
        done += len(batch)
        after_id = batch[-1].id
        if progress:
            progress(done, after_id)
