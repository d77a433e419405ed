"""The upkeep jobs through a real Celery worker process and a real Redis broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from ragtrail_site.celery import app as celery_app
from tests.bypass import around_the_writer
from tests.conftest import broker_for_tests, service_env
from trails.models import RecallEvent, RecallStat, Trail
from trails.tasks import roll_up_task, sweep_expired_task

BROKER = broker_for_tests()
pytestmark = pytest.mark.django_db(transaction=True)


def start_worker(broker_env: dict[str, str], conf: dict):
    """Starts a worker process on a private queue, against the test database."""
    if connection.vendor != "postgresql":
        pytest.skip("a worker process shares the test database only on PostgreSQL (as in CI)")
    queue = f"test-{uuid.uuid4().hex[:8]}"  # no stray worker can take these tasks
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELERY_")}
    env.update(broker_env, DATABASE_URL=service_env()["DATABASE_URL"])
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "ragtrail_site",
            "worker",
            "--pool",
            "solo",
            "-Q",
            queue,
            "--without-heartbeat",
            "--without-mingle",
            "--without-gossip",
            "--loglevel",
            "warning",
        ],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    )
    saved = {k: celery_app.conf[k] for k in (*conf, "task_always_eager", "task_default_queue")}
    use_conf(conf, task_always_eager=False, task_default_queue=queue)
    return process, saved


def use_conf(*args, **kwargs) -> None:
    """Changes the app's configuration and drops its connection pools, which keep the old broker."""
    celery_app.conf.update(*args, **kwargs)
    celery_app.close()
    celery_app.amqp._producer_pool = None
    celery_app._local.__dict__.pop("backend", None)  # made under the old configuration


def stop_worker(process, saved) -> None:
    use_conf(saved)
    process.terminate()
    process.wait(timeout=20)


@pytest.fixture
def worker():
    import redis

    try:
        redis.Redis.from_url(BROKER).ping()
    except redis.RedisError:
        pytest.skip(f"no Redis at {BROKER}")
    process, saved = start_worker(
        {"CELERY_BROKER_URL": BROKER, "CELERY_RESULT_BACKEND": BROKER}, {"broker_url": BROKER, "result_backend": BROKER}
    )
    try:
        yield
    finally:
        stop_worker(process, saved)


@pytest.fixture
def laptop_worker(settings):
    """A worker on the laptop default: the filesystem broker, no server."""
    process, saved = start_worker(
        {}, {"broker_url": "filesystem://", "broker_transport_options": settings.CELERY_BROKER_TRANSPORT_OPTIONS}
    )
    try:
        yield
    finally:
        stop_worker(process, saved)


def test_a_real_worker_sweeps_exactly_the_expired_trails(worker, api, sections):
    kept = api.record("hospital", query="Where do visitors park?", cited=["parking"]).json()["trail_id"]
    gone = api.record("hospital", query="Is parking free?", cited=["parking"]).json()["trail_id"]
    with around_the_writer():
        Trail.objects.filter(public_id=gone).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert sweep_expired_task.delay().get(timeout=90) == {"trails": 1, "events": 0, "revisions": 0, "purge_runs": 0}
    assert [str(t) for t in Trail.objects.values_list("public_id", flat=True)] == [kept]


def test_a_real_worker_rolls_up_what_a_direct_count_gives(worker, api, sections):
    api.record("hospital", query="Where do visitors park?", cited=["parking"])
    for query in ["Where do visitors park?", "Where do visitors park?", "How do I renew a permit?"]:
        api.recall("hospital", query=query)
    assert roll_up_task.delay().get(timeout=90) >= 2
    counts = {s.outcome: s.count for s in RecallStat.objects.all()}
    assert (
        counts
        == {"prefetch": 2, "miss": 1}
        == {o: RecallEvent.objects.filter(outcome=o).count() for o in ("prefetch", "miss")}
    )


def test_a_broker_that_is_down_never_breaks_the_api(api, sections, settings):
    # The API never waits on the broker: invalidation runs in the request, jobs are
    # periodic. With an unreachable broker configured, every call still answers.
    saved = {k: celery_app.conf[k] for k in ("broker_url", "task_always_eager")}
    use_conf(broker_url="redis://127.0.0.1:1/0", task_always_eager=False)
    try:
        assert api.record("hospital", query="Where do visitors park?", cited=["parking"]).status_code == 201
        assert api.put_sections("hospital", {"parking": "Car park C."}).json()["changed_ids"] == ["parking"]
        assert api.recall("hospital", query="Where do visitors park?").json()["outcome"] == "miss"
        assert Trail.objects.get().status == "stale"
    finally:
        use_conf(saved)


def test_the_laptop_default_runs_jobs_without_a_server(laptop_worker, api, sections):
    api.record("hospital", query="Where do visitors park?", cited=["parking"])
    api.recall("hospital", query="Where do visitors park?")
    roll_up_task.delay()
    deadline = time.monotonic() + 90
    while not RecallStat.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert {s.outcome: s.count for s in RecallStat.objects.all()} == {"prefetch": 1}


def test_a_real_worker_runs_a_purge_and_a_retry_changes_nothing(worker, api, sections):
    from trails.models import PurgeRun
    from trails.tasks import purge_task

    for query in ["Where do visitors park?", "Can jane@example.org visit?"]:
        api.record("hospital", query=query, cited=["parking"])
    run = PurgeRun.objects.create(
        scope=Trail.objects.first().scope, rule="built-in", action="redact", requested_by="test"
    )
    assert purge_task.delay(run.id).get(timeout=90) == 1
    assert purge_task.delay(run.id).get(timeout=90) == 1  # a retried task finds the run done
    assert sorted(Trail.objects.values_list("query", flat=True)) == ["Can [redacted] visit?", "Where do visitors park?"]
