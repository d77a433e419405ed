"""Past capacity, requests are answered 503 within their time budget; repeats skip the model."""

from __future__ import annotations

import threading
import time
from typing import Sequence

import numpy as np
import pytest

from infra.load_shedding import embedding_gate, queued_since
from scopes.models import ApiKey, Scope, Section
from tests.conftest import ApiClient, service_env
from trails.embedders import CachedEmbedder, get_embedder
from trails.embedders.base import BaseEmbedder
from trails.models import Trail


@pytest.fixture(autouse=True)
def _the_test_client_is_a_trusted_proxy(settings):
    """These tests stamp X-Request-Start as a proxy on this machine would (the test client's address)."""
    settings.RAGTRAIL_TRUSTED_PROXIES = frozenset({"127.0.0.1"})


def test_a_proxy_stamp_is_read_in_seconds_milliseconds_or_microseconds():
    now = 1_800_000_000.0
    assert queued_since("t=1799999999.5", now) == 1799999999.5
    assert queued_since("1799999999500", now) == 1799999999.5
    assert queued_since("t=1799999999500000", now) == 1799999999.5
    assert queued_since("yesterday", now) is None and queued_since(None, now) is None
    assert queued_since("t=12", now) is None  # no unit puts it near now


def test_a_request_that_waited_past_its_budget_is_answered_503_and_changes_nothing(api, scope, sections, settings):
    settings.RAGTRAIL_API_BUDGET_MS = 500
    stale = f"t={time.time() - 2:.3f}"
    response = api.client.post(
        "/api/v1/scopes/hospital/trails",
        data={"query": "icu visiting hours", "cited": ["visiting/icu"], "signal": "accepted"},
        content_type="application/json",
        headers={**api.headers, "X-Request-Start": stale},
    )
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert response.json()["error"]["code"] == "overloaded"
    assert not Trail.objects.filter(scope=scope).exists()
    fresh = f"t={time.time():.3f}"
    response = api.client.post(
        "/api/v1/scopes/hospital/trails",
        data={"query": "icu visiting hours", "cited": ["visiting/icu"], "signal": "accepted"},
        content_type="application/json",
        headers={**api.headers, "X-Request-Start": fresh},
    )
    assert response.status_code == 201


def test_pages_are_never_shed(admin_client):
    stale = f"t={time.time() - 60:.3f}"
    assert admin_client.get("/ops/", headers={"X-Request-Start": stale}).status_code in (200, 302)


def test_a_recall_that_cannot_reach_the_model_within_its_budget_is_answered_503(db, settings):
    settings.RAGTRAIL_RECALL_BUDGET_MS = 300
    scope = Scope.objects.create(slug="busy")  # the embedding matcher, the real model
    Section.upsert(scope, {"s": "text"})
    _, key = ApiKey.issue([scope])
    api = ApiClient(key)
    get_embedder().embed("warm the model up before the gate is held")
    held, release = threading.Event(), threading.Event()

    def hold_the_model():
        with embedding_gate().entered("test"):
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_model)
    holder.start()
    try:
        held.wait(10)
        started = time.monotonic()
        response = api.recall("busy", query="a question never asked before in this process")
        waited = time.monotonic() - started
    finally:
        release.set()
        holder.join()
    assert response.status_code == 503 and response.json()["error"]["code"] == "overloaded"
    assert response["Retry-After"] == "1"
    assert waited < 5  # it gave up at its budget, not when the model came free
    # With the model free again, the same question is answered.
    assert api.recall("busy", query="a question never asked before in this process").status_code == 200


class CountingEmbedder(BaseEmbedder):
    dim = 4

    def __init__(self) -> None:
        super().__init__("counting")
        self.name, self.calls = "counting", []

    def embed_many(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([np.array([len(t), t.count("a"), 1.0, 0.0], dtype=np.float32) for t in texts])


def test_a_repeated_question_pays_the_model_once_and_the_cache_stays_bounded(db):
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, size=2)
    first = cached.embed("What are the  ICU hours?")
    again = cached.embed("what are the icu hours ")  # the same question in its normalised form
    assert inner.calls == [["what are the icu hours"]]
    assert np.array_equal(first, again)
    cached.embed("b")
    cached.embed("c")  # the cache holds two: the first question went
    cached.embed("What are the ICU hours?")
    assert len(inner.calls) == 4


def test_the_bundled_model_gives_the_same_vector_to_whitespace_and_case_variants(db):
    embedder = get_embedder()
    inner = embedder.inner
    a, b = inner.embed_many(["How do I  copy a list in Python?", "how do i copy a list in python?"])
    assert float(a @ b) > 1 - 1e-5


def test_a_wait_the_gate_cannot_grant_in_time_is_refused_at_once():
    from infra.load_shedding import Gate, Overloaded, _deadline

    gate = Gate(1)
    gate._held_s = 20.0  # one caller stays inside 20 s, as measured
    held, release = threading.Event(), threading.Event()

    def hold():
        with gate.entered("test"):
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    token = _deadline.set(time.monotonic() + 10.0)  # 10 s left: less than the expected 20 s wait
    started = time.monotonic()
    try:
        with pytest.raises(Overloaded):
            with gate.entered("the model"):
                pass
    finally:
        _deadline.reset(token)
        release.set()
        holder.join()
    assert time.monotonic() - started < 5  # refused at once, not after its 10 s


