"""How fast the operator overview answers with a million recall events in its scope."""
from __future__ import annotations

import random
import statistics
import time
import uuid
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db.models import Count, Sum
from django.test import Client, override_settings
from django.utils import timezone

from scopes.models import Scope
from trails.models import drop_scope
from trails.models import RecallEvent
from trails.upkeep import roll_up


class Command(BaseCommand):
    help = ("Fills a scope with recall events over 30 days, rolls them up, and times GET /ops/<scope>/ "
            "for each window through the whole Django stack (session, view, template).")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--events", type=int, default=1_000_000)
        parser.add_argument("--requests", type=int, default=30, help="timed requests per window")

    def handle(self, *args, events: int, requests: int, **options) -> None:
        scope = Scope.objects.create(slug=f"overview-{uuid.uuid4().hex[:8]}", matcher="lexical")
        user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}", is_staff=True)
        try:
            now = timezone.now()
            rng = random.Random(3)
            started = time.perf_counter()
            for start in range(0, events, 20_000):
                batch = []
                for _ in range(min(20_000, events - start)):
                    outcome = rng.choices(["prefetch", "hint", "miss"], [5, 2, 3])[0]
                    hit = outcome != "miss"
                    batch.append(RecallEvent(
                        scope=scope, created_at=now - timedelta(seconds=rng.randrange(30 * 86400)), outcome=outcome,
                        similarity=0.9375 + rng.random() * 0.0625 if hit else None, latency_ms=2.0, matcher="embedding" if hit else "",
                        calls_saved=rng.randrange(1, 5) if hit else 0, tokens_saved=rng.randrange(2000) if outcome == "prefetch" else 0,
                    ))
                RecallEvent.objects.bulk_create(batch)
            self.stdout.write(f"filled {events:,} recall events over 30 days in {time.perf_counter() - started:.0f} s")
            started = time.perf_counter()
            buckets = roll_up(now - timedelta(days=31), now + timedelta(minutes=1))
            self.stdout.write(f"rolled up into {buckets:,} hourly buckets in {time.perf_counter() - started:.1f} s")

            client = Client()
            client.force_login(user)
            with override_settings(DEBUG=False):
                for window in ("24h", "7d", "30d"):
                    url = f"/ops/{scope.slug}/?window={window}"
                    assert client.get(url).status_code == 200  # warm-up
                    timings = []
                    for _ in range(requests):
                        started = time.perf_counter()
                        response = client.get(url)
                        timings.append((time.perf_counter() - started) * 1000)
                        assert response.status_code == 200
                    timings.sort()
                    self.stdout.write(f"overview {window:>3}: median {statistics.median(timings):6.1f} ms, "
                                      f"p90 {timings[int(len(timings) * 0.9)]:6.1f} ms, max {timings[-1]:6.1f} ms ({requests} requests)")
                # What the page would cost counting raw events instead of the roll-up.
                started = time.perf_counter()
                list(RecallEvent.objects.filter(scope=scope, created_at__gte=now - timedelta(days=30)).values("outcome").annotate(
                    Count("id"), Sum("calls_saved"), Sum("tokens_saved")))
                self.stdout.write(f"for comparison, one count over the raw events of 30 days: {(time.perf_counter() - started) * 1000:.0f} ms")
        finally:
            user.delete()
            drop_scope(scope)
