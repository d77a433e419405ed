"""The benchmarks' own parts: the scale workload and the comparison with the previous run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evaluation.management.commands.bench import comparison
from evaluation.scale import ScaleWorkload
from trails.embedders.hashing import Embedder as HashingEmbedder


def pairs_file(tmp_path, count: int = 60):
    rows = [
        {
            "a": f"how do i configure the {w} setting number {i} on linux",
            "b": f"how can i change the {w} option on linux {i}",
            "duplicate": i % 3 == 0,
        }
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


def test_a_second_store_takes_the_first_questions_already_handed_out(tmp_path):
    """grow() hands out only questions not handed out before: a 10k store made after a 100k one
    must take the 100k store's first questions, not grow() (which gave it none)."""
    workload = ScaleWorkload(HashingEmbedder(), seed=3, pairs_path=pairs_file(tmp_path), cache=None)
    texts, vectors = workload.grow(3_000)
    assert workload.grow(1_000)[0] == []
    small_texts, small_vectors = workload.first(1_000)
    assert small_texts == texts[:1_000] and np.array_equal(small_vectors, vectors[:1_000])
    with pytest.raises(ValueError):
        workload.first(5_000)


def test_variants_relate_to_their_base_as_same_topic_pairs_do(tmp_path):
    workload = ScaleWorkload(HashingEmbedder(), seed=3, pairs_path=pairs_file(tmp_path), cache=None)
    texts, vectors = workload.grow(2_000)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    base = workload.base
    best = (vectors[len(base) :] @ base.T).max(axis=1)  # each variant's nearest stored question
    assert best.min() >= workload.pair_cosines.min() - 1e-4
    asked = workload.asked(40)
    assert {a.kind for a in asked} >= {"stored", "unseen"} and not set(
        a.text for a in asked if a.kind != "stored"
    ) & set(texts)


def test_the_comparison_flags_what_got_worse_past_the_tolerance():
    previous = {
        "http": {"recall lexical (half hits)": {"per_second": 500.0, "p99_ms": 60.0}},
        "scale": {"largest": {"p50_ms": 2.0}},
    }
    current = {
        "http": {"recall lexical (half hits)": {"per_second": 400.0, "p99_ms": 50.0}},
        "scale": {"largest": {"p50_ms": 2.1}},
    }
    lines = {line.split("  ")[1].strip(): line for line in comparison(previous, current)}
    assert "REGRESSION" in lines["HTTP lexical recalls/s"]  # 20 % fewer
    assert "REGRESSION" not in lines["HTTP lexical recall p99 ms"]  # better
    assert "REGRESSION" not in lines["embedding recall p50 ms at the largest size"]  # 5 %: within the tolerance


def test_the_comparison_watches_the_peer_at_a_million_once_both_runs_measured_it():
    # Figures as they come back from the JSON files: sizes are string keys.
    peer = lambda p50, p99: {
        "peer": {
            "sizes": {"100000": {"ratio_p50": 11.0, "ratio_p99": 5.0}, "1000000": {"ratio_p50": p50, "ratio_p99": p99}}
        }
    }
    lines = {line.split("  ")[1].strip(): line for line in comparison(peer(28.0, 18.0), peer(20.0, 17.0))}
    assert "REGRESSION" in lines["GPTCache get() p50 / recall() p50 at 1M"]  # 29 % less of a lead
    assert "REGRESSION" not in lines["GPTCache get() p99 / recall() p99 at 1M"]
    only_100k = {"peer": {"sizes": {"100000": {"ratio_p50": 11.0, "ratio_p99": 5.0}}}}
    assert not [line for line in comparison(only_100k, peer(20.0, 17.0)) if "at 1M" in line]  # nothing to compare with


