"""A bad day walked in the browser, as an operator reads it: an overload then quiet, a stopped
worker then started, a flooding key set aside then counted again, one person's actions among
many. Each step asserts what the page says, on the next load after the event."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from django.core.cache import caches

from scopes.models import ApiKey
from tests.browser.test_operator_flows import hospital, log_in  # noqa: F401 -- a fixture and a step
from trails.core.lifecycle import Actor
from trails.models import Trail, writes

pytestmark = pytest.mark.slow

TASKS = ("trails.tasks.roll_up_task", "trails.tasks.sweep_expired_task", "trails.tasks.heartbeat_task")


def heard_from(seconds_ago: float = 20.0, tasks=TASKS, beat: bool = True) -> None:
    """The worker's (and beat's) heartbeats as they leave them in the shared cache."""
    for task in tasks:
        caches["heartbeats"].set(f"rt:task-last-success:{task}", time.time() - seconds_ago, None)
    if beat:
        caches["heartbeats"].set("rt:beat-sent-heartbeat", time.time() - seconds_ago, None)
    caches["heartbeats"].delete("rt:beat-started")  # beat started long ago: every job is due


def recall(base: str, key: str, queued_s: float = 0.0) -> int:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    if queued_s:
        headers["X-Request-Start"] = f"t={time.time() - queued_s:.3f}"  # a trusted proxy's stamp
    request = urllib.request.Request(
        f"{base}/api/v1/scopes/hospital/recall",
        data=json.dumps({"query": "Where do I park?"}).encode(),
        headers=headers,
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def health(page) -> tuple[str, str]:
    page.reload()
    because = page.locator("#health-because")
    return page.locator("#health-verdict").inner_text(), because.inner_text() if because.count() else ""


def test_an_operator_reads_a_bad_day_step_by_step(page, live_server, hospital, settings, monkeypatch):  # noqa: F811
    from infra import refusals

    settings.RAGTRAIL_TRUSTED_PROXIES = frozenset({"127.0.0.1"})
    heard_from()
    _, key = ApiKey.issue([hospital], name="agents")
    log_in(page, live_server, "/ops/hospital/")
    assert health(page)[0] == "ok"

    # Overload: four recalls queued 30 s at the proxy are shed before their key is read: the service's
    # refusals, said as the service's, never this scope's verdict.
    assert recall(live_server.url, key) == 200
    assert [recall(live_server.url, key, queued_s=30) for _ in range(4)] == [503] * 4
    verdict, because = health(page)
    service = page.locator("#health-service").inner_text()
    assert verdict == "ok", because
    assert "The service (not this scope's verdict)" in service and "service refused 4 of 5" in service, service
    # Quiet: six minutes later the window holds none of it.
    later = time.time() + 360
    monkeypatch.setattr(refusals, "time", type("Clock", (), {"time": staticmethod(lambda: later)}))
    heard_from()
    verdict, because = health(page)
    assert verdict == "ok", because
    assert "this scope 0 of 0 API requests refused" in page.locator("#health-refusals").inner_text()
    # (the clock stays six minutes on for the rest of the walk)

    # The worker stops (beat still sends): three minutes on, the page names the worker; started again, ok.
    heard_from(190, tasks=("trails.tasks.heartbeat_task",), beat=False)
    verdict, because = health(page)
    assert verdict == "broken" and "worker silent for 3 min" in because and "beat silent" not in because
    heard_from()
    assert health(page)[0] == "ok"

    # Beat stops, the worker is well (it ran the last heartbeat beat sent): beat is named, not the worker.
    stamp = {
        "trails.tasks.heartbeat_task": 235,
        "trails.tasks.roll_up_task": 235,
        "trails.tasks.sweep_expired_task": 900,
    }
    for task, ago in stamp.items():
        caches["heartbeats"].set(f"rt:task-last-success:{task}", time.time() - ago, None)
    caches["heartbeats"].set("rt:beat-sent-heartbeat", time.time() - 240, None)
    verdict, because = health(page)
    assert verdict == "broken" and "beat silent for 4 min" in because and "is beat running?" in because
    assert "worker" not in because
    heard_from()
    assert health(page)[0] == "ok"

    # A fresh deploy's first hour: beat started ten minutes ago, the hourly sweep has not run and is not late.
    caches["heartbeats"].delete("rt:task-last-success:trails.tasks.sweep_expired_task")
    caches["heartbeats"].set("rt:beat-started", time.time() - 600, None)
    verdict, because = health(page)
    assert verdict == "ok", because
    assert "sweep_expired_task not yet due (first run in" in page.locator("#health-jobs").inner_text()
    heard_from()

    # A key whose report helped hold a trail, then whose own down vote rejected it, is suspended
    # and set aside from the page (asked first): the trail is back in service and listed there.
    agents = ApiKey.objects.get(name="agents")
    helper, _ = ApiKey.issue([hospital], name="helper")
    trail = Trail.objects.get(scope=hospital, query__startswith="When can I visit")
    writes.report(trail, agents.reporter)
    writes.report(trail, helper.reporter)  # two reporters: held
    writes.act(trail, "down", Actor.AGENT, by=agents.reporter)
    trail.refresh_from_db()
    assert trail.status == "rejected"
    page.goto(f"{live_server.url}/ops/hospital/audit/#keys")
    page.click(f"#suspend-{agents.lookup}")
    assert "Suspend key agents?" in page.locator("h1").inner_text()
    assert ApiKey.objects.get(pk=agents.pk).revoked_at is None  # asked, nothing done yet
    page.check("#set-aside")
    page.click("#confirm-suspend")
    page.wait_for_url("**/audit/#keys")
    trail.refresh_from_db()
    assert (trail.status, trail.false_hit_reporters) == ("active", 1)
    moved = page.locator(f"#moved-{agents.lookup}").inner_text()
    assert "When can I visit the ICU and where do I park?" in moved and "active" in moved
    assert "suspended and its reports and votes set aside" in page.locator(".messages").inner_text()

    # Restored from the same table: let in again, its reports counted again, both audited with who.
    page.click(f"#restore-{agents.lookup}")
    page.wait_for_url("**/audit/#keys")
    assert "restored" in page.locator(".messages").inner_text()
    agents.refresh_from_db()
    assert agents.revoked_at is None and agents.set_aside_at is None
    audit = page.locator("#audit").inner_text()
    assert "key set aside" in audit and "key restored" in audit and "olga" in audit
    # The trails the set-aside decided again stay as decided, listed until an operator marks them seen.
    assert "When can I visit the ICU" in page.locator(f"#moved-{agents.lookup}").inner_text()
    with page.expect_navigation():
        page.click(f"#moved-seen-{agents.lookup}")
    assert page.locator(f"#moved-{agents.lookup}").count() == 0

    # One person's actions among many: thirty by others, one by olga; the filter keeps hers.
    trail = Trail.objects.get(scope=hospital, query__startswith="When can I visit")
    for n in range(30):  # rejected, reinstated, approved again, by thirty others
        writes.act(trail, ("down", "reinstate", "up")[n % 3], Actor.OPERATOR, by=f"other-{n}")
    writes.act(trail, "down", Actor.OPERATOR, by="olga")
    page.goto(f"{live_server.url}/ops/hospital/audit/?who=olga")
    mine = page.locator("main").inner_text()
    assert "olga" in mine and "other-" not in mine
