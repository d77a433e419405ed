"""Operating it: bad bytes, faults of the database and the cache, secure defaults (issue 12)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection
from django.test import override_settings

from trails.models import Trail

ROOT = Path(__file__).resolve().parents[1]
NUL, SURROGATE = "\u0000", "\ud800"


def raw(api, method: str, path: str, body: str, content_type: str = "application/json"):
    return api.client.generic(
        method.upper(),
        f"/api/v1{path}",
        body.encode("utf-8", "surrogatepass"),
        content_type=content_type,
        headers=api.headers,
    )


def record_body(**override) -> dict:
    body = {
        "query": "Where do visitors park?",
        "cited": ["parking"],
        "signal": "accepted",
        "steps": [{"tool": "search", "args": {"q": "parking"}, "section_ids": ["parking"]}],
    }
    body.update(override)
    return body


@pytest.mark.parametrize(
    "body,field",
    [
        (record_body(query=f"Where{NUL} do visitors park?"), "query"),
        (record_body(partition=f"ward{NUL}"), "partition"),
        (record_body(steps=[{"tool": f"se{NUL}arch", "args": {}, "section_ids": []}]), "steps.0.tool"),
        (record_body(steps=[{"tool": "search", "args": {f"k{NUL}": 1}, "section_ids": []}]), "steps.0.args"),
        (record_body(steps=[{"tool": "search", "args": {"q": f"v{NUL}"}, "section_ids": []}]), "steps.0.args.q"),
        (record_body(steps=[{"tool": "search", "args": {"q": SURROGATE}, "section_ids": []}]), "steps.0.args.q"),
        (record_body(cited=[f"parking{NUL}"]), "cited.0"),
        (record_body(idempotency_key=f"k{NUL}"), "idempotency_key"),
    ],
)
def test_bytes_a_database_refuses_answer_422_naming_the_field_and_store_nothing(api, sections, body, field):
    import json

    # ensure_ascii escapes NUL and surrogates as \u sequences, as a real client would send them.
    response = raw(api, "post", "/scopes/hospital/trails", json.dumps(body))
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == field
    assert not Trail.objects.exists()


def test_nul_in_a_section_text_or_tool_result_and_nan_are_refused(api, sections):
    import json

    response = raw(api, "put", "/scopes/hospital/sections", json.dumps({"sections": [{"id": "a", "text": f"x{NUL}"}]}))
    assert response.status_code == 422 and response.json()["error"]["field"] == "sections.0.text"
    nan = raw(
        api,
        "put",
        "/scopes/hospital/tool-results",
        '{"tool": "search", "args": {"n": NaN}, "context": {}, "result": 1}',
    )
    assert nan.status_code == 422
    inf = raw(
        api, "put", "/scopes/hospital/tool-results", '{"tool": "search", "args": {}, "context": {}, "result": Infinity}'
    )
    assert inf.status_code == 422


def test_duplicate_keys_are_refused_not_settled_silently(api, sections):
    body = '{"query": "Where do visitors park?", "cited": ["x"], "cited": ["parking"], "signal": "accepted"}'
    response = raw(api, "post", "/scopes/hospital/trails", body)
    assert response.status_code == 422 and response.json()["error"]["field"] == "cited"
    assert not Trail.objects.exists()


def test_a_body_that_is_not_json_answers_415(api, sections):
    response = raw(
        api, "post", "/scopes/hospital/recall", "query=parking", content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code == 415 and response.json()["error"]["field"] == "Content-Type"


@pytest.mark.django_db(transaction=True)
def test_a_database_that_refuses_connections_answers_json_503_with_retry_after(api, scope):
    if connection.vendor != "postgresql":
        pytest.skip(
            "a database server that refuses connections (PostgreSQL, as in CI); SQLite's test database lives in memory"
        )
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict["HOST"], connection.settings_dict["PORT"] = "127.0.0.1", str(_free_port())
    try:
        started = time.perf_counter()
        response = api.recall("hospital", query="Where do visitors park?")
        elapsed = time.perf_counter() - started
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "unavailable" and elapsed < 5


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """A real redis-server of the test's own on a spare port, to stop or pause (SIGSTOP)."""

    def __init__(self) -> None:
        if not shutil.which("redis-server"):
            pytest.skip("redis-server is not installed (CI has it)")
        self.port = _free_port()
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def close(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.mark.parametrize("fault", ["stopped", "paused"])
def test_tool_results_degrade_within_the_socket_timeout_when_redis_is_away(api, sections, fault):
    policy = {"policies": [{"tool": "search", "cacheable": True, "ttl_s": 60}]}
    assert api.call("put", "/scopes/hospital/tool-policies", policy).status_code == 200
    redis = RedisServer()
    caches = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": f"redis://127.0.0.1:{redis.port}/0",
            "OPTIONS": {"socket_timeout": 0.25, "socket_connect_timeout": 0.25},
        }
    }
    call = {"tool": "search", "args": {"q": "parking"}, "context": {}}
    try:
        with override_settings(CACHES=caches):
            # Mid-traffic: the cache answers, then goes away.
            assert api.call("put", "/scopes/hospital/tool-results", {**call, "result": "R"}).json()["stored"] is True
            assert api.call("post", "/scopes/hospital/tool-results/lookup", call).json()["hit"] is True
            if fault == "stopped":
                redis.close()
            else:
                redis.process.send_signal(signal.SIGSTOP)
            started = time.perf_counter()
            looked = api.call("post", "/scopes/hospital/tool-results/lookup", call)
            stored = api.call("put", "/scopes/hospital/tool-results", {**call, "result": "R"})
            stats = api.call("get", "/scopes/hospital/tool-results/stats")
            elapsed = time.perf_counter() - started
    finally:
        redis.close()
    assert looked.status_code == 200 and looked.json() == {
        "hit": False,
        "result": None,
        "age_s": None,
        "reason": "cache_unavailable",
    }
    assert (
        stored.status_code == 200
        and stored.json()["stored"] is False
        and stored.json()["reason"] == "cache_unavailable"
    )
    assert stats.status_code == 503 and stats.json()["error"]["code"] == "cache_unavailable"
    assert elapsed < 4, elapsed


