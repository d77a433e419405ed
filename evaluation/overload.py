"""What benchmark_http's overload runs measure with: a run's summary, the gunicorn workers'
memory, and unauthenticated senders of large gzip bodies beside the recalls."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import Counter
from pathlib import Path

from evaluation.loadgen import Request, Result, open_loop
from evaluation.timing import percentile


def summary(results: list[Result], seconds: float) -> dict:
    ok = [r.latency_ms for r in results if 200 <= r.status < 300]
    shed = [r.latency_ms for r in results if r.status == 503]
    failed = [r for r in results if r.status == 0 or (r.status >= 300 and r.status != 503)]
    return {
        "requests": len(results),
        "ok": len(ok),
        "per_second": round(len(ok) / seconds, 1),
        "p50_ms": round(statistics.median(ok), 1) if ok else None,
        "p99_ms": round(percentile(ok, 0.99), 1) if ok else None,
        "shed_503": len(shed),
        "shed_p99_ms": round(percentile(shed, 0.99), 1) if shed else None,
        "failed": len(failed),
        "statuses": dict(sorted(Counter(r.status for r in results).items())),
        "no_answer": dict(Counter(r.error for r in results if r.status == 0)),
        "max_ms": round(max(r.latency_ms for r in results), 1) if results else None,
        # The load generator's own lag before sending (it shares the 2 cores), and latency without it.
        "client_lag_p99_ms": round(percentile([r.lag_ms for r in results], 0.99), 1) if results else None,
        "sent_to_answer_p99_ms": round(percentile([r.latency_ms - r.lag_ms for r in results if r.status], 0.99), 1)
        if results
        else None,
    }


def worker_pids(master: int) -> list[int]:
    """The gunicorn master's children: its workers."""
    return [int(pid) for pid in Path(f"/proc/{master}/task/{master}/children").read_text().split()]


def worker_rss_mb(master: int) -> dict[int, float]:
    """Resident memory of each gunicorn worker."""
    found = {}
    for pid in worker_pids(master):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                found[int(pid)] = int(line.split()[1]) / 1024.0
    return found


async def with_gzip_senders(port, key, make, rate, seconds, slug) -> tuple[list[Result], list[Result]]:
    """The overload's recalls, and beside them 8 senders without a key, each posting a 1.9 MB gzip body (64 MB
    unpacked) to the section sync back to back."""
    import gzip

    from evaluation.loadgen import Connection

    bomb = gzip.compress(b'{"sections": [' + b" " * (64 * 1024 * 1024 - 32) + b"]}", compresslevel=9)
    bomb_request = Request(
        "POST", f"/api/v1/scopes/{slug}/section-syncs", raw=bomb, headers=("Content-Encoding: gzip",)
    )
    attacks: list[Result] = []
    began = time.perf_counter()

    async def sender() -> None:
        connection = Connection("127.0.0.1", port, {})
        while time.perf_counter() - began < seconds:
            start = time.perf_counter()
            try:
                status = await asyncio.wait_for(connection.send(bomb_request, time.time()), 30)
            except (
                OSError,
                ConnectionError,
                asyncio.TimeoutError,
                asyncio.IncompleteReadError,
                ValueError,
                IndexError,
            ):
                connection.close()
                status = 0
            attacks.append(Result(status, (time.perf_counter() - start) * 1000.0, start - began))

    senders = [asyncio.create_task(sender()) for _ in range(8)]
    recalls = await open_loop(
        "127.0.0.1", port, {"Authorization": f"Bearer {key}"}, make, rate=rate, seconds=seconds, timeout=10.0
    )
    await asyncio.gather(*senders)
    return recalls, attacks


# The overload runs, by how their recalls are stamped or what runs beside them.
OVERLOAD_RUNS = {
    "proxy": "overload",
    "no proxy": "overload without a proxy",
    "forged stamps": "overload with forged stamps",
    "gzip senders": "overload beside 8 unauthenticated gzip senders",
}


def overload_said(name: str, rate: float, seconds: float, elapsed: float, row: dict, budget_ms: int) -> str:
    """One overload run in a line: offered, answered, shed, failed, and the gzip senders where they ran."""
    return (
        f"{name}: {rate:.0f}/s offered for {seconds:.0f} s (3x capacity), stopped after {elapsed:.1f} s: "
        f"{row['ok']} answered ({row['per_second']}/s, p99 {row['p99_ms']} ms), {row['shed_503']} shed with 503 "
        f"(p99 {row['shed_p99_ms']} ms; budget {budget_ms} ms), {row['failed']} failed, "
        f"slowest {row['max_ms']} ms"
        + (f"; no answer: {row['no_answer']}" if row["no_answer"] else "")
        + f"; the load generator's own lag before sending p99 {row['client_lag_p99_ms']} ms, "
        f"sent to answered p99 {row['sent_to_answer_p99_ms']} ms"
        + (
            f"; gzip senders: {row['gzip_senders']['sent']} bodies, answered {row['gzip_senders']['statuses']} "
            f"(p99 {row['gzip_senders']['p99_ms']} ms); workers' RSS {row['worker_rss_mb']['before']} MB before, "
            f"{row['worker_rss_mb']['after']} MB after"
            if "gzip_senders" in row
            else ""
        )
    )
