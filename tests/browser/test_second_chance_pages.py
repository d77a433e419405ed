"""An operator reads second chances in a real browser: the overview's hit-rate chart draws them as
a series of their own, the recall log filters to them, and the switch turns them off."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import expect

from scopes.models import Scope, Section
from tests.browser.test_operator_flows import log_in
from tests.conftest import grant
from tests.trails.test_second_chance import ASKED, SECTIONS, STORED
from trails.embedders import get_embedder
from trails.serving.recall import recall
from trails.serving.record import RecordInput, record
from trails.serving.second_chance import second_chance
from trails.upkeep.jobs import roll_up

pytestmark = pytest.mark.slow


@pytest.fixture
def helpdesk(transactional_db) -> dict:
    get_embedder().embed("warm up")
    scope = Scope.objects.create(
        slug="helpdesk", name="Helpdesk", second_chance=True, second_chance_margin=0.1, second_chance_top=3
    )
    Section.upsert(scope, SECTIONS)
    record(scope, RecordInput(query=STORED, cited=["billing/cancel"], signal="accepted"))
    first = recall(scope, STORED)
    given = recall(scope, ASKED)
    refused = recall(scope, ASKED)
    assert (first.outcome.value, given.outcome.value, refused.outcome.value) == ("prefetch", "miss", "miss")
    assert second_chance(scope, given.recall_id, ["billing/cancel", "billing/refunds"]).second_chance["given"]
    assert not second_chance(scope, refused.recall_id, ["billing/invoices"]).second_chance["given"]
    roll_up(timezone.now() - timedelta(hours=1), timezone.now() + timedelta(minutes=1))
    grant(User.objects.create_user("olga", password="correct horse", is_staff=True), scope)
    return {"scope": scope, "given": given.recall_id, "refused": refused.recall_id}


def test_the_overview_draws_second_chance_hits_apart_and_the_log_filters_to_them(page, live_server, helpdesk):
    log_in(page, live_server, "/ops/helpdesk/")
    expect(page.locator("#kpi-second-chance-hits")).to_have_text("1 first chance, 1 by a second chance")
    chart = page.locator("#chart-hit-rate")
    chart.scroll_into_view_if_needed()
    expect(page.locator("#chart-hit-rate[data-drawn=true] .main-svg").first).to_be_visible()
    # Plotly's legend names both series, and the second one has its own drawn line.
    expect(chart.locator(".legend .legendtext")).to_have_text(["first chance", "second chance"])
    expect(chart.locator(".scatterlayer .trace")).to_have_count(2)

    # From the overview to the recall log, then narrowed to the second chances given.
    page.click("#second-chance-recalls")
    expect(page.locator("#recall-log tbody tr")).to_have_count(2)
    page.select_option("#id_second_chance", "given")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**second_chance=given**")
    rows = page.locator("#recall-log tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-recall", helpdesk["given"])
    expect(rows.first.locator(".second-chance")).to_contain_text("given: similarity")
    page.select_option("#id_second_chance", "not_given")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**second_chance=not_given**")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-recall", helpdesk["refused"])
    expect(rows.first.locator(".second-chance")).to_contain_text("not given: ")
    rows.first.locator("a").first.click()
    expect(page.locator("#recall-second-chance")).to_contain_text("not among the search's first 3")


def test_an_operator_turns_the_second_chance_off_from_the_overview(page, live_server, helpdesk):
    log_in(page, live_server, "/ops/helpdesk/")
    expect(page.locator("#second-chance-state")).to_have_text("on")
    page.click("#second-chance-off")
    expect(page.locator("#second-chance-state")).to_have_text("off")
    expect(page.locator("#second-chance-on")).to_be_visible()
    assert Scope.objects.get(slug="helpdesk").second_chance is False
    page.goto(f"{live_server.url}/ops/helpdesk/audit/")
    expect(page.locator("body")).to_contain_text("second_chance: True → False")
