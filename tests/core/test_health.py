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


JOBS = {"worker": 60.0, "beat": 60.0, "roll_up_task": 600.0, "sweep_expired_task": 3600.0}


def jobs(**ages) -> dict:
    """Every job heard from 20 s ago, but those given."""
    return {**CALM, "job_ages": {job: ages.get(job, 20.0) for job in JOBS}, "job_periods": JOBS}


def test_a_beat_outage_beside_a_healthy_worker_names_beat_and_not_the_worker():
    # Beat stopped 4 min ago; the worker ran the last heartbeat it sent, and nothing since.
    health = judge(**jobs(beat=240.0, worker=235.0, roll_up_task=235.0))
    assert health.verdict == "broken"
    assert health.because == (
        "beat silent for 4 min (it sends a heartbeat every 1 min): is beat running? No job is sent until it is"
    )
    # Both stopped: the worker left the heartbeats beat sent unanswered, so both are named.
    both = judge(**jobs(beat=240.0, worker=900.0))
    assert "beat silent for 4 min" in both.because
    assert "worker silent for 15 min (a heartbeat every 1 min, beat silent too): is the worker running?" in both.because
    # The worker stopped, beat still sends: the worker alone.
    worker = judge(**jobs(worker=200.0))
    assert (
        worker.because
        == "worker silent for 3 min (a heartbeat every 1 min, beat still sends it): is the worker running?"
    )


def test_beat_running_inside_the_worker_names_the_worker_when_both_go_silent():
    # `worker --beat` (as make run starts it): one process, so stopping it silences both.
    embedded = judge(**jobs(beat=240.0, worker=240.0), beat_embedded=True)
    assert embedded.verdict == "broken" and embedded.because == (
        "beat silent for 4 min (it sends a heartbeat every 1 min): is the worker (beat runs inside it) running? "
        "No job is sent until it is"
    )
    standalone = judge(**jobs(beat=240.0, worker=240.0))
    assert "is beat running?" in standalone.because and "worker" not in standalone.because


def test_a_job_not_yet_due_after_a_deploy_is_not_late():
    # Ten minutes after beat started: the hourly sweep has not come due, and the verdict is calm.
    fresh = judge(**jobs(sweep_expired_task=None), beat_started_age=600.0)
    assert (fresh.verdict, fresh.because) == ("ok", "")
    # Past its first hour without a run, it is a watch that points at the worker's log, not at beat.
    late = judge(**jobs(sweep_expired_task=None), beat_started_age=3700.0)
    assert late.verdict == "watch" and late.because == (
        "sweep_expired_task has not run since it came due (every 1 h): see the worker's log"
    )
    # Beat never heard from at all: beat is named, the jobs it never sent are not.
    nothing = judge(**jobs(beat=None, worker=None, roll_up_task=None, sweep_expired_task=None))
    assert nothing.because == "beat never heard from: is beat running?"


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
