"""Tool-result cache lookup latency and throughput, in-process, against the configured cache."""

from __future__ import annotations

import random
import statistics
import time
import uuid

from django.conf import settings
from django.core.management.base import BaseCommand

from evaluation.bulk import drop_scope
from evaluation.timing import percentile
from scopes.models import Scope
from trails import tool_results


class Command(BaseCommand):
    help = "Prints tool-result lookup p50/p99 (hits and misses) and lookups per second against the configured cache."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--entries", type=int, default=10_000)
        parser.add_argument("--lookups", type=int, default=20_000)
        parser.add_argument("--seed", type=int, default=3)

    def handle(self, *args, entries: int, lookups: int, seed: int, **options) -> None:
        rng = random.Random(seed)
        scope = Scope.objects.create(scratch=True, slug=f"toolbench-{uuid.uuid4().hex[:8]}")
        try:
            tool_results.replace_policies(
                scope,
                [
                    {
                        "tool": "read_file",
                        "cacheable": True,
                        "ttl_s": 3600,
                        "ignore_args": ["intention"],
                        "path_args": ["path"],
                    },
                    {"tool": "search", "cacheable": True, "ttl_s": 3600},
                ],
            )
            context = {"commit": "c0ffee"}
            calls = [
                ("read_file", {"path": f"src/module_{i}.py", "offset": 0, "limit": 200, "intention": "read"})
                for i in range(entries // 2)
            ]
            calls += [("search", {"q": f"query number {i}", "limit": 10}) for i in range(entries - len(calls))]
            for tool, call_args in calls:
                tool_results.store(scope, tool, call_args, context, {"lines": ["x" * 80] * 20})
            hit_times, miss_times = [], []
            started = time.perf_counter()
            for i in range(lookups):
                tool, call_args = rng.choice(calls)
                if i % 2:
                    call_args = {**call_args, "limit": 999}  # never stored: a miss
                t0 = time.perf_counter()
                answer = tool_results.lookup(scope, tool, call_args, context)
                (hit_times if answer["hit"] else miss_times).append((time.perf_counter() - t0) * 1000)
            elapsed = time.perf_counter() - started
            both = hit_times + miss_times
            backend = settings.CACHES["default"]["BACKEND"].rsplit(".", 2)[-2]
            self.stdout.write(f"cache backend: {backend}; {entries} entries; {lookups} lookups")
            self.stdout.write(
                f"lookup p50 {statistics.median(both):.3f} ms, p99 {percentile(both, 0.99):.3f} ms; "
                f"hit p50 {statistics.median(hit_times):.3f} ms, miss p50 {statistics.median(miss_times):.3f} ms; "
                f"{lookups / elapsed:.0f} lookups/s (one thread)"
            )
        finally:
            drop_scope(scope)
