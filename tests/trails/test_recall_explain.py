"""Explain a recall (dry run): the candidates read, their similarities and verdicts, and why it missed."""

from __future__ import annotations

from scopes.models import Section
from tests.trails.test_recall import record_icu
from trails.models import RecallEvent


def explain(api, query: str) -> dict:
    response = api.recall("hospital", query=query, dry_run=True, explain=True)
    assert response.status_code == 200, response.json()
    return response.json()


def test_an_answer_says_what_matched_and_how_closely(api, sections):
    trail_id = record_icu(api)
    body = explain(api, "ICU visiting hours")
    why = body["explanation"]
    assert body["outcome"] == "prefetch" and why["matcher"] == "lexical" and why["lexical_threshold"] == 0.5
    assert why["candidates"][0] == {
        "trail_id": trail_id,
        "query": "What are the ICU visiting hours?",
        "lexical": body["similarity"],
        "embedding": None,
        "verdict": "answered",
    }
    assert (
        why["summary"].startswith('Answered by "What are the ICU visiting hours?" at 0.5')
        and "2 of 2 cited sections unchanged" in why["summary"]
    )


def test_a_look_alike_names_the_guards_rule(api, sections):
    record_icu(api)
    why = explain(api, "What are the ICU visiting hours for children?")["explanation"]
    assert why["candidates"][0]["lexical"] > 0.5
    assert why["candidates"][0]["verdict"] == "refused by the guard: terms differ: children"
    assert (
        why["summary"]
        == "1 candidate(s) reached the threshold but the look-alike guard refused them: terms differ: children."
    )


def test_a_question_sharing_no_band_says_so(api, sections):
    record_icu(api)
    why = explain(api, "Where is the pharmacy?")["explanation"]
    assert why["candidates_read"] == 0 and why["candidates"] == []
    assert why["summary"].startswith("No stored question shares a band key")


def test_a_stale_trail_is_named_as_such(api, scope, sections):
    trail_id = record_icu(api)
    Section.upsert(scope, {"visiting/icu": "ICU visiting is suspended.", "parking": "Car park B is closed."})
    body = explain(api, "what are the ICU visiting hours")
    assert body["outcome"] == "miss"
    assert body["explanation"]["candidates"][0]["trail_id"] == trail_id
    assert body["explanation"]["candidates"][0]["verdict"].startswith("stale")
    assert "stale" in body["explanation"]["summary"]


def test_below_the_threshold_gives_the_nearest_similarity(api, scope, sections):
    record_icu(api)
    scope.lexical_threshold = 0.9  # the band layout follows; the reworded question still shares a band
    scope.band_count, scope.band_rows = 32, 4
    scope.save()
    from trails.upkeep.reindex import reindex_scope

    reindex_scope(scope)
    why = explain(api, "when are the ICU visiting hours")["explanation"]
    assert why["candidates"] and why["candidates"][0]["verdict"] == "below the threshold"
    assert "nearest scored" in why["summary"] and "threshold 0.9" in why["summary"]


def test_explain_is_for_dry_runs_only_and_changes_nothing(api, sections):
    record_icu(api)
    response = api.recall("hospital", query="ICU visiting hours", explain=True)
    assert response.status_code == 422 and response.json()["error"]["field"] == "explain"
    assert not RecallEvent.objects.exists()
    # Without explain the answer carries none.
    assert api.recall("hospital", query="ICU visiting hours", dry_run=True).json()["explanation"] is None
