"""What recall answers: prefetch, hint and miss after real edits, budgets, isolation, expiry."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from infra.hashing import section_hash
from scopes.demo import faq_questions, faq_sections
from scopes.models import Scope, Section
from tests.bypass import around_the_writer
from trails.models import RecallEvent, Trail, TrailStatus

ICU_STEPS = [
    {"tool": "search", "args": {"query": "ICU visiting hours"}, "section_ids": ["visiting/icu", "visiting/ward"]},
    {"tool": "read", "args": {"id": "visiting/icu"}, "section_ids": ["visiting/icu"]},
    {"tool": "read", "args": {"id": "parking"}, "section_ids": ["parking"]},
]


def record_icu(api, **extra):
    body = dict(query="What are the ICU visiting hours?", steps=ICU_STEPS, cited=["visiting/icu", "parking"], **extra)
    response = api.record("hospital", **body)
    assert response.status_code == 201, response.json()
    return response.json()["trail_id"]


def test_recall_prefetches_current_text_when_every_cited_section_is_unchanged(api, sections):
    trail_id = record_icu(api)
    body = api.recall("hospital", query="what are the ICU visiting hours").json()
    assert body["outcome"] == "prefetch"
    assert body["trail_id"] == trail_id
    assert body["matched_query"] == "What are the ICU visiting hours?"
    assert [(s["id"], s["status"], s["text"]) for s in body["sections"]] == [
        ("visiting/icu", "valid", sections["visiting/icu"]),
        ("parking", "valid", sections["parking"]),
    ]
    assert [s["tool"] for s in body["steps"]] == ["search", "read", "read"]
    assert body["truncated"] is False and body["tokens"] > 0 and body["hint"] is None


def test_recall_returns_hint_when_one_cited_section_changed(api, sections):
    record_icu(api)
    api.put_sections("hospital", {"visiting/icu": "ICU visiting hours are now 13:00 to 17:00."})
    body = api.recall("hospital", query="What are the ICU visiting hours?").json()
    assert body["outcome"] == "hint"
    # The still-valid section comes with its current text and hash; the changed one with neither.
    assert [(s["id"], s["status"], s["text"]) for s in body["sections"]] == [
        ("visiting/icu", "changed", None),
        ("parking", "valid", sections["parking"]),
    ]
    assert body["sections"][1]["hash"] == section_hash(sections["parking"]) and body["sections"][0].get("hash") is None
    assert "still valid: parking" in body["hint"] and "visiting/icu" in body["hint"]
    # The first step that returned the changed section is where the path needs redoing.
    assert body["hint"].endswith('Start with: search(query="ICU visiting hours").')
    assert "13:00" not in str(body)


def test_recall_misses_and_marks_stale_when_every_cited_section_changed(api, sections):
    trail_id = record_icu(api)
    api.put_sections("hospital", {"visiting/icu": "changed", "parking": "changed too"})
    body = api.recall("hospital", query="What are the ICU visiting hours?").json()
    assert body["outcome"] == "miss" and body["sections"] == []
    assert Trail.objects.get(public_id=trail_id).status == TrailStatus.STALE
    # Restoring the text does not bring a stale trail back.
    api.put_sections("hospital", sections)
    assert api.recall("hospital", query="What are the ICU visiting hours?").json()["outcome"] == "miss"


def test_a_deleted_section_counts_as_changed(api, sections):
    record_icu(api)
    assert api.call("delete", "/scopes/hospital/sections/parking").status_code == 204
    body = api.recall("hospital", query="What are the ICU visiting hours?").json()
    assert body["outcome"] == "hint"
    assert [(s["id"], s["status"]) for s in body["sections"]] == [("visiting/icu", "valid"), ("parking", "deleted")]


def test_stale_trail_is_stepped_over_for_a_valid_one(api, sections):
    stale_id = record_icu(api)
    api.put_sections("hospital", {"visiting/icu": "v2", "parking": "v2"})
    # Slightly less similar, so the stale trail ranks first and must be stepped over.
    fresh = api.record("hospital", query="What are ICU visiting hours?", cited=["visiting/icu"]).json()["trail_id"]
    body = api.recall("hospital", query="What are the ICU visiting hours?").json()
    assert body["outcome"] == "prefetch" and body["trail_id"] == fresh
    assert Trail.objects.get(public_id=stale_id).status == TrailStatus.STALE


def test_look_alike_question_is_not_matched(api, sections):
    record_icu(api)
    body = api.recall("hospital", query="What are the general ward visiting hours?").json()
    assert body["outcome"] == "miss" and body["trail_id"] is None


def test_unrelated_question_misses_without_a_trail(api, sections):
    record_icu(api)
    body = api.recall("hospital", query="How do I renew a parking permit for staff?").json()
    assert body == {**body, "outcome": "miss", "trail_id": None, "similarity": None}


def test_token_budget_cuts_the_prefetch_and_says_so(api, sections):
    record_icu(api)
    body = api.recall("hospital", query="What are the ICU visiting hours?", token_budget=5).json()
    assert body["outcome"] == "prefetch" and body["truncated"] is True and body["tokens"] == 5
    first, second = body["sections"]
    assert first["text"] == "Intensive care visiting hours are" and first["truncated"] is True
    assert second["text"] is None


def test_scope_default_budget_applies_when_the_request_has_none(api, scope, sections):
    scope.token_budget = 3
    scope.save()
    record_icu(api)
    body = api.recall("hospital", query="What are the ICU visiting hours?").json()
    assert body["tokens"] == 3 and body["truncated"]


def test_dry_run_changes_nothing(api, sections):
    trail_id = record_icu(api)
    api.put_sections("hospital", {"visiting/icu": "x", "parking": "y"})
    body = api.recall("hospital", query="What are the ICU visiting hours?", dry_run=True).json()
    assert body["outcome"] == "miss" and body["recall_id"] is None
    trail = Trail.objects.get(public_id=trail_id)
    assert trail.status == TrailStatus.ACTIVE and trail.hit_count == 0
    assert RecallEvent.objects.count() == 0


def test_hits_are_counted_and_every_recall_is_an_event(api, sections):
    trail_id = record_icu(api)
    api.recall("hospital", query="What are the ICU visiting hours?")
    api.recall("hospital", query="What are the general ward visiting hours?")
    trail = Trail.objects.get(public_id=trail_id)
    assert trail.hit_count == 1 and trail.last_hit_at is not None
    events = list(RecallEvent.objects.order_by("created_at", "id"))
    assert [e.outcome for e in events] == ["prefetch", "miss"]
    assert events[0].trail_id == trail.id and events[0].similarity == 1.0
    # The scope does not keep raw queries by default.
    assert [e.query for e in events] == ["", ""]


def test_raw_query_kept_only_where_the_scope_allows(api, scope, sections):
    scope.keep_raw_queries = True
    scope.save()
    api.recall("hospital", query="Where do visitors park?")
    assert RecallEvent.objects.get().query == "Where do visitors park?"


def test_a_trail_in_one_scope_is_never_returned_in_another(api, other_api, sections, other_scope):
    record_icu(api)
    Section.upsert(other_scope, sections)
    for query in ["What are the ICU visiting hours?", "ICU visiting hours", "what are the icu visiting hours"]:
        assert other_api.recall("other", query=query).json()["outcome"] == "miss"
    # And the key of one scope cannot even reach the other.
    assert other_api.recall("hospital", query="What are the ICU visiting hours?").status_code == 404


def test_partition_narrows_matching(api, sections):
    record_icu(api, partition="doc-1")
    assert (
        api.recall("hospital", query="What are the ICU visiting hours?", partition="doc-1").json()["outcome"]
        == "prefetch"
    )
    assert (
        api.recall("hospital", query="What are the ICU visiting hours?", partition="doc-2").json()["outcome"] == "miss"
    )
    assert api.recall("hospital", query="What are the ICU visiting hours?").json()["outcome"] == "miss"


def test_expired_trails_are_never_served(api, sections):
    trail_id = record_icu(api)
    with around_the_writer():
        Trail.objects.filter(public_id=trail_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api.recall("hospital", query="What are the ICU visiting hours?").json()["outcome"] == "miss"
    assert api.call("get", f"/scopes/hospital/trails/{trail_id}").json()["status"] == "expired"


def test_trail_expiry_follows_the_scope_ttl(api, scope, sections):
    scope.active_ttl_days = 3
    scope.save()
    trail = Trail.objects.get(public_id=record_icu(api))
    assert timedelta(days=3) - timedelta(minutes=1) < trail.expires_at - timezone.now() <= timedelta(days=3)


@pytest.mark.django_db
def test_real_faq_edits_give_all_three_outcomes(api):
    """Trails recorded on the v3.6.0 FAQ, recalled after the sections move to v3.11.0."""
    scope = Scope.objects.get(slug="hospital")
    old, new = faq_sections("old"), faq_sections("new")
    Section.upsert(scope, old)
    questions = [q for q in faq_questions() if "old" in q["present_in"]]
    # "What is Python?" heads two entries; a repeated question is one question.
    texts = [q["question"] for q in questions]
    questions = [q for q in questions if texts.count(q["question"]) == 1]
    for q in questions:
        assert api.record("hospital", query=q["question"], cited=[q["section_id"]]).status_code == 201
    # One two-section trail whose sections split: one kept its text, one changed.
    same = next(i for i in old if i in new and old[i] == new[i])
    changed = next(i for i in old if i in new and old[i] != new[i])
    api.record("hospital", query="How do copies and views of data differ?", cited=[same, changed])

    Section.upsert(scope, {i: t for i, t in new.items()})
    Section.objects.filter(scope=scope).exclude(section_id__in=list(new)).delete()

    outcomes = {}
    for q in questions:
        body = api.recall("hospital", query=q["question"]).json()
        outcomes[q["section_id"]] = body["outcome"]
        for s in body["sections"]:
            if s.get("text") is not None:
                assert s["text"] == new[s["id"]], "served text must be the current revision's"
    expected = {
        q["section_id"]: ("prefetch" if new.get(q["section_id"]) == old[q["section_id"]] else "miss") for q in questions
    }
    assert outcomes == expected
    # 93 entries kept their text; one of them sits under the repeated question.
    assert sum(o == "prefetch" for o in outcomes.values()) == 92
    assert api.recall("hospital", query="How do copies and views of data differ?").json()["outcome"] == "hint"


def test_a_section_change_flags_exactly_the_active_trails_that_cite_it(api, sections, committed):
    icu = record_icu(api)  # cites visiting/icu and parking
    ward = api.record("hospital", query="What are the general ward visiting hours?", cited=["visiting/ward"]).json()[
        "trail_id"
    ]
    pending = api.record("hospital", query="Where do visitors park?", cited=["parking"], signal=None).json()["trail_id"]
    with committed():  # the flag is set once the write commits
        api.put_sections(
            "hospital", {"parking": "Visitors park in car park C.", "visiting/ward": sections["visiting/ward"]}
        )
    flagged = {
        t: api.call("get", f"/scopes/hospital/trails/{t}").json()["section_changed_at"] is not None
        for t in (icu, ward, pending)
    }
    assert flagged == {icu: True, ward: False, pending: False}
    # The flag informs operators; what recall serves is still decided on read.
    assert api.recall("hospital", query="What are the ICU visiting hours?").json()["outcome"] == "hint"
    with committed():
        api.call("delete", "/scopes/hospital/sections/visiting/ward")
    assert api.call("get", f"/scopes/hospital/trails/{ward}").json()["section_changed_at"] is not None
