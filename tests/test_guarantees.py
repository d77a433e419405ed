"""The four promises on the side paths: admin, recreated scopes, tool results, purge, votes, demo.

Each test here reproduces a hole found in review (issue 11) and failed before its fix.
"""

from __future__ import annotations

import re
import threading
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection, connections
from django.test import Client, override_settings

from infra.hashing import section_hash
from scopes.models import ApiKey, Scope, Section
from tests.conftest import ApiClient, grant
from trails.core.lifecycle import Actor
from trails.models import PurgeRun, RecallEvent, Step, Trail, TrailSignal, writes
from trails.upkeep import purge

TOOL_POLICY = {"policies": [{"tool": "search", "cacheable": True, "ttl_s": 600}]}


@pytest.fixture
def admin_client(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="x"))
    return client


@pytest.fixture(autouse=True)
def empty_cache():
    cache.clear()
    yield
    cache.clear()


# 1. A section edited in Django admin is hashed, its old text kept, and citing trails flagged.
def test_section_edited_in_admin_is_rehashed_and_never_served_under_its_old_hash(
    api, scope, sections, admin_client, committed
):
    trail_id = api.record("hospital", query="When are ICU visiting hours?", cited=["visiting/icu"]).json()["trail_id"]
    section = Section.objects.get(scope=scope, section_id="visiting/icu")
    edited = "Intensive care visiting is closed this week."
    with committed():
        response = admin_client.post(
            f"/admin/scopes/section/{section.pk}/change/",
            {"scope": scope.pk, "section_id": "visiting/icu", "text": edited},
        )
    assert response.status_code == 302, response.content[:500]
    section.refresh_from_db()
    assert (section.text, section.hash) == (edited, section_hash(edited))
    answer = api.recall("hospital", query="When are ICU visiting hours?").json()
    assert answer["outcome"] == "miss" and edited not in str(answer)
    assert Trail.objects.get(public_id=trail_id).section_changed_at is not None


def test_section_saved_from_a_shell_is_rehashed_and_flags_citing_trails(api, scope, sections, committed):
    api.record("hospital", query="When are ICU visiting hours?", cited=["visiting/icu"])
    section = Section.objects.get(scope=scope, section_id="visiting/icu")
    section.text = "Closed."
    with committed():
        section.save()
    assert Section.objects.get(pk=section.pk).hash == section_hash("Closed.")
    assert Trail.objects.get().section_changed_at is not None
    with pytest.raises(ValueError, match="upsert"):
        Section.objects.filter(scope=scope).update(text="sneaky")


def test_recall_never_serves_text_whose_hash_differs_from_the_citation_even_if_the_row_lies(api, scope, sections):
    api.record("hospital", query="When are ICU visiting hours?", cited=["visiting/icu"])
    # A row written behind every model method (raw SQL), text changed and hash not.
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Section._meta.db_table} SET text = %s WHERE section_id = %s", ["Forged text.", "visiting/icu"]
        )
    answer = api.recall("hospital", query="When are ICU visiting hours?").json()
    assert answer["outcome"] == "miss" and "Forged" not in str(answer)


# 2. A scope deleted and created again with the same slug reads nothing of the first one's cache.
def test_recreated_scope_never_reads_the_deleted_scopes_tool_results(db):
    first = Scope.objects.create(slug="acme", matcher="lexical")
    api_first = ApiClient(ApiKey.issue([first])[1])
    assert api_first.call("put", "/scopes/acme/tool-policies", TOOL_POLICY).status_code == 200
    call = {"tool": "search", "args": {"q": "salaries"}, "context": {}}
    assert api_first.call("put", "/scopes/acme/tool-results", {**call, "result": "first tenant's secret"}).json()[
        "stored"
    ]
    first.delete()
    second = Scope.objects.create(slug="acme", matcher="lexical")
    api_second = ApiClient(ApiKey.issue([second])[1])
    assert api_second.call("put", "/scopes/acme/tool-policies", TOOL_POLICY).status_code == 200
    found = api_second.call("post", "/scopes/acme/tool-results/lookup", call).json()
    assert found["hit"] is False and "secret" not in str(found)
    assert api_second.call("get", "/scopes/acme/tool-results/stats").json()["search"]["hit"] == 0


