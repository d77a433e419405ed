"""The trail lifecycle's declared table holds on every path: who may do what, from which
state, to which, and what it does to reports; each defect found from outside is a test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scopes.models import ApiKey, Scope, Section
from tests.bypass import around_the_writer
from tests.trails.test_recall import record_icu
from tests.trails.test_recall_feedback import QUESTION, feedback, recall_id, second_key
from trails.core import lifecycle as table
from trails.core.lifecycle import Actor, Reports, State
from trails.learning.shipped import thresholds_for
from trails.models import ActionRefused, RecallEvent, Trail, TrailReport, TrailSignal, TrailStatus, writes

REFUSING = "The documents I found don't cover this."
ROOT = Path(__file__).resolve().parents[2]


# -- the table walked: every (action, actor, state) triple ------------------------------------


def _trail_in(state: State, api, scope) -> Trail:
    """A recorded trail of the ICU question brought to `state` through the real paths."""
    if state is State.PENDING:
        return Trail.objects.get(
            public_id=api.record("hospital", query=QUESTION, cited=["visiting/icu"], signal=None).json()["trail_id"]
        )
    if state is State.REJECTED:
        body = api.record("hospital", query=QUESTION, cited=["visiting/icu"], answer=REFUSING).json()
        return Trail.objects.get(public_id=body["trail_id"])
    trail = Trail.objects.get(public_id=record_icu(api))
    if state is State.HELD:
        for key in (api, second_key(scope, "held-a")):
            feedback(key, recall_id(key), helpful=False)
    elif state is State.STALE:
        Section.upsert(scope, {"visiting/icu": "The ICU is closed to visitors.", "parking": "No parking."})
        assert api.recall("hospital", query=QUESTION).json()["outcome"] == "miss"
    trail.refresh_from_db()
    assert trail.lifecycle_state() is state
    return trail


def _snapshot(trail: Trail) -> tuple:
    row = (
        Trail.objects.filter(pk=trail.pk)
        .values_list("status", "held_by", "false_hit_reports", "false_hit_reporters", "expires_at")
        .first()
    )
    return (
        row,
        TrailSignal.objects.filter(trail_id=trail.pk).count(),
        TrailReport.objects.filter(trail_id=trail.pk).count(),
    )


TRIPLES = [
    (action, actor, state)
    for action in (*table.NAMED_ACTIONS, table.REPORT)
    for actor in (Actor.AGENT, Actor.OPERATOR)
    for state in (State.PENDING, State.HELD, State.ACTIVE, State.STALE, State.REJECTED)
]


@pytest.mark.parametrize("action,actor,state", TRIPLES, ids=[f"{a}-{b.value}-{c.value}" for a, b, c in TRIPLES])
def test_every_action_by_every_actor_from_every_state_does_what_the_table_says(
    api, scope, sections, action, actor, state
):
    trail = _trail_in(state, api, scope)
    before = _snapshot(trail)
    by = "key:walker" if actor is Actor.AGENT else "olga"
    allowed = [r for r in table.rules_for(action, actor) if r.applies_to(state)]
    if action == table.UNDO and trail.undoable() is None:
        allowed = []  # undo also needs its history: the latest change an operator's rejection or send-back

    def run() -> None:
        if action == table.REPORT:
            writes.report(trail, by, "walked", actor=actor)
        else:
            writes.act(trail, action, actor, by=by)

    if not allowed:
        with pytest.raises(ActionRefused):
            run()
        assert _snapshot(trail) == before, "a refused action changed the trail"
        return
    rule = allowed[0]
    run()
    if rule.taken_as:
        rule = table.rules_for(rule.taken_as, actor)[0]
    if rule.to_state is State.DELETED:
        assert not Trail.objects.filter(pk=trail.pk).exists()
        return
    after = Trail.objects.get(pk=trail.pk)
    # One report from a new key never reaches the two reporters that hold a trail (a held one was held by two).
    expected = state if rule.to_state is None else rule.to_state
    assert after.lifecycle_state() is expected
    reports_before = before[0][2]
    if rule.reports is Reports.ANSWER:
        assert (after.false_hit_reports, after.false_hit_reporters) == (0, 0) and not TrailReport.objects.filter(
            trail=after
        ).exists()
    elif rule.reports is Reports.COUNT:
        assert after.false_hit_reports == reports_before + 1
    else:
        assert after.false_hit_reports == reports_before, "reports were erased by an action that keeps them"


def test_only_the_lifecycle_module_writes_a_trails_status():
    """No status assignment outside trails/models/lifecycle.py and writes.py: every change goes through the table."""
    pattern = re.compile(
        r"""(\.status\s*=[^=]|\bstatus\s*=\s*(TrailStatus|["'](active|pending|stale|rejected)["'])|SET\s+status)"""
    )
    offenders = []
    for folder in ("trails", "scopes", "evaluation"):
        for path in (ROOT / folder).rglob("*.py"):
            if (
                path.name in ("lifecycle.py", "writes.py")
                and path.parent.name == "models"
                or "migrations" in path.parts
            ):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                reads = any(word in line for word in (".filter(", "exclude(", "WHERE", "where_"))
                if pattern.search(line) and not reads:
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


# -- the reproductions ---------------------------------------------------------------------------


def test_a_reporters_up_vote_does_not_revive_what_two_keys_reports_took_out_of_service(api, scope, sections):
    trail_id = record_icu(api)
    other = second_key(scope)
    feedback(api, recall_id(api), helpful=False)
    assert feedback(other, recall_id(other), helpful=False).json()["trail_status"] == "pending"
    revived = api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "up"})
    assert revived.status_code == 409 and "only an operator's approval" in revived.json()["error"]["message"]
    third = second_key(scope, "third agent")
    assert third.recall("hospital", query=QUESTION).json()["outcome"] == "miss"
    trail = Trail.objects.get(public_id=trail_id)
    assert (trail.false_hit_reporters, TrailReport.objects.filter(trail=trail).count()) == (2, 2)


