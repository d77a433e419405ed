"""The staleness experiment on a slice of the FAQ: ragtrail never serves changed text."""

from __future__ import annotations

from evaluation.staleness import random_edit, staleness
from scopes.demo import faq_questions, faq_sections


def slice_of_faq(n: int = 30):
    old, new = faq_sections("old"), faq_sections("new")
    questions = [q for q in faq_questions() if q["present_in"] == ["old", "new"]]
    texts = [q["question"] for q in questions]
    questions = [(q["question"], q["section_id"]) for q in questions if texts.count(q["question"]) == 1][:n]
    return old, new, questions


def test_real_revision_ragtrail_serves_no_changed_section_and_the_text_cache_serves_each_one(db):
    old, new, questions = slice_of_faq()
    result = staleness(old, new, questions, "real revision")
    changed = sum(1 for _, s in questions if new.get(s) != old[s])
    assert result.changed_sections == changed > 0
    assert result.ragtrail.stale_served == 0
    assert result.ragtrail.prefetch_kept == len(questions) - changed and result.ragtrail.miss == changed
    assert result.text_cache.stale_served == changed and result.text_cache.hits == len(questions)


def test_random_edits_are_reproducible_and_never_served_stale(db):
    old, _, questions = slice_of_faq(20)
    ids = [s for _, s in questions]
    edited = random_edit(old, ids, 0.5, seed=11)
    assert edited == random_edit(old, ids, 0.5, seed=11)
    result = staleness(old, edited, questions, "random 50%")
    assert result.changed_sections == 10
    assert result.ragtrail.stale_served == 0 and result.ragtrail.miss == 10
    assert result.text_cache.stale_served == 10


def test_trails_citing_two_sections_come_back_as_hints_when_one_changed_and_never_serve_it(db):
    from evaluation.staleness import next_in_document

    old, new, questions = slice_of_faq()
    companions = next_in_document([s for _, s in questions], old)
    result = staleness(old, new, questions, "real revision", companions=companions)
    partly = sum(1 for _, s in questions if (new.get(s) != old[s]) != (new.get(companions[s]) != old[companions[s]]))
    wholly = sum(1 for _, s in questions if new.get(s) != old[s] and new.get(companions[s]) != old[companions[s]])
    assert partly > 0
    assert result.ragtrail.stale_served == 0
    assert result.ragtrail.hint == partly and result.ragtrail.miss == wholly
    assert result.text_cache.stale_served == partly + wholly
