"""The Python client (clients/python) against a live ragtrail server."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.cache import cache
from ragtrail_client import RagtrailClient, RagtrailError, Step, cached_tool

from scopes.models import ApiKey, Scope
from tests.conftest import VISITING
from trails.models import Trail, TrailStatus


@pytest.fixture
def scope(transactional_db) -> Scope:
    return Scope.objects.create(slug="hospital", matcher="lexical")


@pytest.fixture
def client(live_server, scope) -> RagtrailClient:
    _, key = ApiKey.issue([scope], name="client test")
    return RagtrailClient(
        live_server.url, api_key=key, scope="hospital", timeout=5, recall_timeout=5, retries=2, backoff=0.01
    )


def test_an_agent_recalls_records_and_recalls_again_in_three_lines(client):
    hashes = client.put_sections(VISITING)["hashes"]
    assert client.recall("What are the ICU visiting hours?").outcome == "miss"
    recorded = client.record(
        "What are the ICU visiting hours?",
        ["visiting/icu"],
        hashes={"visiting/icu": hashes["visiting/icu"]},
        steps=[Step("search", {"query": "ICU visiting"}, ("visiting/icu",))],
        signal="accepted",
    )
    assert recorded.status == "active" and recorded.created
    again = client.recall("what are the ICU visiting hours")
    assert again.hit and again.outcome == "prefetch" and again.trail_id == recorded.trail_id
    assert again.sections[0].text == VISITING["visiting/icu"] and again.steps[0].tool == "search"
    # After the section changes, the client gets a miss, never the old text.
    client.put_sections({"visiting/icu": "ICU visiting is suspended this week."})
    assert client.recall("what are the ICU visiting hours").outcome == "miss"


def test_record_needs_the_signal_stated_and_pending_is_never_served(client):
    client.put_sections(VISITING)
    with pytest.raises(TypeError):
        client.record("What are the ICU visiting hours?", ["visiting/icu"])  # no signal: the caller must say
    with pytest.raises(ValueError, match="signal must be one of"):
        client.record("What are the ICU visiting hours?", ["visiting/icu"], signal="yes")
    waiting = client.record("What are the ICU visiting hours?", ["visiting/icu"], signal="pending")
    assert waiting.status == "pending" and client.recall("what are the ICU visiting hours").outcome == "miss"


def test_explain_says_why_a_paraphrase_missed_and_counts_nothing(client):
    from trails.models import RecallEvent

    client.put_sections(VISITING)
    client.record("What are the ICU visiting hours?", ["visiting/icu"], signal="accepted")
    answer = client.explain("What are the general ward visiting hours?")  # a look-alike
    assert answer.outcome == "miss" and answer.recall_id is None and not RecallEvent.objects.exists()
    assert answer.explanation["matcher"] == "lexical" and answer.explanation["lexical_threshold"] > 0
    assert "similar enough" in answer.explanation["summary"]


def test_a_key_of_one_scope_needs_no_scope_setting(client, live_server, scope):
    from ragtrail_client import RagtrailClient

    assert client.scopes() == [{"slug": "hospital", "name": ""}]
    bare = RagtrailClient(live_server.url, api_key=client.api_key, timeout=5, retries=0)
    assert bare.recall("anything").outcome == "miss" and bare.scope == "hospital"


def test_a_re_search_in_the_clients_session_is_learnt(client):
    from trails.models import RecallEvent

    client.put_sections(VISITING)
    client.record("What are the ICU visiting hours?", ["visiting/icu"], signal="accepted")
    served = client.recall("what are the ICU visiting hours", session="agent-run-1")
    client.record("What are the ICU visiting hours?", ["visiting/ward"], session="agent-run-1", signal="accepted")
    assert RecallEvent.objects.get(public_id=served.recall_id).helpful is False


def test_record_is_idempotent_with_the_generated_or_given_key(client):
    client.put_sections(VISITING)
    first = client.record("Where do visitors park?", ["parking"], idempotency_key="run-1", signal="accepted")
    again = client.record("Where do visitors park?", ["parking"], idempotency_key="run-1", signal="accepted")
    assert first.created and not again.created and first.trail_id == again.trail_id
    # Another key but the same question and sections: the trail held is renewed, not twinned.
    same = client.record("Where do visitors park?", ["parking"], signal="accepted")
    assert same.trail_id == first.trail_id and not same.created and same.refreshed
    other = client.record("Where do visitors park?", ["parking", "visiting/ward"], signal="accepted")
    assert other.trail_id != first.trail_id and other.created and Trail.objects.count() == 2


def test_api_errors_are_raised_with_the_apis_body(client):
    client.put_sections(VISITING)
    with pytest.raises(RagtrailError) as refused:
        client.record("Where do visitors park?", ["parking"], hashes={"parking": "0" * 64}, signal="accepted")
    assert refused.value.status == 409 and refused.value.field == "hashes"
    with pytest.raises(RagtrailError) as invalid:
        client.recall("")
    assert invalid.value.status == 422 and invalid.value.field == "query"
    with pytest.raises(RagtrailError) as elsewhere:
        client.recall("anything", scope="another-tenant")
    assert elsewhere.value.status == 404 and elsewhere.value.body["error"]["code"] == "not_found"


def test_feedback_from_two_keys_demotes_a_misleading_trail(client, scope, live_server):
    client.put_sections(VISITING)
    client.record("What are the ICU visiting hours?", ["visiting/icu"], signal="accepted")
    other = RagtrailClient(
        live_server.url,
        api_key=ApiKey.issue([scope])[1],
        scope="hospital",
        timeout=5,
        recall_timeout=5,
        retries=2,
        backoff=0.01,
    )
    for agent, status in ((client, "active"), (client, "active"), (other, "pending")):
        answer = agent.recall("what are the ICU visiting hours")
        verdict = agent.feedback(answer.recall_id, helpful=False, reason="it was about the ward")
        assert verdict.trail_status == status
    assert (verdict.false_hit_reports, verdict.false_hit_reporters) == (3, 2)
    assert client.recall("what are the ICU visiting hours").outcome == "miss"
    assert Trail.objects.get().status == TrailStatus.PENDING


def test_cached_tool_calls_the_tool_once_and_never_after_its_section_changed(client):
    cache.clear()
    hashes = client.put_sections(VISITING)["hashes"]
    client.put_tool_policies([{"tool": "read", "cacheable": True, "ttl_s": 600}])
    calls = []

    @cached_tool(client, "read", context={"corpus": "v1"}, sections=lambda result: {result["id"]: result["hash"]})
    def read(section_id: str) -> dict:
        calls.append(section_id)
        section = client.get_section(section_id)
        return {"id": section["id"], "text": section["text"], "hash": section["hash"]}

    assert read("parking")["hash"] == hashes["parking"]
    assert read(section_id="parking")["text"] == VISITING["parking"]
    assert calls == ["parking"]
    client.put_sections({"parking": "Car park B is closed."})
    assert read("parking")["text"] == "Car park B is closed."
    assert calls == ["parking", "parking"]
    counts = client.tool_result_stats()["read"]
    assert counts["hit"] == 1 and counts["miss"] == 1 and counts["stale"] == 1


def test_a_tool_without_a_policy_is_called_every_time_and_says_so_once(client):
    from ragtrail_client import UncachedToolWarning

    cache.clear()
    calls = []

    @cached_tool(client, "search")
    def search(query: str) -> list:
        calls.append(query)
        return []

    with pytest.warns(UncachedToolWarning, match="no policy"):
        search("parking")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        search("parking")  # warned once per decorated tool, not on every call
    assert calls == ["parking", "parking"]


MISS = {
    "outcome": "miss",
    "recall_id": None,
    "trail_id": None,
    "matcher": None,
    "similarity": None,
    "matched_query": None,
    "sections": [],
    "steps": [],
    "hint": None,
    "tokens": 0,
    "truncated": False,
}


class JsonAnswers(BaseHTTPRequestHandler):
    """A stand-in server: `answer(path)` gives (status, JSON body or None, headers); every
    request is kept in `seen` as `describe()` says it."""

    seen: list[str] = []

    def describe(self) -> str:
        return self.command

    def answer(self, path: str) -> tuple[int, dict | None, dict[str, str]]:
        raise NotImplementedError

    def _answer(self):
        type(self).seen.append(self.describe())
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, body, headers = self.answer(self.path)
        raw = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers, "Content-Length": str(len(raw))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(raw)

    do_POST = do_GET = _answer

    def log_message(self, *args):
        pass


def serve(handler: type[JsonAnswers]):
    handler.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class Flaky(JsonAnswers):
    """Answers 503 (Retry-After: 0) to the first `failures` requests, then 200."""

    failures = 2

    def answer(self, path):
        if len(Flaky.seen) <= Flaky.failures:
            return 503, {"error": {"code": "unavailable", "message": "database unavailable"}}, {"Retry-After": "0"}
        return 200, MISS, {}


@pytest.fixture
def flaky():
    server, url = serve(Flaky)
    yield url
    server.shutdown()


def test_safe_calls_are_retried_on_503_and_unsafe_ones_are_not(flaky):
    client = RagtrailClient(flaky, api_key="rt_x", scope="s", retries=3, backoff=0.001)
    assert client.recall("anything").outcome == "miss"
    assert Flaky.seen == ["POST"] * 3
    Flaky.seen = []
    with pytest.raises(RagtrailError) as refused:
        client.feedback("00000000-0000-0000-0000-000000000000", helpful=False)
    assert refused.value.status == 503 and Flaky.seen == ["POST"]


def test_a_refused_connection_fails_at_once_without_a_retry():
    import httpx

    attempts = []
    http = httpx.Client(event_hooks={"request": [attempts.append]})
    client = RagtrailClient("http://127.0.0.1:9", api_key="rt_x", scope="s", retries=3, backoff=0.2, http=http)
    for call in (lambda: client.recall("anything"), lambda: client.get_section("s1")):
        with pytest.raises(RagtrailError) as unreachable:
            call()
        assert unreachable.value.status == 0 and unreachable.value.code == "unreachable"
        assert str(unreachable.value) == (
            "could not reach http://127.0.0.1:9: connection refused (is ragtrail running there?)"
        )
    assert len(attempts) == 2  # one attempt a call: nothing listens there, so no retry until the deadline


def test_a_base_url_ending_in_the_api_path_is_the_same_server(client, live_server):
    client.put_sections(VISITING)
    for suffix in ("/api/v1", "/api/v1/"):
        same = RagtrailClient(live_server.url + suffix, api_key=client.api_key, scope="hospital", recall_timeout=5)
        assert same.base_url == live_server.url and same.recall("Where do visitors park?").outcome == "miss"


def test_a_base_url_that_is_not_ragtrail_gets_an_error_naming_it(client, live_server):
    wrong = RagtrailClient(live_server.url + "/ops", api_key=client.api_key, scope="hospital", recall_timeout=5)
    with pytest.raises(RagtrailError) as refused:
        wrong.recall("Where do visitors park?")
    assert refused.value.status == 404 and "<" not in str(refused.value)
    assert str(refused.value).startswith(
        f"404 not_ragtrail: {live_server.url}/ops answered 404 with text/html, not ragtrail's JSON"
    )


class HtmlSite(JsonAnswers):
    """A web site that answers every path with a page (a base_url pointing at the wrong server), at `status`."""

    status = 200

    def _answer(self):
        type(self).seen.append(self.command)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(type(self).status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.end_headers()
        self.wfile.write(b"<!DOCTYPE html><html>Welcome</html>")

    do_POST = do_GET = _answer


@pytest.mark.parametrize("status", [200, 404, 500])
def test_a_page_that_is_not_ragtrails_json_is_code_not_ragtrail_naming_base_url(status, monkeypatch):
    monkeypatch.setattr(HtmlSite, "status", status)
    server, url = serve(HtmlSite)
    try:
        with pytest.raises(RagtrailError) as wrong:
            RagtrailClient(url, api_key="rt_x", scope="s").recall("anything")
    finally:
        server.shutdown()
    assert wrong.value.status == status and wrong.value.code == "not_ragtrail" and "<" not in str(wrong.value)
    assert f"{url} answered {status} with text/html, not ragtrail's JSON" in str(wrong.value)


def test_the_constructors_show_their_keywords_and_refuse_a_misspelt_one():
    import inspect

    from ragtrail_client import AsyncRagtrailClient

    for cls in (RagtrailClient, AsyncRagtrailClient):
        parameters = inspect.signature(cls).parameters
        assert list(parameters) == [
            "base_url",
            "api_key",
            "scope",
            "timeout",
            "recall_timeout",
            "retries",
            "backoff",
            "http",
        ]
        assert parameters["recall_timeout"].default == 1.0 and parameters["timeout"].default == 1.5
        with pytest.raises(TypeError, match="recal_timeout"):
            cls("http://127.0.0.1:9", "rt_x", recal_timeout=5)


@pytest.fixture
def hung():
    """A server that accepts connections and never answers (a frozen process behind a proxy)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    for connection in accepted:
        connection.close()
    listener.close()


