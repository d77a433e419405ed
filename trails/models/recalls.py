"""Recall events and their hourly roll-ups (what the charts read)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Sequence

from django.db import models
from django.db.models import Case, Count, F, Q, When
from django.db.models.functions import Floor
from django.utils import timezone

from scopes.models import Scope
from trails.core.charts import HourCounts
from trails.core.second_chance import SECOND_CHANCE_MATCHER
from trails.core.validation import Outcome
from trails.models.trail import Trail

# The database's choices of the one outcome enum (trails/core/validation.py).
RecallOutcome = models.TextChoices("RecallOutcome", [(o.name, o.value) for o in Outcome])


class RecallEvent(models.Model):
    """One recall, for the hit-rate charts; the query text only where the scope keeps it."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # No index of its own: recallevent_scope_time leads with the scope (another would only cost
    # every recall's insert a write).
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="recall_events", db_index=False)
    created_at = models.DateTimeField(default=timezone.now)
    outcome = models.CharField(max_length=16, choices=RecallOutcome.choices)
    similarity = models.FloatField(null=True, blank=True)
    latency_ms = models.FloatField()
    trail = models.ForeignKey(Trail, on_delete=models.SET_NULL, null=True, blank=True, related_name="recall_events")
    matcher = models.CharField(max_length=16, blank=True)
    stale_marked = models.PositiveSmallIntegerField(default=0)
    # Estimates of what the answer spared the agent (trails/core/savings.py).
    calls_saved = models.PositiveSmallIntegerField(default=0)
    tokens_saved = models.PositiveIntegerField(default=0)
    query = models.TextField(blank=True)
    # The partition asked in, kept with the query (and purged like it): a replay asks what was asked.
    partition = models.CharField(max_length=200, blank=True, db_default="")
    # The agent's verdict on what the recall served (POST .../recalls/{id}/feedback).
    helpful = models.BooleanField(null=True, blank=True)
    feedback_reason = models.CharField(max_length=500, blank=True, db_default="")
    feedback_at = models.DateTimeField(null=True, blank=True)
    # A hash of the caller's session id and the normalised query (never either in
    # clear): a path recorded for the same question in the same session finds it.
    research_key = models.CharField(max_length=64, blank=True, db_default="")
    # For a miss by embedding: the nearest candidate the guard allowed, under the threshold.
    # A path the agent then records for the same question says whether serving it would
    # have been right (a label that can lower the threshold: trails/learning/feedback.py).
    nearest_trail = models.ForeignKey(
        Trail, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    nearest_similarity = models.FloatField(null=True, blank=True)
    # Which API key asked (its lookup; blank for the operator pages' and the system's own) and
    # which reporter judged it: the recall log filters by key, and a key set aside stops counting.
    caller = models.CharField(max_length=16, blank=True, db_default="")
    feedback_by = models.CharField(max_length=100, blank=True, db_default="")
    # A miss's near candidates the guard allowed, [[trail id, similarity], ...]: what a second chance may serve.
    near_candidates = models.JSONField(null=True, blank=True)
    # When the caller handed back its search for a second chance (once a recall), and what was decided.
    second_chance_at = models.DateTimeField(null=True, blank=True)
    second_chance_reason = models.CharField(max_length=300, blank=True, db_default="")

    class Meta:
        indexes = [
            models.Index(fields=["scope", "created_at"], name="recallevent_scope_time"),
            # The recall log filtered by outcome, newest first: without it a plan without
            # statistics sorted every event of the scope (303 ms p90 at 1M events).
            models.Index(fields=["scope", "outcome", "created_at"], name="recallevent_scope_outcome_time"),
            models.Index(fields=["scope", "research_key"], name="recallevent_research", condition=~Q(research_key="")),
            # Deleting a trail unlinks the misses it was nearest to; most events have none.
            models.Index(
                fields=["nearest_trail"], name="recallevent_nearest", condition=Q(nearest_trail__isnull=False)
            ),
            # The scope's labelled recalls, which its learned threshold is computed from.
            models.Index(
                fields=["scope", "feedback_at"],
                name="recallevent_labelled",
                condition=Q(feedback_at__isnull=False),
                include=["helpful"],
            ),
            # The scopes a key's verdicts count in: setting the key aside changes them (judged_scopes).
            models.Index(
                fields=["feedback_by", "scope"],
                name="recallevent_feedback_by",
                condition=Q(feedback_at__isnull=False),
            ),
            # The recall log's second-chance filter: few recalls ask for one, so the scope's others are never read.
            models.Index(
                fields=["scope", "created_at"],
                name="recallevent_second_chance",
                condition=Q(second_chance_at__isnull=False),
            ),
            # The what-if page's near misses: only recalls with a session carry one.
            models.Index(
                fields=["scope", "created_at"],
                name="recallevent_near_misses",
                condition=Q(nearest_similarity__isnull=False),
            ),
        ]


# The recalls the false-hit verdict judges: the overview's health strip and the alert's
# gauge read the same window, so they never disagree on the same counts.
FALSE_HIT_WINDOW = timedelta(hours=24)


def judged_counts(scope_ids: Sequence[int] | None, now: datetime) -> dict[int, tuple[int, int]]:
    """(reported not helpful, judged) recalls per scope over FALSE_HIT_WINDOW before `now`,
    read on the labelled-recalls index; all scopes where `scope_ids` is None."""
    from scopes.keys import set_aside_reporters

    rows = RecallEvent.objects.filter(feedback_at__gt=now - FALSE_HIT_WINDOW, feedback_at__lte=now)
    set_aside = set_aside_reporters()
    if set_aside:
        rows = rows.exclude(feedback_by__in=list(set_aside))  # a flood's key, revoked and set aside
    if scope_ids is not None:
        rows = rows.filter(scope_id__in=list(scope_ids))
    counted = (
        rows.values("scope_id").annotate(judged=Count("id"), reported=Count("id", filter=Q(helpful=False))).order_by()
    )
    return {row["scope_id"]: (row["reported"], row["judged"]) for row in counted}


def latency_percentiles(scope: Scope, since: datetime, limit: int = 5_000) -> dict[str, float] | None:
    """p50 / p95 / p99 of recall latency (ms) over the window's latest `limit` recalls, read
    newest first on the (scope, created_at) index: a percentile over a month of a million
    events cost the overview 220 ms of its 300 (benchmark_overview)."""
    values = sorted(
        RecallEvent.objects.filter(scope=scope, created_at__gte=since)
        .order_by("-created_at")
        .values_list("latency_ms", flat=True)[:limit]
    )
    if not values:
        return None
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return {"p50": pick(0.5), "p95": pick(0.95), "p99": pick(0.99), "count": len(values)}


def latest_recalls_since(scope: Scope, since: datetime, limit: int) -> datetime:
    """Where the window's latest `limit` recalls begin (`since` when it holds fewer): a page
    that reads every event of a month of a million recalls cannot answer within its budget."""
    cut = (
        RecallEvent.objects.filter(scope=scope, created_at__gte=since)
        .order_by("-created_at")
        .values_list("created_at", flat=True)[limit - 1 : limit]
    )
    return max([since, *cut])


def similarity_evidence(
    scope: Scope, since: datetime, current: float, picked: float | None
) -> tuple[dict[float, dict[str, int]], dict[str, int]]:
    """The what-if page's evidence in one pass over the window's recalls: judged hits by
    similarity (0.01 bins from 0.85, where thresholds live) and, for a picked threshold, the
    hits it would lose and the sessions' near misses it would serve. Four queries over a
    week of a million events cost the page 440 ms of its 300 (benchmark_overview)."""
    # A second chance's hit was served under the threshold with the search's backing: no threshold's evidence.
    hit = ~Q(outcome=Outcome.MISS) & Q(similarity__isnull=False) & ~Q(matcher=SECOND_CHANCE_MATCHER)
    # (Aggregate names differ from the fields: a filter on `helpful` would read the aggregate.)
    counted = {"hits": hit, "helpful_hits": hit & Q(helpful=True), "reported_hits": hit & Q(helpful=False)}
    if picked is not None and picked > current:
        lost = hit & Q(similarity__lt=picked)
        counted |= {"hits_lost": lost, "helpful_lost": lost & Q(helpful=True), "reported_lost": lost & Q(helpful=False)}
    if picked is not None and picked < current:
        counted["near_misses_gained"] = Q(
            outcome=Outcome.MISS, nearest_similarity__gte=picked, nearest_similarity__lt=current
        )
    rows = (
        RecallEvent.objects.filter(scope=scope, created_at__gte=since)
        .annotate(
            bin=Case(
                When(hit & Q(similarity__gte=0.85), then=Floor(F("similarity") * 100)), output_field=models.FloatField()
            )
        )
        .values("bin")
        .annotate(**{name: Count("id", filter=condition) for name, condition in counted.items()})
    )
    by_bin, totals = {}, dict.fromkeys(("hits_lost", "helpful_lost", "reported_lost", "near_misses_gained"), 0)
    for row in rows:
        for name in totals:
            totals[name] += row.get(name, 0)
        if row["bin"] is not None:
            by_bin[round(row["bin"] / 100, 2)] = {
                "hits": row["hits"],
                "helpful": row["helpful_hits"],
                "not_helpful": row["reported_hits"],
            }
    return by_bin, totals


class RecallStat(models.Model):
    """Recalls per scope, hour, outcome and matcher: what the charts read instead of raw events."""

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=RecallOutcome.choices)
    matcher = models.CharField(max_length=16, blank=True)
    count = models.PositiveIntegerField()
    similarity_sum = models.FloatField(default=0.0)
    stale_marked = models.PositiveIntegerField(default=0)
    calls_saved = models.PositiveBigIntegerField(default=0)
    tokens_saved = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "hour", "outcome", "matcher"], name="recallstat_unique_bucket")
        ]
        indexes = [models.Index(fields=["scope", "hour"], name="recallstat_scope_hour")]

    @classmethod
    def hourly(cls, scope: Scope, start: datetime) -> list[HourCounts]:
        """The scope's counts per hour and outcome from `start` on: the second chance's apart,
        the rest summed over matchers."""
        rows = (
            cls.objects.filter(scope=scope, hour__gte=start)
            .annotate(
                second_chance=Case(
                    When(matcher=SECOND_CHANCE_MATCHER, then=True), default=False, output_field=models.BooleanField()
                )
            )
            .values_list("hour", "outcome", "second_chance")
            .annotate(
                models.Sum("count"), models.Sum("stale_marked"), models.Sum("calls_saved"), models.Sum("tokens_saved")
            )
            .order_by()
        )
        return [
            HourCounts(hour, outcome, count, stale, calls, tokens, second_chance=second_chance)
            for hour, outcome, second_chance, count, stale, calls, tokens in rows
        ]

    @classmethod
    def last_hour(cls, scope: Scope) -> datetime | None:
        return cls.objects.filter(scope=scope).aggregate(last=models.Max("hour"))["last"]


class SimilarityStat(models.Model):
    """Hits per scope, hour and similarity bin (of width 1/SIMILARITY_BINS): the histogram's source."""

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    bin = models.PositiveSmallIntegerField()
    count = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "hour", "bin"], name="similaritystat_unique_bucket")]

    @classmethod
    def histogram(cls, scope: Scope, start: datetime) -> list[tuple[int, int]]:
        """(bin, hits) of the scope from `start` on, by bin."""
        rows = (
            cls.objects.filter(scope=scope, hour__gte=start)
            .values_list("bin")
            .annotate(models.Sum("count"))
            .order_by("bin")
        )
        return list(rows)


SIMILARITY_BINS = 100
