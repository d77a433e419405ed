"""The overview's verdict from plain figures: which signal makes it watch or broken."""

from trails.core.health import in_words, judge, service_refusals

CALM = dict(
    false_hits_verdict="ok",
    latency_p95_ms=40.0,
    budget_ms=500,
    refusals={
        "minutes": 5,
        "scope": {"requests": 400, "refused": {}},
        "service": {"requests": 1000, "refused": {}},
    },
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
        "rollup_behind": (True, "broken", "the roll-up is behind"),
        "flags": (["embedding:ceiling"], "broken", "1 flag(s) waiting for an operator"),
    }
    for name, (value, verdict, words) in cases.items():
        health = judge(**{**CALM, name: value})
        assert health.verdict == verdict and words in health.because, name
    assert judge(**{**CALM, "latency_p95_ms": 450.0}).verdict == "watch"  # near the budget
    assert judge(**{**CALM, "false_hits_verdict": "watch"}).verdict == "watch"


def refusals(own: dict, service: dict, own_requests: int = 400, requests: int = 1000) -> dict:
    return {
        "minutes": 5,
        "scope": {"requests": own_requests, "refused": own},
        "service": {"requests": requests, "refused": service},
    }


def test_a_scopes_own_refusals_judge_it_by_cause_and_the_services_only_watch():
    own = judge(**{**CALM, "refusals": refusals({"queued past the budget": 100, "database": 30}, {"database": 130})})
    assert own.verdict == "broken" and (
        "130 of 400 API requests to this scope refused with 503 in the last 5 min "
        "(100 queued past the budget, 30 database)" in own.because
    )
    assert judge(**{**CALM, "refusals": refusals({"model busy": 12}, {"model busy": 12})}).verdict == "watch"  # 3 %
    # A quiet tenant beside a flooded one (keyless floods included): the service's, not the tenant's verdict.
    flooded = refusals({}, {"queued past the budget": 500, "model busy": 20})
    assert judge(**{**CALM, "refusals": flooded}).verdict == "ok"
    service = service_refusals(flooded)
    assert service.level == "broken" and (
        "the service refused 520 of 1000 API requests with 503 in the last 5 min "
        "(500 queued past the budget, 20 model busy), of every client, keyless ones included; "
        "0 of them to this scope's keys" == service.words
    )
    assert service_refusals(refusals({}, {"model busy": 30})).level == "watch"  # 3 %
    assert service_refusals(refusals({}, {"model busy": 10})) is None
    # Refusals that ended before the window are none; counts that cannot be read are no verdict.
    assert judge(**{**CALM, "refusals": refusals({}, {})}).verdict == "ok"
    assert judge(**{**CALM, "refusals": None}).verdict == "ok"


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


def test_a_job_waiting_past_its_time_is_a_watch_with_its_age():
    from trails.core.health import WaitingJob

    fresh = WaitingJob("docs sync", "queued", 60.0, 1800.0)
    late = WaitingJob("docs sync", "queued", 1200.0, 1800.0)
    lost = WaitingJob("purge", "running", 4000.0, 3600.0)
    assert judge(**{**CALM, "waiting": [fresh]}).verdict == "ok"
    queued = judge(**{**CALM, "waiting": [fresh, late]})
    assert queued.verdict == "watch" and "a docs sync queued for 20 min: is the worker taking jobs?" in queued.because
    assert "its worker may have stopped" in judge(**{**CALM, "waiting": [lost]}).because
