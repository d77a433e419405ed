"""An operator's flows in a real browser: log in, open a trail, replay it after an edit,
approve with one click, purge personal data."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from scopes.models import Scope, Section
from tests.conftest import grant
from trails.core.hint import RecordedStep
from trails.models import Trail
from trails.serving.record import RecordInput, record

pytestmark = pytest.mark.slow

SECTIONS = {
    "visiting/icu": "Intensive care visiting hours are 14:00 to 16:00, two visitors at a time.",
    "parking": "Visitors park in car park B; the first hour is free.",
}


@pytest.fixture
def hospital(transactional_db) -> Scope:
    scope = Scope.objects.create(slug="hospital", name="Hospital", matcher="lexical")
    Section.upsert(scope, SECTIONS)
    record(
        scope,
        RecordInput(
            query="When can I visit the ICU and where do I park?",
            cited=["visiting/icu", "parking"],
            signal="accepted",
            steps=[
                RecordedStep("read", {"id": "parking"}, ["parking"]),
                RecordedStep("read", {"id": "visiting/icu"}, ["visiting/icu"]),
            ],
        ),
    )
    record(scope, RecordInput(query="Is the car park free for visitors?", cited=["parking"]))
    record(scope, RecordInput(query="Parking question from ana@example.org about car park B", cited=["parking"]))
    grant(User.objects.create_user("olga", password="correct horse", is_staff=True), scope)
    return scope


def log_in(page, live_server, next_path: str) -> None:
    page.goto(f"{live_server.url}{next_path}")
    # Anonymous: the login page, which returns to where the operator was going.
    page.fill("#id_username", "olga")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    page.wait_for_url(f"**{next_path}")


def test_operator_logs_in_opens_a_trail_and_replays_it_after_a_section_edit(page, live_server, hospital):
    log_in(page, live_server, "/ops/hospital/trails/")
    page.click("text=When can I visit the ICU and where do I park?")
    expect(page.locator("#trail-query")).to_have_text("When can I visit the ICU and where do I park?")
    expect(page.locator("#check-outcome")).to_have_text("prefetch")

    Section.upsert(hospital, {"visiting/icu": "ICU visiting is closed this week."})
    page.reload()
    expect(page.locator("#check-outcome")).to_have_text("hint")
    expect(page.locator("tr[data-section='visiting/icu'] .badge")).to_have_text("changed")
    expect(page.locator("pre.diff .add")).to_contain_text("ICU visiting is closed this week.")

    page.click("text=Replay now")
    expect(page.locator("#replay-outcome")).to_have_text("hint")
    expect(page.locator("#replay-hint")).to_contain_text("These changed since and must be read again: visiting/icu.")
    # A replay is a dry run: the trail gained no hit.
    assert Trail.objects.get(query__startswith="When can I visit").hit_count == 0


def test_operator_approves_a_pending_trail_with_one_click_and_the_row_changes_in_place(page, live_server, hospital):
    log_in(page, live_server, "/ops/hospital/trails/?status=pending")
    trail = Trail.objects.get(query="Is the car park free for visitors?")
    row = page.locator(f"#trail-{trail.public_id}")
    expect(row.locator("[data-status]")).to_have_text("pending")
    # A full page load would drop this marker.
    page.evaluate("window.notReloaded = true")

    row.get_by_role("button", name="Approve").click()

    expect(row.locator("[data-status]")).to_have_text("active")
    expect(row.get_by_role("button", name="Approve")).to_have_count(0)
    assert page.evaluate("window.notReloaded") is True
    # The keyboard goes on from the row it acted on, not from the top of the page.
    expect(row).to_be_focused()
    trail.refresh_from_db()
    assert trail.status == "active"


def test_an_approval_the_database_refuses_says_so_and_the_next_one_clears_it(page, live_server, hospital):
    log_in(page, live_server, "/ops/hospital/trails/?status=pending")
    trail = Trail.objects.get(query="Is the car park free for visitors?")
    row = page.locator(f"#trail-{trail.public_id}")
    from django.template.loader import render_to_string

    away = render_to_string("503.html", {"code": "unavailable", "message": "the database is not answering"})
    page.route("**/vote/", lambda route: route.fulfill(status=503, body=away, content_type="text/html"))
    row.get_by_role("button", name="Approve").click()
    notice = page.get_by_role("alert")
    expect(notice).to_have_text("Not done: try again in a moment. The database is not answering. (503)")
    expect(row.locator("[data-status]")).to_have_text("pending")
    page.unroute("**/vote/")
    row.get_by_role("button", name="Approve").click()
    expect(row.locator("[data-status]")).to_have_text("active")
    expect(page.locator("#action-error")).to_have_count(0)


def test_deleting_a_stale_row_leaves_the_keyboard_on_the_row_beside_it(page, live_server, hospital):
    from trails.serving.recall import recall

    Section.upsert(hospital, {"visiting/icu": "Closed.", "parking": "Moved."})
    recall(hospital, "When can I visit the ICU and where do I park?")
    stale = Trail.objects.get(status="stale")
    log_in(page, live_server, "/ops/hospital/trails/?sort=age")
    rows = page.locator("#trail-table tbody tr")
    ids = [rows.nth(i).get_attribute("id") for i in range(rows.count())]
    at = ids.index(f"trail-{stale.public_id}")
    beside = ids[at + 1] if at + 1 < len(ids) else ids[at - 1]  # the next row, else the one before
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f"#trail-{stale.public_id}").get_by_role("button", name="Delete").click()
    expect(page.locator(f"#trail-{stale.public_id}")).to_have_count(0)
    expect(page.locator(f"#{beside}")).to_be_focused()
    assert not Trail.objects.filter(pk=stale.pk).exists()


def test_operator_filters_the_table_without_a_reload(page, live_server, hospital):
    log_in(page, live_server, "/ops/hospital/trails/")
    page.evaluate("window.notReloaded = true")
    page.fill("#id_q", "ICU")
    page.press("#id_q", "Enter")
    expect(page.locator("#trail-table tbody tr")).to_have_count(1)
    expect(page.locator("#trail-table")).to_contain_text("When can I visit the ICU")
    assert page.evaluate("window.notReloaded") is True


def test_operator_previews_and_runs_a_purge_and_sees_the_count(page, live_server, hospital):
    log_in(page, live_server, "/ops/hospital/purge/")
    page.click("text=Preview matches")
    expect(page.locator("[data-preview-count]")).to_have_text("1")
    page.click("text=Redact 1 trail")
    expect(page.locator("[data-purge-count]")).to_have_text("1")
    expect(page.locator("#audit-log")).to_contain_text("olga")
    assert "ana@example.org" not in Trail.objects.get(query__startswith="Parking question").query


def test_overview_draws_its_charts_from_the_bundled_plotly(page, live_server, hospital):
    from datetime import timedelta

    from django.utils import timezone

    from trails.serving.recall import recall
    from trails.upkeep.jobs import roll_up

    recall(hospital, "When can I visit the ICU and where do I park?")
    recall(hospital, "How do I renew my passport?")
    roll_up(timezone.now() - timedelta(hours=1), timezone.now() + timedelta(minutes=1))
    outside = []
    page.on(
        "request", lambda request: outside.append(request.url) if not request.url.startswith(live_server.url) else None
    )
    log_in(page, live_server, "/ops/hospital/")
    expect(page.locator("#kpi-recalls")).to_have_text("2")
    # plotly.js comes only when a chart nears the screen (a phone's first screen has none).
    page.locator("#chart-similarity").scroll_into_view_if_needed()
    expect(page.locator("#chart-outcomes[data-drawn=true] .main-svg").first).to_be_visible()
    expect(page.locator("#chart-similarity[data-drawn=true]")).to_have_count(1)
    assert outside == []


def test_a_phone_fetches_plotly_only_when_it_scrolls_to_the_charts(browser, live_server, hospital):
    from datetime import timedelta

    from django.utils import timezone

    from trails.serving.recall import recall
    from trails.upkeep.jobs import roll_up

    recall(hospital, "When can I visit the ICU and where do I park?")
    roll_up(timezone.now() - timedelta(hours=1), timezone.now() + timedelta(minutes=1))
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    fetched = []
    page.on("request", lambda request: fetched.append(request.url))
    log_in(page, live_server, "/ops/hospital/")
    expect(page.locator("#health")).to_be_visible()
    page.wait_for_load_state("networkidle")
    assert not [url for url in fetched if "plotly" in url]
    page.locator("#chart-outcomes").scroll_into_view_if_needed()
    expect(page.locator("#chart-outcomes[data-drawn=true] .main-svg").first).to_be_visible()
    assert [url for url in fetched if "plotly-basic" in url]
    context.close()


def test_operator_replays_a_look_alike_and_reads_why_it_missed(page, live_server, hospital):
    log_in(page, live_server, "/ops/hospital/replay/")
    page.fill("#id_query", "When can I visit the ICU and where do I park at night?")
    page.click("button.primary:has-text('Replay')")
    expect(page.locator("#replay-outcome")).to_have_text("miss")
    expect(page.locator("#replay-why")).to_contain_text("the look-alike guard refused them: terms differ: night")
    row = page.locator("#replay-candidates tbody tr").first
    expect(row).to_contain_text("When can I visit the ICU and where do I park?")
    expect(row).to_contain_text("refused by the guard")
    # From the candidate to its trail.
    row.locator("a").click()
    expect(page.locator("#trail-query")).to_have_text("When can I visit the ICU and where do I park?")


def test_operator_clicks_an_hours_bar_and_lands_on_that_hours_recalls(page, live_server, hospital):
    from datetime import timedelta

    from django.utils import timezone

    from trails.serving.recall import recall
    from trails.upkeep.jobs import roll_up

    recall(hospital, "When can I visit the ICU and where do I park?")
    recall(hospital, "How do I renew my passport?")
    roll_up(timezone.now() - timedelta(hours=1), timezone.now() + timedelta(minutes=1))
    log_in(page, live_server, "/ops/hospital/")
    page.locator("#chart-outcomes").scroll_into_view_if_needed()
    expect(page.locator("#chart-outcomes[data-drawn=true] .main-svg").first).to_be_visible()
    # The current hour's miss bar (the last bar of the miss trace).
    page.locator("#chart-outcomes .trace.bars").nth(2).locator(".point path").last.click(force=True)
    page.wait_for_url("**/ops/hospital/recalls/?outcome=miss**")
    expect(page.locator("#recall-log tbody tr")).to_have_count(1)
    expect(page.locator("#recall-log tbody tr .badge")).to_have_text("miss")
    # And from the stale card to the stale trails.
    page.goto(f"{live_server.url}/ops/hospital/")
    page.click("#kpi-stale")
    page.wait_for_url("**/ops/hospital/trails/?status=stale&since=**")


def test_operator_finds_every_trail_citing_a_section_and_approves_with_the_citations_in_view(
    page, live_server, hospital
):
    log_in(page, live_server, "/ops/hospital/trails/")
    page.fill("#id_section", "parking")
    page.press("#id_section", "Enter")
    page.wait_for_url("**section=parking**")
    # The filter fires on change and on submit; let both swaps land before acting on a row.
    page.wait_for_load_state("networkidle")
    rows = page.locator("#trail-table tbody tr")
    expect(rows).to_have_count(3)
    pending = page.locator("tr", has_text="Is the car park free for visitors?")
    expect(pending.locator(".cites")).to_have_text("cites parking")
    flagged = page.locator("tr", has_text="ana@example.org")
    expect(flagged.locator(".pii-flag")).to_contain_text("may hold personal data")
    pending.locator("button:has-text('Approve')").click()
    expect(page.locator("tr", has_text="Is the car park free for visitors?").locator("[data-status]")).to_have_text(
        "active"
    )


def test_operator_walks_an_incident_from_a_recall_id_to_a_rejection_and_undoes_it(page, live_server, hospital):
    """Paste a recall id -> see what was served and why -> reject with a reason -> the same
    question now misses -> undo -> it is served again; every step in the trail's history."""
    from trails.serving.recall import recall

    hospital.keep_raw_queries = True
    hospital.save(update_fields=["keep_raw_queries"])
    served = recall(hospital, "When can I visit the ICU and where do I park?")
    assert served.outcome.value == "prefetch"
    log_in(page, live_server, "/ops/hospital/")
    page.fill("#find-box", served.recall_id)
    page.press("#find-box", "Enter")
    page.wait_for_url(f"**/ops/hospital/recalls/{served.recall_id}/")
    expect(page.locator("#served-sections tbody tr")).to_have_count(2)
    expect(page.locator("#served-sections")).to_contain_text("unchanged")
    expect(page.locator("#replay-now")).to_contain_text("prefetch")
    page.fill("#action-reason", "answers the ward, not the ICU")
    page.click("#reject")
    expect(page.locator("#trail-status")).to_have_text("rejected")
    expect(page.locator("#replay-now")).to_contain_text("miss")
    expect(page.locator("#trail-history")).to_contain_text("olga: answers the ward, not the ICU")
    page.click("#undo")
    expect(page.locator("#trail-status")).to_have_text("active")
    expect(page.locator("#replay-now")).to_contain_text("prefetch")
    expect(page.locator("#trail-history")).to_contain_text(
        "An operator's rejection or send-back undone · Operator · olga: undo"
    )
    # Words in the box search the trails.
    page.fill("#find-box", "car park")
    page.press("#find-box", "Enter")
    page.wait_for_url("**/ops/hospital/trails/?q=car+park")