def test_a_hung_server_costs_a_recall_one_second_not_forty(hung):
    client = RagtrailClient(hung, api_key="rt_x", scope="s")  # the defaults an agent gets
    started = time.perf_counter()
    with pytest.raises(RagtrailError) as late:
        client.recall("How do I copy a list?")
    elapsed = time.perf_counter() - started
    assert late.value.status == 0 and late.value.code == "deadline"
    assert str(late.value) == f"deadline exceeded after 1.0 s: {hung} did not answer"
    assert 0.9 < elapsed < 1.5, elapsed


def test_every_call_ends_by_its_deadline_retries_and_waits_included(hung):
    client = RagtrailClient(hung, api_key="rt_x", scope="s", timeout=1.5, retries=5, backoff=0.3)
    started = time.perf_counter()
    with pytest.raises(RagtrailError) as late:
        client.get_section("s1")
    assert late.value.code == "deadline" and time.perf_counter() - started < 2.0


def test_the_client_pages_through_a_scopes_sections(client):
    page = client.list_sections(limit=2)
    rest = client.list_sections(after=page["next"], limit=2)
    ids = [s["id"] for s in page["sections"] + rest["sections"]]
    assert ids == sorted(ids) and rest["next"] is None and all(len(s["hash"]) == 64 for s in page["sections"])


