"""Trails (recorded paths to an answer), their steps, citations, band keys and recall events."""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Sequence

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from scopes.models import Scope
from trails.core.hint import RecordedStep
from trails.core.minhash import MinHashParams, MinHashSignature
from trails.core.validation import Citation as CoreCitation


class TrailStatus(models.TextChoices):
    PENDING = "pending", "Pending approval"
    ACTIVE = "active", "Active"
    STALE = "stale", "Stale"
    REJECTED = "rejected", "Rejected"


class Signal(models.TextChoices):
    ACCEPTED = "accepted", "Caller accepted the answer"
    USER = "user", "User thumbs-up"
    VERIFIER = "verifier", "Verifier approved"
    UP = "up", "Approved"
    DOWN = "down", "Rejected"


POSITIVE_SIGNALS = frozenset({Signal.ACCEPTED, Signal.USER, Signal.VERIFIER})


class TrailQuerySet(models.QuerySet):
    def servable(self, scope: Scope, partition: str, now: datetime) -> "TrailQuerySet":
        """Trails recall may return: this scope and partition, active, not expired."""
        return self.filter(scope=scope, partition=partition, status=TrailStatus.ACTIVE, expires_at__gt=now)

    def candidates(self, scope: Scope, partition: str, keys: Sequence[int], now: datetime) -> "TrailQuerySet":
        """Servable trails that share at least one band key with the query.

        A key read on the (scope, key) index, never a scan over the scope's trails.
        """
        sharing = BandKey.objects.filter(scope=scope, key__in=list(keys)).values("trail_id")
        return self.servable(scope, partition, now).filter(id__in=sharing)


class Trail(models.Model):
    """The path an agent took to an answer: query, steps and cited sections with their hashes."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="trails")
    partition = models.CharField(max_length=200, blank=True, default="")
    query = models.TextField()
    normalised_query = models.TextField()
    status = models.CharField(max_length=16, choices=TrailStatus.choices)
    signal = models.CharField(max_length=16, choices=Signal.choices, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    lexical_params = models.CharField(max_length=40)
    lexical_signature = models.BinaryField()
    band_layout = models.CharField(max_length=16)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    stale_at = models.DateTimeField(null=True, blank=True)
    hit_count = models.PositiveIntegerField(default=0)
    last_hit_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True)

    objects = TrailQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="trail_idempotency_key_unique_in_scope",
            )
        ]
        indexes = [
            models.Index(fields=["scope", "status", "expires_at"], name="trail_scope_status_expiry"),
            models.Index(fields=["expires_at"], name="trail_expiry"),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.query[:60]}"

    def signature(self) -> MinHashSignature:
        return MinHashSignature.from_bytes(MinHashParams.from_label(self.lexical_params), bytes(self.lexical_signature))

    def core_citations(self) -> list[CoreCitation]:
        return [CoreCitation(c.section_id, c.hash) for c in self.citations.order_by("position")]

    def recorded_steps(self) -> list[RecordedStep]:
        return [RecordedStep(s.tool, s.args, tuple(s.section_ids)) for s in self.steps.order_by("position")]

    def is_expired(self, now: datetime | None = None) -> bool:
        return self.expires_at <= (now or timezone.now())

    @property
    def display_status(self) -> str:
        """The status an operator sees: an active trail past its expiry shows as expired."""
        if self.status == TrailStatus.ACTIVE and self.is_expired():
            return "expired"
        return self.status

    def vote(self, vote: str, now: datetime | None = None) -> None:
        """Applies an operator's or user's vote.

        An up vote activates a pending trail (its active lifetime starts now) or
        refreshes an active one; a down vote rejects it.

        Raises:
            ValueError: an up vote on a stale or rejected trail, which cannot come back.
        """
        now = now or timezone.now()
        if vote == Signal.UP:
            if self.status not in (TrailStatus.PENDING, TrailStatus.ACTIVE):
                raise ValueError(f"a {self.status} trail cannot be approved")
            self.status = TrailStatus.ACTIVE
            self.expires_at = self.scope.expiry_for(active=True, now=now)
            self.reason = ""
        elif vote == Signal.DOWN:
            self.status = TrailStatus.REJECTED
            self.reason = "voted down"
        else:
            raise ValueError(f"unknown vote {vote!r}")
        self.save(update_fields=["status", "expires_at", "reason"])
        TrailSignal.objects.create(trail=self, signal=vote, source=TrailSignal.Source.FEEDBACK, created_at=now)

    @classmethod
    def mark_stale(cls, trail_ids: Sequence[int], now: datetime) -> int:
        """Marks active trails stale; returns how many changed (already stale ones are left)."""
        if not trail_ids:
            return 0
        return cls.objects.filter(id__in=list(trail_ids), status=TrailStatus.ACTIVE).update(
            status=TrailStatus.STALE, stale_at=now, reason="every cited section changed"
        )

    @classmethod
    def count_hit(cls, trail_id: int, now: datetime) -> None:
        cls.objects.filter(id=trail_id).update(hit_count=F("hit_count") + 1, last_hit_at=now)


class Step(models.Model):
    """One tool call on a trail's path."""

    trail = models.ForeignKey(Trail, on_delete=models.CASCADE, related_name="steps")
    position = models.PositiveSmallIntegerField()
    tool = models.CharField(max_length=200)
    args = models.JSONField(default=dict)
    section_ids = models.JSONField(default=list)

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["trail", "position"], name="step_position_unique")]


class Citation(models.Model):
    """A section the answer cited, and its hash when the trail was recorded."""

    trail = models.ForeignKey(Trail, on_delete=models.CASCADE, related_name="citations")
    # The scope is repeated here so "which trails cite this section" is one index read.
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+")
    position = models.PositiveSmallIntegerField()
    section_id = models.CharField(max_length=512)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["position"]
        indexes = [models.Index(fields=["scope", "section_id"], name="citation_scope_section")]
        constraints = [models.UniqueConstraint(fields=["trail", "position"], name="citation_position_unique")]


class BandKey(models.Model):
    """One LSH band of a trail's signature; recall finds candidates by reading these."""

    trail = models.ForeignKey(Trail, on_delete=models.CASCADE, related_name="band_keys")
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+", db_index=False)
    key = models.BigIntegerField()

    class Meta:
        indexes = [models.Index(fields=["scope", "key", "trail"], name="bandkey_scope_key")]


class TrailSignal(models.Model):
    """The history of signals and votes a trail received."""

    class Source(models.TextChoices):
        RECORD = "record", "At record time"
        FEEDBACK = "feedback", "Feedback"

    trail = models.ForeignKey(Trail, on_delete=models.CASCADE, related_name="signals")
    signal = models.CharField(max_length=16, choices=Signal.choices)
    source = models.CharField(max_length=16, choices=Source.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]


class RecallOutcome(models.TextChoices):
    PREFETCH = "prefetch"
    HINT = "hint"
    MISS = "miss"


class RecallEvent(models.Model):
    """One recall, for the hit-rate charts; the query text only where the scope keeps it."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="recall_events")
    created_at = models.DateTimeField(default=timezone.now)
    outcome = models.CharField(max_length=16, choices=RecallOutcome.choices)
    similarity = models.FloatField(null=True, blank=True)
    latency_ms = models.FloatField()
    trail = models.ForeignKey(Trail, on_delete=models.SET_NULL, null=True, blank=True, related_name="recall_events")
    matcher = models.CharField(max_length=16, default="lexical")
    stale_marked = models.PositiveSmallIntegerField(default=0)
    query = models.TextField(blank=True)

    class Meta:
        indexes = [models.Index(fields=["scope", "created_at"], name="recallevent_scope_time")]
