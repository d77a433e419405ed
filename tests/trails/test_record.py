"""Admission: signals, approval, refusal answers, hashes, idempotency, and refused input."""

from __future__ import annotations

import pytest

from infra.hashing import section_hash
from scopes.models import Section
from trails.core.lifecycle import Actor
from trails.models import BandKeys, Citation, Step, Trail, TrailSignal, writes

QUERY = "What are the ICU visiting hours?"


def counts() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (Trail, Step, Citation, BandKeys, TrailSignal))


def test_accepted_trail_is_active_and_stores_the_current_hashes(api, sections):
    response = api.record(
        "hospital",
        query=QUERY,
        cited=["visiting/icu"],
        steps=[{"tool": "read", "args": {"id": "visiting/icu"}, "section_ids": ["visiting/icu"]}],
    )
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "active" and body["reason"] is None
    trail = api.call("get", f"/scopes/hospital/trails/{body['trail_id']}").json()
    assert trail["cited"] == [{"id": "visiting/icu", "hash": section_hash(sections["visiting/icu"])}]
    assert trail["steps"] == [{"tool": "read", "args": {"id": "visiting/icu"}, "section_ids": ["visiting/icu"]}]


def test_answers_are_never_stored(api, sections):
    api.record(
        "hospital", query=QUERY, cited=["visiting/icu"], answer="Visiting is 14:00 to 16:00 (secret-answer-text)."
    )
    stored = " ".join(str(v) for t in Trail.objects.values() for v in t.values())
    assert "secret-answer-text" not in stored


@pytest.mark.parametrize("signal", [None])
def test_without_a_positive_signal_a_trail_is_pending_and_never_served(api, sections, signal):
    body = api.record("hospital", query=QUERY, cited=["visiting/icu"], signal=signal).json()
    assert body["status"] == "pending"
    assert api.recall("hospital", query=QUERY).json()["outcome"] == "miss"


def test_approving_a_pending_trail_makes_it_servable(api, sections):
    trail_id = api.record("hospital", query=QUERY, cited=["visiting/icu"], signal=None).json()["trail_id"]
    response = api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "up"})
    assert response.status_code == 200 and response.json()["status"] == "active"
    assert api.recall("hospital", query=QUERY).json()["outcome"] == "prefetch"


def test_a_down_vote_rejects_and_a_rejected_trail_cannot_be_approved(api, sections):
    trail_id = api.record("hospital", query=QUERY, cited=["visiting/icu"], signal=None).json()["trail_id"]
    assert (
        api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "down"}).json()["status"]
        == "rejected"
    )
    assert api.recall("hospital", query=QUERY).json()["outcome"] == "miss"
    again = api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "up"})
    assert again.status_code == 409 and again.json()["error"]["field"] == "vote"
    assert [s.signal for s in TrailSignal.objects.order_by("id")] == ["down"]


def test_an_agents_down_vote_on_an_approved_trail_is_a_report_not_a_rejection(api, sections):
    trail_id = api.record("hospital", query=QUERY, cited=["visiting/icu"]).json()["trail_id"]
    assert (
        api.call("post", f"/scopes/hospital/trails/{trail_id}/feedback", {"vote": "down"}).json()["status"] == "active"
    )
    assert api.recall("hospital", query=QUERY).json()["outcome"] == "prefetch"
    trail = Trail.objects.get(public_id=trail_id)
    assert (trail.false_hit_reports, trail.false_hit_reporters) == (1, 1)


def test_an_answer_saying_the_sources_do_not_cover_it_is_rejected(api, sections):
    response = api.record(
        "hospital", query=QUERY, cited=["visiting/icu"], answer="The documents I found don't cover this."
    )
    assert response.status_code == 201
    assert response.json()["status"] == "rejected" and "do not answer" in response.json()["reason"]
    assert api.recall("hospital", query=QUERY).json()["outcome"] == "miss"
    assert BandKeys.objects.count() == 0


def test_record_is_refused_with_409_when_the_agent_read_an_older_version(api, sections):
    before = counts()
    response = api.record(
        "hospital",
        query=QUERY,
        cited=["visiting/icu", "parking"],
        hashes={"visiting/icu": section_hash("an older text"), "parking": section_hash(sections["parking"])},
    )
    assert response.status_code == 409
    assert response.json()["error"] == {
        "code": "section_changed",
        "field": "hashes",
        "section_ids": ["visiting/icu"],
        "message": "the agent read a version of these sections that has since changed",
    }
    assert counts() == before


def test_matching_hashes_are_accepted(api, sections):
    response = api.record(
        "hospital", query=QUERY, cited=["visiting/icu"], hashes={"visiting/icu": section_hash(sections["visiting/icu"])}
    )
    assert response.status_code == 201


def test_the_same_idempotency_key_returns_the_first_result(api, sections):
    first = api.record("hospital", query=QUERY, cited=["visiting/icu"], idempotency_key="task-42")
    second = api.record("hospital", query=QUERY, cited=["visiting/icu"], idempotency_key="task-42")
    assert first.status_code == 201 and second.status_code == 200
    assert first.json() == second.json()
    assert Trail.objects.count() == 1


def test_an_idempotency_key_reused_for_other_input_is_refused(api, sections):
    api.record("hospital", query=QUERY, cited=["visiting/icu"], idempotency_key="task-42")
    response = api.record("hospital", query="Where do visitors park?", cited=["parking"], idempotency_key="task-42")
    assert response.status_code == 409 and response.json()["error"]["field"] == "idempotency_key"
    assert Trail.objects.count() == 1


