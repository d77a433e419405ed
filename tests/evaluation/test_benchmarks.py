"""The benchmarks' own parts: the scale workload and the comparison with the previous run."""
from __future__ import annotations

import json

import numpy as np

from evaluation.management.commands.bench import comparison
from evaluation.scale import ScaleWorkload
from trails.embedders.hashing import Embedder as HashingEmbedder


def pairs_file(tmp_path, count: int = 60):
    rows = [
        {"a": f"how do i configure the {w} setting number {i} on linux", "b": f"how can i change the {w} option on linux {i}",
         "duplicate": i % 3 == 0}
        for i, w in enumerate(["proxy", "cache", "timeout", "locale", "font", "printer"] * (count // 6))
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def test_a_store_grown_in_steps_is_the_store_grown_at_once(tmp_path):
    path = pairs_file(tmp_path)
    stepwise = ScaleWorkload(HashingEmbedder(), seed=3, pairs_path=path, cache=None)
    stepwise.grow(100)
    stepwise.grow(25_000)
    at_once = ScaleWorkload(HashingEmbedder(), seed=3, pairs_path=path, cache=None)
    at_once.grow(25_000)
    assert stepwise.texts == at_once.texts
    assert np.array_equal(stepwise.matrix(), at_once.matrix())
    assert len(set(at_once.texts)) == len(at_once.texts) >= 25_000  # each text has its own vector


def test_variants_relate_to_their_base_as_same_topic_pairs_do(tmp_path):
    workload = ScaleWorkload(HashingEmbedder(), seed=3, pairs_path=pairs_file(tmp_path), cache=None)
    texts, vectors = workload.grow(2_000)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    base = workload.base
    best = (vectors[len(base):] @ base.T).max(axis=1)  # each variant's nearest stored question
    assert best.min() >= workload.pair_cosines.min() - 1e-4
    asked = workload.asked(40)
    assert {a.kind for a in asked} >= {"stored", "unseen"} and not set(a.text for a in asked if a.kind != "stored") & set(texts)


def test_the_comparison_flags_what_got_worse_past_the_tolerance():
    previous = {"http": {"recall lexical (half hits)": {"per_second": 500.0, "p99_ms": 60.0}},
                "scale": {"largest": {"p50_ms": 2.0}}}
    current = {"http": {"recall lexical (half hits)": {"per_second": 400.0, "p99_ms": 50.0}},
               "scale": {"largest": {"p50_ms": 2.1}}}
    lines = {line.split("  ")[1].strip(): line for line in comparison(previous, current)}
    assert "REGRESSION" in lines["HTTP lexical recalls/s"]  # 20 % fewer
    assert "REGRESSION" not in lines["HTTP lexical recall p99 ms"]  # better
    assert "REGRESSION" not in lines["embedding recall p50 ms at the largest size"]  # 5 %: within the tolerance