def _manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAGTRAIL_") and k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    clean.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=120
    )


PRODUCTION = {
    "RAGTRAIL_SECRET_KEY": "p" * 20 + "-Zq81vN0xK7wL3mT9bR2yH6cJ5dF4sA",
    "RAGTRAIL_HTTPS": "1",
    "RAGTRAIL_ALLOWED_HOSTS": "ragtrail.example.org",
}


@pytest.mark.slow
def test_check_deploy_passes_with_the_documented_production_settings():
    done = _manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_without_debug_the_process_refuses_to_start_without_a_secret_key():
    done = _manage("check")
    assert done.returncode != 0 and "RAGTRAIL_SECRET_KEY is not set" in done.stderr
    assert _manage("check", RAGTRAIL_DEBUG="1").returncode == 0


def test_api_errors_never_show_a_traceback(api, scope, settings):
    assert settings.DEBUG is False
    response = api.call("post", "/scopes/hospital/recall", raw=b"{not json")
    assert response.status_code == 400 and "Traceback" not in response.content.decode()


def test_a_wrong_method_or_path_under_the_api_answers_the_json_error_shape_with_debug_on_or_off(api, scope, settings):
    for debug in (False, True):
        settings.DEBUG = debug
        wrong_method = api.call("get", "/scopes/hospital/recall")
        assert wrong_method.status_code == 405 and wrong_method["Allow"] == "POST"
        assert wrong_method.json()["error"]["code"] == "method_not_allowed"
        assert wrong_method["X-Frame-Options"] == "DENY"
        for path in ("/scopes/hospital/recall/", "/no-such-endpoint"):
            missing = api.call("post", path, {"query": "Where do visitors park?"})
            assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found", path
        assert api.client.get("/api")["Content-Type"] == "application/json"
    # Off the API, Django's own pages as before.
    assert "application/json" not in api.client.get("/ops/no-such-page/")["Content-Type"]