def test_a_third_keys_up_votes_between_reports_shield_nothing(api, scope, sections):
    trail_id = record_icu(api)
    shield = second_key(scope, "shield")
    reporters = [api, second_key(scope, "b"), second_key(scope, "d")]
    for n, key in enumerate(reporters[:2], 1):
        feedback(key, recall_id(key), helpful=False)
        voted = shield.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "up"})
        if n == 1:
            # Still active: the up vote renews it but answers no report.
            assert voted.status_code == 200 and voted.json()["status"] == "active"
            assert Trail.objects.get(public_id=trail_id).false_hit_reporters == 1
        else:
            assert voted.status_code == 409
    assert Trail.objects.get(public_id=trail_id).status == TrailStatus.PENDING
    assert api.recall("hospital", query=QUESTION).json()["outcome"] == "miss"


def test_an_agents_up_vote_still_approves_a_trail_recorded_pending(api, sections):
    trail_id = api.record("hospital", query=QUESTION, cited=["visiting/icu"], signal=None).json()["trail_id"]
    assert api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "up"}).json()["status"] == "active"
    assert api.recall("hospital", query=QUESTION).json()["outcome"] == "prefetch"


def test_only_an_operators_approval_answers_the_reports(api, scope, sections):
    trail_id = record_icu(api)
    for key in (api, second_key(scope)):
        feedback(key, recall_id(key), helpful=False)
    trail = Trail.objects.get(public_id=trail_id)
    writes.act(trail, "up", Actor.OPERATOR, by="olga")
    assert (trail.status, trail.held_by, trail.false_hit_reporters) == ("active", "", 0)
    assert not TrailReport.objects.filter(trail=trail).exists()
    assert api.recall("hospital", query=QUESTION).json()["outcome"] == "prefetch"


