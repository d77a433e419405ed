"""How long the retention sweep and the hourly roll-up take on a million rows."""

from __future__ import annotations

import random
import time
import uuid
from datetime import timedelta

from django.core.management.base import BaseCommand
from django.utils import timezone

from evaluation.bulk import drop_scope
from evaluation.questions import QuestionMaker
from scopes.models import Scope, Section
from trails.core.hint import RecordedStep
from trails.models import RecallEvent, RecallStat, writes
from trails.serving.record import RecordInput, TrailRows
from trails.upkeep.jobs import roll_up, sweep_expired


class Command(BaseCommand):
    help = "Fills a scope with recall events and trails (half expired) and times the sweep and the roll-up."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--events", type=int, default=1_000_000)
        parser.add_argument("--trails", type=int, default=100_000)
        parser.add_argument("--batch-size", type=int, default=5000)

    def handle(self, *args, events: int, trails: int, batch_size: int, **options) -> None:
        scope = Scope.objects.create(
            scratch=True, slug=f"upkeep-{uuid.uuid4().hex[:8]}", matcher="lexical", event_retention_days=30
        )
        try:
            now = timezone.now()
            rng = random.Random(5)
            started = time.perf_counter()
            outcomes = ["prefetch", "hint", "miss"]
            for start in range(0, events, 20_000):
                events_batch = [
                    RecallEvent(
                        scope=scope,
                        created_at=now - timedelta(minutes=rng.randrange(60 * 24 * 60)),
                        outcome=rng.choice(outcomes),
                        similarity=rng.random(),
                        latency_ms=1.0,
                        matcher="lexical",
                    )
                    for _ in range(min(20_000, events - start))
                ]
                writes.bulk_load(lambda batch=events_batch: RecallEvent.objects.bulk_create(batch))
            Section.upsert(scope, {"s": "a section"})
            current = {s.section_id: s for s in Section.objects.filter(scope=scope)}
            maker = QuestionMaker(5)
            for start in range(0, trails, 5000):
                rows = [
                    TrailRows.build(
                        scope,
                        RecordInput(
                            query=maker.question(),
                            cited=["s"],
                            signal="accepted",
                            steps=[RecordedStep("read", {}, ["s"])],
                        ),
                        current,
                        "",
                        now,
                    )
                    for _ in range(min(5000, trails - start))
                ]
                for i, row in enumerate(rows):
                    if i % 2:
                        row.trail.expires_at = now - timedelta(minutes=1)
                TrailRows.save_all(rows)
            self.stdout.write(
                f"filled {events} recall events over 60 days and {trails} trails (half expired) in {time.perf_counter() - started:.0f} s"
            )

            started = time.perf_counter()
            buckets = roll_up(now - timedelta(days=60), now)
            rolled = time.perf_counter() - started
            started = time.perf_counter()
            roll_up(now - timedelta(hours=2), now)
            recent = time.perf_counter() - started
            counted = sum(RecallStat.objects.filter(scope=scope).values_list("count", flat=True))
            self.stdout.write(
                f"roll-up of 60 days: {buckets} buckets in {rolled:.1f} s (counts sum {counted} of {events}); "
                f"the periodic 2-hour window: {recent * 1000:.0f} ms"
            )
            started = time.perf_counter()
            deleted = sweep_expired(now, batch_size)
            self.stdout.write(
                f"sweep: {deleted['trails']} trails and {deleted['events']} events deleted in {time.perf_counter() - started:.1f} s "
                f"(batches of {batch_size})"
            )
        finally:
            drop_scope(scope)
