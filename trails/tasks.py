"""Thin Celery wrappers over the upkeep functions; each also has a management command."""
from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from infra import metrics
from scopes.models import Scope
from trails.upkeep.purge import run_purge
from trails.upkeep.reindex import reindex_scope
from trails.upkeep.sync import run_sync_job
from trails.upkeep.jobs import roll_up, scopes_needing_a_look, sweep_expired


@shared_task(bind=True, max_retries=5, default_retry_delay=30)
def sweep_expired_task(self, batch_size: int = 5000) -> dict[str, int]:
    return sweep_expired(timezone.now(), batch_size)


@shared_task(bind=True, max_retries=5, default_retry_delay=30)
def roll_up_task(self, hours: int = 2) -> int:
    end = timezone.now()
    buckets = roll_up(end - timedelta(hours=hours), end)
    # The gauges the alerts read, refreshed with the roll-up every ten minutes.
    looked = scopes_needing_a_look(end)
    metrics.SCOPES_OVER_BOUND.set(looked["over_false_hit_bound"])
    metrics.SCOPES_AT_CEILING.set(looked["threshold_at_ceiling"])
    for kind, count in looked["flagged"].items():
        metrics.SCOPES_FLAGGED.labels(kind).set(count)
    return buckets


@shared_task(bind=True, max_retries=5, default_retry_delay=30)
def reindex_scope_task(self, scope_id: int, after_id: int = 0) -> int:
    scope = Scope.objects.filter(pk=scope_id).first()
    return reindex_scope(scope, after_id=after_id) if scope else 0


@shared_task(bind=True, max_retries=5, default_retry_delay=30)
def purge_task(self, run_id: int) -> int:
    return run_purge(run_id).matched


@shared_task(bind=True, max_retries=5, default_retry_delay=30)
def sync_job_task(self, job_id: int) -> str:
    job = run_sync_job(job_id)
    return job.state if job else "gone"