def test_an_operators_send_back_and_reinstate_hold_the_trail_from_agents_up_votes(api, sections):
    trail_id = record_icu(api)
    trail = Trail.objects.get(public_id=trail_id)
    writes.act(trail, "demote", Actor.OPERATOR, by="olga")
    assert api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "up"}).status_code == 409
    writes.act(trail, "down", Actor.OPERATOR, by="olga")
    writes.act(trail, "reinstate", Actor.OPERATOR, by="olga")
    assert (trail.status, trail.held_by) == ("pending", "operator")
    assert api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "up"}).status_code == 409


def test_recall_marking_a_trail_stale_writes_its_history(api, scope, sections):
    trail_id = record_icu(api)
    Section.upsert(scope, {"visiting/icu": "The ICU is closed to visitors.", "parking": "No parking."})
    assert api.recall("hospital", query=QUESTION).json()["outcome"] == "miss"
    trail = Trail.objects.get(public_id=trail_id)
    assert trail.status == TrailStatus.STALE and trail.stale_at is not None
    mark = trail.signals.last()
    assert (mark.signal, mark.source, mark.by) == ("stale", "system", "recall")
    # Stale is final: no vote brings it back.
    assert api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "up"}).status_code == 409


# -- calibrated on every path ---------------------------------------------------------------------


def test_the_models_threshold_defaults_are_the_calibrations_for_the_default_bound_and_matcher():
    fields = {f.name: f.default for f in Scope._meta.fields}
    expected = thresholds_for(fields["max_false_hit_rate"], fields["matcher"])
    assert {name: fields[name] for name in expected} == expected


@pytest.mark.parametrize(
    "settings_given",
    [{"matcher": "both"}, {"max_false_hit_rate": 0.05}, {"matcher": "both", "max_false_hit_rate": 0.005}],
)
def test_a_scope_created_with_a_matcher_or_bound_gets_the_thresholds_an_edit_would_set(db, settings_given):
    created = Scope.objects.create(slug="made", **settings_given)
    edited = Scope.objects.create(slug="edited")
    for name, value in settings_given.items():
        setattr(edited, name, value)
    edited.save()
    expected = thresholds_for(created.max_false_hit_rate, created.matcher)
    assert {
        "lexical_threshold": created.lexical_threshold,
        "embedding_threshold": created.embedding_threshold,
    } == expected
    assert (edited.lexical_threshold, edited.embedding_threshold) == (
        created.lexical_threshold,
        created.embedding_threshold,
    )


def test_thresholds_given_at_creation_stand(db):
    scope = Scope.objects.create(slug="tuned", matcher="both", embedding_threshold=0.97)
    assert scope.embedding_threshold == 0.97


def test_a_scope_added_in_django_admin_with_both_matchers_is_calibrated(db):
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="x"))
    page = admin.get("/admin/scopes/scope/add/")
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    data.update({"slug": "both-scope", "name": "Both", "matcher": "both"})
    data = {k: ("on" if v is True else v) for k, v in data.items() if v is not False}
    response = admin.post("/admin/scopes/scope/add/", data)
    assert response.status_code == 302, response.content.decode()[:2000]
    scope = Scope.objects.get(slug="both-scope")
    assert (scope.lexical_threshold, scope.embedding_threshold) == tuple(thresholds_for(0.02, "both").values())


# -- one check of what recall gives now; replays ask what was asked ------------------------------


def test_the_recall_page_replays_a_recall_in_its_partition(api, scope, sections):
    scope.keep_raw_queries = True
    scope.save()
    api.record("hospital", query=QUESTION, cited=["visiting/icu"], partition="product-a")
    answer = api.recall("hospital", query=QUESTION, partition="product-a").json()
    assert answer["outcome"] == "prefetch"
    assert RecallEvent.objects.get(public_id=answer["recall_id"]).partition == "product-a"
    staff = Client()
    staff.force_login(User.objects.create_superuser("olga", password="x"))
    page = staff.get(f"/ops/hospital/recalls/{answer['recall_id']}/")
    assert page.context["replayed"].outcome.value == "prefetch"


