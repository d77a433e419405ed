"""What an operator sees of second chances (the overview's series and savings, the recall log's
filter and reasons) and how the scope's switch is turned, recorded and guarded."""

from __future__ import annotations

import csv
import html
import io
import json
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from scopes.access import Access
from scopes.audit import AuditEvent
from scopes.models import Scope
from tests.bypass import around_the_writer
from tests.conftest import grant
from tests.trails.test_second_chance import ask, helpdesk, missed  # noqa: F401
from trails.core import charts
from trails.core.charts import HourCounts
from trails.models import RecallEvent, RecallStat
from trails.upkeep.jobs import roll_up

HOUR = datetime(2026, 12, 1, 10, tzinfo=dt_timezone.utc)
NOT_GIVEN = "no candidate reached the lower cut 0.8925: the nearest scored 0.8100"
GIVEN = "similarity 0.9100 (lower cut 0.8925) and every cited section among the search's first 3"


def operator(scope: Scope, access: int = Access.CONFIGURE, name: str = "olga") -> Client:
    user = User.objects.create_user(name, password="x", is_staff=True)
    grant(user, scope, access=access)
    client = Client()
    client.force_login(user)
    return client


def events(scope: Scope) -> dict[str, RecallEvent]:
    """A first-chance hit, a second-chance hit, a second chance refused and a plain miss, this hour."""
    now = timezone.now()
    made = {
        "first": RecallEvent(
            scope=scope, outcome="prefetch", matcher="lexical", similarity=1.0, calls_saved=3, tokens_saved=900
        ),
        "second": RecallEvent(
            scope=scope,
            outcome="prefetch",
            matcher="second-chance",
            similarity=0.91,
            calls_saved=1,
            tokens_saved=400,
            second_chance_at=now,
            second_chance_reason=GIVEN,
        ),
        "refused": RecallEvent(
            scope=scope, outcome="miss", matcher="", second_chance_at=now, second_chance_reason=NOT_GIVEN
        ),
        "miss": RecallEvent(scope=scope, outcome="miss", matcher=""),
    }
    with around_the_writer():
        for event in made.values():
            # This hour's, whatever minute the test runs at: the chart's last point is this hour.
            event.latency_ms = 2.0
            event.created_at = max(now - timedelta(minutes=5), now.replace(minute=0, second=0, microsecond=0))
            event.save()
    return made


def figure(page: str, name: str) -> dict:
    return json.loads(page.split(f'id="chart-{name}-data" type="application/json">')[1].split("</script>")[0])


def test_totals_and_series_keep_second_chance_hits_apart_from_the_first_chances():
    rows = [
        HourCounts(HOUR, "prefetch", 4, calls_saved=8, tokens_saved=4000),
        HourCounts(HOUR, "prefetch", 1, calls_saved=2, tokens_saved=300, second_chance=True),
        HourCounts(HOUR, "hint", 1, calls_saved=1, second_chance=True),
        HourCounts(HOUR, "miss", 4),
        HourCounts(HOUR + timedelta(hours=1), "miss", 2),
    ]
    totals = charts.totals(rows)
    assert (totals.recalls, totals.hits, totals.first_chance_hits, totals.second_chance_hits) == (12, 6, 4, 2)
    assert (totals.calls_saved, totals.second_chance_calls_saved) == (11, 3)
    assert (totals.tokens_saved, totals.second_chance_tokens_saved) == (4300, 300)
    data = charts.series(rows, HOUR, HOUR + timedelta(hours=2), timedelta(hours=1))
    assert data.counts["prefetch"] == [5, 0] and data.second_chance == [2, 0]
    assert data.first_chance_rate() == [0.4, 0.0] and data.second_chance_rate() == [0.2, 0.0]
    assert data.hit_rate() == [0.6, 0.0]
    traces = charts.hit_rate_figure(data, second_chance_apart=True)["data"]
    assert [t["name"] for t in traces] == ["first chance", "second chance"]
    assert traces[0]["y"] == [40.0, 0.0] and traces[1]["y"] == [20.0, 0.0]
    assert traces[1]["customdata"] == [[2, 10], [0, 2]]


