"""A scope's health verdict: ok / watch / broken, and which signal made it so.

Plain data in, plain data out (the overview renders it; tests call it without a database).
Red ("broken") only where a person is needed now: false hits over the bound, recall slower
than its budget, a fifth of API requests refused, a job silent for three of its periods, the
roll-up behind, a flag waiting for an operator. "watch" where something may turn so: reports
too few to judge, latency near the budget, some requests refused, a job never heard from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Shares of API requests refused with 503 that make the service "watch" and "broken".
REFUSED_WATCH, REFUSED_BROKEN = 0.02, 0.2
# p95 latency past this share of the budget is "watch"; past the budget, "broken".
LATENCY_WATCH = 0.8
# A job silent for this many of its periods is "broken".
SILENT_PERIODS = 3


@dataclass(frozen=True)
class Finding:
    level: str  # "watch" or "broken"
    part: str  # what it is about: "false hits", "latency", "refused requests", "jobs", "roll-up", "flags"
    words: str


@dataclass(frozen=True)
class Health:
    verdict: str  # "ok", "watch" or "broken"
    findings: list[Finding] = field(default_factory=list)

    @property
    def because(self) -> str:
        """The findings that set the verdict, in words ("" when ok)."""
        return "; ".join(f.words for f in self.findings if f.level == self.verdict)


def in_words(seconds: float | None) -> str:
    """An age as a person reads it: "40 s", "7 min", "3 h", "2 days"."""
    if seconds is None:
        return "never"
    seconds = max(0.0, seconds)
    for unit, size in (("day", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size * (2 if unit == "day" else 1):
            n = int(seconds // size)
            return f"{n} {unit}{'s' if unit == 'day' and n != 1 else ''}"
    return f"{int(seconds)} s"


# A job queued longer than this (three heartbeats) waits for a worker that is not taking jobs.
QUEUED_STUCK_S = 180.0


@dataclass(frozen=True)
class WaitingJob:
    """A background job the scope is waiting for: a docs sync or a purge, queued or running."""

    what: str  # "docs sync", "purge"
    state: str  # "queued" or "running"
    age_s: float  # since it was queued (queued) or a worker took it (running)
    running_limit_s: float  # past this a running one is taken for lost (the worker died)

    @property
    def age_words(self) -> str:
        return in_words(self.age_s)

    @property
    def stuck(self) -> bool:
        return self.age_s > (QUEUED_STUCK_S if self.state == "queued" else self.running_limit_s)


def waiting_findings(jobs: list[WaitingJob]) -> list[Finding]:
    """A job stuck in the queue or past its running limit is a watch, with its age."""
    return [
        Finding(
            "watch",
            "jobs",
            f"a {job.what} {job.state} for {in_words(job.age_s)}"
            + (": is the worker taking jobs?" if job.state == "queued" else ": its worker may have stopped"),
        )
        for job in jobs
        if job.stuck
    ]


def beat_silent(job_ages: dict[str, float | None], job_periods: dict[str, float]) -> bool:
    """Whether beat has not sent the heartbeat for three of its periods (or was never heard from)."""
    age, period = job_ages.get("beat", 0.0), job_periods.get("beat", 60.0)
    return age is None or age > SILENT_PERIODS * period


def due_in(age: float | None, period: float, beat_started_age: float | None) -> float | None:
    """Seconds until a job that never ran comes due (beat first sends it one period after it
    starts), or None where it is due already or ran before (its own age judges it then)."""
    if age is not None or beat_started_age is None or not period:
        return None
    left = period - beat_started_age
    return left if left > 0 else None


def job_findings(
    job_ages: dict[str, float | None],
    job_periods: dict[str, float],
    beat_started_age: float | None = None,
    beat_embedded: bool = False,
) -> list[Finding]:
    """Each job judged by its own schedule and heartbeat, and the process to look at named.

    Beat sends every job, the worker runs it: "beat" is when beat last sent the heartbeat,
    "worker" when the worker last ran it. While beat is silent nothing reaches the worker, so
    a worker that ran the last heartbeat beat sent is not blamed, nor are the jobs beat did not
    send. A job that never ran is not late before its first run is due (after a deploy). Beat
    embedded in the worker (`worker --beat`) stops with it: its silence then names the worker.
    """
    findings: list[Finding] = []
    silent_beat = beat_silent(job_ages, job_periods)
    beat_age = job_ages.get("beat", 0.0)
    for job, age in job_ages.items():
        period = job_periods.get(job) or 0.0
        if due_in(age, period, beat_started_age) is not None:
            continue  # not yet due: the first hour after a deploy is not late
        if job == "beat":
            if age is None:
                findings.append(Finding("watch", "jobs", "beat never heard from: is beat running?"))
            elif period and age > SILENT_PERIODS * period:
                process = "the worker (beat runs inside it)" if beat_embedded else "beat"
                findings.append(
                    Finding(
                        "broken",
                        "jobs",
                        f"beat silent for {in_words(age)} (it sends a heartbeat every {in_words(period)}): "
                        f"is {process} running? No job is sent until it is",
                    )
                )
            continue
        # With beat silent, a job it did not send is not the job's fault, nor the worker's
        # where the worker ran what beat last sent (its last run no older than beat's last send).
        if silent_beat and (beat_age is None or age is None or age <= beat_age + period):
            continue
        if job == "worker":
            if age is None:
                findings.append(Finding("watch", "jobs", "worker never heard from: is the worker running?"))
            elif period and age > SILENT_PERIODS * period:
                findings.append(
                    Finding(
                        "broken",
                        "jobs",
                        f"worker silent for {in_words(age)} (a heartbeat every {in_words(period)}, "
                        + ("beat silent too" if silent_beat else "beat still sends it")
                        + "): is the worker running?",
                    )
                )
            continue
        if age is None:
            words = f"{job} has not run since it came due"
            findings.append(Finding("watch", "jobs", f"{words} (every {in_words(period)}): see the worker's log"))
        elif period and age > SILENT_PERIODS * period:
            findings.append(
                Finding(
                    "broken", "jobs", f"{job} last succeeded {in_words(age)} ago (it runs every {in_words(period)})"
                )
            )
    return findings


def causes_in_words(refused: dict[str, float]) -> str:
    """ "40 queued past the budget, 12 database": the largest cause first."""
    return ", ".join(f"{n:.0f} {cause}" for cause, n in sorted(refused.items(), key=lambda c: (-c[1], c[0])) if n)


def refusal_findings(refusals: dict | None) -> list[Finding]:
    """This scope's own refusals judge it (watch past 2 %, broken past 20 % of its requests):
    requests its keys were let in with (or refused before the check with a key let in before).
    The service's refusals (keyless floods included) never do: `service_refusals` tells them."""
    if refusals is None:
        return []
    minutes, own = refusals["minutes"], refusals["scope"]
    own_refused = sum(own["refused"].values())
    own_share = own_refused / own["requests"] if own["requests"] else 0.0
    if own_share >= REFUSED_WATCH:
        return [
            Finding(
                "broken" if own_share >= REFUSED_BROKEN else "watch",
                "refused requests",
                f"{own_refused:.0f} of {own['requests']:.0f} API requests to this scope refused with 503 in the "
                f"last {minutes} min ({causes_in_words(own['refused'])})",
            )
        ]
    return []


