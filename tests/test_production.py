"""The production run command of the README, started as production runs it and driven over HTTP:
gunicorn with ragtrail_site/gunicorn_conf.py, a Celery worker with beat on Redis, PostgreSQL,
static files from the app server, DEBUG off."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from scopes.models import ApiKey, Scope
from tests.conftest import broker_for_tests, service_env
from trails.models import RecallStat

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
BROKER = broker_for_tests()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for_port(port: int, seconds: float = 60) -> None:
    """Until something listens on the port (a server starting), or the time is up."""
    for _ in range(int(seconds * 2)):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)


def stop(*processes: subprocess.Popen) -> None:
    """Terminates them all, then waits for each (30 s, then kill)."""
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def call(base: str, method: str, path: str, key: str | None = None, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.fixture
def production(tmp_path_factory):
    if connection.vendor != "postgresql":
        pytest.skip("production runs on PostgreSQL (as CI does)")
    port = free_port()
    env = service_env(
        RAGTRAIL_SECRET_KEY=settings.SECRET_KEY,  # API-key hashes are salted with it
        RAGTRAIL_BIND=f"127.0.0.1:{port}",
        RAGTRAIL_STATIC_ROOT=str(tmp_path_factory.mktemp("static")),
        RAGTRAIL_WORKERS="2",
        CELERY_BROKER_URL=BROKER,
        # The hashing embedder keeps start-up short here; the bundled model is tested elsewhere.
        RAGTRAIL_EMBEDDER="trails.embedders.hashing",
    )
    # As the recipe does: hashed, compressed copies for whitenoise to serve.
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"], cwd=ROOT, env=env, check=True, capture_output=True
    )
    web = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "ragtrail_site/gunicorn_conf.py", "ragtrail_site.wsgi"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    jobs: list[subprocess.Popen] = []

    def queue(task: str) -> None:
        subprocess.run(
            [sys.executable, "-m", "celery", "-A", "ragtrail_site", "call", task],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start_jobs(schedule: Path) -> None:
        jobs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "ragtrail_site",
                    "worker",
                    "--beat",
                    "--pool",
                    "solo",
                    "--schedule",
                    str(schedule),
                    "--loglevel",
                    "warning",
                ],
                cwd=ROOT,
                env=env,
                stdout=open(schedule.parent / "jobs.log", "w"),
                stderr=subprocess.STDOUT,
            )
        )

    base = f"http://127.0.0.1:{port}"
    try:
        wait_for_port(port)
        yield base, start_jobs, queue
    finally:
        stop(web, *jobs)
        log = web.stdout.read() if web.stdout else ""
        print(log[-3000:])


def test_production_serves_the_api_static_files_and_docs_and_runs_jobs(production, tmp_path):
    scope = Scope.objects.create(slug="prod", matcher="lexical", keep_raw_queries=True)
    _, key = ApiKey.issue([scope], name="prod")
    base, start_jobs, queue = production

    status, _, body = call(
        base, "PUT", "/api/v1/scopes/prod/sections", key, {"sections": [{"id": "parking", "text": "Car park B."}]}
    )
    assert status == 200, body
    status, _, body = call(
        base,
        "POST",
        "/api/v1/scopes/prod/trails",
        key,
        {"query": "Where do visitors park?", "cited": ["parking"], "signal": "accepted"},
    )
    assert status == 201, body
    status, _, body = call(base, "POST", "/api/v1/scopes/prod/recall", key, {"query": "Where do visitors park?"})
    assert (
        status == 200
        and json.loads(body)["outcome"] == "prefetch"
        and json.loads(body)["sections"][0]["text"] == "Car park B."
    )

    status, _, body = call(base, "POST", "/api/v1/scopes/prod/recall", key, {"query": 5})
    assert status == 422 and b"Traceback" not in body
    status, headers, body = call(base, "GET", "/api/v1/docs")
    bundle = re.search(rb"/static/ninja/swagger-ui-bundle\.[0-9a-f]{12}\.js", body)
    assert status == 200 and bundle and b"cdn" not in body.lower()
    status, headers, body = call(base, "GET", bundle.group().decode())
    assert status == 200 and len(body) > 100_000
    # Hashed names, cached for a year at least and compressed, the operator pages' CSS and scripts too.
    hashed = rb"/static/[\w./-]+\.[0-9a-f]{12}\.(?:css|js)"
    _, _, missing = call(base, "GET", "/nothing-here/")  # the operator pages' own stylesheet, on their 404
    _, _, login = call(base, "GET", "/admin/login/")
    assets = [name.decode() for name in re.findall(hashed, missing + login)]
    assert any(a.startswith("/static/css/ops.") for a in assets) and any("/admin/" in a for a in assets), assets
    for path in [*assets, bundle.group().decode()]:
        request = urllib.request.Request(base + path, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            cache = answer.headers["Cache-Control"]
            assert answer.headers["Content-Encoding"] == "gzip", path
            assert "immutable" in cache and int(re.search(r"max-age=(\d+)", cache).group(1)) >= 365 * 86400, cache
    status, _, body = call(base, "GET", "/static/vendor/plotly-basic-4.1.1.min.js")
    assert status == 200 and body.startswith(b"/**")

    # The worker (beside beat, which sends the roll-up every 10 minutes) takes jobs from Redis.
    start_jobs(tmp_path / "beat-schedule")
    queue("trails.tasks.roll_up_task")
    for _ in range(90):
        if RecallStat.objects.filter(scope=scope).exists():
            break
        time.sleep(1)
    assert RecallStat.objects.filter(scope=scope, outcome="prefetch").exists(), (tmp_path / "jobs.log").read_text()[
        -3000:
    ]
    assert (tmp_path / "beat-schedule").exists() or any(tmp_path.glob("beat-schedule*")), "beat did not start"
    # Beat said it runs inside the worker: the overview names the worker when both fall silent.
    from infra import metrics

    assert metrics.beat_embedded() and metrics.beat_started() is not None
