"""Liveness and readiness, as a load balancer or systemd polls them."""

from __future__ import annotations

import socket
import threading

import pytest
from django.db import OperationalError, close_old_connections
from django.test import Client

from infra import refusals
from trails import embedders

pytestmark = pytest.mark.django_db


@pytest.fixture
def probe(settings) -> Client:
    settings.RAGTRAIL_EMBEDDER = "trails.embedders.hashing"
    return Client()


def test_readiness_is_false_until_the_model_is_loaded_and_the_database_answers(probe, monkeypatch):
    monkeypatch.setattr(embedders, "_loaded", set())
    answer = probe.get("/health/ready")
    assert answer.status_code == 503 and answer.json() == {
        "ready": False,
        "checks": {"database": "ok", "cache": "ok", "model": "not ready"},
    }
    embedders.load_embedder.cache_clear()
    embedders.get_embedder()
    assert probe.get("/health/ready").json() == {
        "ready": True,
        "checks": {"database": "ok", "cache": "ok", "model": "ok"},
    }

    from django.db import connection

    def away():
        raise OperationalError("connection refused")

    monkeypatch.setattr(connection, "cursor", away)
    answer = probe.get("/health/ready")
    assert answer.status_code == 503 and answer.json()["checks"]["database"] == "not ready"
    assert "OperationalError" not in answer.content.decode()
    # Liveness asks nothing of the database: the process answers, so it is not restarted.
    assert probe.get("/health/live").json() == {"live": True}


def test_probes_need_no_key_and_are_never_counted_as_api_traffic(probe, scope):
    before = refusals.window(scope.slug)
    for _ in range(5):
        assert probe.get("/health/live").status_code == 200
        probe.get("/health/ready")
    assert refusals.window(scope.slug) == before


def test_probes_over_plain_http_are_answered_where_https_is_enforced(probe, settings):
    settings.SECURE_SSL_REDIRECT = True
    assert probe.get("/api/v1/docs").status_code == 301
    assert probe.get("/health/live").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_readiness_answers_on_the_first_probe_after_the_database_dropped_its_connections(probe):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("a dropped server connection is PostgreSQL's case")
    embedders.load_embedder.cache_clear()
    embedders.get_embedder()
    first = probe.get("/health/ready")
    assert first.status_code == 200, first.json()
    pid = connection.connection.info.backend_pid
    import psycopg

    settings_dict = connection.get_connection_params()
    with psycopg.connect(**settings_dict, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
    # As after a database restart: the kept connection is dead; the next probe must not fail on it.
    # The test client skips the request-start hook a served request runs, so it is run here.
    close_old_connections()
    answer = probe.get("/health/ready")
    assert answer.status_code == 200, answer.json()


def test_readiness_with_the_cache_down_makes_one_bounded_attempt(probe, settings, monkeypatch):
    from redis.connection import Connection

    # A Redis going down: it takes each connection and drops it before answering.
    dropping = socket.socket()
    dropping.bind(("127.0.0.1", 0))
    dropping.listen(16)

    def drop() -> None:
        while True:
            try:
                taken, _ = dropping.accept()
            except OSError:
                return
            taken.close()

    threading.Thread(target=drop, daemon=True).start()
    settings.RAGTRAIL_CACHE_TIMEOUT_S = 0.1
    settings.CACHES = {
        **settings.CACHES,
        "heartbeats": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{dropping.getsockname()[1]}/0",
            "OPTIONS": {"socket_timeout": 0.1, "socket_connect_timeout": 0.1},
        },
    }
    attempts = []
    connect = Connection._connect

    def counted(self):
        attempts.append((self.socket_connect_timeout, self.socket_timeout))
        return connect(self)

    monkeypatch.setattr(Connection, "_connect", counted)
    try:
        answer = probe.get("/health/ready")
    finally:
        dropping.close()
    assert answer.status_code == 503 and answer.json()["checks"]["cache"] == "not ready"
    # One connection attempt, bounded by the configured cache timeout: the client's default
    # retries with backoff (seconds on a Redis going down) are not the probe's.
    assert attempts == [(0.1, 0.1)]
