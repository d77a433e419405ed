"""Operator pages: what a staff user sees and can do, and that nobody else gets anything."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client
from django.utils import timezone

from tests.bypass import around_the_writer
from tests.conftest import VISITING
from trails.core.lifecycle import Actor
from trails.models import PurgeRun, RecallEvent, Trail, TrailSignal, writes
from trails.upkeep.jobs import roll_up


def jobs_heard_from(seconds_ago: float = 60.0) -> None:
    """The worker's heartbeats, as its jobs leave them after each success."""
    import time

    from django.core.cache import caches

    for task in ("trails.tasks.roll_up_task", "trails.tasks.sweep_expired_task", "trails.tasks.heartbeat_task"):
        caches["heartbeats"].set(f"rt:task-last-success:{task}", time.time() - seconds_ago, None)
    caches["heartbeats"].set("rt:beat-sent-heartbeat", time.time() - seconds_ago, None)  # beat's own
    caches["heartbeats"].delete("rt:beat-started")  # long ago: every job is due


def windowed(own: dict, requests: int) -> dict:
    """The last minutes' refusals as infra.refusals.window reads them: this scope's are the service's."""
    return {
        "minutes": 5,
        "scope": {"requests": requests, "refused": dict(own)},
        "service": {"requests": requests, "refused": dict(own)},
    }