def test_operator_triages_the_pending_queue_with_the_keyboard_and_is_asked_before_approving_a_miss(
    page, live_server, hospital
):
    Section.upsert(
        hospital, {"parking": "Car park B is closed; park in car park C."}
    )  # both pending trails would now miss
    log_in(page, live_server, "/ops/hospital/trails/?status=pending")
    rows = page.locator("#trail-table tbody tr")
    expect(rows).to_have_count(2)
    page.keyboard.press("j")
    expect(rows.nth(0)).to_have_class("focused")
    page.keyboard.press("j")
    expect(rows.nth(1)).to_have_class("focused")
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.keyboard.press("a")
    expect(rows.nth(1).locator("[data-status]")).to_have_text("pending")  # dismissed: nothing changed
    assert asked and "would give a miss" in asked[0]
    page.keyboard.press("k")
    page.keyboard.press("r")
    expect(rows.nth(0).locator("[data-status]")).to_have_text("rejected")
    assert Trail.objects.filter(status="rejected").count() == 1


def test_operator_sees_a_learned_threshold_at_its_ceiling_and_resets_it(page, live_server, hospital):
    Scope.objects.filter(pk=hospital.pk).update(learned_lexical_threshold=0.99, threshold_flags="lexical:ceiling")
    log_in(page, live_server, "/ops/hospital/")
    expect(page.locator("#threshold-in-use-lexical")).to_contain_text("0.99")
    expect(page.locator("#health-flags")).to_be_visible()
    # It cannot be undone, so it asks first: declined, nothing changes.
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.click("button[value=reset]")
    assert asked and "cannot be undone" in asked[0]
    expect(page.locator("#threshold-in-use-lexical")).to_contain_text("0.99")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[value=reset]")
    expect(page.locator("#threshold-in-use-lexical")).not_to_contain_text("0.99")
    expect(page.locator("#threshold-in-use-lexical")).not_to_contain_text("learned")
    hospital.refresh_from_db()
    assert hospital.learned_lexical_threshold is None and hospital.threshold_flags == ""
