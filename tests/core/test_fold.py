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


def test_other_scripts_keep_their_letters_and_marks_in_either_composition():
    assert fold_text("が東京") == "が東京"
    assert fold_text(unicodedata.normalize("NFD", "が한국어")) == fold_text("が한국어")


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
    assert MinHashParams(128, 1).label == "minhash:128:1:fold2"
    assert MinHashParams.from_label("minhash:128:1") == MinHashParams(128, 1, fold=1)
    assert MinHashParams.from_label("minhash:128:1:fold2") == MinHashParams(128, 1)
    with pytest.raises(ValueError):
        MinHashParams.from_label("minhash:128:1:x")