@pytest.fixture
def staff(db) -> Client:
    """An operator of every scope (these tests are about the pages; tests/test_access.py
    walks them as an operator of one tenant against another)."""
    client = Client()
    client.force_login(User.objects.create_user("olga", password="x", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def trails(api, sections) -> dict[str, Trail]:
    api.record(
        "hospital",
        query="When are ICU visiting hours?",
        cited=["visiting/icu"],
        steps=[
            {"tool": "search", "args": {"q": "icu visiting"}, "section_ids": ["visiting/icu", "visiting/ward"]},
            {"tool": "read", "args": {"id": "visiting/icu"}, "section_ids": ["visiting/icu"]},
        ],
    )
    api.record("hospital", query="Where do visitors park?", cited=["parking"], signal=None)
    api.record("hospital", query="Is parking free for visitors? mail bob@example.com", cited=["parking"], signal=None)
    return {t.query.split()[0].lower() + str(i): t for i, t in enumerate(Trail.objects.order_by("id"))}


def page_urls(scope: str, trail: Trail) -> list[str]:
    run = PurgeRun.request(trail.scope, "", False, "olga")
    run.save()
    return [
        "/ops/",
        f"/ops/{scope}/",
        f"/ops/{scope}/trails/",
        f"/ops/{scope}/trails/{trail.public_id}/",
        f"/ops/{scope}/replay/",
        f"/ops/{scope}/purge/",
        f"/ops/{scope}/purge/{run.public_id}/",
        f"/ops/{scope}/recalls/",
        "/ops/evaluation/reports/",
        "/ops/evaluation/reports/any/",
    ]


def test_anonymous_users_are_sent_to_log_in_and_change_nothing(trails, scope):
    anonymous, pending = Client(), Trail.objects.filter(status="pending").first()
    for url in page_urls("hospital", pending):
        response = anonymous.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), url
    response = anonymous.post(f"/ops/hospital/trails/{pending.public_id}/vote/", {"vote": "up"})
    assert response.status_code == 302
    response = anonymous.post("/ops/hospital/purge/", {"step": "run", "action": "delete"})
    assert response.status_code == 302
    pending.refresh_from_db()
    assert pending.status == "pending" and Trail.objects.count() == 3 and PurgeRun.objects.get().state == "queued"


def test_signed_in_users_who_are_not_staff_get_403_and_change_nothing(trails, scope):
    client = Client()
    client.force_login(User.objects.create_user("nick", password="x"))
    pending = Trail.objects.filter(status="pending").first()
    for url in page_urls("hospital", pending):
        assert client.get(url).status_code == 403, url
    assert client.post(f"/ops/hospital/trails/{pending.public_id}/vote/", {"vote": "up"}).status_code == 403
    assert (
        client.post("/ops/hospital/trails/vote/", {"vote": "up", "trail": [str(pending.public_id)]}).status_code == 403
    )
    assert client.post("/ops/hospital/purge/", {"step": "run", "action": "delete"}).status_code == 403
    pending.refresh_from_db()
    assert pending.status == "pending" and Trail.objects.count() == 3 and PurgeRun.objects.get().state == "queued"


def test_index_opens_the_first_scope_or_says_how_to_create_one(staff, db):
    response = staff.get("/ops/")
    assert response.status_code == 200 and b"No scopes yet" in response.content


def test_overview_counts_outcomes_from_the_roll_up_and_charts_from_static_plotly(staff, api, trails, scope):
    api.recall("hospital", query="When are ICU visiting hours?")
    api.recall("hospital", query="How do I renew a passport?")
    now = timezone.now()
    roll_up(now - timedelta(hours=2), now + timedelta(minutes=1))

    response = staff.get("/ops/hospital/?window=7d")
    html = response.content.decode()
    assert response.status_code == 200
    assert '<div class="value" id="kpi-recalls">2</div>' in html
    assert '<div class="value" id="kpi-hit-rate"><a href="/ops/hospital/recalls/">50.0 %</a></div>' in html
    assert "1 hits of 2 recalls" in html and '(1)</a> <span class="help">no trail</span>' in html
    # Tool calls saved: the prefetched trail's two steps.
    assert '<div class="label">Tool calls saved</div><div class="value">2</div>' in html
    # Pending approvals: the two trails recorded without a signal.
    assert '?status=pending">2</a>' in html
    assert "/static/vendor/plotly-basic-4.1.1.min.js" in html and "cdn" not in html.lower()
    figures = {
        c: json.loads(html.split(f'id="chart-{c}-data" type="application/json">')[1].split("</script>")[0])
        for c in ("outcomes", "hit-rate", "similarity")
    }
    assert sum(sum(trace["y"]) for trace in figures["outcomes"]["data"]) == 2
    assert sum(figures["similarity"]["data"][0]["y"]) == 1


def test_overview_without_recalls_says_what_to_do(staff, scope):
    response = staff.get("/ops/hospital/")
    assert b"No recalls in this window" in response.content


def test_plotly_bundle_in_static_is_the_npm_basic_bundle_and_its_gzip_the_same_bytes():
    import gzip
    import hashlib

    from django.conf import settings

    vendor = settings.BASE_DIR / "static" / "vendor"
    bundle = (vendor / "plotly-basic-4.1.1.min.js").read_bytes()
    assert hashlib.sha256(bundle).hexdigest() == "99784e3abfb07b142a15e521a439e6d9addceadb3f79553fd24c72774f0649ba"
    assert gzip.decompress((vendor / "plotly-basic-4.1.1.min.js.gz").read_bytes()) == bundle
    assert b"plotly.js (basic - minified) v4.1.1" in bundle[:200]


def test_the_overview_weighs_under_a_megabyte_on_the_wire(staff, trails):
    """The page, its CSS and scripts as a browser that accepts gzip receives them."""
    from evaluation.management.commands.benchmark_overview import overview_bytes

    assert overview_bytes(staff, "/ops/hospital/") < 1_000_000


def test_trail_table_filters_searches_sorts_and_answers_htmx_with_the_fragment(staff, trails, scope):
    response = staff.get("/ops/hospital/trails/?status=pending")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Where do visitors park?" in html and "ICU visiting" not in html and "<html" in html

    fragment = staff.get("/ops/hospital/trails/?q=icu", headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in fragment and fragment.strip().startswith('<div id="trail-table">')
    assert "ICU visiting hours" in fragment and "visitors park" not in fragment

    with around_the_writer():
        Trail.objects.filter(query__startswith="Where").update(hit_count=9)
    by_hits = staff.get("/ops/hospital/trails/?sort=hits").content.decode()
    assert by_hits.index("Where do visitors park?") < by_hits.index("ICU visiting")

    empty = staff.get("/ops/hospital/trails/?q=nothing-like-this").content.decode()
    assert "No trails match" in empty


def test_trail_table_pages_through_many_trails(staff, api, scope, sections):
    for i in range(30):
        api.record("hospital", query=f"Question number {i} about parking zone {i * 7}", cited=["parking"])
    first = staff.get("/ops/hospital/trails/").content.decode()
    assert "1–25 of 30" in first and "Page 1 of 2" in first
    second = staff.get("/ops/hospital/trails/?page=2", headers={"HX-Request": "true"}).content.decode()
    assert "26–30 of 30" in second and "<html" not in second


def test_approving_a_pending_trail_with_htmx_returns_its_row_now_active(staff, trails, scope):
    pending = Trail.objects.get(query="Where do visitors park?")
    response = staff.post(
        f"/ops/hospital/trails/{pending.public_id}/vote/", {"vote": "up"}, headers={"HX-Request": "true"}
    )
    row = response.content.decode()
    assert response.status_code == 200 and row.strip().startswith(f'<tr id="trail-{pending.public_id}">')
    assert "data-status>active</span>" in row and "Approve" not in row
    pending.refresh_from_db()
    assert pending.status == "active" and list(pending.signals.values_list("signal", "source")) == [("up", "operator")]


def test_without_javascript_a_rows_approve_button_posts_the_table_form_and_returns_to_the_table(staff, trails, scope):
    html = staff.get("/ops/hospital/trails/?status=pending").content.decode()
    pending = Trail.objects.get(query="Where do visitors park?")
    assert f'formaction="/ops/hospital/trails/{pending.public_id}/vote/"' in html
    assert '<input type="hidden" name="next" value="/ops/hospital/trails/?status=pending">' in html
    response = staff.post(
        f"/ops/hospital/trails/{pending.public_id}/vote/",
        {"vote": "up", "next": "/ops/hospital/trails/?status=pending"},
    )
    assert response["Location"] == "/ops/hospital/trails/?status=pending"
    pending.refresh_from_db()
    assert pending.status == "active"


def test_rejecting_without_htmx_redirects_and_a_bad_vote_changes_nothing(staff, trails, scope):
    pending = Trail.objects.get(query="Where do visitors park?")
    # A "next" pointing off the site is not followed.
    response = staff.post(
        f"/ops/hospital/trails/{pending.public_id}/vote/", {"vote": "down", "next": "https://evil.example/"}
    )
    assert response.status_code == 302 and response["Location"] == f"/ops/hospital/trails/{pending.public_id}/"
    pending.refresh_from_db()
    assert pending.status == "rejected"
    # A refused action comes back to the trail's page saying why (never a bare error page).
    refused = staff.post(f"/ops/hospital/trails/{pending.public_id}/vote/", {"vote": "up"}, follow=True)
    assert (
        refused.status_code == 200
        and "Nothing was done: a rejected trail cannot be approved" in refused.content.decode()
    )
    unknown = staff.post(f"/ops/hospital/trails/{pending.public_id}/vote/", {"vote": "maybe"}, follow=True)
    assert unknown.status_code == 200 and "Nothing was done: unknown action" in unknown.content.decode()
    pending.refresh_from_db()
    assert pending.status == "rejected" and TrailSignal.objects.filter(trail=pending).count() == 1


def test_bulk_approval_activates_only_the_selected_pending_trails(staff, trails, scope):
    pending = list(Trail.objects.filter(status="pending").order_by("id"))
    active = Trail.objects.get(status="active")
    response = staff.post(
        "/ops/hospital/trails/vote/?status=pending",
        {"vote": "up", "trail": [str(pending[0].public_id), str(active.public_id), "not-a-uuid"]},
        headers={"HX-Request": "true"},
    )
    # "Approve selected pending" approves the pending ones only (an active one's lifetime is not renewed).
    assert response.status_code == 200
    assert "1 trail approved. 1 selected trail left as it was: the action applies to pending trails only." in (
        response.content.decode()
    )
    assert sorted(Trail.objects.values_list("status", flat=True)) == ["active", "active", "pending"]
    assert Trail.objects.get(pk=active.pk).expires_at == active.expires_at
    assert (
        staff.post("/ops/hospital/trails/vote/", {"vote": "up"}, headers={"HX-Request": "true"})
        .content.decode()
        .count("Select the trails to act on first.")
        == 1
    )


def test_another_scopes_trail_is_not_found_on_this_scopes_pages(staff, trails, scope, other_scope):
    trail = Trail.objects.first()
    assert staff.get(f"/ops/other/trails/{trail.public_id}/").status_code == 404
    assert staff.post(f"/ops/other/trails/{trail.public_id}/vote/", {"vote": "down"}).status_code == 404
    assert "ICU" not in staff.get("/ops/other/trails/").content.decode()


def test_trail_page_compares_stored_and_current_hashes_and_diffs_a_changed_section(staff, api, trails, scope):
    trail = Trail.objects.get(query="When are ICU visiting hours?")
    api.put_sections(
        "hospital", {"visiting/icu": "Intensive care visiting hours are 15:00 to 17:00, two visitors at a time."}
    )
    html = staff.get(f"/ops/hospital/trails/{trail.public_id}/").content.decode()
    assert '<span class="badge changed">changed</span>' in html and 'id="check-outcome">miss' in html
    assert '<span class="del">- ' + VISITING["visiting/icu"] + "</span>" in html
    assert '<span class="add">+ Intensive care visiting hours are 15:00 to 17:00' in html
    assert "<code>search</code>" in html and "icu visiting" in html
    assert "Caller accepted the answer" in html

    api.call("delete", "/scopes/hospital/sections/visiting/icu")
    html = staff.get(f"/ops/hospital/trails/{trail.public_id}/").content.decode()
    assert '<span class="badge deleted">deleted</span>' in html


def test_replay_shows_hint_after_a_section_edit_and_changes_nothing(staff, api, sections, scope):
    api.record(
        "hospital",
        query="When can I visit the ICU and where do I park?",
        cited=["visiting/icu", "parking"],
        steps=[
            {"tool": "read", "args": {"id": "parking"}, "section_ids": ["parking"]},
            {"tool": "read", "args": {"id": "visiting/icu"}, "section_ids": ["visiting/icu"]},
        ],
    )
    api.put_sections("hospital", {"visiting/icu": "ICU visiting is closed this week."})
    trail = Trail.objects.get()
    response = staff.post("/ops/hospital/replay/", {"query": "When can I visit the ICU and where do I park?"})
    html = response.content.decode()
    assert 'id="replay-outcome">hint' in html
    assert "These changed since and must be read again: visiting/icu." in html
    assert "Start with: read(id=&quot;visiting/icu&quot;)." in html
    trail.refresh_from_db()
    assert trail.hit_count == 0 and trail.status == "active" and not RecallEvent.objects.exists()


def test_replay_shows_the_prefetch_text_and_errors_next_to_the_field(staff, api, trails, scope):
    html = staff.post("/ops/hospital/replay/", {"query": "When are ICU visiting hours?"}).content.decode()
    assert 'id="replay-outcome">prefetch' in html and VISITING["visiting/icu"] in html
    response = staff.post("/ops/hospital/replay/", {"query": "?!"})
    assert response.status_code == 422 and "query has no words to match on" in response.content.decode()
    response = staff.post("/ops/hospital/replay/", {"query": "parking", "token_budget": "0"})
    assert response.status_code == 422 and 'id="id_token_budget-errors"' in response.content.decode()


def test_purge_previews_then_redacts_inline_and_writes_the_audit_log(staff, trails, scope):
    response = staff.post("/ops/hospital/purge/", {"step": "preview", "action": "redact", "subject": ""})
    html = response.content.decode()
    assert "<span data-preview-count>1</span> trail would be redacted" in html and "email" in html
    assert "bob@example.com" in Trail.objects.get(query__startswith="Is parking").query

    run_id = re.search(r'name="run" value="([0-9a-f-]+)"', html).group(1)
    response = staff.post("/ops/hospital/purge/", {"step": "run", "run": run_id})
    assert response.status_code == 302
    html = staff.get(response["Location"]).content.decode()
    assert "<strong data-purge-count>1</strong> of 1 trails redacted" in html
    assert "bob@example.com" not in Trail.objects.get(query__startswith="Is parking").query
    run = PurgeRun.objects.get()
    assert (run.requested_by, run.matched, run.state, run.subject) == ("olga", 1, "done", "")
    assert 'id="audit-log"' in html and "olga" in html and "bob@example.com" not in html


def test_purge_refuses_a_too_short_subject_next_to_the_field(staff, trails, scope):
    response = staff.post("/ops/hospital/purge/", {"step": "preview", "action": "delete", "subject": "a"})
    assert response.status_code == 422
    assert "each identifier needs at least 3 letters or digits." in response.content.decode()
    assert Trail.objects.count() == 3 and not PurgeRun.objects.exists()


def test_purge_runs_only_a_previewed_run(staff, trails, scope):
    response = staff.post("/ops/hospital/purge/", {"step": "run", "action": "delete", "subject": "bob@example.com"})
    assert response.status_code == 422 and "Preview the purge first" in response.content.decode()
    assert Trail.objects.count() == 3 and not PurgeRun.objects.exists()


def test_large_purges_go_to_a_worker_and_the_page_polls_their_progress(
    staff, trails, scope, settings, django_capture_on_commit_callbacks
):
    settings.RAGTRAIL_PURGE_INLINE_LIMIT = 0
    preview = staff.post("/ops/hospital/purge/", {"step": "preview", "action": "delete", "subject": "bob@example.com"})
    run_id = re.search(r'name="run" value="([0-9a-f-]+)"', preview.content.decode()).group(1)
    with mock.patch("trails.tasks.purge_task.delay") as delay, django_capture_on_commit_callbacks(execute=True):
        response = staff.post("/ops/hospital/purge/", {"step": "run", "run": run_id})
    run = PurgeRun.objects.get()
    delay.assert_called_once_with(run.id)
    assert run.state == "queued" and Trail.objects.count() == 3
    html = staff.get(response["Location"]).content.decode()
    assert f'hx-get="/ops/hospital/purge/{run.public_id}/" hx-trigger="every 1s"' in html

    PurgeRun.objects.filter(id=run.id).update(state="running", total=3, processed=1)
    fragment = staff.get(f"/ops/hospital/purge/{run.public_id}/").content.decode()
    assert 'aria-valuenow="33"' in fragment and "1 of 3 trails checked" in fragment and "<html" not in fragment
    PurgeRun.objects.filter(id=run.id).update(
        total=1, trail_ids=list(Trail.objects.filter(query__contains="bob@").values_list("id", flat=True))
    )

    from trails.upkeep.purge import run_purge

    PurgeRun.objects.filter(id=run.id).update(state="queued", total=0, processed=0)
    run_purge(run.id)
    fragment = staff.get(f"/ops/hospital/purge/{run.public_id}/").content.decode()
    assert "<strong data-purge-count>1</strong> of 1 trails deleted" in fragment and "every 1s" not in fragment
    assert Trail.objects.count() == 2


def test_reports_page_lists_the_reports_in_the_reports_folder(staff, settings, tmp_path, db):
    settings.RAGTRAIL_REPORTS_DIR = tmp_path
    assert b"No reports yet" in staff.get("/ops/evaluation/reports/").content
    (tmp_path / "2026-11-30T120000").mkdir()
    (tmp_path / "2026-11-30T120000" / "report.json").write_text(
        json.dumps(
            {
                "git_commit": "abc123",
                "created_at": "2026-11-30T12:00:00Z",
                "experiments": ["staleness"],
                "headline": [["ragtrail stale sections served", "0"]],
            }
        )
    )
    (tmp_path / "2026-11-30T120000" / "report.html").write_text("<html>the report</html>")
    html = staff.get("/ops/evaluation/reports/").content.decode()
    assert "ragtrail stale sections served" in html and "abc123" in html
    assert staff.get("/ops/evaluation/reports/2026-11-30T120000/").content == b"<html>the report</html>"
    assert staff.get("/ops/evaluation/reports/..%2F..%2Fetc/").status_code == 404


def test_the_recall_log_lists_filters_and_pages_recalls_and_links_to_replay(staff, api, scope, trails):
    scope.keep_raw_queries = True
    scope.save()
    for n in range(3):
        api.recall("hospital", query="When are ICU visiting hours?")
    api.recall("hospital", query="Where is the pharmacy?")
    page = staff.get("/ops/hospital/recalls/").content.decode()
    assert (
        page.count('data-recall="') == 4 and "Where is the pharmacy?" in page and "When are ICU visiting hours?" in page
    )
    misses = staff.get("/ops/hospital/recalls/?outcome=miss").content.decode()
    assert misses.count('data-recall="') == 1 and "pharmacy" in misses
    close = staff.get("/ops/hospital/recalls/?min_similarity=0.99").content.decode()
    assert close.count('data-recall="') == 3
    later = (timezone.now() + timedelta(hours=1)).strftime("%Y-%m-%d %H:%M")
    assert 'data-recall="' not in staff.get("/ops/hospital/recalls/", {"since": later}).content.decode()
    # Replay from the log names the recall, never its question, in the URL.
    event = RecallEvent.objects.filter(outcome="miss").get()
    assert f"/ops/hospital/replay/?recall={event.public_id}" in page
    replay = staff.get(f"/ops/hospital/replay/?recall={event.public_id}").content.decode()
    assert 'id="replay-outcome">miss' in replay and "Where is the pharmacy?" in replay
    # Pages of 50 by id: the second page holds the rest.
    with around_the_writer():
        RecallEvent.objects.bulk_create([RecallEvent(scope=scope, outcome="miss", latency_ms=1.0) for _ in range(60)])
    first = staff.get("/ops/hospital/recalls/").content.decode()
    assert first.count('data-recall="') == 50
    older = re.search(r'href="\?([^"]+)" id="older-recalls"', first).group(1).replace("&amp;", "&")
    assert staff.get(f"/ops/hospital/recalls/?{older}").content.decode().count('data-recall="') == 14


def test_bad_recall_log_filters_are_named_and_show_no_rows(staff, trails):
    response = staff.get("/ops/hospital/recalls/?min_similarity=2&since=yesterday")
    page = response.content.decode()
    assert response.status_code == 200 and "min_similarity" in page and "since" in page


def test_a_trail_page_lists_the_recalls_it_answered(staff, api, trails):
    api.recall("hospital", query="When are ICU visiting hours?")
    trail = Trail.objects.get(query="When are ICU visiting hours?")
    page = staff.get(f"/ops/hospital/trails/{trail.public_id}/").content.decode()
    assert 'id="trail-recalls"' in page and "prefetch" in page.split('id="trail-recalls"')[1] and "1.0000" in page


def test_overview_numbers_link_to_the_rows_behind_them(staff, api, trails):
    api.recall("hospital", query="When are ICU visiting hours?")
    roll_up(timezone.now() - timedelta(hours=2), timezone.now() + timedelta(hours=1))
    page = staff.get("/ops/hospital/").content.decode()
    assert (
        'href="/ops/hospital/recalls/?outcome=miss"' in page
        and 'href="/ops/hospital/trails/?status=stale&amp;since=' in page
    )
    figure = json.loads(page.split('id="chart-outcomes-data" type="application/json">')[1].split("</script>")[0])
    assert figure["layout"]["meta"]["click"] == "/ops/hospital/recalls/?{customdata}"
    assert figure["data"][0]["customdata"][-1].startswith("outcome=prefetch&since=")


def test_triage_finds_trails_by_id_and_by_cited_section_and_shows_what_recall_would_do(staff, api, scope, trails):
    from scopes.models import Section

    icu = Trail.objects.get(query="When are ICU visiting hours?")
    by_id = staff.get(f"/ops/hospital/trails/?q={icu.public_id}").content.decode()
    assert by_id.count('<tr id="trail-') == 1 and f'id="trail-{icu.public_id}"' in by_id
    citing = staff.get("/ops/hospital/trails/?section=parking").content.decode()
    assert citing.count('<tr id="trail-') == 2 and "ICU" not in citing.split('id="trail-table"')[1]
    assert (
        staff.get("/ops/hospital/trails/?section=visiting").content.decode().count('<tr id="trail-') == 0
    )  # an id is exact
    by_prefix = staff.get("/ops/hospital/trails/?section=visiting/*").content.decode()
    assert "ICU" in by_prefix.split('id="trail-table"')[1]
    # What recall would do now, from the cited sections' state.
    assert '<span class="badge prefetch" data-would>prefetch</span>' in by_id
    Section.upsert(scope, {"visiting/icu": "ICU visiting is suspended."})
    assert (
        '<span class="badge miss" data-would>miss</span>'
        in staff.get(f"/ops/hospital/trails/?q={icu.public_id}").content.decode()
    )


def test_pending_rows_show_what_they_cite_and_a_personal_data_flag(staff, trails):
    page = staff.get("/ops/hospital/trails/?status=pending").content.decode()
    flagged = page.split("Is parking free for visitors?")[1].split("</tr>")[0]
    assert "cites <code>parking</code>" in flagged and "may hold personal data: email" in flagged
    clean = page.split("Where do visitors park?")[1].split("</tr>")[0]
    assert "cites <code>parking</code>" in clean and "personal data" not in clean


def test_bulk_actions_apply_only_where_they_fit(staff, api, scope, trails):
    from scopes.models import Section

    icu = Trail.objects.get(query="When are ICU visiting hours?")
    pending = Trail.objects.filter(status="pending").first()
    writes.act(pending, "down", Actor.OPERATOR, by="olga")
    # The ICU trail goes stale when a recall finds its only cited section changed.
    Section.upsert(scope, {"visiting/icu": "ICU visiting is suspended."})
    api.recall("hospital", query="When are ICU visiting hours?")
    icu.refresh_from_db()
    assert icu.status == "stale"
    page = staff.get("/ops/hospital/trails/").content.decode()
    assert 'value="delete"' in page and 'value="reinstate"' in page and 'id="select-all"' in page
    both = [str(icu.public_id), str(pending.public_id)]
    # Without JavaScript a plain post asks first and deletes nothing; confirm.js adds confirm=yes.
    asked = staff.post("/ops/hospital/trails/vote/", {"vote": "delete", "trail": both}).content.decode()
    assert "Delete the 1 selected stale trail?" in asked and 'name="confirm" value="yes"' in asked
    assert f'name="trail" value="{icu.public_id}"' in asked and Trail.objects.filter(pk=icu.pk).exists()
    deleted = staff.post(
        "/ops/hospital/trails/vote/",
        {"vote": "delete", "trail": both, "confirm": "yes"},
        headers={"HX-Request": "true"},
    ).content.decode()
    assert "1 trail deleted. 1 selected trail left as it was: the action applies to stale trails only." in deleted
    assert not Trail.objects.filter(pk=icu.pk).exists() and Trail.objects.filter(pk=pending.pk).exists()
    # Undo a rejection, from its row.
    row = staff.post(
        f"/ops/hospital/trails/{pending.public_id}/vote/", {"vote": "reinstate"}, headers={"HX-Request": "true"}
    ).content.decode()
    assert "pending" in row
    pending.refresh_from_db()
    assert (
        pending.status == "pending"
        and pending.signals.last().signal == "reinstate"
        and pending.signals.last().by == "olga"
    )
    # Where nothing fits, no bulk bar.
    active_only = staff.get("/ops/hospital/trails/?status=active").content.decode()
    assert 'id="bulk-bar"' not in active_only


def test_bulk_reject_of_a_whole_page_rejects_only_its_pending_trails_and_says_so_without_javascript(
    staff, api, scope, trails
):
    from scopes.models import Section

    rejected = Trail.objects.filter(status="pending").first()
    writes.act(rejected, "down", Actor.OPERATOR, by="olga")
    Section.upsert(scope, {"visiting/icu": "ICU visiting is suspended."})
    api.recall("hospital", query="When are ICU visiting hours?")
    stale = Trail.objects.get(query="When are ICU visiting hours?", status="stale")
    every = list(Trail.objects.filter(scope=scope))
    before = {t.pk: (t.status, t.signals.count()) for t in every}
    page = staff.post(
        "/ops/hospital/trails/vote/", {"vote": "down", "trail": [str(t.public_id) for t in every]}, follow=True
    ).content.decode()
    pending = [t.pk for t in every if before[t.pk][0] == "pending"]
    assert f"{len(pending)} trail{'s' if len(pending) != 1 else ''} rejected." in page
    assert "the action applies to pending trails only." in page
    after = {t.pk: (t.status, t.signals.count()) for t in Trail.objects.filter(scope=scope)}
    assert all(after[pk][0] == "rejected" for pk in pending)
    assert {pk: state for pk, state in after.items() if pk not in pending} == {
        pk: state for pk, state in before.items() if pk not in pending
    }
    assert after[stale.pk][0] == "stale" and after[rejected.pk] == before[rejected.pk]
    # A rejected trail offers no second rejection (whose undo would restore the rejection).
    assert 'id="trail-reject"' not in staff.get(f"/ops/hospital/trails/{rejected.public_id}/").content.decode()
    again = staff.post(f"/ops/hospital/trails/{rejected.public_id}/vote/", {"vote": "down"}, follow=True)
    assert "Nothing was done" in again.content.decode() and rejected.signals.count() == before[rejected.pk][1]


def test_a_stale_row_is_deleted_from_its_own_row_after_asking(staff, api, scope, trails):
    from scopes.models import Section

    Section.upsert(scope, {"visiting/icu": "ICU visiting is suspended."})
    api.recall("hospital", query="When are ICU visiting hours?")
    stale = Trail.objects.get(query="When are ICU visiting hours?", status="stale")
    row = staff.get("/ops/hospital/trails/?status=stale").content.decode().split(stale.query)[1].split("</tr>")[0]
    assert 'value="delete"' in row and "hx-confirm=" in row
    vote, back = f"/ops/hospital/trails/{stale.public_id}/vote/", "/ops/hospital/trails/?status=stale"
    asked = staff.post(vote, {"vote": "delete", "next": back}).content.decode()  # without JavaScript: asked first
    assert "Delete this trail?" in asked and Trail.objects.filter(pk=stale.pk).exists()
    with transaction.atomic():  # both ways tried on the same row
        gone = staff.post(vote, {"vote": "delete", "confirm": "yes"}, headers={"HX-Request": "true"})
        assert gone.status_code == 200 and gone.content == b"" and not Trail.objects.filter(pk=stale.pk).exists()
        transaction.set_rollback(True)
    # Confirmed without JavaScript: back to the table as it was filtered.
    assert staff.post(vote, {"vote": "delete", "next": back, "confirm": "yes"})["Location"] == back
    assert not Trail.objects.filter(pk=stale.pk).exists()


def test_pages_read_while_the_database_refuses_writes_once_the_scope_is_remembered(staff, trails, monkeypatch):
    from django.contrib.sessions.backends.db import SessionStore
    from django.db import OperationalError

    assert staff.get("/ops/hospital/trails/").status_code == 200  # the scope remembered

    def refused(self, must_create=False):
        raise OperationalError("database is locked")

    monkeypatch.setattr(SessionStore, "save", refused)
    for page in ("/ops/hospital/", "/ops/hospital/trails/", "/ops/hospital/recalls/"):
        assert staff.get(page).status_code == 200, page


def test_without_javascript_approving_a_trail_that_would_not_prefetch_asks_first(staff, api, scope, trails):
    from scopes.models import Section

    pending = Trail.objects.get(query="Where do visitors park?", status="pending")
    Section.upsert(scope, {"parking": "Parking moved to car park C."})
    vote = f"/ops/hospital/trails/{pending.public_id}/vote/"
    asked = staff.post(vote, {"vote": "up"}).content.decode()
    assert "Approve anyway?" in asked and "recall would give a miss" in asked and 'value="yes"' in asked
    assert Trail.objects.get(pk=pending.pk).status == "pending"
    done = staff.post(vote, {"vote": "up", "confirm": "yes"}, follow=True).content.decode()
    assert "Done (approve): the trail is active now." in done and Trail.objects.get(pk=pending.pk).status == "active"


def test_a_confirmed_bulk_delete_deletes_the_trails_it_counted_not_one_gone_stale_since(staff, api, scope, trails):
    import re

    from scopes.models import Section

    Section.upsert(scope, {"visiting/icu": "ICU visiting is suspended."})
    api.recall("hospital", query="When are ICU visiting hours?")
    stale = Trail.objects.get(query="When are ICU visiting hours?", status="stale")
    other = Trail.objects.get(query="Where do visitors park?")
    asked = staff.post(
        "/ops/hospital/trails/vote/", {"vote": "delete", "trail": [str(stale.public_id), str(other.public_id)]}
    ).content.decode()
    assert "Delete the 1 selected stale trail?" in asked
    fields = re.findall(r'<input type="hidden" name="(vote|trail)" value="([^"]+)"', asked)
    assert ("trail", str(other.public_id)) not in fields
    # Gone stale while the operator read the question: approved, then its one section changed under a recall.
    writes.act(other, "up", Actor.OPERATOR, by="olga")
    Section.upsert(scope, {"parking": "Parking moved to car park C."})
    api.recall("hospital", query="Where do visitors park?")
    assert Trail.objects.get(pk=other.pk).status == "stale"
    body: dict[str, list[str]] = {"confirm": ["yes"]}
    for name, value in fields:
        body.setdefault(name, []).append(value)
    staff.post("/ops/hospital/trails/vote/", body)
    assert not Trail.objects.filter(pk=stale.pk).exists() and Trail.objects.filter(pk=other.pk).exists()
    pending = Trail.objects.filter(status="pending").first()
    nothing = staff.post(
        "/ops/hospital/trails/vote/", {"vote": "delete", "trail": [str(pending.public_id)]}, follow=True
    )
    assert "None of the selected trails is stale: nothing was deleted." in nothing.content.decode()
    assert Trail.objects.filter(pk=pending.pk).exists()


def test_operator_and_admin_pages_declare_an_icon_so_browsers_ask_for_no_favicon(staff, trails):
    from django.test import Client

    for page in (staff.get("/ops/hospital/trails/"), Client().get("/admin/login/")):
        assert page.status_code == 200 and '<link rel="icon" href="data:,">' in page.content.decode()


def test_ops_opens_the_scope_last_used_and_hides_scratch_scopes(staff, trails, scope, other_scope):
    from scopes.models import Scope

    Scope.objects.create(slug="eval-match-1234abcd", scratch=True)  # as the evaluation makes them
    Scope.objects.create(slug="zz-newest-empty")
    # First visit: the scope the latest trail was recorded in, not the newest empty one.
    assert staff.get("/ops/")["Location"] == "/ops/hospital/"
    staff.get("/ops/other/trails/")
    assert staff.get("/ops/")["Location"] == "/ops/other/"
    page = staff.get("/ops/evaluation/reports/").content.decode()
    # The Evaluation page keeps the operator's scope, and the switcher offers no scratch scope.
    assert 'href="/ops/other/"' in page and "eval-match-1234abcd" not in page


def test_times_show_their_time_zone(staff, trails):
    trail = Trail.objects.first()
    page = staff.get(f"/ops/hospital/trails/{trail.public_id}/").content.decode()
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", page)
    assert re.search(r'<time datetime="[^"]+" title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC">', page)


def test_csv_exports_follow_the_filters_and_defuse_formulas(staff, api, scope, trails):
    import csv as csv_module
    import io

    def rows(response):
        assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
        return list(csv_module.reader(io.StringIO(b"".join(response.streaming_content).decode())))

    api.record("hospital", query='=HYPERLINK("http://evil.example") parking', cited=["parking"], signal=None)
    trails_csv = rows(staff.get("/ops/hospital/trails/?status=pending&format=csv"))
    assert trails_csv[0][:3] == ["trail_id", "status", "query"] and len(trails_csv) == 1 + 3
    assert any(r[2].startswith("'=HYPERLINK") for r in trails_csv[1:])
    scope.keep_raw_queries = True
    scope.save()
    api.recall("hospital", query="When are ICU visiting hours?")
    api.recall("hospital", query="Where is the pharmacy?")
    recalls_csv = rows(staff.get("/ops/hospital/recalls/?outcome=miss&format=csv"))
    assert (
        recalls_csv[0][-1] == "query"
        and [r[2] for r in recalls_csv[1:]] == ["miss"]
        and recalls_csv[1][-1] == "Where is the pharmacy?"
    )
    PurgeRun.request(scope, "", False, "olga").save()
    audit = rows(staff.get("/ops/hospital/purge/?format=csv"))
    assert audit[0][:4] == ["run_id", "created_at", "requested_by", "rule"] and audit[1][2] == "olga"


def test_overview_shows_safety_at_a_glance(staff, api, scope, trails):
    from django.core.cache import cache

    cache.clear()
    api.call(
        "put", "/scopes/hospital/tool-policies", {"policies": [{"tool": "search", "cacheable": True, "ttl_s": 600}]}
    )
    api.call("post", "/scopes/hospital/tool-results/lookup", {"tool": "search", "args": {"q": "x"}, "context": {}})
    api.recall("hospital", query="When are ICU visiting hours?")
    api.recall("hospital", query="Where is the pharmacy?")
    writes.act(Trail.objects.get(query="Where do visitors park?"), "down", Actor.OPERATOR, by="olga")
    # Last window's recalls (a day before) for the comparison.
    with around_the_writer():
        RecallEvent.objects.filter(outcome="miss").update(created_at=timezone.now() - timedelta(hours=30))
    roll_up(timezone.now() - timedelta(days=3), timezone.now() + timedelta(hours=1))
    page = staff.get("/ops/hospital/").content.decode()
    assert '<div class="detail" id="kpi-recalls-before">before: 1 · rolled up to' in page
    assert "1 hits of 1 recalls · before: 0.0 % of 1" in page
    assert '(1)</a> <span class="help">served in full</span>' in page
    rejected = page.split('id="kpi-voted-down"><a href="')[1].split('"')[0].replace("&amp;", "&")
    assert rejected.startswith("/ops/hospital/trails/?status=rejected&since=") and 'id="rejected-link">1</a>' in page
    # The number and the list it opens count the same trails.
    assert staff.get(rejected).content.decode().count('<tr id="trail-') == 1
    assert '<td><code>search</code></td><td class="num">0</td><td class="num">1</td>' in page
    similarity = json.loads(page.split('id="chart-similarity-data" type="application/json">')[1].split("</script>")[0])
    assert [line["x0"] for line in similarity["layout"]["shapes"]] == [0.5]  # the lexical scope's threshold
    hit_rate = json.loads(page.split('id="chart-hit-rate-data" type="application/json">')[1].split("</script>")[0])
    assert "of %{customdata[1]} recalls" in hit_rate["data"][0]["hovertemplate"]


def test_the_trails_table_counts_at_most_its_cap(staff, trails, monkeypatch):
    from trails.views import trails as views

    monkeypatch.setattr(views.CappedPaginator, "CAP", 2)
    page = staff.get("/ops/hospital/trails/").content.decode()
    assert "1–3 of more than 2" in page and "Page 1 of" not in page
    assert "1–1 of 1" in staff.get("/ops/hospital/trails/?status=active").content.decode()


def test_the_overview_says_when_the_threshold_waits_for_an_operator_and_a_reset_brings_the_configured_one_back(
    staff, scope
):
    from trails.models import ThresholdChange

    scope.learned_lexical_threshold, scope.threshold_flags = 0.55, "lexical:ceiling,lexical:reporter:key:abc"
    scope.save()
    ThresholdChange.objects.create(
        scope=scope,
        matcher="lexical",
        kind="learned",
        before=0.5,
        after=0.55,
        evidence={"labels": 60, "false_hits": 60, "reporters": 1, "asked": 80},
    )
    page = staff.get("/ops/hospital/").content.decode()
    assert "Needs an operator." in page and "past its ceiling" in page and "key:abc" in page
    assert (
        'id="threshold-in-use-lexical">0.55' in page
        and "60 false of 60 labels from 1 reporter, 80 questions asked" in page
    )
    # Without JavaScript a plain post asks first and changes nothing; confirm=yes resets.
    asked = staff.post("/ops/hospital/thresholds/", {"action": "reset"}).content.decode()
    assert "Reset the learned thresholds?" in asked and 'name="confirm" value="yes"' in asked
    assert ThresholdChange.objects.filter(scope=scope, kind="reset").count() == 0
    scope.refresh_from_db()
    assert scope.learned_lexical_threshold == 0.55
    response = staff.post("/ops/hospital/thresholds/", {"action": "reset", "confirm": "yes"}, follow=True)
    page = response.content.decode()
    assert (
        response.status_code == 200
        and "Needs an operator." not in page
        and 'id="threshold-in-use-lexical">0.5<' in page
    )
    reset = ThresholdChange.objects.filter(scope=scope).first()
    assert (reset.kind, reset.by, reset.before, reset.after) == ("reset", "olga", 0.55, 0.5)
    staff.post("/ops/hospital/thresholds/", {"action": "pin"})
    scope.refresh_from_db()
    assert scope.threshold_pinned and "Unpin" in staff.get("/ops/hospital/").content.decode()
    assert staff.post("/ops/hospital/thresholds/", {"action": "lower it"}).status_code == 400


def test_threshold_actions_need_staff_and_post(client, scope):
    assert client.post("/ops/hospital/thresholds/", {"action": "reset"}).status_code == 302  # to log in
    scope.refresh_from_db()
    assert scope.labels_since is None


def test_the_find_box_lands_on_a_recall_a_trail_or_a_trail_search(staff, db):
    from scopes.models import Scope, Section
    from trails.serving.recall import recall
    from trails.serving.record import RecordInput, record

    scope = Scope.objects.create(slug="finder", matcher="lexical")
    Section.upsert(scope, {"s": "Visiting hours are 10 to 8."})
    trail = record(scope, RecordInput(query="What are the visiting hours?", cited=["s"], signal="accepted")).trail
    answer = recall(scope, "What are the visiting hours?")
    assert (
        staff.get(f"/ops/finder/find/?q={answer.recall_id}")["Location"] == f"/ops/finder/recalls/{answer.recall_id}/"
    )
    assert staff.get(f"/ops/finder/find/?q={trail.public_id}")["Location"] == f"/ops/finder/trails/{trail.public_id}/"
    assert staff.get("/ops/finder/find/?q=visiting hours")["Location"] == "/ops/finder/trails/?q=visiting+hours"
    # Part of a trail id, as a log prints its first characters: the box lands on it, the table finds it.
    part = str(trail.public_id)[:8]
    assert staff.get(f"/ops/finder/find/?q={part}")["Location"] == f"/ops/finder/trails/{trail.public_id}/"
    assert staff.get(f"/ops/finder/find/?q={str(trail.public_id)[9:18].upper()}")["Location"] == (
        f"/ops/finder/trails/{trail.public_id}/"
    )
    listed = staff.get(f"/ops/finder/trails/?q={part}").content.decode()
    assert listed.count('<tr id="trail-') == 1 and "What are the visiting hours?" in listed
    page = staff.get(f"/ops/finder/recalls/{answer.recall_id}/")
    assert page.status_code == 200 and b"What are the visiting hours?" in page.content
    other = Scope.objects.create(slug="other", matcher="lexical")
    # Another scope's recall is not found through this scope's box or page.
    assert staff.get(f"/ops/other/find/?q={answer.recall_id}")["Location"] == "/ops/other/recalls/"
    assert staff.get(f"/ops/other/recalls/{answer.recall_id}/").status_code == 404
    assert other.pk


def test_undo_reverses_an_operators_rejection_and_says_so_in_the_history(db):
    from scopes.models import Scope, Section
    from trails.models import ActionRefused, TrailStatus
    from trails.serving.record import RecordInput, record

    scope = Scope.objects.create(slug="undo", matcher="lexical")
    Section.upsert(scope, {"s": "text"})
    served = record(scope, RecordInput(query="a served question?", cited=["s"], signal="accepted")).trail
    writes.act(served, "down", Actor.OPERATOR, by="olga", reason="wrong")
    assert writes.undo(served, Actor.OPERATOR, by="olga").endswith("active") and served.status == TrailStatus.ACTIVE
    waiting = record(scope, RecordInput(query="a waiting question?", cited=["s"])).trail
    writes.act(waiting, "down", Actor.OPERATOR, by="olga")
    writes.undo(waiting, Actor.OPERATOR, by="olga")
    assert waiting.status == TrailStatus.PENDING  # never approved before: back to waiting, not served
    with pytest.raises(ActionRefused):
        writes.undo(waiting, Actor.OPERATOR, by="olga")
    with pytest.raises(ActionRefused):
        writes.undo(served, Actor.AGENT, by="key:abc")


def test_the_overview_says_when_false_hits_are_over_the_bound(staff, db):
    from django.utils import timezone

    from scopes.models import Scope
    from trails.models import RecallEvent

    scope = Scope.objects.create(slug="health", matcher="lexical", max_false_hit_rate=0.02)
    now = timezone.now()
    with around_the_writer():
        RecallEvent.objects.bulk_create(
            RecallEvent(
                scope=scope,
                created_at=now,
                outcome="prefetch",
                similarity=0.96,
                latency_ms=4.0 + i,
                matcher="lexical",
                helpful=i >= 18,
                feedback_at=now,
            )
            for i in range(21)
        )
    page = staff.get("/ops/health/").content.decode()
    assert "False hits over the bound:" in page and "18 of 21 recalls judged in the last 24 h" in page
    assert 'id="health-verdict">broken<' in page
    assert "p50 14.0 ms" in page and "over the latest 21 recalls" in page
    Scope.objects.create(slug="calm", matcher="lexical")
    jobs_heard_from()
    calm_page = staff.get("/ops/calm/").content.decode()
    assert "none judged yet" in calm_page and 'id="health-verdict">ok<' in calm_page
    # 2 of 50 reported against a 2 % bound: too few to tell, and how many at that share would.
    unsure = Scope.objects.create(slug="unsure", matcher="lexical", max_false_hit_rate=0.02)
    with around_the_writer():
        RecallEvent.objects.bulk_create(
            RecallEvent(
                scope=unsure,
                created_at=now,
                outcome="prefetch",
                similarity=0.96,
                latency_ms=4.0,
                matcher="lexical",
                helpful=i >= 2,
                feedback_at=now,
            )
            for i in range(50)
        )
    unsure_page = staff.get("/ops/unsure/").content.decode()
    assert "too few judged to tell (about 263 judged at this share would tell)" in unsure_page


@pytest.mark.parametrize(
    "reported,judged,page_says,alert",
    [(1, 10, "watch", 0), (6, 6, "broken", 1), (0, 40, "ok", 0), (3, 40, "watch", 0), (5, 40, "broken", 1)],
)
def test_the_health_strip_and_the_alert_read_one_false_hit_verdict(staff, db, reported, judged, page_says, alert):
    from django.utils import timezone

    from scopes.models import Scope
    from trails.models import RecallEvent
    from trails.upkeep.jobs import scopes_needing_a_look

    scope = Scope.objects.create(slug="judged", matcher="lexical", max_false_hit_rate=0.02)
    now = timezone.now()
    with around_the_writer():
        RecallEvent.objects.bulk_create(
            RecallEvent(
                scope=scope,
                created_at=now,
                outcome="prefetch",
                similarity=0.96,
                latency_ms=4.0,
                matcher="lexical",
                helpful=i >= reported,
                feedback_at=now,
            )
            for i in range(judged)
        )
    jobs_heard_from()
    page = staff.get("/ops/judged/").content.decode()
    assert f'id="health-verdict">{page_says}<' in page
    assert scopes_needing_a_look(timezone.now())["over_false_hit_bound"] == alert


def test_a_lost_session_on_an_htmx_action_sends_the_page_to_the_login_and_changes_nothing(client, db, trails):
    trail = next(iter(trails.values()))
    before = trail.status
    answer = client.post(
        f"/ops/hospital/trails/{trail.public_id}/vote/",
        {"vote": "down"},
        headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/ops/hospital/trails/?status=pending"},
    )
    assert answer.status_code == 204 and answer["HX-Redirect"].startswith("/admin/login/?next=/ops/hospital/trails/")
    trail.refresh_from_db()
    assert trail.status == before


def test_missing_pages_and_refusals_are_the_apps_own(client, staff, db):
    assert b"Back to the operator pages" in staff.get("/ops/no-such-scope/").content
    from django.contrib.auth.models import User

    client.force_login(User.objects.create_user("visitor", password="x"))
    refused = client.get("/ops/")
    assert refused.status_code == 403 and b"needs a staff account" in refused.content


def test_a_rejected_trail_says_it_is_not_served_and_offers_reinstate_and_undo(staff, trails):
    trail = Trail.objects.filter(status="active").first()
    staff.post(f"/ops/hospital/trails/{trail.public_id}/vote/", {"vote": "down", "reason": "wrong ward"})
    html = staff.get(f"/ops/hospital/trails/{trail.public_id}/").content.decode()
    assert 'id="check-outcome">not served' in html and 'id="trail-reinstate"' in html and 'id="trail-undo"' in html
    staff.post(f"/ops/hospital/trails/{trail.public_id}/vote/", {"vote": "undo"})
    trail.refresh_from_db()
    assert trail.status == "active"
    html = staff.get(f"/ops/hospital/trails/{trail.public_id}/").content.decode()
    assert 'id="trail-demote"' in html and 'id="check-outcome">prefetch' in html


def test_docs_changes_list_changed_sections_and_what_recall_gives_their_trails_now(
    staff, api, trails, scope, other_scope
):
    api.put_sections("hospital", {"visiting/icu": "ICU visiting is suspended this week."})
    html = staff.get("/ops/hospital/syncs/?window=24h").content.decode()
    table = html.split('id="changes"')[1].split("</table>")[0]
    assert "<code>visiting/icu</code>" in table and "When are ICU visiting hours?" in table
    assert '<span class="badge miss">miss</span>' in table or '<span class="badge hint">hint</span>' in table
    assert "<code>parking</code>" not in table  # unchanged sections are not listed
    other = staff.get("/ops/other/syncs/")
    assert other.status_code == 200 and "When are ICU" not in other.content.decode()


def test_a_release_that_moved_more_trails_than_its_summary_lists_says_the_whole_count(staff, trails, scope):
    from scopes.models import SectionSync

    listed = [str(t.public_id) for t in Trail.objects.filter(scope=scope)]
    SectionSync.objects.create(
        scope=scope,
        by="command",
        summary={  # as a sync keeps it: 50 ids listed a move at most, every move counted whole
            "sections": {"added": 0, "changed": 140, "unchanged": 0, "removed": 0, "missing": 0},
            "trails": {"prefetch → hint": 137, "prefetch → stale": 0, "hint → stale": 0, "unaffected": 3},
            "moved_trails": {"prefetch → hint": listed},
        },
    )
    page = staff.get("/ops/hospital/syncs/").content.decode()
    assert "Trails prefetch → hint (137)" in page and "and 137 in all" in page


def test_triage_filters_find_pending_trails_that_would_miss_hold_personal_data_or_were_sent_back(
    staff, api, scope, sections
):
    from scopes.models import ApiKey

    api.record("hospital", query="Where do visitors park?", cited=["parking"], signal="pending")
    api.record(
        "hospital",
        query="When are ICU visiting hours? Ask ann.archer@example.org",
        cited=["visiting/icu"],
        signal="pending",
    )
    served = api.record("hospital", query="Where is car park B?", cited=["parking"], signal="accepted").json()[
        "trail_id"
    ]
    api.put_sections("hospital", {"visiting/icu": "ICU visiting is suspended."})
    page = lambda flag: staff.get(f"/ops/hospital/trails/?flag={flag}").content.decode()
    assert "Ask ann.archer" in page("would_miss") and "Where do visitors park?" not in page("would_miss")
    assert "Ask ann.archer" in page("pii") and "Where do visitors park?" not in page("pii")
    # Two keys' reports send the served trail back: it is what "reported" lists.
    for client in (api, type(api)(ApiKey.issue([scope])[1])):
        recall_id = client.recall("hospital", query="Where is car park B?").json()["recall_id"]
        client.call("post", f"/scopes/hospital/recalls/{recall_id}/feedback", {"helpful": False})
    reported = page("reported")
    assert "Where is car park B?" in reported and "Where do visitors park?" not in reported
    assert Trail.objects.get(public_id=served).status == "pending"


def test_a_section_whose_text_no_longer_matches_its_hash_is_judged_changed_as_recall_would(staff, api, scope, sections):
    """Recall hashes the text it serves; the pages' prediction does too, or a row written
    around the API (a restore, a hand edit) would show prefetch where recall misses."""
    from django.db import connection

    from scopes.models import Section

    api.record("hospital", query="Where do visitors park?", cited=["parking"], signal="pending")
    api.record("hospital", query="When are ICU visiting hours?", cited=["visiting/icu"], signal="pending")
    with connection.cursor() as cursor:  # around Section.upsert, as a restore or a hand edit would
        cursor.execute(
            f"UPDATE {Section._meta.db_table} SET text = %s WHERE scope_id = %s AND section_id = %s",
            ["Parking is free on Sundays.", scope.id, "parking"],
        )
    would_miss = staff.get("/ops/hospital/trails/?flag=would_miss").content.decode()
    assert "Where do visitors park?" in would_miss and "When are ICU visiting hours?" not in would_miss
    api.record("hospital", query="Is there parking for visitors?", cited=["parking"], signal="accepted")
    assert api.recall("hospital", query="Is there parking for visitors?").json()["outcome"] == "miss"


def test_approving_a_trail_that_would_not_prefetch_asks_first(staff, api, scope, sections):
    api.record("hospital", query="When are ICU visiting hours?", cited=["visiting/icu"], signal="pending")
    api.put_sections("hospital", {"visiting/icu": "ICU visiting is suspended."})
    html = staff.get("/ops/hospital/trails/?status=pending").content.decode()
    assert 'hx-confirm="Its cited sections have changed: once approved, recall would give a miss' in html


def test_the_overviews_report_links_keep_the_window_and_open_the_reported_trails(staff, scope):
    html = staff.get("/ops/hospital/?window=7d").content.decode()
    link = html.split('id="false-hit-link"')[0].rsplit('href="', 1)[1]
    assert "feedback=not_helpful" in link and "since=" in link
    assert 'href="/ops/hospital/trails/?flag=reported&amp;since=' in html and 'id="reported-link"' in html


def test_the_threshold_what_if_counts_the_hits_a_higher_threshold_loses_and_quotes_the_calibration(staff, db):
    from django.utils import timezone

    from scopes.models import Scope
    from trails.models import RecallEvent

    scope = Scope.objects.create(slug="tune", matcher="embedding", embedding_threshold=0.945)
    now = timezone.now()
    rows = [(0.95, False), (0.951, True), (0.96, None), (0.99, True)]
    with around_the_writer():
        RecallEvent.objects.bulk_create(
            RecallEvent(
                scope=scope,
                created_at=now,
                outcome="prefetch",
                similarity=s,
                latency_ms=3.0,
                matcher="embedding",
                helpful=h,
                feedback_at=now if h is not None else None,
            )
            for s, h in rows
        )
    with around_the_writer():
        RecallEvent.objects.create(scope=scope, created_at=now, outcome="miss", latency_ms=3.0, nearest_similarity=0.93)
    raised = staff.get("/ops/tune/tuning/?threshold=0.97").content.decode()
    assert (
        "Hits that would become misses: <strong>3</strong> (1 of them reported not helpful, 1 judged helpful)" in raised
    )
    assert "false hits at most" in raised.split('id="tuning-calibration"')[1]
    lowered = staff.get("/ops/tune/tuning/?threshold=0.925").content.decode()
    assert "at least <strong>1</strong>" in lowered and "Hits that would become misses: <strong>0</strong>" in lowered
    assert staff.get("/ops/tune/tuning/?threshold=nonsense").status_code == 200


def test_the_what_if_reads_at_most_the_windows_latest_recalls_and_says_so(staff, db, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from scopes.models import Scope
    from trails.models import RecallEvent
    from trails.views import overview

    scope = Scope.objects.create(slug="busy", matcher="embedding", embedding_threshold=0.945)
    now = timezone.now()
    # Three old reported hits and two recent ones: only the latest two are read.
    with around_the_writer():
        RecallEvent.objects.bulk_create(
            RecallEvent(
                scope=scope,
                created_at=now - timedelta(hours=hours),
                outcome="prefetch",
                similarity=0.95,
                latency_ms=3.0,
                matcher="embedding",
                helpful=False,
                feedback_at=now,
            )
            for hours in (1, 2, 30, 31, 32)
        )
    monkeypatch.setattr(overview, "WHAT_IF_RECALLS", 2)
    html = staff.get("/ops/busy/tuning/?threshold=0.97").content.decode()
    assert "these figures are its latest 2, since" in html
    assert "Hits that would become misses: <strong>2</strong> (2 of them reported not helpful" in html
    monkeypatch.setattr(overview, "WHAT_IF_RECALLS", 10)
    html = staff.get("/ops/busy/tuning/?threshold=0.97").content.decode()
    assert 'id="tuning-cut"' not in html and "Hits that would become misses: <strong>5</strong>" in html


def test_an_operator_accepts_a_learned_raise_and_it_becomes_the_configured_threshold(staff, db):
    from scopes.models import Scope
    from trails.models import ThresholdChange

    scope = Scope.objects.create(slug="accept", matcher="lexical")
    Scope.objects.filter(pk=scope.pk).update(learned_lexical_threshold=0.8)
    staff.post("/ops/accept/thresholds/", {"action": "accept"})
    scope.refresh_from_db()
    assert scope.lexical_threshold == 0.8 and scope.learned_lexical_threshold is None
    change = ThresholdChange.objects.filter(scope=scope).first()
    assert change.kind == "configured" and change.by == "olga"


def test_the_verdict_names_what_made_it_and_turns_on_refused_requests_and_silent_jobs(staff, db, monkeypatch):
    import time

    from django.core.cache import caches

    from infra import refusals
    from scopes.models import Scope

    Scope.objects.create(slug="calm", matcher="lexical")
    jobs_heard_from()
    assert 'id="health-verdict">ok<' in staff.get("/ops/calm/").content.decode()
    # A third of the API's requests refused: broken, and the strip says why.
    monkeypatch.setattr(refusals, "window", lambda slug: windowed({"queued past the budget": 27}, 80))
    page = staff.get("/ops/calm/").content.decode()
    assert 'id="health-verdict">broken<' in page and (
        "27 of 80 API requests to this scope refused with 503 in the last 5 min (27 queued past the budget)" in page
    )
    monkeypatch.setattr(refusals, "window", lambda slug: windowed({}, 80))
    # Beat stopped three hours ago, and with it every job it sends: beat is named, not the worker.
    jobs_heard_from(seconds_ago=3 * 3600)
    page = staff.get("/ops/calm/").content.decode()
    assert 'id="health-verdict">broken<' in page and "beat silent for 3 h" in page
    assert "is the worker running?" not in page and "roll_up_task last succeeded" not in page
    # Beat and the worker well, the roll-up failing for three hours: the roll-up, its age in words.
    jobs_heard_from()
    caches["heartbeats"].set("rt:task-last-success:trails.tasks.roll_up_task", time.time() - 3 * 3600, None)
    page = staff.get("/ops/calm/").content.decode()
    assert 'id="health-verdict">broken<' in page and "roll_up_task last succeeded 3 h ago" in page
    # A fresh deploy whose jobs never reported: watch, never a calm ok.
    # (only these keys: a clear() would empty a Redis another run shares)
    caches["heartbeats"].delete_many(
        ["rt:beat-sent-heartbeat"]
        + [f"rt:task-last-success:trails.tasks.{t}" for t in ("roll_up_task", "sweep_expired_task", "heartbeat_task")]
    )
    page = staff.get("/ops/calm/").content.decode()
    assert 'id="health-verdict">watch<' in page and "beat never heard from: is beat running?" in page
    # The first hour after a deploy: beat started ten minutes ago, the hourly sweep is not yet due.
    jobs_heard_from()
    caches["heartbeats"].delete("rt:task-last-success:trails.tasks.sweep_expired_task")
    caches["heartbeats"].set("rt:beat-started", time.time() - 590, None)
    page = staff.get("/ops/calm/").content.decode()
    assert 'id="health-verdict">ok<' in page and "sweep_expired_task not yet due (first run in 50 min)" in page


def test_requests_shed_before_the_key_check_are_the_services_refusals_not_the_tenants(staff, db, settings):
    """Requests shed for waiting past the budget (a trusted proxy's stamp: the whole service is
    overloaded) are the service's refusals, by cause, even with a tenant's own key: no tenant's
    verdict moves, whichever process answered and whatever it remembers."""
    import time
    import uuid

    from scopes.models import ApiKey, Scope
    from tests.conftest import ApiClient

    jobs_heard_from()
    settings.RAGTRAIL_TRUSTED_PROXIES = frozenset({"127.0.0.1"})  # the test client's address
    busy, quiet = (
        Scope.objects.create(slug=f"{n}-{uuid.uuid4().hex[:6]}", matcher="lexical") for n in ("busy", "quiet")
    )
    agents = {s.slug: ApiClient(ApiKey.issue([s])[1]) for s in (busy, quiet)}
    for slug, agent in agents.items():  # each scope answered once: a scope a key was let into
        assert agent.recall(slug, query="Where do visitors park?").status_code == 200
    late = {"X-Request-Start": f"t={time.time() - 30:.3f}"}  # queued 30 s before it reached a worker
    for _ in range(4):
        shed = agents[busy.slug].client.post(
            f"/api/v1/scopes/{busy.slug}/recall",
            {"query": "x"},
            content_type="application/json",
            headers={**agents[busy.slug].headers, **late},
        )
        assert shed.status_code == 503
    for tenant in (busy, quiet):
        page = staff.get(f"/ops/{tenant.slug}/").content.decode()
        # (the verdict itself may read a loaded machine's recall latency: the refusals are not in it)
        assert "requests to this scope refused" not in page
        assert "0 of them to this scope&#x27;s keys" in page and "service refused 4 of 6" in page
        assert "this scope 0 of 1 API requests refused with 503" in page


def test_a_keyless_or_wrong_key_flood_leaves_a_tenants_verdict_and_counts_unchanged(staff, db, settings):
    """Shed 503s and 401s of requests with no key or a made-up one are the service's figures, said
    as the service's; the tenant's own counts, verdict and per-key table do not move."""
    import time
    import uuid

    from scopes.models import ApiKey, Scope
    from tests.conftest import ApiClient

    jobs_heard_from()
    settings.RAGTRAIL_TRUSTED_PROXIES = frozenset({"127.0.0.1"})
    tenant = Scope.objects.create(slug=f"tenant-{uuid.uuid4().hex[:6]}", matcher="lexical")
    agent = ApiClient(ApiKey.issue([tenant], name="support agents")[1])
    for _ in range(3):
        assert agent.recall(tenant.slug, query="Where do visitors park?").status_code == 200

    def verdict_and_counts() -> tuple[str, str, str]:
        page = staff.get(f"/ops/{tenant.slug}/").content.decode()
        verdict = page.split('id="health-verdict">', 1)[1].split("<", 1)[0]
        own = page.split("this scope ", 1)[1].split(";", 1)[0]
        return verdict, own, page.split('id="key-refusals"', 1)[1].split("</table>", 1)[0]

    before = verdict_and_counts()
    assert before[0] == "ok" and before[1].startswith("0 of 3 API requests refused")
    path = f"/api/v1/scopes/{tenant.slug}/recall"
    late = {"X-Request-Start": f"t={time.time() - 30:.3f}"}
    for headers, status in (
        ({**agent.headers, **late}, 503),  # the tenant's own key, shed while the service is overloaded
        (late, 503),  # no key, shed before the key check
        ({"Authorization": "Bearer rt_madeup_secret", **late}, 503),
        ({}, 401),
        ({"Authorization": "Bearer rt_madeup_secret"}, 401),
    ):
        for _ in range(20):
            answer = staff.post(path, {"query": "x"}, content_type="application/json", headers=headers)
            assert answer.status_code == status
    assert verdict_and_counts() == before
    page = staff.get(f"/ops/{tenant.slug}/").content.decode()
    assert "The service (not this scope's verdict): broken." in page
    assert "service refused 60 of 103 API requests with 503" in page


def test_refusals_are_listed_by_key_name_and_read_whole_whatever_process_tallied_them(staff, db, settings):
    """Each key's requests and refusals in the scope, by its name; counts another process
    tallied a moment ago are on the page at once, and the same on every refresh."""
    import multiprocessing
    import time
    import uuid

    from infra import refusals
    from scopes.models import ApiKey, Scope
    from tests.conftest import ApiClient

    jobs_heard_from()
    settings.RAGTRAIL_TRUSTED_PROXIES = frozenset({"127.0.0.1"})
    tenant = Scope.objects.create(slug=f"keys-{uuid.uuid4().hex[:6]}", matcher="lexical")
    (flooder, flood_key), (helper, calm_key) = (
        ApiKey.issue([tenant], name="nightly crawler"),
        ApiKey.issue([tenant], name="helpdesk bot"),
    )
    calm, flood = ApiClient(calm_key), ApiClient(flood_key)
    assert calm.recall(tenant.slug, query="Where do visitors park?").status_code == 200
    assert flood.recall(tenant.slug, query="Where do visitors park?").status_code == 200
    late = {**flood.headers, "X-Request-Start": f"t={time.time() - 30:.3f}"}
    for _ in range(6):
        answer = flood.client.post(
            f"/api/v1/scopes/{tenant.slug}/recall", {"query": "x"}, content_type="application/json", headers=late
        )
        assert answer.status_code == 503
    # Another web process tallies three more of the crawler's refusals and exits.
    names = refusals.whose((tenant.slug, flooder.lookup))
    child = multiprocessing.get_context("fork").Process(
        target=lambda: [refusals.tally(names, 503, "model busy") for _ in range(3)]
    )
    child.start()
    child.join(30)
    pages = [staff.get(f"/ops/{tenant.slug}/").content.decode() for _ in range(2)]
    rows = [p.split('id="key-refusals"', 1)[1].split("</tbody>", 1)[0] for p in pages]
    assert rows[0] == rows[1]
    cells = [
        [cell.split(">", 1)[1] for cell in row.split("</td>")[:-1]] for row in rows[0].split("<tr>")[2:]
    ]  # after the header's row
    assert cells == [
        [f"nightly crawler <code>rt_{flooder.lookup}_…</code>", "4", "3", "3 model busy"],
        [f"helpdesk bot <code>rt_{helper.lookup}_…</code>", "1", "0", "—"],
    ]
    assert "this scope 3 of 5 API requests refused with 503" in pages[0]


def test_a_docs_sync_left_in_the_queue_is_listed_with_its_age_and_flagged(staff, db):
    from datetime import timedelta

    from scopes.models import Scope, SectionSyncJob

    jobs_heard_from()
    scope = Scope.objects.create(slug="queued", matcher="lexical")
    assert "No docs sync, purge or re-signing waiting or running." in staff.get("/ops/queued/").content.decode()
    SectionSyncJob.objects.create(scope=scope, by="key:x", created_at=timezone.now() - timedelta(minutes=20))
    page = staff.get("/ops/queued/").content.decode()
    assert '<strong class="bad">a docs sync queued for 20 min</strong>' in page
    assert 'id="health-verdict">watch<' in page and "is the worker taking jobs?" in page


def test_the_counts_are_said_rolled_up_to_the_roll_ups_last_run_not_the_hours_end(staff, api, scope, trails):
    import time as clock
    from datetime import datetime
    from datetime import timezone as dt_timezone

    from django.core.cache import caches

    api.recall("hospital", query="When are ICU visiting hours?")
    # No roll-up has run: the counts say never, and the recalls waiting for one are counted.
    caches["heartbeats"].delete_many(["rt:rolled-up-to", "rt:task-last-success:trails.tasks.roll_up_task"])
    page = staff.get("/ops/hospital/").content.decode()
    assert "rolled up to <strong>never</strong>" in page and "Roll-up current" not in page
    assert "No roll-up has run yet: 1 recalls in this window are not in the charts" in page
    roll_up(timezone.now() - timedelta(hours=2), timezone.now() + timedelta(hours=1))
    ran = clock.time() - 120  # the roll-up last ran two minutes ago, inside the current hour
    caches["heartbeats"].set("rt:rolled-up-to", ran, None)
    page = staff.get("/ops/hospital/").content.decode()
    hour_end = RecallEvent.objects.latest("created_at").created_at.replace(minute=0, second=0, microsecond=0)
    expected = min(datetime.fromtimestamp(ran, tz=dt_timezone.utc), hour_end + timedelta(hours=1))
    assert f"rolled up to {expected:%H:%M} UTC" in page
    why = page.split('id="tokens-saved-why">', 1)[1].split("</div>", 1)[0]
    assert why == "path results less what was served"  # its trail was recorded with its steps


def test_tokens_saved_at_zero_says_why(staff, db):
    from scopes.models import Scope, Section
    from trails.serving.recall import recall
    from trails.serving.record import RecordInput, record

    scope = Scope.objects.create(slug="nosteps", matcher="lexical")
    Section.upsert(scope, {"s": "Visiting hours are 10 to 8."})
    roll_up(timezone.now() - timedelta(hours=2), timezone.now() + timedelta(hours=1))
    why = staff.get("/ops/nosteps/").content.decode().split('id="tokens-saved-why">', 1)[1].split("</div>", 1)[0]
    assert why == "none: only a prefetch saves tokens, and this window has none"
    record(scope, RecordInput(query="What are the visiting hours?", cited=["s"], signal="accepted"))
    assert recall(scope, "What are the visiting hours?").outcome == "prefetch"
    roll_up(timezone.now() - timedelta(hours=2), timezone.now() + timedelta(hours=1))
    why = staff.get("/ops/nosteps/").content.decode().split('id="tokens-saved-why">', 1)[1].split("</div>", 1)[0]
    assert why.startswith("none: the trails prefetched were recorded without steps"), why


def test_a_background_re_signing_is_listed_while_it_waits_and_gone_once_run(
    staff, scope, trails, settings, django_capture_on_commit_callbacks
):
    import time as clock

    from django.core.cache import caches

    from trails.tasks import reindex_scope_task

    jobs_heard_from()
    settings.RAGTRAIL_RESIGN_INLINE_LIMIT = 0  # every re-signing goes to the worker
    scope.lexical_threshold = 0.6
    with django_capture_on_commit_callbacks(execute=True):
        scope.save()
    assert "a re-signing queued for" in staff.get("/ops/hospital/").content.decode()
    caches["heartbeats"].set(f"rt:resigning:{scope.pk}", {"state": "queued", "since": clock.time() - 400}, 600)
    page = staff.get("/ops/hospital/").content.decode()
    assert '<strong class="bad">a re-signing queued for 6 min</strong>' in page and 'id="health-verdict">watch<' in page
    reindex_scope_task.apply(args=[scope.pk])  # as the worker runs it
    assert "No docs sync, purge or re-signing waiting or running." in staff.get("/ops/hospital/").content.decode()


def test_a_jobs_success_is_the_workers_heartbeat_on_the_overview(staff, db):
    from django.core.cache import caches

    from scopes.models import Scope
    from trails.tasks import roll_up_task

    Scope.objects.create(slug="beat", matcher="lexical")
    caches["heartbeats"].delete_many(["rt:task-last-success:trails.tasks.roll_up_task", "rt:beat-started"])
    assert "roll_up_task <strong>not heard from</strong>" in staff.get("/ops/beat/").content.decode()
    roll_up_task.apply()
    assert "roll_up_task <strong>not heard from</strong>" not in staff.get("/ops/beat/").content.decode()


def test_the_heartbeat_stamps_the_worker_when_run_and_beat_when_sent(staff, db):
    """Beat sends trails.tasks.heartbeat_task every minute (its pulse: sent), the worker runs it
    (the worker's pulse: run); the overview names each."""
    from django.core.cache import caches

    from infra import metrics
    from scopes.models import Scope
    from trails.tasks import heartbeat_task, roll_up_task

    Scope.objects.create(slug="pulse", matcher="lexical")
    caches["heartbeats"].delete_many([metrics.BEAT_SENT, "rt:task-last-success:trails.tasks.heartbeat_task"])
    page = staff.get("/ops/pulse/").content.decode()
    assert "worker <strong>not heard from</strong>" in page and "beat <strong>not heard from</strong>" in page
    roll_up_task.apply_async()  # another task sent is not beat's pulse
    assert metrics.beat_last_sent() is None
    heartbeat_task.apply_async()  # as beat sends it (to the test run's queue; no worker here)
    assert metrics.beat_last_sent() is not None
    heartbeat_task.apply()  # as the worker runs it
    page = staff.get("/ops/pulse/").content.decode()
    assert "worker <strong>not heard from</strong>" not in page and "beat <strong>not heard from</strong>" not in page


def test_pending_trails_asking_the_same_question_are_pointed_out_together(staff, api, scope, sections):
    # Three paths to one question, each citing other sections (the same sections again would
    # be the same trail, renewed, not a twin).
    for ending, cited in (("?", ["parking"]), ("??", ["parking", "visiting/ward"]), ("  ?", ["visiting/ward"])):
        api.record("hospital", query=f"Where do visitors park{ending}", cited=cited, signal="pending")
    api.record("hospital", query="When are ICU visiting hours?", cited=["visiting/icu"], signal="pending")
    html = staff.get("/ops/hospital/trails/?status=pending").content.decode()
    assert html.count("2 more pending trails ask the same") == 3 and "judge them together" in html


def test_a_forged_csrf_token_on_an_htmx_action_is_a_403_that_reloads_the_page(trails, db):
    from django.test import Client

    operator = Client(enforce_csrf_checks=True)
    operator.force_login(User.objects.create_user("ivan", password="x", is_staff=True, is_superuser=True))
    trail = next(iter(trails.values()))
    before = Trail.objects.get(pk=trail.pk).status
    answer = operator.post(
        f"/ops/hospital/trails/{trail.public_id}/vote/",
        {"vote": "down", "csrfmiddlewaretoken": "forged"},
        headers={"HX-Request": "true"},
    )
    assert answer.status_code == 403 and answer["HX-Refresh"] == "true"
    assert Trail.objects.get(pk=trail.pk).status == before


def test_the_overviews_numbers_count_what_the_lists_they_open_show(staff, api, scope, trails):
    """A rejection undone is no rejected trail; a trail made stale in the window is one."""
    parking = Trail.objects.get(query="Where do visitors park?")
    writes.act(parking, "down", Actor.OPERATOR, by="olga")
    icu = Trail.objects.get(query="When are ICU visiting hours?")
    writes.act(icu, "down", Actor.OPERATOR, by="olga")
    writes.undo(icu, Actor.OPERATOR, by="olga")  # reinstated, then approved again: no longer rejected
    api.put_sections("hospital", {"visiting/icu": "ICU visiting is suspended."})
    api.recall("hospital", query="When are ICU visiting hours?")  # recall marks it stale
    page = staff.get("/ops/hospital/").content.decode()
    for anchor in ('id="rejected-link"', 'id="kpi-stale"'):
        head, tail = page.split(anchor, 1)
        link = head.rsplit('href="', 1)[1].split('"')[0].replace("&amp;", "&")
        shown = int(tail.split(">", 1)[1].split("<", 1)[0])
        listed = staff.get(link).content.decode().count('<tr id="trail-')
        assert shown == listed >= 1, (anchor, shown, listed)


def test_each_degraded_case_turns_the_overviews_verdict_and_names_its_cause(staff, scope, monkeypatch):
    """Slow recalls, refused requests, a stopped worker: each makes the strip say so, and why."""
    from infra import metrics, refusals
    from trails.models import RecallEvent

    now = timezone.now()
    fresh = {
        name: now.timestamp() - 60
        for name in ("trails.tasks.roll_up_task", "trails.tasks.sweep_expired_task", "trails.tasks.heartbeat_task")
    }
    monkeypatch.setattr(metrics, "last_successes", lambda names: {name: fresh.get(name) for name in names})
    sent = {"beat": now.timestamp() - 30}
    monkeypatch.setattr(metrics, "beat_last_sent", lambda: sent["beat"])
    monkeypatch.setattr(refusals, "window", lambda slug: windowed({}, 80))

    def strip() -> str:
        page = staff.get("/ops/hospital/").content.decode()
        return page.split('id="health-because">', 1)[1].split("</p>", 1)[0] if 'id="health-because"' in page else "ok"

    assert strip() == "ok"
    with around_the_writer():
        RecallEvent.objects.bulk_create(
            [RecallEvent(scope=scope, outcome="miss", latency_ms=1060.0, created_at=now) for _ in range(20)]
        )
    assert "Broken because:" in strip() and "recall p95 1060 ms, over its 500 ms budget" in strip()
    with around_the_writer():
        RecallEvent.objects.all().delete()

    monkeypatch.setattr(refusals, "window", lambda slug: windowed({"database": 52}, 80))
    assert "Broken because:" in strip() and "52 of 80 API requests to this scope refused with 503" in strip()
    monkeypatch.setattr(refusals, "window", lambda slug: windowed({}, 80))

    fresh["trails.tasks.roll_up_task"] = now.timestamp() - 2 * 3600  # the worker stopped two hours ago
    assert "Broken because:" in strip() and "roll_up_task last succeeded 2 h ago" in strip()
    fresh["trails.tasks.roll_up_task"] = now.timestamp() - 60

    # The worker stopped three minutes ago, beat still sends: the worker is named, not beat.
    fresh["trails.tasks.heartbeat_task"] = now.timestamp() - 190
    assert (
        "Broken because:" in strip()
        and "worker silent for 3 min (a heartbeat every 1 min, beat still sends it)" in strip()
    )
    assert "beat silent" not in strip()
    # The worker stopped first, then beat: both are named.
    fresh["trails.tasks.heartbeat_task"] = now.timestamp() - 400
    sent["beat"] = now.timestamp() - 200
    assert "worker silent for 6 min" in strip() and "beat silent for 3 min" in strip()
    # Beat stopped, the worker ran the last heartbeat it sent: beat alone is named.
    fresh["trails.tasks.heartbeat_task"] = now.timestamp() - 195
    assert "beat silent for 3 min" in strip() and "worker" not in strip()
    # Both back: ok again.
    fresh["trails.tasks.heartbeat_task"], sent["beat"] = now.timestamp() - 20, now.timestamp() - 20
    assert strip() == "ok"
