"""Where the CPU of a benchmark run went, read from /proc: what one request cost the web
workers, PostgreSQL and the load generator, and so the most requests a second this
machine's cores could carry at that cost.

Requests a second on a shared 2-core machine move by a third from one hour to the next;
CPU per request moves less and tells where a change saved work. A reference workload
timed beside the runs tells a slow hour from a slow change.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of a process, all its threads (0.0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0.0
    # After the command's closing parenthesis: state is field 3, utime 14 and stime 15.
    return (int(fields[11]) + int(fields[12])) / _TICKS


def pids_named(name: str) -> list[int]:
    """Processes whose command name is `name` (PostgreSQL's are all "postgres")."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return found


def cpu_of(pids: Iterable[int]) -> dict[int, float]:
    return {pid: process_cpu_seconds(pid) for pid in pids}


@dataclass
class CpuMeter:
    """CPU seconds spent between `start` and `stop` by the web workers (listed by `workers`),
    every PostgreSQL process, and this process (the load generator runs in it)."""

    workers: Callable[[], list[int]]
    _before: dict[str, dict[int, float]] = field(default_factory=dict)
    _own: float = 0.0

    def start(self) -> None:
        self._before = {"workers": cpu_of(self.workers()), "postgres": cpu_of(pids_named("postgres"))}
        self._own = time.process_time()

    def stop(self, requests: int) -> dict:
        """CPU ms per request of each part, their total, and the rate the cores could carry at it."""
        spent = {
            part: sum(now - self._before[part].get(pid, 0.0) for pid, now in cpu_of(pids).items())
            for part, pids in (("workers", self.workers()), ("postgres", pids_named("postgres")))
        }
        spent["load_generator"] = time.process_time() - self._own
        per_request = {part: round(seconds * 1000.0 / max(1, requests), 2) for part, seconds in spent.items()}
        total = sum(spent.values()) * 1000.0 / max(1, requests)
        return {
            "cpu_ms_per_request": per_request | {"total": round(total, 2)},
            "cpu_ceiling_per_second": round((os.cpu_count() or 1) * 1000.0 / total, 1) if total else None,
        }


def reference_timings(embed: Callable[[str], object], runs: int = 30) -> dict:
    """A fixed workload timed now: one question through the model, and a pure-Python loop
    (medians, ms). Figures of two runs compare fairly only at similar reference timings."""

    def median_ms(work: Callable[[], object]) -> float:
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            work()
            times.append((time.perf_counter() - started) * 1000.0)
        return round(statistics.median(times), 2)

    question = "How do I copy an object in Python without changing the original?"
    embed(question)
    return {
        "model_ms": median_ms(lambda: embed(question)),
        "python_loop_ms": median_ms(lambda: sum(i * i for i in range(200_000))),
    }
