"""Re-signing a scope's trails after its matcher, threshold, lexicon or embedding model changed."""

from __future__ import annotations

import logging
import time
from typing import Callable

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_migrate, post_save
from django.dispatch import receiver

from infra.guards import guard_on
from infra.statistics import analyse_after_large_write
from scopes.models import Scope
from trails.core.fold import FOLD_VERSION
from trails.core.normalise import normalise_query
from trails.learning.thresholds import SIGNING_FIELDS
from trails.models import BandKeys, Trail, TrailStatus, trail_status_changed, writes
from trails.serving.matching import sign
from trails.serving.record import SIGNED_FIELDS, band_key_rows, take_signature

logger = logging.getLogger(__name__)

# A scope's re-signing in the background has no row of its own: the shared cache keeps that
# it was queued and when it started, for the overview's list of waiting jobs.
_WAITING = "rt:resigning:{}"


def note_resigning(scope_id: int, state: str | None) -> None:
    """Says the scope's re-signing is "queued", "running", or (None) done; best effort."""
    from django.core.cache import caches

    try:
        if state is None:
            caches["heartbeats"].delete(_WAITING.format(scope_id))
        else:
            caches["heartbeats"].set(_WAITING.format(scope_id), {"state": state, "since": time.time()}, 86_400)
    except Exception:  # noqa: BLE001 -- the list of waiting jobs is a view, never a reason to fail the job
        pass


def resigning(scope_id: int) -> dict | None:
    """{"state", "since"} of the scope's background re-signing, or None."""
    from django.core.cache import caches

    try:
        return caches["heartbeats"].get(_WAITING.format(scope_id))
    except Exception:  # noqa: BLE001
        return None


def sign_one(scope: Scope, trail: Trail) -> list:
    question = sign(scope, trail.query, trail.partition)
    take_signature(scope, trail, question)
    return band_key_rows(trail, question)


def resign(scope: Scope, trails: list[Trail], servable_only: bool = False) -> int:
    """Signs these trails' current query text afresh and replaces their band keys, through
    the writer (under the scope's settings as committed). Returns how many were signed."""
    return writes.resign(scope.pk, [t.id for t in trails], sign_one, SIGNED_FIELDS, servable_only=servable_only)


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
            # Every key row rewritten: analysed now where that is much of the table, not at autovacuum's next round.
            analyse_after_large_write({BandKeys._meta.db_table: done, Trail._meta.db_table: done})
            return done
        with transaction.atomic():
            resign(scope, batch, servable_only=True)
        done += len(batch)
        after_id = batch[-1].id
        if progress:
            progress(done, after_id)


@receiver(post_save, sender=Scope, dispatch_uid="trails.upkeep.reindex.resign_after_matching_change")
def resign_after_matching_change(sender, instance: Scope, created: bool, raw: bool = False, **kwargs) -> None:
    """Whoever saves a scope with changed signing settings (admin, shell, a command), its
    trails are re-signed so they stay findable: inline for a small scope, else by the
    re-signing task once the save commits. What happened is left on `instance.resigning`."""
    if raw or created or not getattr(instance, "_matching_changed", frozenset()) & SIGNING_FIELDS:
        return
    servable = Trail.objects.filter(scope=instance, status__in=[TrailStatus.ACTIVE, TrailStatus.PENDING])
    limit = settings.RAGTRAIL_RESIGN_INLINE_LIMIT
    if servable[: limit + 1].count() <= limit:
        instance.resigning = f"re-signed {reindex_scope(instance)} trail(s)"
        return
    scope_id = instance.pk

    def queue() -> None:
        try:
            # By name: trails.tasks imports this module.
            current_app.tasks["trails.tasks.reindex_scope_task"].delay(scope_id)
            note_resigning(scope_id, "queued")
        except Exception as problem:  # the broker is away: re-sign here rather than leave trails unfindable
            logger.error(
                "re-signing scope %s could not be queued (%s): re-signing inline", scope_id, type(problem).__name__
            )
            reindex_scope(Scope.objects.get(pk=scope_id))

    transaction.on_commit(queue)
    instance.resigning = "re-signing queued"


@receiver(trail_status_changed, dispatch_uid="trails.upkeep.reindex.sign_on_becoming_servable")
def sign_on_becoming_servable(sender, trail: Trail, action: str, before: str, after: str, **kwargs) -> None:
    """A trail coming back from rejection is signed afresh, so once approved it is found
    like any other. Always, not only when it has no band keys (rejected at record): one
    rejected later keeps the keys of the matching it was signed under, and re-signing
    after a matching change reaches servable trails only."""
    if before == TrailStatus.REJECTED and after in (TrailStatus.PENDING, TrailStatus.ACTIVE):
        # After the commit (the trail's lock is released): the scope and the trail re-read by id, under their locks.
        if guard_on("re-signing-rereads-the-scope"):
            resign(Scope(pk=trail.scope_id), [trail], servable_only=True)
        else:
            writes.resign(trail.scope_id, [trail.pk], lambda _, t: sign_one(trail.scope, t), SIGNED_FIELDS)


def catch_up_fold(batch_size: int = 500) -> tuple[int, int]:
    """Brings trails signed under an older text fold (`fold.FOLD_VERSION`) to the current one:
    a trail whose query is ASCII reads the same words under every fold, so only its label
    changes; any other is signed afresh and its normalised form rewritten. Until then such a
    trail is not compared lexically (`jaccard_many`). Safe to rerun.

    Returns:
        (trails relabelled, trails re-signed).
    """
    relabelled = resigned = 0
    after_id = 0
    while True:
        batch = list(
            Trail.objects.filter(id__gt=after_id, lexical_params__startswith="minhash:")
            .exclude(lexical_params__endswith=f":fold{FOLD_VERSION}")
            .order_by("id")
            .only("id", "scope_id", "query", "partition", "lexical_params")[:batch_size]
        )
        if not batch:
            return relabelled, resigned
        after_id = batch[-1].id
        same = [t for t in batch if t.query.isascii()]
        for trail in same:
            trail.lexical_params = f"{trail.lexical_params.split(':fold')[0]}:fold{FOLD_VERSION}"
        other = [t for t in batch if not t.query.isascii()]
        with transaction.atomic():
            by_scope: dict[int, list[Trail]] = {}
            for trail in other:
                trail.normalised_query = normalise_query(trail.query)
                by_scope.setdefault(trail.scope_id, []).append(trail)
            writes.refold(same, other)
            for scope_id, trails in by_scope.items():
                resign(Scope.objects.get(pk=scope_id), trails)
        relabelled, resigned = relabelled + len(same), resigned + len(other)


@receiver(post_migrate, dispatch_uid="trails.upkeep.reindex.catch_up_fold")
def catch_up_fold_after_migrate(sender, app_config=None, **kwargs) -> None:
    """After a deploy's migrate, trails signed under an older fold are brought up to date."""
    if app_config is None or app_config.label != "trails":
        return
    try:
        done = catch_up_fold()
    except Exception as problem:  # noqa: BLE001 -- the schema is migrated; the catch-up reruns with the next migrate
        logger.error(
            "text fold %s: trails signed under an older fold not brought up (%s: %s); they are not compared "
            "lexically until `manage.py migrate` runs again",
            FOLD_VERSION,
            type(problem).__name__,
            problem,
        )
        return
    if any(done):
        logger.warning("text fold %s: %s trail(s) relabelled, %s re-signed", FOLD_VERSION, *done)