def service_refusals(refusals: dict | None) -> Finding | None:
    """The whole service's refusals, said as the service's (watch past 2 %, broken past 20 % of
    every API request, keyless and wrong-key ones included); None below that."""
    if refusals is None:
        return None
    minutes, service = refusals["minutes"], refusals["service"]
    refused = sum(service["refused"].values())
    share = refused / service["requests"] if service["requests"] else 0.0
    if share < REFUSED_WATCH:
        return None
    return Finding(
        "broken" if share >= REFUSED_BROKEN else "watch",
        "service",
        f"the service refused {refused:.0f} of {service['requests']:.0f} API requests with 503 in the last "
        f"{minutes} min ({causes_in_words(service['refused'])}), of every client, keyless ones included; "
        f"{sum(refusals['scope']['refused'].values()):.0f} of them to this scope's keys",
    )


def judge(
    *,
    false_hits_verdict: str,
    latency_p95_ms: float | None,
    budget_ms: float,
    refusals: dict | None,
    job_ages: dict[str, float | None],
    job_periods: dict[str, float],
    rollup_behind: bool,
    flags: list[str],
    waiting: list[WaitingJob] = (),
    beat_started_age: float | None = None,
    beat_embedded: bool = False,
) -> Health:
    """The verdict from every signal the overview shows, and the findings behind it.

    Args:
        false_hits_verdict: trails.core.calibration.false_hit_verdict's ("ok", "watch", "over").
        latency_p95_ms: recall's p95 in the app over the window (None without recalls).
        refusals: the last minutes' API requests and 503 refusals by cause, of this scope and of
            the service ({"minutes", "scope": {"requests", "refused": {cause: n}}, "service": ...});
            None where they cannot be read.
        job_ages: seconds since each job's last success (None: never heard from).
        job_periods: each job's schedule, in seconds.
        beat_started_age: seconds since beat last started (None: unknown); see job_findings.
        beat_embedded: beat last started inside the worker (`worker --beat`); see job_findings.
    """
    findings: list[Finding] = []
    if false_hits_verdict == "over":
        findings.append(Finding("broken", "false hits", "false hits over the scope's bound"))
    elif false_hits_verdict == "watch":
        findings.append(Finding("watch", "false hits", "false-hit reports, too few judged to tell"))
    if latency_p95_ms is not None and latency_p95_ms > budget_ms:
        findings.append(
            Finding("broken", "latency", f"recall p95 {latency_p95_ms:.0f} ms, over its {budget_ms:.0f} ms budget")
        )
    elif latency_p95_ms is not None and latency_p95_ms > LATENCY_WATCH * budget_ms:
        findings.append(
            Finding("watch", "latency", f"recall p95 {latency_p95_ms:.0f} ms, near its {budget_ms:.0f} ms budget")
        )
    findings += refusal_findings(refusals)
    findings += job_findings(job_ages, job_periods, beat_started_age, beat_embedded)
    findings += waiting_findings(list(waiting))
    if rollup_behind:
        findings.append(
            Finding("broken", "roll-up", "the roll-up is behind: recent recalls are missing from the charts")
        )
    if flags:
        findings.append(Finding("broken", "flags", f"{len(flags)} flag(s) waiting for an operator"))
    levels = {f.level for f in findings}
    return Health("broken" if "broken" in levels else "watch" if "watch" in levels else "ok", findings)
