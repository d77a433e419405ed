"""Every operator page at 390 px (a phone) and through axe-core: no page wider than the
screen, no serious or critical accessibility violation."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from scopes.models import Section
from tests.browser.test_operator_flows import hospital, log_in  # noqa: F401 (fixture)
from trails.models import PurgeRun, Trail
from trails.serving.recall import recall
from trails.upkeep.jobs import roll_up

pytestmark = pytest.mark.slow

AXE = (Path(__file__).parent / "vendor" / "axe-4.14.1.min.js").read_text(encoding="utf-8")


@pytest.fixture(params=[390, 1280], ids=["phone", "desktop"])
def phone(request, browser):
    """A phone (390 px) and a desktop: axe on both, the width check on both."""
    width = request.param
    context = browser.new_context(
        viewport={"width": width, "height": 844}, is_mobile=width < 600, has_touch=width < 600
    )
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


def problems(page) -> list[str]:
    found = []
    width, screen = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    if width > screen:
        wide = page.evaluate(
            """(screen) => [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > screen + 1)
                 .slice(0, 5).map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + [...e.classList].join('.')
                                  + ' ' + Math.round(e.getBoundingClientRect().right))""",
            screen,
        )
        found.append(f"page is {width} px wide on a {screen} px screen: {wide}")
    page.add_script_tag(content=AXE)
    result = page.evaluate("async () => await axe.run(document)")
    for violation in result["violations"]:
        if violation["impact"] in ("serious", "critical"):
            targets = [node["target"] for node in violation["nodes"][:3]]
            found.append(f"{violation['impact']} {violation['id']}: {violation['help']} at {targets}")
    return found


def test_every_operator_page_fits_a_phone_and_passes_axe(phone, live_server, hospital):  # noqa: F811
    trail = Trail.objects.get(query="When can I visit the ICU and where do I park?")
    served = recall(hospital, "When can I visit the ICU and where do I park?")
    recall(hospital, "How do I renew my passport?")
    roll_up(timezone.now() - timedelta(hours=1), timezone.now() + timedelta(minutes=1))
    Section.upsert(hospital, {"visiting/icu": "ICU visiting is closed this week."})
    PurgeRun.request(hospital, "", False, "olga").save()
    log_in(phone, live_server, "/ops/hospital/")
    pages = {
        "overview": "/ops/hospital/",
        "trails": "/ops/hospital/trails/",
        "pending trails": "/ops/hospital/trails/?status=pending",
        "trail": f"/ops/hospital/trails/{trail.public_id}/",
        "recalls": "/ops/hospital/recalls/",
        "replay": "/ops/hospital/replay/",
        "purge": "/ops/hospital/purge/",
        "evaluation": "/ops/evaluation/reports/",
        "one recall": f"/ops/hospital/recalls/{served.recall_id}/",
        "syncs": "/ops/hospital/syncs/",
        "what-if": "/ops/hospital/tuning/?threshold=0.9",
        "audit": "/ops/hospital/audit/",
    }
    report = {}
    for name, path in pages.items():
        phone.goto(f"{live_server.url}{path}")
        report[name] = problems(phone)
    # Replay with an answer and its explanation.
    phone.goto(f"{live_server.url}/ops/hospital/replay/?trail={trail.public_id}")
    report["replay answer"] = problems(phone)
    assert not any(report.values()), "\n".join(f"{k}: {p}" for k, v in report.items() for p in v)


def test_row_actions_cover_no_cell_and_the_operator_stays_named(phone, live_server, hospital):  # noqa: F811
    log_in(phone, live_server, "/ops/hospital/trails/?status=pending")
    width = phone.viewport_size["width"]
    assert (
        phone.locator("header .user span").is_visible()
        and phone.locator("header .user a", has_text="Admin").is_visible()
    )
    rows = phone.locator("#trail-table tbody tr")
    assert rows.count() >= 1
    for index in range(rows.count()):
        row = rows.nth(index)
        for cell in ("[data-status]", "[data-would]"):
            badge = row.locator(cell)
            if badge.count():
                badge.scroll_into_view_if_needed()  # a point off screen has no element
                box = badge.bounding_box()
                hit = phone.evaluate(
                    "([x, y]) => document.elementFromPoint(x, y).closest('[data-status], [data-would]') !== null",
                    [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2],
                )
                assert hit, f"{cell} of row {index} is covered at {width} px"
        assert (
            row.locator("button", has_text="Approve").count() == 1
        )  # one Approve a row, reached by scrolling the table
    # The overview's thresholds table scrolls in its own box, never the page.
    phone.goto(f"{live_server.url}/ops/hospital/")
    assert phone.locator("#thresholds .table-wrap table").count() == 1
    assert phone.evaluate("document.documentElement.scrollWidth") <= width


def test_every_nav_link_is_on_a_phones_screen_and_takes_the_operator_there(browser, live_server, hospital):  # noqa: F811
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        log_in(page, live_server, "/ops/hospital/")
        links = page.locator("header.top nav a")
        names = links.all_inner_texts()
        assert names == ["Overview", "Trails", "Recalls", "Replay", "Purge PII", "Audit", "Evaluation"]
        for n in range(links.count()):
            box = links.nth(n).bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, (names[n], box)
        page.locator("header.top nav a", has_text="Audit").tap()
        page.wait_for_url("**/ops/hospital/audit/")
        page.locator("header.top nav a", has_text="Evaluation").tap()
        page.wait_for_url("**/ops/evaluation/reports/")
    finally:
        context.close()