# 3. A tool result is stored only under the section versions the caller read.
def test_tool_result_computed_from_an_older_section_version_is_refused(api, scope, sections):
    assert api.call("put", "/scopes/hospital/tool-policies", TOOL_POLICY).status_code == 200
    old_hash = section_hash(sections["parking"])
    api.put_sections("hospital", {"parking": "Visitors park in car park C now."})
    call = {
        "tool": "search",
        "args": {"q": "parking"},
        "context": {},
        "result": sections["parking"],
        "section_ids": ["parking"],
    }
    stale = api.call("put", "/scopes/hospital/tool-results", {**call, "hashes": {"parking": old_hash}})
    assert stale.status_code == 409 and stale.json()["error"]["field"] == "hashes"
    unstated = api.call("put", "/scopes/hospital/tool-results", call)
    assert unstated.status_code == 422 and unstated.json()["error"]["field"] == "hashes"
    lookup = api.call("post", "/scopes/hospital/tool-results/lookup", {k: call[k] for k in ("tool", "args", "context")})
    assert lookup.json()["hit"] is False


# 4. A purge reaches every field a caller can write into a trail or an event.
DIRTY = "jane.roe@example.org"


def _all_text(scope: Scope) -> str:
    """Every text and JSON value of the scope's trail rows, events and purge runs."""
    rows = [
        *Trail.objects.filter(scope=scope).values_list(
            "query", "normalised_query", "partition", "reason", "idempotency_key"
        ),
        *Step.objects.filter(trail__scope=scope).values_list("tool", "args", "section_ids"),
        *RecallEvent.objects.filter(scope=scope).values_list("query"),
        *PurgeRun.objects.filter(scope=scope).values_list("rule", "subject"),
    ]
    return repr(rows)


def test_purge_removes_personal_data_from_partition_step_args_and_keys(api, scope, sections):
    scope.keep_raw_queries = True
    scope.save()
    body = dict(
        query="Where do visitors park?",
        partition=f"customer {DIRTY}",
        cited=["parking"],
        steps=[
            {
                "tool": "search",
                "args": {"q": f"parking for {DIRTY}", DIRTY: {"nested": [f"cc {DIRTY}"]}},
                "section_ids": ["parking"],
            }
        ],
        idempotency_key=f"record-{DIRTY}",
    )
    trail_id = api.record("hospital", **body).json()["trail_id"]
    api.recall("hospital", query=f"Where do visitors park? {DIRTY}", partition=body["partition"])
    run = PurgeRun.request(scope, "", delete=False, requested_by="op")
    run.save()
    assert purge.preview(run)[0] == 1
    purge.run_purge(run.id)
    assert DIRTY not in _all_text(scope)
    assert DIRTY not in api.call("get", f"/scopes/hospital/trails/{trail_id}").content.decode()


def test_replay_keeps_the_question_out_of_the_url(api, scope, sections):
    staff = Client()
    staff.force_login(olga := User.objects.create_user("olga", password="x", is_staff=True))
    grant(olga, scope)
    page = staff.get("/ops/hospital/replay/").content.decode()
    assert re.search(r'<form method="post"[^>]*replay', page)
    answered = staff.post("/ops/hospital/replay/", {"query": f"Where do visitors park? {DIRTY}"})
    assert answered.status_code == 200 and "replay-result" in answered.content.decode()


# 5. The purge page runs exactly what was previewed.
def test_purge_confirm_runs_the_previewed_subject_not_what_the_field_now_says(api, scope, sections):
    api.record("hospital", query="Can Ann Archer visit the ICU?", cited=["visiting/icu"])
    api.record("hospital", query="Can Bob Baker visit the ICU?", cited=["visiting/icu"])
    staff = Client()
    staff.force_login(olga := User.objects.create_user("olga", password="x", is_staff=True))
    grant(olga, scope)
    preview = staff.post("/ops/hospital/purge/", {"subject": "Ann Archer", "action": "redact", "step": "preview"})
    run_id = re.search(r'name="run" value="([0-9a-f-]+)"', preview.content.decode()).group(1)
    staff.post("/ops/hospital/purge/", {"subject": "Bob Baker", "action": "delete", "step": "run", "run": run_id})
    assert sorted(Trail.objects.values_list("query", flat=True)) == [
        "Can Bob Baker visit the ICU?",
        "Can [redacted] visit the ICU?",
    ]
    run = PurgeRun.objects.get(public_id=run_id)
    assert (run.state, run.action, run.matched, run.subject) == ("done", "redact", 1, "")


