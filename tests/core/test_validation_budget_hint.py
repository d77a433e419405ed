import pytest

from infra.hashing import section_hash
from trails.core.budget import count_tokens, cut_to_budget
from trails.core.hint import RecordedStep, hint_text, starting_step
from trails.core.refusal import says_sources_do_not_answer
from trails.core.validation import Citation, CurrentSection, Outcome, SectionStatus, validate

A, B = section_hash("alpha"), section_hash("beta")


def test_all_unchanged_is_prefetch_with_text():
    v = validate(
        [Citation("a", A), Citation("b", B)], {"a": CurrentSection(A, "alpha"), "b": CurrentSection(B, "beta")}
    )
    assert v.outcome is Outcome.PREFETCH
    assert [s.text for s in v.sections] == ["alpha", "beta"]


def test_some_changed_is_hint_and_changed_text_is_never_carried():
    v = validate(
        [Citation("a", A), Citation("b", B)],
        {"a": CurrentSection(A, "alpha"), "b": CurrentSection(section_hash("beta2"), "beta2")},
    )
    assert v.outcome is Outcome.HINT
    assert v.with_status(SectionStatus.VALID) == ["a"]
    assert v.with_status(SectionStatus.CHANGED) == ["b"]
    assert v.sections[1].text is None


def test_none_unchanged_is_miss_and_deleted_counts_as_invalid():
    v = validate([Citation("a", A), Citation("b", B)], {"a": CurrentSection(section_hash("x"), "x")})
    assert v.outcome is Outcome.MISS
    assert v.with_status(SectionStatus.DELETED) == ["b"]


def test_nothing_cited_is_a_miss():
    assert validate([], {}).outcome is Outcome.MISS


def test_budget_keeps_whole_sections_then_cuts_the_next_and_drops_the_rest():
    cut = cut_to_budget([("a", "one two three"), ("b", "four five six seven"), ("c", "eight")], 5)
    assert [p.text for p in cut.parts] == ["one two three", "four five", None]
    assert cut.tokens == 5 and cut.truncated
    assert [p.truncated for p in cut.parts] == [False, True, True]


def test_budget_large_enough_is_not_truncated():
    cut = cut_to_budget([("a", "x = f(1)")], 100)
    assert cut.tokens == count_tokens("x = f(1)") == 6 and not cut.truncated


def test_negative_budget_raises():
    with pytest.raises(ValueError):
        cut_to_budget([], -1)


def test_hint_names_valid_changed_deleted_and_where_to_start():
    steps = [RecordedStep("search", {"query": "visiting"}, ("a", "b")), RecordedStep("read", {"id": "c"}, ("c",))]
    text = hint_text("ICU visiting hours", 0.91, ["a"], ["c"], [], steps)
    assert "still valid: a." in text and "changed since and must be read again: c." in text
    assert text.endswith('Start with: read(id="c").')
    assert starting_step(steps, ["b"]) is steps[0]


@pytest.mark.parametrize(
    "answer",
    [
        "The documents I found don't cover this.",
        "I couldn't find any information about parking fees.",
        "The sources do not mention the ICU visiting hours.",
        "There is no information about that in the provided context.",
        "This is not covered in the documentation.",
    ],
)
def test_refusal_answers_are_recognised(answer):
    assert says_sources_do_not_answer(answer)


@pytest.mark.parametrize(
    "answer",
    [
        "ICU visiting hours are 14:00 to 16:00.",
        "Use copy.deepcopy(); the docs explain why a shallow copy is not enough.",
        "You cannot park in car park A; visitors use car park B.",
    ],
)
def test_real_answers_are_not_taken_for_refusals(answer):
    assert not says_sources_do_not_answer(answer)