def test_a_shed_request_says_how_long_its_body_is(api, scope, settings):
    """Answered before the middleware that would add it: without Content-Length gunicorn sends it chunked."""
    response = api.client.post(
        "/api/v1/scopes/hospital/recall",
        data={"query": "icu visiting hours"},
        content_type="application/json",
        headers={**api.headers, "X-Request-Start": f"t={time.time() - 5:.3f}"},
    )
    assert response.status_code == 503 and int(response["Content-Length"]) == len(response.content)


def test_a_request_is_not_started_when_what_is_left_of_its_budget_cannot_serve_it(api, scope, sections, settings):
    """The 503 must itself come back within the budget: a request whose queue wait leaves less
    than recalls take (measured; at most half the budget) is refused before any work."""
    from infra import load_shedding as load

    settings.RAGTRAIL_RECALL_BUDGET_MS = 500
    load.queue_watch.cache_clear()
    served = load.service_time(0.5)
    before = served.seconds
    api.record("hospital", query="icu visiting hours", cited=["visiting/icu"])

    def recall(waited_s: float):
        headers = {**api.headers, "X-Request-Start": f"t={time.time() - waited_s:.3f}"}
        return api.client.post(
            "/api/v1/scopes/hospital/recall",
            data={"query": "icu visiting hours"},
            content_type="application/json",
            headers=headers,
        )

    try:
        served.seconds = 0.2  # recalls have been taking 200 ms
        assert recall(0.35).status_code == 503  # 350 ms waited + 200 ms to serve > 500 ms
        assert recall(0.2).status_code == 200
        served.seconds = 30.0  # one very slow request must not shut the door on the rest:
        assert recall(0.2).status_code == 200  # headroom is at most half the budget
        assert recall(0.3).status_code == 503
        assert api.recall("hospital", query="icu visiting hours").status_code == 200  # no queue, no refusal
    finally:
        served.seconds = before


def test_a_standing_queue_is_drained_to_a_short_wait_and_a_burst_is_not():
    from infra.load_shedding import QueueWatch

    watch = QueueWatch(target=0.15, interval=1.0)
    longest = 0.4
    # A burst: waits grow, then a short one shows the queue emptied; nothing is cut short.
    assert [
        watch.allowed_wait(w, longest, now=t) for w, t in [(0.05, 0.0), (0.3, 0.5), (0.35, 0.9), (0.1, 1.2), (0.3, 1.3)]
    ] == [longest] * 5
    # A long wait after a quiet hour is no standing queue either.
    assert watch.allowed_wait(0.3, longest, now=3600.0) == longest
    # Overload: no wait under the target for a whole interval, so the queue stands...
    assert [watch.allowed_wait(0.3, longest, now=3600.0 + t) for t in (0.4, 0.8, 1.2)] == [longest, longest, 0.15]
    # ...and keeps standing while requests come through at about the target...
    assert watch.allowed_wait(0.14, longest, now=3601.3) == 0.15
    # ...until one that hardly waited shows it drained.
    assert watch.allowed_wait(0.02, longest, now=3601.4) == longest
    assert watch.allowed_wait(0.3, longest, now=3601.5) == longest


def test_gunicorn_alone_stamps_when_a_request_was_queued_so_overload_is_shed_without_a_proxy():
    from infra.load_shedding import queued_since
    from ragtrail_site.gunicorn_worker import stamp

    headers = [("HOST", "ragtrail")]
    stamp(headers, 1_764_000_000.25, peer="203.0.113.9", trusted=frozenset())
    assert queued_since(dict(headers)["X-RAGTRAIL-QUEUED-AT"], 1_764_000_001.0) == pytest.approx(1_764_000_000.25)
    proxied = [("X-Request-Start", "t=1764000000.1")]
    stamp(proxied, 1_764_000_000.9, peer="10.0.0.2", trusted=frozenset({"10.0.0.2"}))
    assert proxied == [("X-Request-Start", "t=1764000000.1"), ("X-RAGTRAIL-QUEUED-AT", "t=1764000000.900000")]


def test_the_proxy_on_gunicorns_unix_socket_is_trusted_by_the_name_unix_and_nothing_else():
    from infra.load_shedding import arrival
    from infra.queue_stamps import peer_of
    from ragtrail_site.gunicorn_worker import stamp

    now = 1_800_000_000.0
    assert [peer_of(a) for a in ("", b"", ("10.0.0.2", 5123), None)] == ["unix", "unix", "10.0.0.2", None]
    proxied = [("X-Request-Start", f"t={now - 5}")]
    stamp(proxied, now - 1.0, peer=peer_of(""), trusted=frozenset({"unix"}))
    assert dict(proxied)["X-Request-Start"] == f"t={now - 5}"
    stamp(
        dropped := [("X-Request-Start", f"t={now - 5}")],
        now - 1.0,
        peer=peer_of(("127.0.0.1", 1)),
        trusted=frozenset({"unix"}),
    )
    assert "X-Request-Start" not in dict(dropped)
    # gunicorn on a unix socket gives REMOTE_ADDR "": the proxy's stamp counts only where "unix" is trusted.
    meta = {"SERVER_SOFTWARE": "gunicorn/27.0.1", "REMOTE_ADDR": "", "HTTP_X_REQUEST_START": f"t={now - 5}"}
    assert arrival(meta, now, {"unix"}) == now - 5
    assert arrival(meta, now, {"127.0.0.1"}) is None


