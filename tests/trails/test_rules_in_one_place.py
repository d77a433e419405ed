"""Each rule about a trail's or a scope's state holds on every path that reaches it."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from ragtrail_site.celery import app as celery_app
from scopes.models import Scope
from tests.trails.test_record import QUERY
from trails.core.lifecycle import Actor
from trails.learning.shipped import thresholds_for
from trails.models import ActionRefused, BandKeys, ThresholdChange, Trail, TrailStatus, writes

REFUSING = "The documents I found don't cover this."


@pytest.fixture
def operator(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("olga", password="x"))
    return client


def test_a_trail_rejected_at_record_reinstated_and_approved_is_served(api, sections, operator, committed):
    body = api.record("hospital", query=QUERY, cited=["visiting/icu"], answer=REFUSING).json()
    assert body["status"] == "rejected"
    trail = Trail.objects.get(public_id=body["trail_id"])
    assert not BandKeys.objects.filter(trail=trail).exists()  # a rejected trail is stored unsigned for lookups
    # The operator reinstates it from its row and approves it (the same pages an operator uses).
    with committed():
        assert operator.post(f"/ops/hospital/trails/{trail.public_id}/vote/", {"vote": "reinstate"}).status_code == 302
    assert operator.post(f"/ops/hospital/trails/{trail.public_id}/vote/", {"vote": "up"}).status_code == 302
    assert Trail.objects.get(pk=trail.pk).status == TrailStatus.ACTIVE
    answer = api.recall("hospital", query=QUERY).json()
    assert answer["outcome"] == "prefetch" and answer["trail_id"] == body["trail_id"]


def test_a_trail_rejected_after_use_then_re_signed_elsewhere_is_found_once_reinstated(
    api, sections, operator, scope, committed
):
    """A rejected trail keeps the band keys of the matching it was signed under; the scope's
    matching changes while it is out of service (re-signing reaches servable trails only).
    Reinstated and approved, it must be found by the matching in use now."""
    trail_id = api.record("hospital", query=QUERY, cited=["visiting/icu"]).json()["trail_id"]
    assert operator.post(f"/ops/hospital/trails/{trail_id}/vote/", {"vote": "down"}).status_code == 302
    scope.lexical_threshold = 0.6  # from 0.5: the band keys drawn for 0.6 differ
    scope.save()
    with committed():
        for vote in ("reinstate", "up"):
            assert operator.post(f"/ops/hospital/trails/{trail_id}/vote/", {"vote": vote}).status_code == 302
    answer = api.recall("hospital", query=QUERY).json()
    assert answer["outcome"] == "prefetch" and answer["trail_id"] == trail_id


def test_the_same_through_django_admin(api, sections, operator, committed):
    trail_id = api.record("hospital", query=QUERY, cited=["visiting/icu"], answer=REFUSING).json()["trail_id"]
    pk = Trail.objects.get(public_id=trail_id).pk
    with committed():
        for action in ("reinstate", "approve"):
            response = operator.post("/admin/trails/trail/", {"action": action, "_selected_action": [pk]}, follow=True)
            assert response.status_code == 200
    assert api.recall("hospital", query=QUERY).json()["outcome"] == "prefetch"
    # Django admin finds a trail by the id the API and the pages show.
    found = operator.get("/admin/trails/trail/", {"q": trail_id}).content.decode()
    assert QUERY in found


def test_agents_cannot_do_what_only_operators_may(api, sections):
    trail_id = api.record("hospital", query=QUERY, cited=["visiting/icu"], signal=None).json()["trail_id"]
    trail = Trail.objects.get(public_id=trail_id)
    writes.act(trail, "down", Actor.OPERATOR, by="olga")
    for action in ("reinstate", "demote", "delete"):
        with pytest.raises(ActionRefused, match="only an operator"):
            writes.act(trail, action, Actor.AGENT, by="key:abc")
    # The API offers votes alone: up and down.
    refused = api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "reinstate"})
    assert refused.status_code == 422 and Trail.objects.get(pk=trail.pk).status == TrailStatus.REJECTED


def test_an_operator_sends_an_active_trail_back_to_pending_with_a_reason(api, sections, operator):
    trail_id = api.record("hospital", query=QUERY, cited=["visiting/icu"]).json()["trail_id"]
    response = operator.post(f"/ops/hospital/trails/{trail_id}/vote/", {"vote": "demote", "reason": "wrong ward"})
    assert response.status_code == 302
    trail = Trail.objects.get(public_id=trail_id)
    assert trail.status == TrailStatus.PENDING and trail.reason == "sent back to pending by an operator"
    signal = trail.signals.last()
    assert (signal.signal, signal.source, signal.by, signal.reason) == ("demote", "operator", "olga", "wrong ward")
    assert api.recall("hospital", query=QUERY).json()["outcome"] == "miss"


def test_a_bound_changed_from_a_shell_sets_the_thresholds_and_drops_what_was_learned(scope):
    scope.learned_lexical_threshold, scope.threshold_flags = 0.7, "lexical:ceiling"
    scope.save()
    scope.max_false_hit_rate = 0.005
    scope.save()
    scope.refresh_from_db()
    expected = thresholds_for(0.005, "lexical")
    assert (scope.lexical_threshold, scope.embedding_threshold) == (
        expected["lexical_threshold"],
        expected["embedding_threshold"],
    )
    assert (scope.learned_lexical_threshold, scope.threshold_flags) == (None, "")
    change = ThresholdChange.objects.get(scope=scope, kind="configured")
    assert change.evidence["max_false_hit_rate"] == {"before": 0.02, "after": 0.005}


def test_a_matching_change_from_a_shell_re_signs_the_trails(api, scope, sections):
    api.record("hospital", query=QUERY, cited=["visiting/icu"])
    before = {key for keys in BandKeys.objects.values_list("keys", flat=True) for key in keys}
    scope.lexical_threshold = 0.8
    scope.save()
    assert {key for keys in BandKeys.objects.values_list("keys", flat=True) for key in keys}.isdisjoint(before)
    assert api.recall("hospital", query=QUERY).json()["outcome"] == "prefetch"


def test_a_large_scopes_matching_change_is_queued_for_the_re_signing_task(
    api, scope, sections, settings, django_capture_on_commit_callbacks
):
    api.record("hospital", query=QUERY, cited=["visiting/icu"])
    before = {key for keys in BandKeys.objects.values_list("keys", flat=True) for key in keys}
    settings.RAGTRAIL_RESIGN_INLINE_LIMIT = 0
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    try:
        scope = Scope.objects.get(pk=scope.pk)
        scope.lexical_threshold = 0.8
        with django_capture_on_commit_callbacks(execute=False) as queued:
            scope.save()
        assert scope.resigning == "re-signing queued"
        assert {
            key for keys in BandKeys.objects.values_list("keys", flat=True) for key in keys
        } == before  # not yet: the task does it
        for callback in queued:
            callback()
    finally:
        celery_app.conf.task_always_eager = eager
    assert {key for keys in BandKeys.objects.values_list("keys", flat=True) for key in keys}.isdisjoint(before)
    assert api.recall("hospital", query=QUERY).json()["outcome"] == "prefetch"


def test_a_rejected_trail_is_rejected_once_whoever_votes_down_and_admin_approval_renews_no_active_trail(
    api, sections, operator
):
    trail_id = api.record("hospital", query=QUERY, cited=["visiting/icu"]).json()["trail_id"]
    trail = Trail.objects.get(public_id=trail_id)
    writes.act(trail, "down", Actor.OPERATOR, by="olga")
    # An agent's down vote on it is refused: a second rejection would make the operator's undo restore the first.
    again = api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "down"})
    assert again.status_code == 409 and again.json()["error"]["field"] == "vote"
    trail.refresh_from_db()
    assert "undo" in trail.available_actions(Actor.OPERATOR)
    assert writes.undo(trail, Actor.OPERATOR, by="olga") and Trail.objects.get(pk=trail.pk).status == "active"
    # Django admin's "Approve the selected pending trails" leaves an active trail's expiry alone.
    expires = Trail.objects.get(pk=trail.pk).expires_at
    operator.post("/admin/trails/trail/", {"action": "approve", "_selected_action": [trail.pk]}, follow=True)
    assert Trail.objects.get(pk=trail.pk).expires_at == expires
