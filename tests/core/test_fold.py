"""The one fold matching and erasure share."""

from __future__ import annotations

import unicodedata

import pytest

from trails.core import pii
from trails.core.fold import fold, fold_text
from trails.core.minhash import MinHashParams
from trails.core.normalise import normalise_query


@pytest.mark.parametrize(
    "spelling",
    [
        "Ja\u200dne Doe",
        "Ja\u200bne Doe",
        "Ja\u00adne Doe",
        "Jane\u2060 Doe",
        "JANE DOE",
        "Ｊａｎｅ Ｄｏｅ",
        "Jane\u00a0Doe",
    ],
)
def test_ignorable_characters_width_and_case_fold_away(spelling):
    assert normalise_query(spelling) == "jane doe"


@pytest.mark.parametrize(
    "spelling, folded",
    [
        ("IŞIK YILMAZ", "isik yilmaz"),
        ("Işık Yılmaz", "isik yilmaz"),
        ("İşık", "isik"),
        ("Łukasz", "lukasz"),
        ("Søren", "soren"),
        ("Straße", "strasse"),
        ("Æsir", "aesir"),
        ("ﬁnance", "finance"),
        ("Zoe\u0308", "zoe"),
    ],
)
def test_latin_letters_are_transliterated(spelling, folded):
    assert fold_text(spelling) == folded


def test_other_scripts_keep_their_letters_in_either_composition():
    assert fold_text("が東京") == "が東京"  # the voicing mark is kept: が is not か
    assert fold_text("東京 한국어") == "東京 한국어"
    assert fold_text(unicodedata.normalize("NFD", "が한국어")) == fold_text("が한국어") == "が한국어"
    assert fold_text("कि") != fold_text("क")  # a vowel sign is part of the word, not an accent


@pytest.mark.parametrize(
    "spelling, folded",
    [
        ("J\u0332a\u0332n\u0332e\u0332", "jane"),  # marks with no precomposed letter
        ("J\u0336ane", "jane"),
        ("J\u0301ane", "jane"),
        ("a\u0323\u0302", "a"),  # stacked marks in either order
        ("a\u0302\u0323", "a"),
        ("ΣΩΚΡΑΤΗΣ", "σωκρατησ"),
        ("Σωκράτης", "σωκρατησ"),
        ("Фёдоров", "федоров"),
        ("Федоров", "федоров"),
    ],
)
def test_combining_marks_are_dropped_in_every_script(spelling, folded):
    assert fold_text(spelling) == folded
    assert normalise_query(spelling) == folded


@pytest.mark.parametrize(
    "text",
    [
        "J\u0332a\u0332n\u0332e\u0332 D\u0332o\u0332e\u0332 asked",
        "J\u0336ane Doe asked",
        "see /search?q=Jane+Doe&x=1",
        "see /search?q=Jane%20Doe",
        "see /search?q=%4Aane%20Doe",
        "JaneDoe asked",
        "Jane\u200bDoe asked",
        "Jane\u2014Doe asked",
        "Jane/Doe asked",
        "Jane\u00b7Doe asked",
        "report_jane_doe.pdf",
    ],
)
def test_erasure_finds_and_cuts_every_spelling_the_matcher_reads_as_the_name(text):
    rules = pii.rules_for(subject="Jane Doe", builtin=False)
    redacted = pii.redact(text, rules)
    assert pii.REDACTED in redacted
    assert "jane" not in normalise_query(redacted) and not pii.find(redacted, rules)


@pytest.mark.parametrize("text", ["Janet Doe asked", "Jane Does asked", "Jane Roe", "jane+doey"])
def test_erasure_leaves_other_names_alone(text):
    assert pii.redact(text, pii.rules_for(subject="Jane Doe", builtin=False)) == text


def test_an_identifier_must_fold_to_three_letters_or_digits_and_is_named_when_not():
    assert pii.identifier_problem("Bob") is None
    assert "J\u0332" in pii.identifier_problem("J\u0332\u0332\u0332")  # three characters, one letter
    assert "nothing" in pii.identifier_problem("\u200b\u0332\u0332\u0332")


def test_matching_and_erasure_read_one_fold():
    text = "Can Ja\u200bne Doe park?"
    assert "jane doe" in normalise_query(text)
    assert pii.find(text, pii.rules_for(subject="Jane Doe", builtin=False))


def test_each_folded_character_points_back_to_its_origin_so_redaction_cuts_the_original():
    text = "Ask Ja\u200dne Do\u0301e\u00ad, or ＳØＲＥＮ."
    rules = pii.rules_for(subject="jane doe\nsøren", builtin=False)
    assert pii.redact(text, rules) == "Ask [redacted]\u00ad, or [redacted]."
    folded = fold("ß!")
    assert folded.text == "ss!" and folded.origin(0, 2) == (0, 1) and folded.origin(2, 3) == (1, 2)


def test_a_minhash_label_carries_the_fold_and_reads_back_older_labels():
    assert MinHashParams(128, 1).label == "minhash:128:1:fold3"
    assert MinHashParams.from_label("minhash:128:1") == MinHashParams(128, 1, fold=1)
    assert MinHashParams.from_label("minhash:128:1:fold3") == MinHashParams(128, 1)
    with pytest.raises(ValueError):
        MinHashParams.from_label("minhash:128:1:x")
