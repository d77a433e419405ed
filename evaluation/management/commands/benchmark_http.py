"""Recall and record over HTTP: gunicorn (the production config) on PostgreSQL, driven by
evaluation.loadgen on the same machine: throughput and latency at 16 clients, an overload
that stops by itself, and each worker's memory over 100,000 requests."""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from evaluation import gunicorn
from evaluation.bulk import drop_scope
from evaluation.cpu import CpuMeter, reference_timings
from evaluation.loadgen import Request, Result, closed_loop, open_loop
from evaluation.overload import OVERLOAD_RUNS, overload_said, summary, with_gzip_senders, worker_pids, worker_rss_mb
from evaluation.scale import ScaleWorkload, store_trails
from evaluation.timing import percentile, save_figures
from scopes.demo import faq_sections
from scopes.models import ApiKey, Scope, Section
from trails.embedders import get_embedder


class Command(BaseCommand):
    help = "Prints HTTP recall/record throughput and latency, an overload run and worker memory (gunicorn, PostgreSQL)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--seconds", type=float, default=20.0, help="length of each throughput run")
        parser.add_argument("--clients", type=int, default=16)
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument("--overload-seconds", type=float, default=30.0, help="0 skips the overload run")
        parser.add_argument("--memory-requests", type=int, default=100_000, help="0 skips the memory run")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--json", dest="json_path", type=Path, help="also write the figures to this file")
        parser.add_argument(
            "--metrics-cost",
            action="store_true",
            help="only compare CPU per lexical recall with the Prometheus metrics on and off (two servers, alternating)",
        )
        parser.add_argument(
            "--compare-env",
            metavar="NAME",
            help="only compare CPU per lexical recall with the environment variable NAME on and off (two servers, "
            "alternating); --metrics-cost is --compare-env RAGTRAIL_METRICS",
        )
        parser.add_argument(
            "--rounds", type=int, default=3, help="alternating rounds of --compare-env and of the floors"
        )
        parser.add_argument(
            "--record",
            action="store_true",
            help="keep the overload figures with forged stamps and unauthenticated senders in docs/benchmark-results.json",
        )

    def handle(
        self,
        *args,
        seconds,
        clients,
        workers,
        overload_seconds,
        memory_requests,
        seed,
        json_path: Path | None,
        metrics_cost: bool = False,
        compare_env: str | None = None,
        rounds: int = 3,
        record: bool = False,
        **options,
    ) -> None:
        self.floor_rounds = rounds
        # Checked before the minutes of filling: a 0 s throughput run divided by zero at its end.
        for name, value, least in (
            ("--seconds", seconds, 1),
            ("--clients", clients, 1),
            ("--workers", workers, 1),
            ("--rounds", rounds, 1),
            ("--overload-seconds", overload_seconds, 0),
            ("--memory-requests", memory_requests, 0),
        ):
            if value < least:
                raise CommandError(f"{name} must be at least {least}, not {value}")
        if connection.vendor != "postgresql":
            raise CommandError("the HTTP benchmark runs on PostgreSQL: set DATABASE_URL")
        self.clients = clients
        embedder = get_embedder()
        workload = ScaleWorkload(embedder, seed)
        scopes, key = self._fill(workload)
        if metrics_cost or compare_env:
            try:
                save_figures(
                    json_path,
                    self._on_and_off(
                        compare_env or "RAGTRAIL_METRICS", workload, scopes, key, workers, seconds, rounds
                    ),
                )
            finally:
                for scope in scopes.values():
                    drop_scope(scope)
            return
        port = gunicorn.free_port()
        # The model itself, past the process's cache of recent questions.
        model = getattr(embedder, "inner", embedder)
        reference = reference_timings(lambda text: model.embed_many([text]))
        self.stdout.write(
            f"reference workload now: the model {reference['model_ms']} ms a question, "
            f"a pure-Python loop {reference['python_loop_ms']} ms (medians; compare runs at similar figures)"
        )
        figures: dict = {
            "workers": workers,
            "clients": clients,
            "trails_per_scope": len(workload.base_texts),
            "reference": reference,
        }
        server = gunicorn.start(port, workers, {"DJANGO_SETTINGS_MODULE": "evaluation.settings"})
        self.meter = CpuMeter(lambda: worker_pids(server.pid))
        try:
            figures.update(self._run(workload, scopes, key, port, server, seconds, overload_seconds, memory_requests))
        finally:
            gunicorn.stop(server)
            for scope in scopes.values():
                drop_scope(scope)
        save_figures(json_path, figures)
        if record and "overload with forged stamps" in figures:
            self._record_edge(figures)

    def _record_edge(self, figures: dict) -> None:
        from evaluation import results

        forged, beside = (
            figures["overload with forged stamps"],
            figures["overload beside 8 unauthenticated gzip senders"],
        )
        proxy, alone = figures["overload"], figures["overload without a proxy"]
        budget = settings.RAGTRAIL_RECALL_BUDGET_MS
        met = all(
            row["p99_ms"] is not None and row["p99_ms"] <= budget and (row["shed_p99_ms"] or 0) <= budget
            for row in (forged, beside)
        ) and set(beside["gzip_senders"]["statuses"]) == {401}
        senders, rss = beside["gzip_senders"], beside["worker_rss_mb"]
        results.record(
            "overload-edge",
            target="3x capacity with forged queue stamps and unauthenticated bodies: answers and 503s still within the "
            "500 ms budget at p99, the bodies never read, workers' memory back to where it was",
            command="`benchmark_http --seconds 5 --overload-seconds 15 --memory-requests 0 --rounds 1 --record` (2 workers; "
            "after the two overload runs, one with every second recall sending an `X-Request-Start` an hour in the "
            "future from an address not trusted as a proxy, then one beside 8 senders without a key posting a gzip "
            "body that unpacks to 64 MB to the section sync, back to back)",
            measured=f"forged stamps: {forged['ok']:,} answered, p99 **{forged['p99_ms']} ms**; {forged['shed_503']:,} shed, "
            f"p99 **{forged['shed_p99_ms']} ms**. Beside the senders: {beside['ok']:,} answered, p99 "
            f"**{beside['p99_ms']} ms**; {beside['shed_503']:,} shed, p99 **{beside['shed_p99_ms']} ms**; the senders' "
            f"{senders['sent']:,} bodies answered {senders['statuses']}; the workers' RSS {rss['before']} MB before, "
            f"{rss['after']} MB after. In the same run, a trusted proxy's stamps {proxy['p99_ms']} / "
            f"{proxy['shed_p99_ms']} ms, gunicorn alone {alone['p99_ms']} / {alone['shed_p99_ms']} ms",
            met=met,
            say=self.stdout.write,
        )

    def _fill(self, workload: ScaleWorkload) -> tuple[dict[str, Scope], str]:
        """Two scopes holding the QQP first questions as trails: one matched lexically, one by embedding."""
        suffix = uuid.uuid4().hex[:8]
        texts = dict(list(faq_sections("old").items())[:200])
        scopes = {}
        for matcher in ("lexical", "embedding"):
            scope = scopes[matcher] = Scope.objects.create(
                scratch=True, slug=f"bench-http-{matcher}-{suffix}", name="HTTP benchmark", matcher=matcher
            )
            Section.upsert(scope, texts)
            current = {s.section_id: s for s in Section.objects.filter(scope=scope)}
            ids = sorted(current)
            store_trails(scope, workload.base_texts, workload.base, current, lambda i: [ids[i % len(ids)]])
        _, key = ApiKey.issue(list(scopes.values()), name=f"bench-http-{suffix}")
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        return scopes, key

    def _on_and_off(self, variable: str, workload, scopes, key, workers, seconds, rounds) -> dict:
        """CPU per lexical recall request with a setting on and off (RAGTRAIL_METRICS, say): two
        servers, the same load on each in turn, alternating, so a slow minute weighs on both alike."""
        stored = workload.base_texts
        path = f"/api/v1/scopes/{scopes['lexical'].slug}/recall"
        make = lambda i: Request(
            "POST", path, {"query": stored[(i * 7919) % len(stored)] if i % 2 else f"{stored[i % len(stored)]} now?"}
        )
        servers = {}
        try:
            for state in ("on", "off"):
                port = gunicorn.free_port()
                servers[state] = (
                    port,
                    gunicorn.start(port, workers, {variable: state, "RAGTRAIL_METRICS_TOKEN": "bench"}),
                )
            measured: dict[str, list[float]] = {"on": [], "off": []}
            tails: dict[str, list[float]] = {"on": [], "off": []}
            for state, (port, server) in servers.items():
                self._load(port, key, make, requests=300)  # warm up
            for round_ in range(rounds):
                for state in ("on", "off") if round_ % 2 == 0 else ("off", "on"):
                    port, server = servers[state]
                    meter = CpuMeter(lambda server=server: worker_pids(server.pid))
                    meter.start()
                    results = self._load(port, key, make, seconds=seconds)
                    row = summary(results, seconds) | meter.stop(len(results))
                    measured[state].append(row["cpu_ms_per_request"]["workers"])
                    tails[state].append(row["p99_ms"])
                    self.stdout.write(
                        f"round {round_ + 1}, {variable}={state}: {row['per_second']}/s, p99 {row['p99_ms']} ms, "
                        f"workers' CPU {row['cpu_ms_per_request']['workers']} ms a request"
                    )
            on, off = statistics.median(measured["on"]), statistics.median(measured["off"])
            self.stdout.write(
                f"{variable} on lexical HTTP recall, median of {rounds} alternating rounds: workers' CPU "
                f"{on} ms a request on, {off} off; ratio {on / off:.3f} ({on - off:+.3f} ms); p99 "
                f"{statistics.median(tails['on'])} ms on, {statistics.median(tails['off'])} off"
            )
            return {
                "variable": variable,
                "on_cpu_ms": measured["on"],
                "off_cpu_ms": measured["off"],
                "ratio": round(on / off, 3),
                "on_p99_ms": tails["on"],
                "off_p99_ms": tails["off"],
            }
        finally:
            for port, server in servers.values():
                gunicorn.stop(server)

    def _load(self, port: int, key: str, make, **kwargs) -> list[Result]:
        headers = {"Authorization": f"Bearer {key}"}
        if "rate" in kwargs:
            return asyncio.run(open_loop("127.0.0.1", port, headers, make, **kwargs))
        return asyncio.run(closed_loop("127.0.0.1", port, headers, make, self.clients, **kwargs))

    def _floors(self, port, key, scopes, recall, fresh, offset, half_and_half, seconds) -> dict:
        """Recall against what the same workers do with nothing of ours (evaluation/urls.py):
        embedding recall of new questions against the model alone on new questions from the same
        pool, and lexical recall's CPU against a trivial endpoint that parses the same body and
        checks the key. Alternating rounds, so a slow minute weighs on both sides alike."""
        floor = lambda name, questions, slug: (
            lambda i: Request("POST", f"/api/v1/bench/{slug}/{name}", {"query": questions(i)})
        )
        pairs = {
            "embedding": (recall("embedding", fresh), floor("embed", fresh, scopes["embedding"].slug)),
            "lexical": (recall("lexical", half_and_half), floor("trivial", half_and_half, scopes["lexical"].slug)),
        }
        measured: dict = {}
        for kind, (ours, theirs) in pairs.items():
            rows: dict[str, list[dict]] = {"recall": [], "floor": []}
            for round_ in range(self.floor_rounds):
                for side in ("recall", "floor") if round_ % 2 == 0 else ("floor", "recall"):
                    offset[0] += 10_000  # new questions for every run, from the same pool
                    self.meter.start()
                    results = self._load(port, key, ours if side == "recall" else theirs, seconds=seconds)
                    rows[side].append(summary(results, seconds) | self.meter.stop(len(results)))
            rate = {side: statistics.median(r["per_second"] for r in runs) for side, runs in rows.items()}
            cpu = {
                side: statistics.median(
                    r["cpu_ms_per_request"]["workers"] + r["cpu_ms_per_request"]["postgres"] for r in runs
                )
                for side, runs in rows.items()
            }
            measured[kind] = {
                "rounds": rows,
                "rate_ratio": round(rate["recall"] / rate["floor"], 3),
                "cpu_ratio": round(cpu["recall"] / cpu["floor"], 3),
                "rate": rate,
                "cpu_ms": cpu,
            }
        embedding, lexical = measured["embedding"], measured["lexical"]
        self.stdout.write(
            f"embedding recall of new questions: {embedding['rate']['recall']:.1f}/s against the model alone on the same workers "
            f"{embedding['rate']['floor']:.1f}/s: {embedding['rate_ratio']:.1%} (target >= 85 %; medians of {self.floor_rounds} "
            f"alternating rounds; CPU a request, workers + PostgreSQL, {embedding['cpu_ms']['recall']:.2f} / {embedding['cpu_ms']['floor']:.2f} ms)"
        )
        self.stdout.write(
            f"lexical recall CPU a request (workers + PostgreSQL) {lexical['cpu_ms']['recall']:.2f} ms against a trivial authenticated "
            f"endpoint's {lexical['cpu_ms']['floor']:.2f} ms: {lexical['cpu_ratio']:.2f}x (target <= 1.5x); rates "
            f"{lexical['rate']['recall']:.0f}/s and {lexical['rate']['floor']:.0f}/s"
        )
        return measured

    def _overload(
        self, port, key, recall, fresh, offset, half_and_half, figures, overload_seconds, server=None, slug=""
    ) -> dict:
        """Fresh embedding recalls at three times the capacity just measured, open loop, then lexical recall 5 s after:
        stamped as a trusted proxy stamps (X-Request-Start), as clients talking to gunicorn alone send them, with half
        the recalls forging a stamp an hour in the future from an untrusted address, and beside 8 unauthenticated
        senders of large gzip bodies (worker memory before and after)."""
        found = {}
        for mode in ("proxy", "no proxy", "forged stamps", "gzip senders"):
            found.update(
                self._overload_once(
                    port, key, recall, fresh, offset, half_and_half, figures, overload_seconds, mode, server, slug
                )
            )
        return found

    def _overload_once(
        self,
        port,
        key,
        recall,
        fresh,
        offset,
        half_and_half,
        figures,
        overload_seconds,
        mode: str,
        server=None,
        slug: str = "",
    ) -> dict:
        from evaluation import loadgen

        capacity = figures["recall embedding (distinct questions)"]["per_second"]
        rate = max(50.0, 3 * capacity)
        offset[0] += 20_000
        started = time.perf_counter()
        rss_before = worker_rss_mb(server.pid) if server is not None else {}
        loadgen.Connection.proxy_stamp = mode == "proxy"
        if mode == "forged stamps":
            loadgen.Connection.forge_every, loadgen.Connection.source = 2, "127.0.0.2"
        attackers: list[Result] = []
        try:
            if mode == "gzip senders":
                results, attackers = asyncio.run(
                    with_gzip_senders(port, key, recall("embedding", fresh), rate, overload_seconds, slug)
                )
            else:
                results = self._load(
                    port, key, recall("embedding", fresh), rate=rate, seconds=overload_seconds, timeout=10.0
                )
        finally:
            loadgen.Connection.proxy_stamp, loadgen.Connection.forge_every, loadgen.Connection.source = True, 0, None
        elapsed = time.perf_counter() - started
        row = summary(results, overload_seconds)
        row.update(
            {
                "offered_per_second": round(rate, 1),
                "run_s": round(elapsed, 1),
                "budget_ms": settings.RAGTRAIL_RECALL_BUDGET_MS,
            }
        )
        if mode == "gzip senders":
            time.sleep(2)
            row["gzip_senders"] = {
                "sent": len(attackers),
                "statuses": dict(Counter(r.status for r in attackers)),
                "p99_ms": round(percentile([r.latency_ms for r in attackers], 0.99), 1) if attackers else None,
            }
            row["worker_rss_mb"] = {
                "before": round(sum(rss_before.values()), 1),
                "after": round(sum(worker_rss_mb(server.pid).values()), 1),
            }
        name = OVERLOAD_RUNS[mode]
        found = {name: row}
        self.stdout.write(overload_said(name, rate, overload_seconds, elapsed, row, settings.RAGTRAIL_RECALL_BUDGET_MS))
        after_overload = summary(self._load(port, key, recall("lexical", half_and_half), seconds=5), 5)
        found[f"after {name}"] = after_overload
        self.stdout.write(
            f"5 s after: lexical recall {after_overload['per_second']}/s, p99 {after_overload['p99_ms']} ms, "
            f"{after_overload['shed_503']} shed"
        )
        return found

    def _run(self, workload, scopes, key, port, server, seconds, overload_seconds, memory_requests) -> dict:
        rng = np.random.default_rng(11)
        stored = workload.base_texts
        asked = [p["b"] for p in workload.pairs]
        distinct = list(dict.fromkeys(asked + stored))
        rng.shuffle(distinct)
        popular = [distinct[i] for i in rng.choice(len(distinct), 500, replace=False)]
        zipf = np.minimum(rng.zipf(1.2, 1_000_000), 500) - 1

        def recall(matcher: str, questions):
            path = f"/api/v1/scopes/{scopes[matcher].slug}/recall"
            return lambda i: Request("POST", path, {"query": questions(i)})

        # Half stored questions (hits), half the pairs' other questions (mostly misses).
        half_and_half = lambda i: stored[(i * 7919) % len(stored)] if i % 2 else asked[(i * 104729) % len(asked)]
        # Agents repeat themselves: half the questions come from 500 popular ones (Zipf), half are new.
        repeating = lambda i: popular[zipf[i]] if i % 2 else distinct[(i // 2) % len(distinct)]
        offset = [0]

        def fresh(i):  # never asked before in this run: every one pays the model
            return distinct[(offset[0] + i) % len(distinct)]

        section_ids = sorted(Section.objects.filter(scope=scopes["lexical"]).values_list("section_id", flat=True))
        record_path = f"/api/v1/scopes/{scopes['lexical'].slug}/trails"
        run_id = uuid.uuid4().hex[:6]
        record = lambda i: Request(
            "POST",
            record_path,
            {
                "query": f"{distinct[i % len(distinct)]} ({run_id})",
                "cited": [section_ids[i % len(section_ids)]],
                "signal": "accepted",
                "steps": [{"tool": "search", "args": {"q": "x"}, "section_ids": [section_ids[i % len(section_ids)]]}],
            },
        )

        self.stdout.write(
            f"gunicorn: {server.pid}, {len(worker_rss_mb(server.pid))} workers (gthread), PostgreSQL; "
            f"{self.clients} clients, keep-alive; load generator on the same 2 cores"
        )
        self._load(port, key, recall("lexical", half_and_half), requests=400)  # warm up
        self._load(port, key, recall("embedding", repeating), requests=400)
        offset[0] = 400
        figures = {}
        runs = [
            ("recall lexical (half hits)", recall("lexical", half_and_half), 500),
            ("recall embedding (distinct questions)", recall("embedding", fresh), 150),
            ("recall embedding (half repeats)", recall("embedding", repeating), 150),
            ("record", record, 100),
        ]
        self.stdout.write(
            f"{'run':<40} {'per s':>7} {'p50 ms':>7} {'p99 ms':>7} {'503':>5} {'failed':>6}  target; "
            "CPU ms a request (workers + PostgreSQL + load generator) and the rate the cores could carry at it"
        )
        for name, make, target in runs:
            offset[0] += 10_000  # the new-question run asks none asked before
            self.meter.start()
            results = self._load(port, key, make, seconds=seconds)
            row = summary(results, seconds) | self.meter.stop(len(results))
            figures[name] = row
            cpu = row["cpu_ms_per_request"]
            self.stdout.write(
                f"{name:<40} {row['per_second']:7.1f} {row['p50_ms'] or 0:7.1f} {row['p99_ms'] or 0:7.1f} "
                f"{row['shed_503']:5d} {row['failed']:6d}  >= {target}/s, p99 <= 100 ms; "
                f"CPU {cpu['workers']} + {cpu['postgres']} + {cpu['load_generator']} = {cpu['total']} ms, "
                f"at most {row['cpu_ceiling_per_second']}/s"
                + (f"  statuses {row['statuses']} {row['no_answer']}" if row["failed"] else "")
            )

        figures["floors"] = self._floors(port, key, scopes, recall, fresh, offset, half_and_half, seconds)

        if overload_seconds:
            figures.update(
                self._overload(
                    port,
                    key,
                    recall,
                    fresh,
                    offset,
                    half_and_half,
                    figures,
                    overload_seconds,
                    server,
                    scopes["lexical"].slug,
                )
            )

        if not memory_requests:
            return figures
        # Memory over many requests: lexical and embedding recalls of ever new questions. RSS per
        # worker after the run's first 1,000 requests, then after all of them.
        mixed = lambda i: Request(
            "POST",
            f"/api/v1/scopes/{scopes['lexical' if i % 3 else 'embedding'].slug}/recall",
            {"query": distinct[i % len(distinct)] + ("" if i < len(distinct) else f" again {i // len(distinct)}")},
        )
        first = min(1_000, memory_requests)
        started = time.perf_counter()
        early = summary(self._load(port, key, mixed, requests=first), 1.0)
        before = worker_rss_mb(server.pid)
        rest = (
            summary(self._load(port, key, lambda i: mixed(i + first), requests=memory_requests - first), 1.0)
            if memory_requests > first
            else early
        )
        took = time.perf_counter() - started
        after = worker_rss_mb(server.pid)
        growth = {pid: round(after.get(pid, 0.0) - mb, 1) for pid, mb in before.items()}
        ratio = {pid: round(after.get(pid, 0.0) / mb, 3) for pid, mb in before.items() if mb}
        figures["memory"] = {
            "requests": memory_requests,
            "seconds": round(took, 1),
            "failed": early["failed"] + (rest["failed"] if rest is not early else 0),
            "rss_before_mb": {str(k): round(v, 1) for k, v in before.items()},
            "rss_after_mb": {str(k): round(v, 1) for k, v in after.items()},
            "growth_mb": {str(k): v for k, v in growth.items()},
            "rss_ratio": {str(k): v for k, v in ratio.items()},
        }
        self.stdout.write(
            f"memory: {memory_requests:,} requests in {took:.0f} s (a third embedding recalls, all questions new to the cache "
            f"until it holds {settings.RAGTRAIL_EMBEDDING_CACHE_SIZE:,}), {figures['memory']['failed']} failed; RSS per worker after "
            f"{first:,} -> after {memory_requests:,}: "
            + ", ".join(f"{before[p]:.0f} -> {after.get(p, 0):.0f} MB ({ratio.get(p, 0):.3f}x)" for p in before)
            + " (target within 1.10x)"
        )
        return figures