def test_the_async_client_makes_the_same_calls_and_keeps_the_deadline(client, hung):
    import asyncio

    from ragtrail_client import AsyncRagtrailClient

    async def main():
        live = AsyncRagtrailClient(client.base_url, client.api_key, "hospital", recall_timeout=5)
        await live.put_sections(VISITING)
        recorded = await live.record("Where do visitors park?", ["parking"], signal="accepted")
        answers = await asyncio.gather(*(live.recall("Where do visitors park?") for _ in range(3)))
        started = time.perf_counter()
        with pytest.raises(RagtrailError) as late:
            await AsyncRagtrailClient(hung, "rt_x", "s").recall("anything")
        return recorded, answers, late.value, time.perf_counter() - started

    # In a thread of its own: the browser tests leave an event loop running in this one.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        recorded, answers, late, waited = pool.submit(asyncio.run, main()).result()
    assert {a.trail_id for a in answers} == {recorded.trail_id} and all(a.outcome == "prefetch" for a in answers)
    assert late.code == "deadline" and waited < 1.5


# Every call an agent makes, with the arguments it needs, for the deadline tests.
AGENT_CALLS = {
    "recall": lambda c: c.recall("How do I copy a list?"),
    "record": lambda c: c.record("How do I copy a list?", ["s1"], signal="accepted"),
    "feedback": lambda c: c.feedback("00000000-0000-0000-0000-000000000000", helpful=False),
    "get_section": lambda c: c.get_section("s1"),
    "lookup_tool_result": lambda c: c.lookup_tool_result("search", {"q": "x"}),
    "store_tool_result": lambda c: c.store_tool_result("search", {"q": "x"}, [1]),
}