# 6. A purge that cannot be queued fails visibly and keeps no subject.
@override_settings(RAGTRAIL_PURGE_INLINE_LIMIT=0)
def test_purge_with_the_broker_down_is_marked_failed_and_forgets_the_subject(api, scope, sections):
    from ragtrail_site.celery import app as celery_app
    from tests.trails.test_worker import use_conf

    api.record("hospital", query="Can Ann Archer visit the ICU?", cited=["visiting/icu"])
    staff = Client()
    staff.force_login(olga := User.objects.create_user("olga", password="x", is_staff=True))
    grant(olga, scope)
    saved = {
        k: celery_app.conf[k]
        for k in ("broker_url", "task_always_eager", "task_publish_retry", "broker_connection_timeout")
    }
    use_conf(
        broker_url="redis://127.0.0.1:1/0",
        task_always_eager=False,
        task_publish_retry=False,
        broker_connection_timeout=1,
    )
    try:
        preview = staff.post("/ops/hospital/purge/", {"subject": "Ann Archer", "action": "redact", "step": "preview"})
        run_id = re.search(r'name="run" value="([0-9a-f-]+)"', preview.content.decode()).group(1)
        response = staff.post("/ops/hospital/purge/", {"step": "run", "run": run_id}, follow=True)
    finally:
        use_conf(saved)
    assert response.status_code == 200 and "could not be queued" in response.content.decode()
    run = PurgeRun.objects.get(public_id=run_id)
    assert (run.state, run.subject) == ("failed", "")
    assert Trail.objects.get().query == "Can Ann Archer visit the ICU?"


# 7. Votes race: a rejection is final unless an operator reinstates the trail.
@pytest.mark.django_db(transaction=True)
def test_racing_votes_never_revive_a_rejected_trail():
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers need PostgreSQL (as in CI)")
    scope = Scope.objects.create(slug="race", matcher="lexical")
    Section.upsert(scope, {"s": "text"})
    api = ApiClient(ApiKey.issue([scope])[1])
    for _ in range(15):
        trail_id = api.record("race", query="Is the race fixed?", cited=["s"], signal=None).json()["trail_id"]
        barrier = threading.Barrier(20)

        def vote(direction: str) -> None:
            try:
                client = ApiClient(api.headers["Authorization"].split()[1])
                barrier.wait()
                client.call("post", f"/scopes/race/trails/{trail_id}/feedback", {"vote": direction})
            finally:
                connections.close_all()

        threads = [threading.Thread(target=vote, args=(d,)) for d in ["up", "down"] * 10]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        trail = Trail.objects.get(public_id=trail_id)
        history = list(TrailSignal.objects.filter(trail=trail).order_by("id").values_list("signal", flat=True))
        if history[0] == "down":
            # Rejected first: final for votes, no up applies after it.
            assert trail.status == "rejected" and "up" not in history, history
        else:
            # Approved first: this one key's down votes are its reports (counted once), not a rejection.
            assert trail.status == "active" and "down" not in history, history
            # (an up applied after some of them restarts the count: one reporter at most remains)
            assert trail.false_hit_reporters <= 1


def test_an_operator_reinstates_a_rejected_trail_explicitly_and_it_is_in_the_history(api, scope, sections):
    trail_id = api.record("hospital", query="Where do visitors park?", cited=["parking"], signal=None).json()[
        "trail_id"
    ]
    assert (
        api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "down"}).json()["status"]
        == "rejected"
    )
    assert api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "up"}).status_code == 409
    trail = Trail.objects.get(public_id=trail_id)
    writes.act(trail, "reinstate", Actor.OPERATOR, by="olga")
    trail.refresh_from_db()
    assert trail.status == "pending"
    assert list(trail.signals.values_list("signal", flat=True)) == ["down", "reinstate"]


def test_admin_cannot_set_a_trail_status_past_the_vote_rules(api, scope, sections, admin_client):
    trail_id = api.record("hospital", query="Where do visitors park?", cited=["parking"], signal=None).json()[
        "trail_id"
    ]
    trail = Trail.objects.get(public_id=trail_id)
    page = admin_client.get(f"/admin/trails/trail/{trail.pk}/change/").content.decode()
    assert 'name="status"' not in page


# 8. The demo loader touches only what it made.
def test_load_demo_leaves_an_existing_admin_and_other_scopes_demo_keys_alone(db, tmp_path, settings):
    settings.RAGTRAIL_DEMO_CREDENTIALS = tmp_path / "demo.json"
    User.objects.create_user("admin", password="owner's own password", is_staff=False)
    other = Scope.objects.create(slug="customer", matcher="lexical")
    kept, _ = ApiKey.issue([other], name="demo")
    out = StringIO()
    call_command("load_demo", "--no-trails", stdout=out)
    admin = User.objects.get(username="admin")
    assert admin.check_password("owner's own password") and not admin.is_superuser and not admin.is_staff
    assert ApiKey.objects.filter(pk=kept.pk, revoked_at__isnull=True).exists()
    first = out.getvalue()
    again = StringIO()
    call_command("load_demo", "--no-trails", stdout=again)
    # The same credentials on a second run: a running demo keeps working.
    assert re.search(r"rt_\S+", first).group(0) == re.search(r"rt_\S+", again.getvalue()).group(0)
