"""Upkeep jobs: idempotent functions, each with a management command and a Celery task."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Count, Exists, F, OuterRef, Q, Sum
from django.db.models.functions import Floor, TruncHour
from django.utils import timezone

from infra import metrics
from scopes.models import Scope, SectionRevision
from trails.core.calibration import FLAG_KINDS, false_hit_verdict
from trails.core.second_chance import SECOND_CHANCE_MATCHER
from trails.learning.embedder_calibration import matcher_fit
from trails.learning.shipped import limits_for
from trails.learning.thresholds import in_use, used_matchers
from trails.models import (
    SIMILARITY_BINS,
    Citation,
    RecallEvent,
    RecallOutcome,
    RecallStat,
    SimilarityStat,
    writes,
)
from trails.models.recalls import judged_counts
from trails.upkeep.purge import forget_unconfirmed_previews


def sweep_expired(now: datetime, batch_size: int = 5000) -> dict[str, int]:
    """Deletes trails past their expiry and recall events past their scope's retention.

    Pending trails expire sooner (their TTL is set at record time), so one rule
    covers both. Works in batches of ids, each its own transaction, so a sweep of
    millions of rows neither holds long locks nor much memory; running it again
    deletes nothing more.

    Returns:
        {"trails": deleted trails, "events": deleted recall events,
        "revisions": deleted old section texts no trail cites, "purge_runs":
        unconfirmed purge previews and stuck runs forgotten}.
    """
    # Each trail re-checked under its lock: one renewed since the batch was read stays.
    deleted = {"trails": writes.sweep_expired_trails(now, batch_size), "events": 0}
    for scope in Scope.objects.only("id", "event_retention_days"):
        cutoff = now - timedelta(days=scope.event_retention_days)
        while True:
            ids = list(
                RecallEvent.objects.filter(scope=scope, created_at__lt=cutoff)
                .order_by("id")
                .values_list("id", flat=True)[:batch_size]
            )
            if not ids:
                break
            deleted["events"] += writes.forget_recall_events(ids)
    # Old section texts are kept only to show operators what a cited section said.
    cited = Citation.objects.filter(
        scope_id=OuterRef("scope_id"), section_id=OuterRef("section_id"), hash=OuterRef("hash")
    )
    deleted["revisions"], _ = SectionRevision.objects.filter(~Exists(cited)).delete()
    deleted["purge_runs"] = forget_unconfirmed_previews(now)
    return deleted


def roll_up(start: datetime, end: datetime) -> int:
    """Recounts recall events into hourly buckets for the hours touching [start, end).

    The window is widened to whole hours and its buckets replaced in one
    transaction, so running it twice gives the same counts.

    Returns:
        How many buckets the window now holds.
    """
    first = start.replace(minute=0, second=0, microsecond=0)
    last = end.replace(minute=0, second=0, microsecond=0)
    if last < end:
        last += timedelta(hours=1)
    rows = (
        RecallEvent.objects.filter(created_at__gte=first, created_at__lt=last)
        .annotate(bucket=TruncHour("created_at"))
        .values("scope_id", "bucket", "outcome", "matcher")
        .annotate(
            n=Count("id"),
            similarity=Sum("similarity"),
            stale=Sum("stale_marked"),
            calls=Sum("calls_saved"),
            tokens=Sum("tokens_saved"),
        )
    )
    buckets = [
        RecallStat(
            scope_id=r["scope_id"],
            hour=r["bucket"],
            outcome=r["outcome"],
            matcher=r["matcher"],
            count=r["n"],
            similarity_sum=r["similarity"] or 0.0,
            stale_marked=r["stale"] or 0,
            calls_saved=r["calls"] or 0,
            tokens_saved=r["tokens"] or 0,
        )
        for r in rows
    ]
    hits = (
        RecallEvent.objects.filter(created_at__gte=first, created_at__lt=last, similarity__isnull=False)
        .exclude(outcome=RecallOutcome.MISS)
        .exclude(matcher=SECOND_CHANCE_MATCHER)  # the threshold's histogram: first-chance hits only
        .annotate(bucket=TruncHour("created_at"), bin=Floor(F("similarity") * SIMILARITY_BINS))
        .values("scope_id", "bucket", "bin")
        .annotate(n=Count("id"))
    )
    # A similarity of exactly 1.0 belongs to the top bin, which its floor overshoots.
    counts: dict[tuple, int] = {}
    for r in hits:
        key = (r["scope_id"], r["bucket"], min(int(r["bin"]), SIMILARITY_BINS - 1))
        counts[key] = counts.get(key, 0) + r["n"]
    histogram = [SimilarityStat(scope_id=s, hour=h, bin=b, count=n) for (s, h, b), n in counts.items()]
    with transaction.atomic():
        RecallStat.objects.filter(hour__gte=first, hour__lt=last).delete()
        RecallStat.objects.bulk_create(buckets, batch_size=2000)
        SimilarityStat.objects.filter(hour__gte=first, hour__lt=last).delete()
        SimilarityStat.objects.bulk_create(histogram, batch_size=2000)
    # Whoever ran it (the worker, the command, a demo load): the page's "rolled up to".
    transaction.on_commit(lambda: metrics.stamp_rolled_up(min(end, timezone.now()).timestamp()))
    return len(buckets)


def scopes_needing_a_look(now: datetime) -> dict[str, int]:
    """What the service-wide alerts count, by scope (a bounded number, not a label per scope):
    scopes whose false hits the one verdict (trails.core.calibration.false_hit_verdict, over
    FALSE_HIT_WINDOW, as the overview's health strip) judges over their bound, and scopes
    whose learned threshold sits at its ceiling, and scopes flagged for an operator, by the
    flag's kind (every flag the overview shows has its alert)."""
    bounds = dict(Scope.objects.values_list("id", "max_false_hit_rate"))
    over = sum(
        1
        for scope_id, (reported, judged) in judged_counts(None, now).items()
        if false_hit_verdict(reported, judged, bounds.get(scope_id, 1.0)).verdict == "over"
    )
    at_ceiling = 0
    for scope in Scope.objects.filter(scratch=False).filter(
        Q(learned_lexical_threshold__isnull=False) | Q(learned_embedding_threshold__isnull=False)
    ):
        if any(
            in_use(scope, matcher)
            >= limits_for(matcher, getattr(scope, f"{matcher}_threshold"), matcher_fit(scope, matcher)).ceiling
            for matcher in used_matchers(scope)
        ):
            at_ceiling += 1
    flagged = dict.fromkeys(FLAG_KINDS, 0)
    for flags in (
        Scope.objects.filter(scratch=False).exclude(threshold_flags="").values_list("threshold_flags", flat=True)
    ):
        for kind in {flag.split(":")[1] for flag in flags.split(",") if flag.count(":") >= 1} & set(FLAG_KINDS):
            flagged[kind] += 1
    return {"over_false_hit_bound": over, "threshold_at_ceiling": at_ceiling, "flagged": flagged}