def test_without_second_chances_apart_the_hit_rate_is_one_series_of_every_hit():
    rows = [HourCounts(HOUR, "prefetch", 1), HourCounts(HOUR, "prefetch", 1, second_chance=True)]
    data = charts.series([*rows, HourCounts(HOUR, "miss", 2)], HOUR, HOUR + timedelta(hours=1), timedelta(hours=1))
    (together,) = charts.hit_rate_figure(data)["data"]
    assert together["name"] == "hit rate" and together["y"] == [50.0]
    apart = charts.hit_rate_figure(data, second_chance_apart=True)["data"]
    assert [t["name"] for t in apart] == ["first chance", "second chance"] and [t["y"] for t in apart] == [[25.0]] * 2


def test_the_overview_shows_second_chances_apart_once_switched_on_even_before_any_hit(db, scope):
    Scope.objects.filter(pk=scope.pk).update(matcher="embedding", second_chance=True)
    with around_the_writer():
        RecallEvent.objects.create(scope=scope, outcome="prefetch", matcher="embedding", latency_ms=1.0)
    roll_up(timezone.now() - timedelta(hours=2), timezone.now() + timedelta(hours=1))
    page = operator(scope).get("/ops/hospital/").content.decode()
    traces = figure(page, "hit-rate")["data"]
    assert [t["name"] for t in traces] == ["first chance", "second chance"] and traces[1]["y"][-1] == 0.0
    assert '<span id="kpi-second-chance-hits">1 first chance' in page and "0 by a second chance</a>" in page
    assert 'id="second-chance-state">on<' in page and "second chances apply to scopes" not in page


def test_the_hourly_roll_up_reads_second_chance_hits_apart(db, scope):
    events(scope)
    roll_up(timezone.now() - timedelta(hours=2), timezone.now() + timedelta(hours=1))
    rows = RecallStat.hourly(scope, timezone.now() - timedelta(hours=3))
    apart = {(r.outcome, r.second_chance): (r.count, r.calls_saved, r.tokens_saved) for r in rows}
    # The refused second chance stays a miss among the misses; only the hit it gave is apart.
    assert apart == {("prefetch", False): (1, 3, 900), ("prefetch", True): (1, 1, 400), ("miss", False): (2, 0, 0)}


def test_the_overview_draws_second_chance_hits_as_their_own_series_and_shows_their_savings(db, scope):
    events(scope)
    roll_up(timezone.now() - timedelta(hours=2), timezone.now() + timedelta(hours=1))
    page = operator(scope).get("/ops/hospital/").content.decode()
    traces = figure(page, "hit-rate")["data"]
    assert [t["name"] for t in traces] == ["first chance", "second chance"]
    assert sum(c[0] for c in traces[0]["customdata"]) == 1 and sum(c[0] for c in traces[1]["customdata"]) == 1
    assert traces[1]["y"][-1] == 25.0  # one second-chance hit of the hour's four recalls
    assert '<span id="kpi-second-chance-hits">1 first chance' in page and "1 by a second chance</a>" in page
    assert '<span id="calls-saved-second-chance">1 of them by second chances</span>' in page
    assert '<span id="tokens-saved-second-chance">400 of them by second chances</span>' in page
    assert 'id="second-chance-state">off<' in page  # hits rolled up from when it was on still show


def test_a_scope_that_never_had_a_second_chance_shows_one_hit_rate_and_no_share(staff_user, api, scope, sections):
    api.record("hospital", query="When are ICU visiting hours?", cited=["visiting/icu"], signal="accepted")
    api.recall("hospital", query="When are ICU visiting hours?")
    roll_up(timezone.now() - timedelta(hours=2), timezone.now() + timedelta(hours=1))
    page = staff_user.get("/ops/hospital/").content.decode()
    assert [t["name"] for t in figure(page, "hit-rate")["data"]] == ["hit rate"]
    assert "kpi-second-chance-hits" not in page and "calls-saved-second-chance" not in page
    assert "second chances apply to scopes matching by embedding" in page


@pytest.fixture
def staff_user(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("root", password="x", is_staff=True, is_superuser=True))
    return client


def rows_of(page: str) -> int:
    return page.count('data-recall="')