def test_a_section_whose_text_no_longer_matches_its_hash_reads_changed_on_every_page(api, scope, sections):
    trail_id = record_icu(api)
    answer = api.recall("hospital", query=QUESTION).json()
    # A row written around the store (raw SQL): the stored hash still says unchanged.
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Section._meta.db_table} SET text = %s WHERE section_id = %s", ["tampered", "visiting/icu"]
        )
    staff = Client()
    staff.force_login(User.objects.create_superuser("olga", password="x"))
    served = staff.get(f"/ops/hospital/recalls/{answer['recall_id']}/").context["served"]
    assert [row["same"] for row in served] == [False, True]
    trail_page = staff.get(f"/ops/hospital/trails/{trail_id}/").context
    assert trail_page["outcome"] == "hint" and [c["status"] for c in trail_page["citations"]] == ["changed", "valid"]
    assert api.recall("hospital", query=QUESTION, dry_run=True).json()["outcome"] == "hint"


def test_undo_is_not_offered_for_what_agents_reports_did(api, scope, sections):
    trail_id = record_icu(api)
    for key in (api, second_key(scope)):
        feedback(key, recall_id(key), helpful=False)
    staff = Client()
    staff.force_login(User.objects.create_superuser("olga", password="x"))
    assert staff.get(f"/ops/hospital/trails/{trail_id}/").context["undoable"] is False
    writes.act(Trail.objects.get(public_id=trail_id), "down", Actor.OPERATOR, by="olga")
    assert staff.get(f"/ops/hospital/trails/{trail_id}/").context["undoable"] is True


# -- one lock order: a docs sync never blocks votes, reports or rejections --------------------


@pytest.mark.django_db(transaction=True)
def test_votes_reports_and_rejections_go_through_while_a_docs_sync_is_open(api, scope, sections, monkeypatch):
    """A sync is paused with its transaction open (after its lock, before its writes): an
    agent's down vote, an agent's report (which labels and learns) and an operator's
    rejection of trails citing the synced sections are answered at once, not after the sync
    nor with a 503; once the sync commits, the citing trails are flagged."""
    from django.db import connection, connections

    if connection.vendor != "postgresql":
        pytest.skip("row locks and lock_timeout as PostgreSQL has them (as in CI)")
    import threading
    import time

    from trails.upkeep import sync as sync_module

    voted = record_icu(api)
    rejected = api.record("hospital", query="Where do visitors park?", cited=["parking"]).json()["trail_id"]
    reported_recall = api.recall("hospital", query="Where do visitors park?").json()["recall_id"]
    started, release = threading.Event(), threading.Event()
    real_upsert = sync_module.Section.upsert

    def paused_upsert(*args, **kwargs):
        started.set()
        release.wait(15)
        return real_upsert(*args, **kwargs)

    monkeypatch.setattr(sync_module.Section, "upsert", paused_upsert)
    answers: dict = {}

    def release_docs() -> None:
        try:
            body = {
                "sections": [
                    {"id": "visiting/icu", "text": "ICU visiting is 15:00 to 17:00."},
                    {"id": "parking", "text": "Visitors park in car park C."},
                    {"id": "visiting/ward", "text": "General ward visiting hours are 10:00 to 20:00."},
                ]
            }
            answers["sync"] = api.call("post", "/scopes/hospital/section-syncs", body)
        finally:
            connections.close_all()

    syncing = threading.Thread(target=release_docs)
    syncing.start()
    try:
        assert started.wait(10)
        began = time.perf_counter()
        vote = api.call("post", f"/scopes/hospital/trails/{voted}/feedback", {"vote": "down"})
        report = api.call("post", f"/scopes/hospital/recalls/{reported_recall}/feedback", {"helpful": False})
        writes.act(Trail.objects.get(public_id=rejected), "down", Actor.OPERATOR, by="olga", reason="wrong car park")
        waited = time.perf_counter() - began
    finally:
        release.set()
        syncing.join()
    assert vote.status_code == 200 and report.status_code == 200, (vote.content, report.content)
    assert waited < 1.5, f"the votes waited {waited:.2f} s on the sync"
    assert answers["sync"].status_code == 200 and answers["sync"].json()["sections"]["changed"] == 2
    assert Trail.objects.get(public_id=voted).section_changed_at is not None
    assert Trail.objects.get(public_id=rejected).status == TrailStatus.REJECTED


