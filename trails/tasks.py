"""Thin Celery wrappers over the upkeep functions; each also has a management command.

Each retries, with growing waits, on what a retry can fix (the database away or its
connection dropped); any other error is a defect a retry repeats, so it is not retried.
The functions are safe to run again, so a retry redoes nothing twice."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from infra import metrics
from scopes.models import Scope
from trails.upkeep.jobs import roll_up, scopes_needing_a_look, sweep_expired
from trails.upkeep.purge import run_purge
from trails.upkeep.reindex import note_resigning, reindex_scope
from trails.upkeep.sync import reap_lost_sync_jobs, run_sync_job

RETRY = {
    "autoretry_for": (OperationalError, InterfaceError),
    "max_retries": 5,
    "retry_backoff": 15,
    "retry_backoff_max": 600,
    "retry_jitter": True,
}


@shared_task
def heartbeat_task() -> float:
    """Does nothing but succeed: its last success (stamped for every task) is the worker's pulse."""
    return timezone.now().timestamp()


@shared_task(bind=True, **RETRY)
def sweep_expired_task(self, batch_size: int = 5000) -> dict[str, int]:
    return sweep_expired(timezone.now(), batch_size)


@shared_task(bind=True, **RETRY)
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


@shared_task(bind=True, **RETRY)
def reindex_scope_task(self, scope_id: int, after_id: int = 0) -> int:
    scope = Scope.objects.filter(pk=scope_id).first()
    note_resigning(scope_id, "running")
    done = reindex_scope(scope, after_id=after_id) if scope else 0
    note_resigning(scope_id, None)
    return done


@shared_task(bind=True, **RETRY)
def purge_task(self, run_id: int) -> int:
    return run_purge(run_id).matched


@shared_task(bind=True, **RETRY)
def sync_job_task(self, job_id: int) -> str:
    # The task's id names the run: a retry or a redelivery (its worker died) takes the job back.
    job = run_sync_job(job_id, claimant=self.request.id or "")
    return job.state if job else "gone"


@shared_task(bind=True, **RETRY)
def reap_lost_sync_jobs_task(self) -> dict[str, int]:
    return reap_lost_sync_jobs(timezone.now())
