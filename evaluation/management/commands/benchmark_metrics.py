"""What the Prometheus metrics cost a recall: CPU per request through the whole Django stack
(middleware, ninja, recall, the event write), with the metrics live and with every metric
replaced by a no-op, alternating in one run."""

from __future__ import annotations

import json
import statistics
import time
import uuid

from django.core.management.base import BaseCommand
from django.test import Client

from evaluation.bulk import drop_scope
from infra import metrics
from scopes.models import ApiKey, Scope, Section
from trails.serving.record import RecordInput, record


class _Nothing:
    def labels(self, *args, **kwargs):
        return self

    def inc(self, *args, **kwargs):
        pass

    observe = set = inc


METRICS = [name for name in dir(metrics) if name.isupper() and hasattr(getattr(metrics, name), "labels")]


class Command(BaseCommand):
    help = "CPU per recall request with the metrics live against no-op metrics, alternating rounds in one run."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rounds", type=int, default=6)
        parser.add_argument("--requests", type=int, default=300)

    def handle(self, *args, rounds: int, requests: int, **options) -> None:
        scope = Scope.objects.create(scratch=True, slug=f"metrics-{uuid.uuid4().hex[:8]}", matcher="lexical")
        live = {name: getattr(metrics, name) for name in METRICS}
        try:
            Section.upsert(scope, {f"s{i}": f"Section {i} says something about topic {i}." for i in range(50)})
            for i in range(50):
                record(
                    scope,
                    RecordInput(
                        query=f"What does section {i} say about topic {i}?", cited=[f"s{i}"], signal="accepted"
                    ),
                )
            _, key = ApiKey.issue([scope])
            client = Client(headers={"Authorization": f"Bearer {key}"})
            url = f"/api/v1/scopes/{scope.slug}/recall"

            def run() -> float:
                started = time.process_time()
                for n in range(requests):
                    body = json.dumps({"query": f"What does section {n % 50} say about topic {n % 50}?"})
                    assert client.post(url, data=body, content_type="application/json").status_code == 200
                return (time.process_time() - started) / requests * 1000

            run()  # warm up
            with_metrics, without = [], []
            for _ in range(rounds):
                with_metrics.append(run())
                for name in METRICS:
                    setattr(metrics, name, _Nothing())
                try:
                    without.append(run())
                finally:
                    for name, metric in live.items():
                        setattr(metrics, name, metric)
            a, b = statistics.median(with_metrics), statistics.median(without)
            self.stdout.write(
                f"CPU per recall request, median of {rounds} alternating rounds of {requests}: "
                f"metrics live {a:.3f} ms, no-op {b:.3f} ms; ratio {a / b:.3f} (+{a - b:.3f} ms)"
            )
        finally:
            for name, metric in live.items():
                setattr(metrics, name, metric)
            drop_scope(scope)
