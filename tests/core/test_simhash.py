import subprocess
import sys

import numpy as np
import pytest

from trails.core.banding import BandLayout, band_keys
from trails.core.simhash import EmbeddingVector, SimHashParams, bit_agreement, cosine_many, simhash_bits
from trails.embedders.hashing import Embedder as HashingEmbedder

P = SimHashParams(dim=384, bits=512, seed=1)


def test_close_vectors_share_most_bits_and_far_ones_about_half():
    embedder = HashingEmbedder()
    a, b, c = embedder.embed_many(
        ["visiting hours in the icu", "visiting hours in the icu today", "renew a staff parking permit"]
    )
    agree_close = np.mean(simhash_bits(a, P) == simhash_bits(b, P))
    agree_far = np.mean(simhash_bits(a, P) == simhash_bits(c, P))
    assert agree_close > 0.8 > agree_far
    assert abs(agree_close - bit_agreement(float(a @ b))) < 0.06


def test_simhash_band_keys_are_the_same_in_another_process():
    code = (
        "import numpy as np\n"
        "from trails.core.simhash import SimHashParams, simhash_bits\n"
        "from trails.core.banding import BandLayout, band_keys\n"
        "from trails.embedders.hashing import Embedder\n"
        "v = Embedder().embed('what are the icu visiting hours')\n"
        "print(band_keys(simhash_bits(v, SimHashParams(384, 512, 1)), BandLayout(32, 16), 'ns'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "99", "PATH": ""},
    ).stdout.strip()
    v = HashingEmbedder().embed("what are the icu visiting hours")
    assert out == str(band_keys(simhash_bits(v, P), BandLayout(32, 16), "ns"))


def test_vectors_of_different_models_are_never_compared():
    a = EmbeddingVector("all-MiniLM-L6-v2", np.ones(4, dtype=np.float32) / 2)
    b = EmbeddingVector("other-model", np.ones(4, dtype=np.float32) / 2)
    with pytest.raises(ValueError, match="'all-MiniLM-L6-v2' and model 'other-model'"):
        a.cosine(b)
    with pytest.raises(ValueError, match="other-model"):
        cosine_many(a, [b.to_bytes()], ["other-model"])


def test_wrong_dimension_is_refused():
    with pytest.raises(ValueError, match="expect"):
        simhash_bits(np.ones(10, dtype=np.float32), P)


def test_hashing_embedder_is_deterministic_and_unit_length():
    one, two = HashingEmbedder().embed("ICU visiting hours"), HashingEmbedder().embed("ICU visiting hours")
    assert np.array_equal(one, two) and abs(float(np.linalg.norm(one)) - 1.0) < 1e-5


def test_pairs_at_the_threshold_stay_within_the_sketch_distance_limit():
    """The candidate read drops collisions past the limit: a pair at the threshold
    must almost never be past it (the limit promises at most 1 in 10,000)."""
    from trails.core.simhash import sketch, sketch_distance, sketch_distance_limit

    rng = np.random.RandomState(5)
    limit = sketch_distance_limit(0.95)
    over = 0
    for _ in range(3000):
        a = rng.standard_normal(384).astype(np.float32)
        a /= np.linalg.norm(a)
        u = rng.standard_normal(384).astype(np.float32)
        u -= (u @ a) * a
        u /= np.linalg.norm(u)
        b = (0.95 * a + np.sqrt(1 - 0.95**2) * u).astype(np.float32)
        over += sketch_distance(sketch(a, P), sketch(b, P)) > limit
    assert over <= 3  # expected 0.3 at 1e-4
    assert sketch_distance_limit(0.97) < limit < sketch_distance_limit(0.9)


def test_a_sketch_is_two_signed_64_bit_integers_and_its_own_nearest():
    from trails.core.simhash import sketch, sketch_distance

    v = HashingEmbedder().embed("what are the icu visiting hours")
    high, low = sketch(v, P)
    assert all(-(2**63) <= x < 2**63 for x in (high, low))
    assert sketch_distance((high, low), (high, low)) == 0
    assert sketch_distance((high, low), sketch(-v, P)) == 128


def test_a_stored_vector_keeps_its_cosines_in_every_format_and_old_rows_still_read():
    from trails.core.simhash import FLOAT16, INT8, decode_vector, encode_vector

    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((200, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = EmbeddingVector("m", vectors[0])
    exact = vectors @ vectors[0]
    for stored_format, tolerance in ((FLOAT16, 1e-3), (INT8, 5e-3)):
        stored = [encode_vector(v, stored_format) for v in vectors]
        assert np.abs(cosine_many(query, stored, ["m"] * len(stored)) - exact).max() < tolerance
    assert len(encode_vector(vectors[0], FLOAT16)) == 769 and len(encode_vector(vectors[0], INT8)) == 389
    # Rows stored as float32 before the compact formats, and a mix of both, read as they were.
    legacy = [v.astype("<f4").tobytes() for v in vectors[:3]]
    assert np.allclose(cosine_many(query, legacy, ["m"] * 3), exact[:3])
    mixed = [legacy[0], encode_vector(vectors[1])]
    assert np.allclose(cosine_many(query, mixed, ["m"] * 2), exact[:2], atol=1e-3)
    with pytest.raises(ValueError, match="not a stored vector"):
        decode_vector(b"\x07ab")