def test_the_recall_log_filters_to_second_chances_given_refused_or_asked(db, scope):
    made = events(scope)
    client = operator(scope)
    given = html.unescape(client.get("/ops/hospital/recalls/?second_chance=given").content.decode())
    assert rows_of(given) == 1 and f'data-recall="{made["second"].public_id}"' in given
    assert "given: " in given and GIVEN[:60] in given
    refused = html.unescape(client.get("/ops/hospital/recalls/?second_chance=not_given").content.decode())
    assert rows_of(refused) == 1 and f'data-recall="{made["refused"].public_id}"' in refused
    assert "not given: " in refused and NOT_GIVEN[:60] in refused
    assert rows_of(client.get("/ops/hospital/recalls/?second_chance=asked").content.decode()) == 2
    assert rows_of(client.get("/ops/hospital/recalls/").content.decode()) == 4
    # Beside the outcome filter: second-chance hits that prefetched, and none that hinted.
    assert rows_of(client.get("/ops/hospital/recalls/?second_chance=given&outcome=prefetch").content.decode()) == 1
    assert rows_of(client.get("/ops/hospital/recalls/?second_chance=given&outcome=hint").content.decode()) == 0
    bad = client.get("/ops/hospital/recalls/?second_chance=everything").content.decode()
    assert "second_chance" in bad.split('role="alert"')[1]
    exported = list(
        csv.reader(
            io.StringIO(
                b"".join(client.get("/ops/hospital/recalls/?second_chance=asked&format=csv").streaming_content).decode()
            )
        )
    )
    assert exported[0][-2:] == ["second_chance_at_utc", "second_chance_reason"]
    assert sorted(r[-1] for r in exported[1:]) == sorted([GIVEN, NOT_GIVEN])


def test_a_recalls_page_says_whether_its_second_chance_was_given_and_why(db, scope):
    made = events(scope)
    client = operator(scope)
    refused = html.unescape(client.get(f"/ops/hospital/recalls/{made['refused'].public_id}/").content.decode())
    assert 'id="recall-second-chance"' in refused and f"<strong>not given</strong> ({NOT_GIVEN})" in refused
    given = html.unescape(client.get(f"/ops/hospital/recalls/{made['second'].public_id}/").content.decode())
    assert f"<strong>given</strong> ({GIVEN})" in given
    plain = client.get(f"/ops/hospital/recalls/{made['miss'].public_id}/").content.decode()
    assert 'id="recall-second-chance"' not in plain


def test_the_second_chance_filter_never_shows_another_scopes_recalls(db, scope, other_scope):
    mine, theirs = events(scope), events(other_scope)
    client = operator(scope)
    for choice in ("given", "not_given", "asked"):
        page = client.get(f"/ops/hospital/recalls/?second_chance={choice}").content.decode()
        assert all(str(e.public_id) not in page for e in theirs.values()), choice
        assert rows_of(page) == (2 if choice == "asked" else 1)
        assert client.get(f"/ops/other/recalls/?second_chance={choice}").status_code == 404
        exported = b"".join(
            client.get(f"/ops/hospital/recalls/?second_chance={choice}&format=csv").streaming_content
        ).decode()
        assert all(str(e.public_id) not in exported for e in theirs.values())
    assert client.get(f"/ops/hospital/recalls/{theirs['second'].public_id}/").status_code == 404
    assert client.get(f"/ops/other/recalls/{theirs['second'].public_id}/").status_code == 404
    assert str(mine["second"].public_id) in client.get("/ops/hospital/recalls/?second_chance=given").content.decode()


def test_an_operator_who_may_configure_switches_the_second_chance_and_the_audit_log_says_who(db, scope):
    client = operator(scope)
    page = client.get("/ops/hospital/").content.decode()
    assert 'id="second-chance-on"' in page and 'id="second-chance-state">off<' in page
    answer = client.post("/ops/hospital/second-chance/", {"second_chance": "on"})
    assert answer.status_code == 302 and answer["Location"] == "/ops/hospital/#second-chance"
    assert Scope.objects.get(pk=scope.pk).second_chance is True
    # Asked again: nothing changes and nothing more is recorded.
    client.post("/ops/hospital/second-chance/", {"second_chance": "on"})
    client.post("/ops/hospital/second-chance/", {"second_chance": "off"})
    assert Scope.objects.get(pk=scope.pk).second_chance is False
    recorded = list(AuditEvent.objects.filter(scope_id=scope.pk, kind=AuditEvent.Kind.SETTINGS).order_by("id"))
    assert [(e.who, e.what, e.detail) for e in recorded] == [
        ("olga", "second_chance: False → True", {"second_chance": {"before": False, "after": True}}),
        ("olga", "second_chance: True → False", {"second_chance": {"before": True, "after": False}}),
    ]
    audit_page = client.get("/ops/hospital/audit/").content.decode()
    assert "second_chance: False → True" in audit_page


