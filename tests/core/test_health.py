"""The overview's verdict from plain figures: which signal makes it watch or broken."""

from trails.core.health import in_words, judge

CALM = dict(
    false_hits_verdict="ok",
    latency_p95_ms=40.0,
    budget_ms=500,
    requests=1000,
    refused=0,
    job_ages={"roll_up_task": 120.0},
    job_periods={"roll_up_task": 600.0},
    rollup_behind=False,
    flags=[],
)


def test_a_calm_service_is_ok_and_says_no_because():
    health = judge(**CALM)
    assert (health.verdict, health.because) == ("ok", "")


def test_each_signal_turns_the_verdict_and_is_named():
    cases = {
        "false_hits_verdict": ("over", "broken", "false hits over the scope's bound"),
        "latency_p95_ms": (1060.0, "broken", "recall p95 1060 ms, over its 500 ms budget"),
        "refused": (333, "broken", "333 of 1000 API requests refused with 503 (service-wide)"),
        "rollup_behind": (True, "broken", "the roll-up is behind"),
        "flags": (["embedding:ceiling"], "broken", "1 flag(s) waiting for an operator"),
    }
    for name, (value, verdict, words) in cases.items():
        health = judge(**{**CALM, name: value})
        assert health.verdict == verdict and words in health.because, name
    assert judge(**{**CALM, "latency_p95_ms": 450.0}).verdict == "watch"  # near the budget
    assert judge(**{**CALM, "refused": 30}).verdict == "watch"  # 3 %: some refused
    assert judge(**{**CALM, "false_hits_verdict": "watch"}).verdict == "watch"


def test_a_job_never_heard_from_is_watch_and_one_silent_for_three_periods_broken():
    assert judge(**{**CALM, "job_ages": {"roll_up_task": None}}).verdict == "watch"
    silent = judge(**{**CALM, "job_ages": {"roll_up_task": 1801.0}})
    assert (
        silent.verdict == "broken" and "roll_up_task last succeeded 30 min ago (it runs every 10 min)" in silent.because
    )


def test_ages_read_in_words():
    assert [in_words(s) for s in (None, 40, 600, 7200, 86_400, 3 * 86_400)] == [
        "never",
        "40 s",
        "10 min",
        "2 h",
        "24 h",
        "3 days",
    ]
