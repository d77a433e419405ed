import subprocess
import sys

import numpy as np
import pytest

from trails.core.banding import BandLayout, band_keys, layout_for_threshold
from trails.core.lexical import jaccard_many
from trails.core.minhash import MinHashParams, MinHashSignature, minhash_query
from trails.core.normalise import normalise_query, shingles

P = MinHashParams(128, 1)


def test_normalise_folds_unicode_case_punctuation_and_space():
    assert normalise_query("  What are the ＩＣＵ   visiting-hours?! ") == "what are the icu visiting hours"


def test_normalise_keeps_c_plus_plus_apart_from_c():
    assert normalise_query("Is C++ faster than C?") == "is c++ faster than c"


def jaccard(a: MinHashSignature, b: MinHashSignature) -> float:
    """The product's estimate (recall compares a question with stored signatures this way)."""
    return float(jaccard_many(a, [b.to_bytes()], [b.params.label])[0])


def test_identical_questions_have_jaccard_one_and_different_ones_less():
    a = minhash_query("How do I copy an object in Python?", P)
    assert jaccard(a, minhash_query("how do i copy an OBJECT in python", P)) == 1.0
    assert jaccard(a, minhash_query("How do I delete a file in Python?", P)) < 0.5


def test_jaccard_estimate_is_close_to_exact_jaccard():
    x, y = "what are the icu visiting hours today", "what are the general ward visiting hours today"
    exact = len(shingles(x) & shingles(y)) / len(shingles(x) | shingles(y))
    estimate = jaccard(minhash_query(x, MinHashParams(1024, 7)), minhash_query(y, MinHashParams(1024, 7)))
    assert abs(exact - estimate) < 0.06


def test_comparing_signatures_with_different_parameters_raises():
    with pytest.raises(ValueError, match="minhash:128:1:fold3 and minhash:128:2:fold3"):
        jaccard(minhash_query("a question", P), minhash_query("a question", MinHashParams(128, 2)))


def test_signature_round_trips_through_bytes_and_refuses_wrong_length():
    sig = minhash_query("how do I sort a dict", P)
    again = MinHashSignature.from_bytes(P, sig.to_bytes())
    assert np.array_equal(sig.values, again.values)
    with pytest.raises(ValueError, match="64 values"):
        MinHashSignature.from_bytes(P, sig.to_bytes()[:256])


def test_empty_query_has_no_signature():
    with pytest.raises(ValueError):
        minhash_query("?!", P)


def test_signatures_and_band_keys_are_the_same_in_another_process():
    query = "What are the ICU visiting hours?"
    code = (
        "from trails.core.minhash import MinHashParams, minhash_query\n"
        "from trails.core.banding import BandLayout, band_keys\n"
        f"s = minhash_query({query!r}, MinHashParams(128, 1))\n"
        "print(s.values.tolist()); print(band_keys(s.values, BandLayout(21, 6), 'p'))\n"
    )
    # A different hash seed proves nothing depends on Python's salted hash().
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    ).stdout.splitlines()
    sig = minhash_query(query, P)
    assert out[0] == str(sig.values.tolist())
    assert out[1] == str(band_keys(sig.values, BandLayout(21, 6), "p"))


def test_layout_from_threshold_fits_the_signature_and_moves_with_the_threshold():
    low, high = layout_for_threshold(0.5, 128), layout_for_threshold(0.9, 128)
    assert low.bands * low.rows <= 128 and high.bands * high.rows <= 128
    assert low.rows < high.rows
    # Around the threshold the collision probability climbs steeply.
    assert low.collision_probability(0.3) < 0.5 < low.collision_probability(0.7)


def test_band_keys_differ_by_partition_and_layout():
    sig = minhash_query("where do visitors park", P)
    a = band_keys(sig.values, BandLayout(16, 8), "doc-1")
    assert len(a) == 16 and all(-(2**63) <= k < 2**63 for k in a)
    assert not set(a) & set(band_keys(sig.values, BandLayout(16, 8), "doc-2"))
    assert not set(a) & set(band_keys(sig.values, BandLayout(32, 4), "doc-1"))


def test_band_keys_refuse_a_layout_longer_than_the_signature():
    with pytest.raises(ValueError, match="needs 132"):
        band_keys(minhash_query("x y", P).values, BandLayout(33, 4))


def test_a_signature_not_kept_resembles_nothing_and_the_others_score_as_before():
    # An embedding-only scope keeps no signature; until re-signed after a switch to lexical
    # matching its trails score 0 beside the others, never an error.
    a = minhash_query("How do I copy an object in Python?", P)
    same = minhash_query("how do i copy an OBJECT in python", P)
    scores = jaccard_many(a, [b"", same.to_bytes(), b""], ["", P.label, P.label])
    assert list(scores) == [0.0, 1.0, 0.0]
    assert list(jaccard_many(a, [b""], [""])) == [0.0]


def test_scope_salts_keep_scopes_keys_apart_and_undo_themselves():
    from trails.core.banding import scope_salt, scoped_keys

    keys = [-(2**63), -1, 0, 1, 2**63 - 1]
    assert len({scope_salt(scope_id) for scope_id in range(1, 10_000)}) == 9_999
    for scope_id in (1, 2, 10**9):
        stored = scoped_keys(keys, scope_id)
        assert all(-(2**63) <= key < 2**63 for key in stored)  # a BIGINT
        assert scoped_keys(stored, scope_id) == keys
    assert set(scoped_keys(keys, 1)).isdisjoint(scoped_keys(keys, 2))