@pytest.mark.django_db(transaction=True)
def test_a_hung_database_answers_503_within_the_deadline_not_after_the_pause(api, scope, settings):
    if connection.vendor != "postgresql":
        pytest.skip("a hung PostgreSQL backend (as in CI)")
    settings.RAGTRAIL_DB_DEADLINE_S = 1.0
    assert api.recall("hospital", query="Where do visitors park?").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    os.kill(backend, signal.SIGSTOP)  # the server process serving this connection hangs
    try:
        started = time.perf_counter()
        response = api.recall("hospital", query="Where do visitors park?")
        elapsed = time.perf_counter() - started
    finally:
        os.kill(backend, signal.SIGCONT)
        connection.close()
    assert response.status_code == 503 and response["Retry-After"] == "5", response.content
    assert response.json()["error"]["code"] == "deadline"  # not "unavailable" nor "lock_wait": the cause is named
    assert elapsed < 4, elapsed
    # The next request gets a fresh connection and is answered.
    assert api.recall("hospital", query="Where do visitors park?").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_the_database_deadline_bounds_the_whole_request_not_each_call(settings):
    """Three slow calls of 0.4 s under a 1 s deadline: the third is cut at the request's
    deadline (the calls before it used it up), not given a full second of its own."""
    if connection.vendor != "postgresql":
        pytest.skip("the deadline watches PostgreSQL sockets (as in CI)")
    from django.db import OperationalError
    from django.test import RequestFactory

    from infra.db_deadline import DatabaseDeadlineMiddleware

    settings.RAGTRAIL_DB_DEADLINE_S = 1.0

    def slow_view(request):
        for _ in range(3):
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_sleep(0.4)")

    started = time.perf_counter()
    with pytest.raises(OperationalError):
        DatabaseDeadlineMiddleware(slow_view)(RequestFactory().post("/api/v1/scopes/x/recall"))
    elapsed = time.perf_counter() - started
    connection.close()
    assert 0.95 < elapsed < 1.3, elapsed


@pytest.mark.django_db(transaction=True)
def test_a_lock_held_past_its_wait_limit_is_a_named_503_for_agents_and_a_styled_page_for_operators(
    api, scope, sections
):
    """Another transaction holds a trail's row past the lock wait limit: the agent's vote
    answers 503 "lock_wait" (not "unavailable"), the operator's page a 503 page saying so;
    nothing changed."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's lock_timeout (as in CI)")
    import threading

    from django.contrib.auth.models import User
    from django.db import connections, transaction
    from django.test import Client

    trail_id = api.record("hospital", **record_body()).json()["trail_id"]
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                Trail.objects.select_for_update().get(public_id=trail_id)
                held.set()
                release.wait(10)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(5)
        voted = api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "down"})
        operator = Client()
        operator.force_login(User.objects.create_superuser("olga", password="x"))
        page = operator.post(f"/ops/hospital/trails/{trail_id}/vote/", {"vote": "down"})
    finally:
        release.set()
        holder.join()
    assert voted.status_code == 503 and voted.json()["error"]["code"] == "lock_wait" and voted["Retry-After"] == "1"
    assert (
        page.status_code == 503
        and 'data-code="lock_wait"' in page.content.decode()
        and "ops.css" in page.content.decode()
    )
    assert Trail.objects.get(public_id=trail_id).status == "active"


def test_manage_py_run_from_inside_a_docs_checkout_uses_its_own_packages(tmp_path):
    # A sync run from a project's checkout (pydantic's has a `pydantic/`): its packages never shadow ragtrail's.
    (tmp_path / "ninja").mkdir()
    (tmp_path / "ninja" / "__init__.py").write_text("raise ImportError('the docs checkout’s own ninja')\n")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAGTRAIL_") and k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check"],
        cwd=tmp_path,
        env={**clean, "RAGTRAIL_DEBUG": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