def test_the_docs_lifecycle_table_is_the_declared_one():
    assert table.markdown_table() in (ROOT / "docs" / "api.md").read_text()


def test_django_admin_finds_a_trail_by_its_public_id_and_by_its_primary_key(api, sections):
    trail = Trail.objects.get(public_id=record_icu(api))
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="x"))
    for term in (str(trail.public_id), str(trail.pk)):
        found = admin.get("/admin/trails/trail/", {"q": term}).context["cl"].result_list
        assert list(found) == [trail], term


# -- side paths found from outside: expiry, undo, release, admin delete ----------------------


def _operator() -> Client:
    staff = Client()
    staff.force_login(User.objects.create_superuser("olga", password="x"))
    return staff


def _expire(trail_id: str) -> Trail:
    from datetime import timedelta

    from django.utils import timezone

    with around_the_writer():
        Trail.objects.filter(public_id=trail_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    return Trail.objects.get(public_id=trail_id)


def test_an_expired_trail_is_not_revived_by_an_up_vote_nor_by_recording_its_question_again(api, scope, sections):
    trail_id = record_icu(api)
    expired_at = _expire(trail_id).expires_at
    other = second_key(scope, "another agent")
    vote = other.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "up"})
    assert vote.status_code == 409 and "expired" in vote.json()["error"]["message"]
    again = api.record(
        "hospital", query="What are the ICU visiting hours?", steps=[], cited=["visiting/icu", "parking"]
    )
    assert again.status_code == 201 and again.json()["trail_id"] != trail_id  # recorded anew, not renewed
    assert Trail.objects.get(public_id=trail_id).expires_at == expired_at
    assert api.recall("hospital", query=QUESTION).json()["trail_id"] == again.json()["trail_id"]


def test_an_operator_cannot_approve_an_expired_trail_but_may_delete_it(api, scope, sections):
    trail = _expire(record_icu(api))
    staff = _operator()
    assert staff.get(f"/ops/hospital/trails/{trail.public_id}/").context["actions"] == ["delete"]
    staff.post(f"/ops/hospital/trails/{trail.public_id}/vote/", {"vote": "up"})
    assert Trail.objects.get(pk=trail.pk).expires_at == trail.expires_at
    # Without JavaScript a plain post asks first and deletes nothing; confirm=yes deletes.
    asked = staff.post(f"/ops/hospital/trails/{trail.public_id}/vote/", {"vote": "delete"}).content.decode()
    assert "Delete this trail?" in asked and Trail.objects.filter(pk=trail.pk).exists()
    staff.post(f"/ops/hospital/trails/{trail.public_id}/vote/", {"vote": "delete", "confirm": "yes"})
    assert not Trail.objects.filter(pk=trail.pk).exists()


def test_undoing_a_rejection_of_a_trail_reports_held_restores_the_hold_and_keeps_the_reports(
    api, scope, sections, committed
):
    trail_id = record_icu(api)
    for key in (api, second_key(scope)):
        feedback(key, recall_id(key), helpful=False)
    held = Trail.objects.get(public_id=trail_id)
    assert held.lifecycle_state() is State.HELD
    with committed():
        writes.act(held, "down", Actor.OPERATOR, by="olga", reason="wrong")
    staff = _operator()
    staff.post(f"/ops/hospital/trails/{trail_id}/vote/", {"vote": "undo"})
    after = Trail.objects.get(public_id=trail_id)
    assert after.lifecycle_state() is State.HELD and after.held_by == "reports"
    assert (after.false_hit_reporters, TrailReport.objects.filter(trail=after).count()) == (2, 2)
    assert after.expires_at == held.expires_at
    assert api.recall("hospital", query=QUESTION).json()["outcome"] == "miss"  # still out of service


