"""The upkeep jobs through a real Celery worker process and a real Redis broker."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from ragtrail_site.celery import app as celery_app
from trails.models import RecallEvent, RecallStat, Trail
from trails.tasks import roll_up_task, sweep_expired_task

BROKER = os.environ.get("RAGTRAIL_TEST_BROKER", "redis://127.0.0.1:6379/3")
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker():
    if connection.vendor != "postgresql":
        pytest.skip("a worker process shares the test database only on PostgreSQL (as in CI)")
    import redis

    try:
        redis.Redis.from_url(BROKER).ping()
    except redis.RedisError:
        pytest.skip(f"no Redis at {BROKER}")
    db = connection.settings_dict
    queue = f"test-{uuid.uuid4().hex[:8]}"  # no stray worker can take these tasks
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "CELERY_BROKER_URL": BROKER,
        "CELERY_RESULT_BACKEND": BROKER,
        "CELERY_TASK_ALWAYS_EAGER": "false",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "ragtrail_site", "worker", "--pool", "solo", "-Q", queue,
         "--without-heartbeat", "--without-mingle", "--without-gossip", "--loglevel", "warning"],
        env=env, cwd=Path(__file__).resolve().parents[2],
    )
    saved = {k: celery_app.conf[k] for k in ("broker_url", "result_backend", "task_always_eager", "task_default_queue")}
    celery_app.conf.update(broker_url=BROKER, result_backend=BROKER, task_always_eager=False, task_default_queue=queue)
    try:
        yield
    finally:
        celery_app.conf.update(saved)
        process.terminate()
        process.wait(timeout=20)


def test_a_real_worker_sweeps_exactly_the_expired_trails(worker, api, sections):
    kept = api.record("hospital", query="Where do visitors park?", cited=["parking"]).json()["trail_id"]
    gone = api.record("hospital", query="Is parking free?", cited=["parking"]).json()["trail_id"]
    Trail.objects.filter(public_id=gone).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert sweep_expired_task.delay().get(timeout=90) == {"trails": 1, "events": 0}
    assert [str(t) for t in Trail.objects.values_list("public_id", flat=True)] == [kept]


def test_a_real_worker_rolls_up_what_a_direct_count_gives(worker, api, sections):
    api.record("hospital", query="Where do visitors park?", cited=["parking"])
    for query in ["Where do visitors park?", "Where do visitors park?", "How do I renew a permit?"]:
        api.recall("hospital", query=query)
    assert roll_up_task.delay().get(timeout=90) >= 2
    counts = {s.outcome: s.count for s in RecallStat.objects.all()}
    assert counts == {"prefetch": 2, "miss": 1} == {o: RecallEvent.objects.filter(outcome=o).count() for o in ("prefetch", "miss")}