@pytest.mark.parametrize("with_scope", [True, False], ids=["scope given", "scope looked up"])
def test_a_hung_server_costs_every_agent_call_at_most_a_second_and_a_half(hung, with_scope):
    """The defaults the quickstart builds (with or without scope=): the scope lookup is inside
    the call's deadline, not a deadline of its own."""
    client = RagtrailClient(hung, api_key="rt_x", scope="s" if with_scope else None)
    for name, make in AGENT_CALLS.items():
        started = time.perf_counter()
        with pytest.raises(RagtrailError) as late:
            make(client)
        elapsed = time.perf_counter() - started
        assert late.value.status == 0 and late.value.code == "deadline", name
        assert elapsed < 1.6, (name, elapsed)


class Counting(JsonAnswers):
    """Grants one scope and answers every recall with a miss; a path behind `/behind-a-proxy/`
    is redirected to https, as a proxy in front of a TLS site does."""

    def describe(self) -> str:
        return f"{self.command} {self.path}"

    def answer(self, path):
        if path.startswith("/behind-a-proxy/"):
            return 308, None, {"Location": "https://ragtrail.example.org/api/v1/scopes/s/recall"}
        return 200, {"scopes": [{"slug": "only", "name": "Only"}]} if path == "/api/v1/scopes" else MISS, {}