def test_idempotency_keys_are_per_scope(api, other_api, sections, other_scope):
    Section.upsert(other_scope, sections)
    api.record("hospital", query=QUERY, cited=["visiting/icu"], idempotency_key="k")
    assert other_api.record("other", query=QUERY, cited=["visiting/icu"], idempotency_key="k").status_code == 201


LONG = "word " * 401


@pytest.mark.parametrize(
    "body,field",
    [
        ({"query": "", "cited": ["parking"]}, "query"),
        ({"query": "   ?! ", "cited": ["parking"]}, "query"),
        ({"query": LONG * 2, "cited": ["parking"]}, "query"),
        ({"query": QUERY, "cited": []}, "cited"),
        ({"query": QUERY, "cited": ["parking"] * 101}, "cited"),
        ({"query": QUERY, "cited": ["no/such/section"]}, "cited"),
        ({"query": QUERY, "cited": ["parking"], "steps": [{"tool": "read"}] * 51}, "steps"),
        ({"query": QUERY, "cited": ["parking"], "steps": [{"tool": ""}]}, "steps.0.tool"),
        ({"query": QUERY, "cited": "parking"}, "cited"),
        ({"query": 42, "cited": ["parking"]}, "query"),
        ({"query": QUERY, "cited": ["parking"], "signal": "maybe"}, "signal"),
        ({"query": QUERY, "cited": ["parking"], "hashes": {"parking": "nothex"}}, "hashes.parking"),
        ({"query": QUERY, "cited": ["parking"], "hashes": {"visiting/icu": "0" * 64}}, "hashes"),
        ({"query": QUERY, "cited": ["parking"], "citations": ["parking"]}, "citations"),
        ({"cited": ["parking"]}, "query"),
    ],
)
def test_bad_record_input_is_refused_naming_the_field_and_writes_nothing(api, sections, body, field):
    before = counts()
    response = api.call("post", "/scopes/hospital/trails", body)
    assert response.status_code == 422, response.json()
    assert response.json()["error"]["field"] == field
    assert counts() == before


def test_invalid_json_is_refused(api, sections):
    response = api.call("post", "/scopes/hospital/trails", raw=b'{"query": "x", ')
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json" and response.json()["error"]["field"] == "body"
    assert Trail.objects.count() == 0


def test_oversized_body_is_refused(api, sections, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = api.record("hospital", query=QUERY, cited=["parking"], answer="x" * 2000)
    assert response.status_code == 413 and response.json()["error"]["field"] == "body"
    assert Trail.objects.count() == 0


@pytest.mark.parametrize(
    "body,field",
    [
        ({"query": ""}, "query"),
        ({"query": "x" * 2001}, "query"),
        ({"query": QUERY, "token_budget": -1}, "token_budget"),
        ({"query": QUERY, "token_budget": "100"}, "token_budget"),
        ({"query": QUERY, "dry_run": "yes"}, "dry_run"),
        ({"query": "?!?"}, "query"),
    ],
)
def test_bad_recall_input_is_refused_and_logs_nothing(api, sections, body, field):
    from trails.models import RecallEvent

    response = api.recall("hospital", **body)
    assert response.status_code == 422, response.json()
    assert response.json()["error"]["field"] == field
    assert RecallEvent.objects.count() == 0


def test_unknown_trail_answers_404(api, other_api, sections):
    trail_id = api.record("hospital", query=QUERY, cited=["parking"]).json()["trail_id"]
    assert api.call("get", "/scopes/hospital/trails/not-a-uuid").status_code == 404
    assert api.call("get", "/scopes/hospital/trails/00000000-0000-0000-0000-000000000000").status_code == 404
    # Another scope's key gets the same 404 as for a trail that does not exist.
    assert (
        other_api.call("get", f"/scopes/hospital/trails/{trail_id}").json()
        == api.call("get", f"/scopes/nowhere/trails/{trail_id}").json()
    )


def test_the_same_question_with_the_same_sections_renews_the_trail_instead_of_a_twin(api, sections):
    first = api.record("hospital", query="Where do visitors park?", cited=["parking"], signal="pending")
    assert first.status_code == 201 and first.json()["status"] == "pending"
    again = api.record("hospital", query="where do visitors  PARK", cited=["parking"])  # accepted, normalised alike
    assert again.status_code == 200 and again.json()["trail_id"] == first.json()["trail_id"]
    assert again.json()["status"] == "active" and "renewed" in again.json()["refreshed"]
    assert Trail.objects.filter(query__icontains="park").count() == 1
    # Other sections, another partition, or a section changed since: a trail of its own.
    assert (
        api.record("hospital", query="Where do visitors park?", cited=["parking", "visiting/ward"]).status_code == 201
    )
    assert (
        api.record("hospital", query="Where do visitors park?", cited=["parking"], partition="ward b").status_code
        == 201
    )
    api.put_sections("hospital", {"parking": "Visitors park in car park C."})
    assert api.record("hospital", query="Where do visitors park?", cited=["parking"]).status_code == 201


def test_recording_again_never_revives_what_an_operator_took_out(api, sections):
    trail_id = api.record("hospital", query="Where do visitors park?", cited=["parking"]).json()["trail_id"]
    writes.act(Trail.objects.get(public_id=trail_id), "demote", Actor.OPERATOR, by="olga")
    again = api.record("hospital", query="Where do visitors park?", cited=["parking"])
    assert again.status_code == 200 and again.json()["status"] == "pending"
    assert "not renewed" in again.json()["refreshed"] and "only an operator" in again.json()["refreshed"]