def test_the_switch_needs_configure_access_to_that_scope_and_a_post(db, scope, other_scope):
    for access in (Access.VIEW, Access.ACT):
        client = operator(scope, access=access, name=f"op{access}")
        assert client.post("/ops/hospital/second-chance/", {"second_chance": "on"}).status_code == 403
        assert 'id="second-chance-on"' not in client.get("/ops/hospital/").content.decode()
    configurer = operator(scope, name="conf")
    assert configurer.post("/ops/other/second-chance/", {"second_chance": "on"}).status_code == 404
    assert configurer.get("/ops/hospital/second-chance/").status_code == 405
    assert configurer.post("/ops/hospital/second-chance/", {"second_chance": "maybe"}).status_code == 400
    assert Client().post("/ops/hospital/second-chance/", {"second_chance": "on"}).status_code == 302  # to log in
    assert not Scope.objects.filter(second_chance=True).exists()
    assert not AuditEvent.objects.filter(kind=AuditEvent.Kind.SETTINGS).exists()


def test_the_scope_admin_groups_the_second_chance_settings_and_records_their_change(db, scope):
    client = operator(scope)
    url = f"/admin/scopes/scope/{scope.pk}/change/"
    response = client.get(url)
    page = response.content.decode()
    fieldset = page.split("Second chance (after a miss)")[1].split("</fieldset>")[0]
    for name in ("second_chance", "second_chance_margin", "second_chance_top"):
        assert f'name="{name}"' in fieldset, name
    form = response.context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form[name].value()
        if isinstance(value, bool):
            if value:
                data[name] = "on"
        elif value is not None:
            data[name] = value
    data.update(second_chance="on", second_chance_margin="0.08")
    saved = client.post(url, data)
    assert saved.status_code == 302, saved.content.decode()[:3000]
    stored = Scope.objects.get(pk=scope.pk)
    assert stored.second_chance is True and stored.second_chance_margin == 0.08
    (event,) = AuditEvent.objects.filter(scope_id=scope.pk, kind=AuditEvent.Kind.SETTINGS)
    assert event.who == "olga" and event.detail == {
        "second_chance": {"before": False, "after": True},
        "second_chance_margin": {"before": 0.05, "after": 0.08},
    }


def test_a_real_second_chance_shows_on_the_overview_and_in_the_log(helpdesk):  # noqa: F811
    scope, api = helpdesk
    recall_id = missed(api)["recall_id"]
    assert ask(api, recall_id, ["billing/cancel", "billing/refunds"]).json()["matcher"] == "second-chance"
    refused_id = missed(api)["recall_id"]
    assert ask(api, refused_id, ["billing/invoices"]).json()["second_chance"]["given"] is False
    roll_up(timezone.now() - timedelta(hours=2), timezone.now() + timedelta(hours=1))
    client = operator(scope)
    page = client.get("/ops/helpdesk/").content.decode()
    traces = figure(page, "hit-rate")["data"]
    assert traces[1]["name"] == "second chance" and sum(c[0] for c in traces[1]["customdata"]) == 1
    assert 'id="second-chance-state">on<' in page and 'id="second-chance-off"' in page
    given = client.get("/ops/helpdesk/recalls/?second_chance=given").content.decode()
    assert rows_of(given) == 1 and f'data-recall="{recall_id}"' in given
    refused = client.get("/ops/helpdesk/recalls/?second_chance=not_given").content.decode()
    assert rows_of(refused) == 1 and f'data-recall="{refused_id}"' in refused
    assert "not among the search's first 3" in RecallEvent.objects.get(public_id=refused_id).second_chance_reason
    assert RecallEvent.objects.get(public_id=refused_id).second_chance_reason[:80] in html.unescape(refused)
