"""After a flood: revoking the key and setting its reports and labels aside puts things back
(the trails its reports held serve again, the verdict stops counting its judgements), recorded
and reversible; the recall log names and filters by key."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from scopes.keys import restore, set_aside
from scopes.models import ApiKey
from tests.conftest import ApiClient, grant
from trails.models import Trail, TrailReport, TrailSignal
from trails.models.recalls import judged_counts

QUESTIONS = {
    "What are the ICU visiting hours?": ["visiting/icu"],
    "Where do visitors park?": ["parking"],
    "When is the general ward open to visitors?": ["visiting/ward"],
}


@pytest.fixture
def flooded(api, scope, sections, committed):
    for question, cited in QUESTIONS.items():
        assert api.record("hospital", query=question, cited=cited).status_code == 201
    flood_key, flood_text = ApiKey.issue([scope], name="scraper")
    honest_key, honest_text = ApiKey.issue([scope], name="support-bot")
    flood, honest = ApiClient(flood_text), ApiClient(honest_text)
    flood_key.client, honest_key.client = flood, honest  # their votes, where a test needs them
    flood_key.not_helpful = lambda question: not_helpful(honest, question)

    def not_helpful(client, question):
        served = client.recall("hospital", query=question).json()
        assert served["outcome"] == "prefetch", served
        with committed():
            answer = client.call("post", f"/scopes/hospital/recalls/{served['recall_id']}/feedback", {"helpful": False})
        assert answer.status_code == 200, answer.content

    for question in QUESTIONS:
        not_helpful(flood, question)  # one report on every trail: each one report from removal
    not_helpful(honest, "What are the ICU visiting hours?")  # the honest report: the ICU trail is held
    return flood_key, honest_key


def test_setting_a_flooding_keys_reports_aside_puts_the_trails_and_the_verdict_back(flooded, scope, api, committed):
    flood_key, honest_key = flooded
    icu = Trail.objects.get(scope=scope, query="What are the ICU visiting hours?")
    assert icu.status == "pending" and icu.held_by == "reports" and icu.false_hit_reporters == 2
    # The hold counts both keys behind it, not only the honest one whose report tipped it.
    assert set(TrailReport.objects.filter(trail=icu).values_list("reporter", flat=True)) == {
        f"key:{flood_key.lookup}",
        f"key:{honest_key.lookup}",
    }
    assert judged_counts([scope.pk], timezone.now())[scope.pk] == (4, 4)

    with committed():
        set_aside(flood_key, by="olga")
    icu.refresh_from_db()
    # Back in service: the honest report alone is under the scope's two reporters.
    assert icu.status == "active" and icu.held_by == "" and icu.false_hit_reporters == 1
    released = TrailSignal.objects.filter(trail=icu).latest("created_at")
    assert released.signal == "released" and released.by == "olga"
    assert api.recall("hospital", query="What are the ICU visiting hours?").json()["outcome"] == "prefetch"
    parking = Trail.objects.get(scope=scope, query="Where do visitors park?")
    assert parking.false_hit_reporters == 0  # no longer one report from removal
    assert judged_counts([scope.pk], timezone.now())[scope.pk] == (1, 1)  # the verdict counts the honest key only
    flood_key.refresh_from_db()
    assert flood_key.revoked_at and flood_key.set_aside_by == "olga"

    # Reversible: restored, the reports count again (the key stays revoked).
    with committed():
        restore(flood_key, by="olga")
    parking.refresh_from_db()
    assert parking.false_hit_reporters == 1 and judged_counts([scope.pk], timezone.now())[scope.pk] == (4, 4)
    assert ApiKey.objects.get(pk=flood_key.pk).revoked_at is not None


def test_the_recall_log_names_each_key_and_filters_by_it(flooded, scope, django_user_model):
    flood_key, honest_key = flooded
    operator = django_user_model.objects.create_user("ann", password="x", is_staff=True)
    grant(operator, scope, access=1)
    browser = Client()
    browser.force_login(operator)
    page = browser.get("/ops/hospital/recalls/").content.decode()
    assert page.count("<td>scraper</td>") == len(QUESTIONS) and page.count("<td>support-bot</td>") == 1
    only = browser.get(f"/ops/hospital/recalls/?key={honest_key.lookup}").content.decode()
    assert only.count("<td>support-bot</td>") == 1 and "<td>scraper</td>" not in only
    trail = Trail.objects.get(scope=scope, query="What are the ICU visiting hours?")
    detail = browser.get(f"/ops/hospital/trails/{trail.public_id}/").content.decode()
    assert f"scraper (key:{flood_key.lookup})" in detail and f"support-bot (key:{honest_key.lookup})" in detail
    csv = b"".join(browser.get(f"/ops/hospital/recalls/?key={flood_key.lookup}&format=csv").streaming_content).decode()
    assert csv.count("\n") == 1 + len(QUESTIONS) and "scraper" in csv


def test_setting_aside_a_key_that_rejected_what_its_reports_held_brings_the_trail_back_and_lists_it(
    flooded, scope, api, committed, django_user_model
):
    """The flood's own down vote rejected the trail its report had held (one key and one other
    report are enough): setting the key aside takes the vote back, then its report, and the
    trail serves again; a trail an operator changed since is left as the operator left it."""
    flood_key, honest_key = flooded
    icu = Trail.objects.get(scope=scope, query="What are the ICU visiting hours?")
    ward = Trail.objects.get(scope=scope, query="When is the general ward open to visitors?")
    flood_key.not_helpful(ward.query)  # the honest key's report: held by two, the flood's among them
    for trail in (icu, ward):
        with committed():
            answer = flood_key.client.call(
                "post", f"/scopes/hospital/trails/{trail.public_id}/feedback", {"vote": "down"}
            )
        assert answer.status_code == 200, answer.content
    icu.refresh_from_db()
    assert icu.status == "rejected"
    # The ward's rejection is then reversed by an operator: that change stays as the operator left it.
    from trails.core.lifecycle import Actor
    from trails.models import writes

    writes.act(ward, "reinstate", Actor.OPERATOR, by="olga")

    with committed():
        set_aside(flood_key, by="olga")
    icu.refresh_from_db()
    assert (icu.status, icu.held_by, icu.false_hit_reporters) == ("active", "", 1)
    assert list(TrailSignal.objects.filter(trail=icu).order_by("-id").values_list("signal", flat=True)[:2]) == [
        "released",
        "set-aside",
    ]
    assert api.recall("hospital", query="What are the ICU visiting hours?").json()["outcome"] == "prefetch"
    ward.refresh_from_db()
    assert (ward.status, ward.held_by) == ("pending", "operator")

    # The audit page lists the trails the key moved, each as it is now.
    operator = django_user_model.objects.create_user("ann", password="x", is_staff=True)
    grant(operator, scope)
    staff = Client()
    staff.force_login(operator)
    page = staff.get("/ops/hospital/audit/").content.decode()
    moved = page.split('id="moved-', 1)[1].split("</ul>", 1)[0]
    assert "What are the ICU visiting hours?" in moved and "active" in moved
    assert "When is the general ward open to visitors?" in moved and "pending (held by operator)" in moved
    assert "Where do visitors park?" in moved  # reported only: counted again, still active


def test_a_suspended_key_is_set_aside_from_the_page_and_restore_keeps_the_trails_it_moved_listed(
    flooded, scope, committed, django_user_model
):
    from scopes.access import Access
    from scopes.audit import AuditEvent

    flood_key, _ = flooded
    acting, looking = Client(), Client()
    for client, name, access in ((acting, "ann", Access.ACT), (looking, "vic", Access.VIEW)):
        user = django_user_model.objects.create_user(name, password="x", is_staff=True)
        grant(user, scope, access=access)
        client.force_login(user)
    lookup, base = flood_key.lookup, f"/ops/hospital/keys/{flood_key.pk}"
    # Suspended without "set aside": the keys table then offers setting its reports aside.
    assert acting.post(f"{base}/suspend/", {"confirm": "yes"}).status_code == 302
    page = acting.get("/ops/hospital/audit/").content.decode()
    assert f'id="set-aside-{lookup}"' in page and f"{base}/set-aside/" in page
    # It asks first (no JavaScript needed) and changes nothing; view access may not.
    asked = acting.get(f"{base}/set-aside/").content.decode()
    assert "Set aside the reports of key scraper?" in asked and 'name="confirm" value="yes"' in asked
    assert acting.post(f"{base}/set-aside/").status_code == 200
    assert looking.post(f"{base}/set-aside/", {"confirm": "yes"}).status_code == 403
    flood_key.refresh_from_db()
    assert flood_key.set_aside_at is None
    with committed():
        assert acting.post(f"{base}/set-aside/", {"confirm": "yes"}).status_code == 302
    flood_key.refresh_from_db()
    assert flood_key.set_aside_at is not None and flood_key.revoked_at is not None
    assert AuditEvent.objects.filter(scope_id=scope.pk, kind="key set aside", who="ann").exists()
    icu = Trail.objects.get(scope=scope, query="What are the ICU visiting hours?")
    assert (icu.status, icu.held_by) == ("active", "")
    # The audit row reads as written: the key's name once, without its standing now.
    written = "scraper (key:{}): revoked, its reports and labels set aside".format(lookup)
    page = acting.get("/ops/hospital/audit/").content.decode()
    assert written in page and "scraper — revoked (key:" not in page and f'id="moved-{lookup}"' in page

    # Restore says what it does, and the trails the set-aside moved stay listed until seen.
    with committed():
        restored = acting.post(f"{base}/restore/", follow=True).content.decode()
    assert "stay as decided unless an operator acts" in restored and "undoes both" not in restored
    assert written in restored and "scraper — revoked (key:" not in restored
    moved = restored.split(f'id="moved-{lookup}"', 1)[1].split("</ul>", 1)[0]
    assert "What are the ICU visiting hours?" in moved and "Where do visitors park?" in moved
    assert "Its reports and votes count again" in restored and f'id="moved-seen-{lookup}"' in restored
    assert looking.post(f"{base}/seen/").status_code == 403
    assert acting.post(f"{base}/seen/").status_code == 302
    assert f'id="moved-{lookup}"' not in acting.get("/ops/hospital/audit/").content.decode()