def test_undoing_a_send_back_restores_the_active_trail_with_its_expiry(api, scope, sections):
    trail = Trail.objects.get(public_id=record_icu(api))
    active_until = trail.expires_at
    writes.act(trail, "demote", Actor.OPERATOR, by="olga")
    assert Trail.objects.get(pk=trail.pk).expires_at < active_until  # held: the pending TTL
    assert writes.undo(trail, Actor.OPERATOR, by="olga").endswith("active")
    after = Trail.objects.get(pk=trail.pk)
    assert after.lifecycle_state() is State.ACTIVE and after.expires_at == active_until
    with pytest.raises(ActionRefused):
        writes.undo(after, Actor.OPERATOR, by="olga")  # the latest change is the undo itself


def test_undoing_a_send_back_of_a_trail_reported_while_it_was_held_leaves_it_held_by_the_reports(api, scope, sections):
    trail = Trail.objects.get(public_id=record_icu(api))
    served = [recall_id(api), recall_id(second_key(scope))]
    writes.act(trail, "demote", Actor.OPERATOR, by="olga")
    for reporter in ("key:aaaa", "key:bbbb"):  # agents' reports on the recalls it served before
        writes.report(Trail.objects.get(pk=trail.pk), reporter, "wrong")
    assert len(served) == 2 and Trail.objects.get(pk=trail.pk).false_hit_reporters == 2
    writes.undo(trail, Actor.OPERATOR, by="olga")
    after = Trail.objects.get(pk=trail.pk)
    assert after.lifecycle_state() is State.HELD and after.held_by == "reports", after.status
    assert api.recall("hospital", query=QUESTION).json()["outcome"] == "miss"  # still out of service


def test_an_operator_cannot_post_a_release_for_a_held_trail(api, scope, sections):
    trail_id = record_icu(api)
    for key in (api, second_key(scope)):
        feedback(key, recall_id(key), helpful=False)
    response = _operator().post(f"/ops/hospital/trails/{trail_id}/vote/", {"vote": "release"}, follow=True)
    assert "unknown action" in response.content.decode()
    trail = Trail.objects.get(public_id=trail_id)
    assert (
        trail.lifecycle_state() is State.HELD
        and not TrailSignal.objects.filter(trail=trail, signal="released").exists()
    )


def test_django_admin_cannot_delete_an_active_trail_outside_the_lifecycle(api, scope, sections):
    trail = Trail.objects.get(public_id=record_icu(api))
    staff = _operator()
    assert staff.get(f"/admin/trails/trail/{trail.pk}/delete/").status_code == 403
    listing = staff.get("/admin/trails/trail/")
    assert "delete_selected" not in listing.content.decode()
    staff.post("/admin/trails/trail/", {"action": "delete_selected", "_selected_action": [trail.pk], "post": "yes"})
    assert Trail.objects.filter(pk=trail.pk).exists()
    staff.post("/admin/trails/trail/", {"action": "delete_stale_or_expired", "_selected_action": [trail.pk]})
    assert Trail.objects.filter(pk=trail.pk).exists()  # active: the table does not delete it


def test_an_agents_key_reads_no_other_keys_nor_operators_names_in_a_trails_reason(api, scope, sections):
    trail_id = record_icu(api)
    reporters = [api, second_key(scope, "reporter two")]
    for key in reporters:
        feedback(key, recall_id(key), helpful=False)
    lookups = list(ApiKey.objects.values_list("lookup", flat=True))
    held = api.call("get", f"/scopes/hospital/trails/{trail_id}").json()
    assert held["reason"] == "reported not helpful by 2 reporters"
    writes.act(
        Trail.objects.get(public_id=trail_id), "down", Actor.OPERATOR, by="ann", reason="Jane Roe complained by phone"
    )
    rejected = api.call("get", f"/scopes/hospital/trails/{trail_id}").content.decode()
    assert "rejected by an operator" in rejected
    assert not any(word in rejected for word in ("ann", "Jane Roe", *lookups))
    # The operator pages keep who and why, in the history.
    history = TrailSignal.objects.filter(trail__public_id=trail_id, signal="down").get()
    assert (history.by, history.reason) == ("ann", "Jane Roe complained by phone")
