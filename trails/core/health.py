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


def judge(
    *,
    false_hits_verdict: str,
    latency_p95_ms: float | None,
    budget_ms: float,
    requests: float,
    refused: float,
    job_ages: dict[str, float | None],
    job_periods: dict[str, float],
    rollup_behind: bool,
    flags: list[str],
) -> Health:
    """The verdict from every signal the overview shows, and the findings behind it.

    Args:
        false_hits_verdict: trails.core.calibration.false_hit_verdict's ("ok", "watch", "over").
        latency_p95_ms: recall's p95 in the app over the window (None without recalls).
        requests, refused: API requests answered and refused with 503 (the service's, all workers).
        job_ages: seconds since each job's last success (None: never heard from).
        job_periods: each job's schedule, in seconds.
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
    share = refused / requests if requests else 0.0
    if share >= REFUSED_WATCH:
        level = "broken" if share >= REFUSED_BROKEN else "watch"
        findings.append(
            Finding(
                level,
                "refused requests",
                f"{refused:.0f} of {requests:.0f} API requests refused with 503 (service-wide)",
            )
        )
    for job, age in job_ages.items():
        period = job_periods.get(job)
        if age is None:
            who = "beat" if job == "beat" else "the worker"
            findings.append(Finding("watch", "jobs", f"{job} never heard from: is {who} running?"))
        elif period and age > SILENT_PERIODS * period and job in ("worker", "beat"):
            findings.append(
                Finding(
                    "broken",
                    "jobs",
                    f"{job} silent for {in_words(age)} (a heartbeat every {in_words(period)}): is {job} running?",
                )
            )
        elif period and age > SILENT_PERIODS * period:
            findings.append(
                Finding(
                    "broken", "jobs", f"{job} last succeeded {in_words(age)} ago (it runs every {in_words(period)})"
                )
            )
    if rollup_behind:
        findings.append(
            Finding("broken", "roll-up", "the roll-up is behind: recent recalls are missing from the charts")
        )
    if flags:
        findings.append(Finding("broken", "flags", f"{len(flags)} flag(s) waiting for an operator"))
    levels = {f.level for f in findings}
    return Health("broken" if "broken" in levels else "watch" if "watch" in levels else "ok", findings)