def test_a_client_cannot_forge_its_wait_nor_switch_shedding_off_with_a_stamp_in_the_future():
    from infra.load_shedding import arrival
    from ragtrail_site.gunicorn_worker import stamp

    now = 1_800_000_000.0
    forged = [("X-Request-Start", f"t={now + 3600}"), ("X-Ragtrail-Queued-At", f"t={now + 3600}")]
    stamp(forged, now - 2.0, peer="203.0.113.9", trusted=frozenset({"10.0.0.2"}))
    assert forged == [("X-RAGTRAIL-QUEUED-AT", f"t={now - 2.0:.6f}")]  # both of the client's dropped
    gunicorn = {"SERVER_SOFTWARE": "gunicorn/27.0.1", "HTTP_X_RAGTRAIL_QUEUED_AT": f"t={now - 2.0}"}
    assert (
        arrival({**gunicorn, "REMOTE_ADDR": "203.0.113.9", "HTTP_X_REQUEST_START": f"t={now + 60}"}, now, {"10.0.0.2"})
        == now - 2.0
    )
    # A trusted proxy whose clock runs fast: its stamp in the future counts as now, the worker's earlier one wins.
    assert (
        arrival({**gunicorn, "REMOTE_ADDR": "10.0.0.2", "HTTP_X_REQUEST_START": f"t={now + 60}"}, now, {"10.0.0.2"})
        == now - 2.0
    )
    assert (
        arrival({**gunicorn, "REMOTE_ADDR": "10.0.0.2", "HTTP_X_REQUEST_START": f"t={now - 5}"}, now, {"10.0.0.2"})
        == now - 5
    )
    # Outside gunicorn no worker stamped the request: a client's "own stamp" header is nobody's.
    assert arrival({"HTTP_X_RAGTRAIL_QUEUED_AT": f"t={now - 9}", "REMOTE_ADDR": "203.0.113.9"}, now, set()) is None


def test_an_untrusted_clients_stale_stamp_is_ignored(api, scope, sections, settings):
    settings.RAGTRAIL_TRUSTED_PROXIES = frozenset()
    response = api.client.post(
        "/api/v1/scopes/hospital/recall",
        data={"query": "icu visiting hours"},
        content_type="application/json",
        headers={**api.headers, "X-Request-Start": f"t={time.time() - 5:.3f}"},
    )
    assert response.status_code == 200


@pytest.mark.slow
def test_gunicorn_without_a_proxy_sheds_what_waited_past_the_budget(transactional_db, tmp_path):
    """One worker with one thread, a 60 ms recall budget and 24 recalls at once, none stamped by
    a proxy: those that wait in gunicorn's queue past the budget answer 503, at once."""
    import concurrent.futures
    import json
    import os
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    from django.conf import settings
    from django.db import connection

    from tests.test_production import free_port, stop, wait_for_port

    if connection.vendor != "postgresql":
        pytest.skip("gunicorn serves the test database over PostgreSQL")
    scope = Scope.objects.create(slug="shed", matcher="lexical")
    Section.upsert(scope, {"s1": "Section one."})
    _, key = ApiKey.issue([scope])
    port = free_port()
    env = service_env()
    env.pop("RAGTRAIL_CACHE_URL", None)  # as before: no Redis for this server
    env.update(
        RAGTRAIL_SECRET_KEY=settings.SECRET_KEY,  # API-key hashes are salted with it
        RAGTRAIL_BIND=f"127.0.0.1:{port}",
        RAGTRAIL_WORKERS="1",
        RAGTRAIL_THREADS="1",
        RAGTRAIL_RECALL_BUDGET_MS="60",
        RAGTRAIL_EMBEDDER="trails.embedders.hashing",
        RAGTRAIL_METRICS_DIR=str(tmp_path),
        RAGTRAIL_ACCESS_LOG="/dev/null",
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "ragtrail_site/gunicorn_conf.py", "ragtrail_site.wsgi"],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def recall(n: int) -> tuple[int, float]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/v1/scopes/shed/recall",
            method="POST",
            data=json.dumps({"query": f"question number {n} about section one"}).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, time.perf_counter() - started
        except urllib.error.HTTPError as error:
            return error.code, time.perf_counter() - started

    try:
        wait_for_port(port)
        recall(0)  # warm
        with concurrent.futures.ThreadPoolExecutor(24) as pool:
            answers = list(pool.map(recall, range(1, 25)))
    finally:
        stop(server)
    statuses = [status for status, _ in answers]
    assert set(statuses) <= {200, 503} and statuses.count(503) >= 1, statuses