@pytest.fixture
def counting():
    server, url = serve(Counting)
    yield url
    server.shutdown()


def test_the_keys_only_scope_is_asked_once_and_kept(counting):
    with RagtrailClient(counting, api_key="rt_x") as client:
        for _ in range(3):
            assert client.recall("anything").outcome == "miss"
    assert Counting.seen == ["GET /api/v1/scopes"] + ["POST /api/v1/scopes/only/recall"] * 3


def test_a_redirect_is_said_as_one_and_not_followed(counting):
    client = RagtrailClient(counting + "/behind-a-proxy", api_key="rt_x", scope="s")  # an HTTP → HTTPS redirect there
    with pytest.raises(RagtrailError) as redirected:
        client.recall("anything")
    assert redirected.value.status == 308 and redirected.value.code == "redirect"
    assert "https://ragtrail.example.org" in redirected.value.message
    assert Counting.seen == ["POST /behind-a-proxy/api/v1/scopes/s/recall"]  # once: not followed, not retried


def test_an_https_address_of_a_plain_http_server_is_said_as_a_tls_failure(counting):
    client = RagtrailClient(counting.replace("http://", "https://"), api_key="rt_x", scope="s")
    started = time.perf_counter()
    with pytest.raises(RagtrailError) as failed:
        client.get_section("s1")
    assert failed.value.status == 0 and failed.value.code == "tls", failed.value
    assert "could not reach" not in str(failed.value) and time.perf_counter() - started < 1.6


def test_the_async_client_runs_no_thread_and_asks_the_scope_once(counting, hung):
    import asyncio

    from ragtrail_client import AsyncRagtrailClient

    async def main():
        threads = threading.active_count()
        async with AsyncRagtrailClient(counting, "rt_x") as live:
            answers = await asyncio.gather(*(live.recall("anything") for _ in range(4)))
        started = time.perf_counter()
        async with AsyncRagtrailClient(hung, "rt_x") as stuck:  # no scope: the lookup hangs
            with pytest.raises(RagtrailError) as late:
                await stuck.recall("anything")
        return answers, threads, threading.active_count(), late.value, time.perf_counter() - started

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        answers, before, after, late, waited = pool.submit(asyncio.run, main()).result()
    assert [a.outcome for a in answers] == ["miss"] * 4 and after <= before
    # Four recalls raced before the scope was known; each asked once, and the scope is kept.
    assert Counting.seen.count("GET /api/v1/scopes") <= 4 and Counting.seen[-1] == "POST /api/v1/scopes/only/recall"
    assert late.code == "deadline" and waited < 1.5


class OtherService(JsonAnswers):
    """Another service's JSON API at base_url: 200 with its own fields, or an empty 200 at /empty/."""

    def answer(self, path):
        if path.startswith("/empty/"):
            return 200, None, {}
        return 200, {"status": "ok", "service": "search", "results": []}, {}


@pytest.mark.parametrize("where", ["other JSON", "empty body"])
def test_a_success_without_ragtrails_fields_is_a_ragtrail_error_in_both_clients(where):
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from ragtrail_client import AsyncRagtrailClient

    server, url = serve(OtherService)
    url += "/empty" if where == "empty body" else ""
    try:
        for call in (
            lambda c: c.recall("anything"),
            lambda c: c.record("q", ["a"], signal="accepted"),
            lambda c: c.scopes(),
        ):
            with pytest.raises(RagtrailError) as wrong:
                call(RagtrailClient(url, api_key="rt_x", scope="s"))
            assert wrong.value.status == 200 and wrong.value.code == "not_ragtrail"
            assert f"{url} answered 200 with {'an empty body' if where == 'empty body' else 'JSON without'}" in str(
                wrong.value
            )

        async def recall():
            async with AsyncRagtrailClient(url, api_key="rt_x", scope="s") as client:
                return await client.recall("anything")

        with ThreadPoolExecutor(1) as pool, pytest.raises(RagtrailError) as wrong:
            pool.submit(
                asyncio.run, recall()
            ).result()  # a thread of its own: the browser tests keep a loop in this one
        assert wrong.value.code == "not_ragtrail"
    finally:
        server.shutdown()