def test_the_cpu_meter_charges_the_work_done_to_the_process_that_did_it():
    import os
    import subprocess
    import sys

    from evaluation.cpu import CpuMeter, process_cpu_seconds

    # A stand-in worker that burns about 0.3 s of CPU while the meter runs.
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nsys.stdin.readline()\nt = time.process_time()\n"
            "while time.process_time() - t < 0.3: pass\nprint(flush=True)\nsys.stdin.readline()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        meter = CpuMeter(lambda: [worker.pid])
        meter.start()
        worker.stdin.write("go\n")
        worker.stdin.flush()
        worker.stdout.readline()  # its 0.3 s are spent
        figures = meter.stop(requests=10)
    finally:
        worker.stdin.write("done\n")
        worker.stdin.flush()
        worker.wait(10)
    per_request = figures["cpu_ms_per_request"]
    assert 25 <= per_request["workers"] <= 60  # 0.3 s over 10 requests, read in clock ticks
    assert per_request["total"] >= per_request["workers"]
    assert figures["cpu_ceiling_per_second"] == pytest.approx(
        (os.cpu_count() or 1) * 1000.0 / per_request["total"], rel=0.01
    )
    assert process_cpu_seconds(worker.pid) == 0.0  # gone: nothing to read


def test_the_phase_clock_times_recall_by_store_and_leaves_recall_as_it_was(db):
    import trails.serving.recall as recall_module
    from evaluation import phases
    from scopes.models import Scope, Section
    from trails.serving.record import RecordInput, record

    scope = Scope.objects.create(slug="phases", name="Phases", matcher="lexical")
    Section.upsert(scope, {"s1": "Visiting hours are 9 to 5."})
    record(scope, RecordInput(query="what are the visiting hours on the ward", cited=["s1"], signal="accepted"))
    original = recall_module.read_candidates
    with phases.timing() as clock:
        clock.label = "large"
        assert recall_module.recall(scope, "what are the visiting hours on the ward").outcome.value == "prefetch"
        clock.label = "small"
        recall_module.recall(scope, "where is the car park")
    timed = clock.mean_ms("large", 1)
    assert set(timed) == set(phases.PHASES) and timed["read_candidates"] > 0 and timed["validate"] > 0
    assert clock.mean_ms("small", 1)["validate"] == 0  # a miss validates nothing
    assert recall_module.read_candidates is original


@pytest.mark.parametrize(
    "option, value", [("seconds", 0), ("overload_seconds", -1), ("memory_requests", -5), ("clients", 0)]
)
def test_the_http_benchmark_refuses_impossible_run_lengths_before_filling_anything(option, value):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    # No database fixture: the refusal comes before the fill (a 0 s run once divided by zero at its end).
    with pytest.raises(CommandError, match=f"--{option.replace('_', '-')} must be at least"):
        call_command("benchmark_http", **{option: value})


def test_brute_force_nearest_is_the_highest_cosine_whatever_the_lengths():
    import numpy as np

    from evaluation.peer.pgvector_peer import brute_force_nearest

    stored = np.array([[1.0, 0.0], [0.0, 5.0], [3.0, 3.0]], dtype=np.float32)
    asked = np.array([[0.1, 1.0], [2.0, 1.9], [9.0, 0.5]], dtype=np.float32)
    nearest, cosine = brute_force_nearest(stored, asked, chunk=2)
    assert nearest.tolist() == [1, 2, 0]
    assert round(float(cosine[1]), 4) == round(float((2.0 + 1.9) / (np.hypot(2.0, 1.9) * np.sqrt(2))), 4)


def test_the_hit_path_summary_names_each_scan_with_the_rows_it_read_over_its_loops():
    from evaluation.management.commands.benchmark_peer import plan_nodes

    plan = {
        "Node Type": "Nested Loop",
        "Plans": [
            {"Node Type": "CTE Scan", "CTE Name": "found", "Actual Rows": 9, "Actual Loops": 1},
            {
                "Node Type": "Bitmap Heap Scan",
                "Relation Name": "trails_citation",
                "Actual Rows": 2,
                "Actual Loops": 3,
                "Plans": [
                    {
                        "Node Type": "Bitmap Index Scan",
                        "Index Name": "citation_scope_section",
                        "Actual Rows": 200000,
                        "Actual Loops": 1,
                    }
                ],
            },
        ],
    }
    assert plan_nodes(plan, []) == [
        "Bitmap Heap Scan trails_citation (6 rows)",
        "Bitmap Index Scan citation_scope_section (200000 rows)",
    ]
