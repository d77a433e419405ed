"""What the learned thresholds are computed from (judged matches) and every move they make."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from scopes.models import Scope
from trails.models.trail import Trail


class MatchLabel(models.Model):
    """A judged match: was serving a trail at this similarity right or wrong, and who said so.

    The scope's thresholds are learned from these (trails/learning/thresholds.py). Sources: an
    agent's feedback on a recall, a re-search (a path recorded for the same question in
    the same session: citing the served sections or not), a near miss (the nearest
    candidate of a miss, judged by the path then recorded), a rejection of a trail that
    was served. Each names its reporter, so no one reporter's labels weigh without bound.
    """

    class Source(models.TextChoices):
        FEEDBACK = "feedback", "Agent's feedback"
        RESEARCH = "research", "Re-search after a hit"
        NEAR_MISS = "near_miss", "Path recorded after a near miss"
        MISS = "miss", "Path recorded after a miss with nothing near"
        REJECTION = "rejection", "Served trail rejected"

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+", db_index=False)
    matcher = models.CharField(max_length=16)
    similarity = models.FloatField()
    false_hit = models.BooleanField()
    source = models.CharField(max_length=16, choices=Source.choices)
    reporter = models.CharField(max_length=100, blank=True)
    recall_event = models.ForeignKey(
        "RecallEvent", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    trail = models.ForeignKey(Trail, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["scope", "matcher", "created_at"], name="matchlabel_scope_time"),
            models.Index(fields=["trail", "source"], name="matchlabel_trail", condition=Q(trail__isnull=False)),
            # The scopes a key labelled: setting it aside reaches them (trails.learning.feedback.judged_scopes).
            models.Index(fields=["reporter", "scope"], name="matchlabel_reporter"),
        ]
        constraints = [
            # One label per recall: feedback, a re-search and a rejection do not count one recall twice.
            models.UniqueConstraint(
                fields=["recall_event"], condition=Q(recall_event__isnull=False), name="matchlabel_once_per_recall"
            )
        ]


class ThresholdChange(models.Model):
    """Every move of a scope's threshold in use, with its cause and evidence: what the
    overview and Django admin show, and what an operator resets or pins against."""

    class Kind(models.TextChoices):
        LEARNED = "learned", "Learned from labels"
        FLAGGED = "flagged", "Flagged for an operator"
        RESET = "reset", "Reset by an operator"
        PINNED = "pinned", "Pinned by an operator (learning off)"
        UNPINNED = "unpinned", "Unpinned by an operator (learning on)"
        CONFIGURED = "configured", "Matching settings changed"

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="threshold_changes")
    matcher = models.CharField(max_length=16, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    before = models.FloatField(null=True, blank=True)
    after = models.FloatField(null=True, blank=True)
    by = models.CharField(max_length=150, blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["scope", "created_at"], name="thresholdchange_scope_time")]


class EmbedderCalibration(models.Model):
    """Thresholds fitted for one embedding model (`manage.py calibrate_embedder`): on labelled
    pairs for every scope, or on one scope's own labels for that scope.

    `fit` has the shape of the shipped trails/learning/calibration.json (the embedding curve
    a scope's bound reads its threshold from) plus the held-out rates it was checked on.
    """

    model = models.CharField(max_length=200, help_text="The embedder's name, as stored with every vector.")
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    source = models.CharField(max_length=300, help_text="The pairs file, or the scope whose labels were fitted on.")
    fit = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["model"], condition=Q(scope__isnull=True), name="embeddercalibration_model"
            ),
            models.UniqueConstraint(
                fields=["model", "scope"], condition=Q(scope__isnull=False), name="embeddercalibration_model_scope"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model} ({self.source})"
