"""The record of each docs sync of a scope, and the background jobs that run large ones."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone


class SectionSync(models.Model):
    """One sync of a scope's sections from its documents (trails/upkeep/sync.py),
    with what it changed and how the served trails moved. Dry runs leave none."""

    scope = models.ForeignKey("scopes.Scope", on_delete=models.CASCADE, related_name="section_syncs")
    created_at = models.DateTimeField(default=timezone.now)
    by = models.CharField(max_length=200, blank=True)  # "command", "key:<lookup>"
    source = models.CharField(max_length=500, blank=True)  # the folder or file synced
    summary = models.JSONField(default=dict)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["scope", "created_at"], name="sectionsync_scope_time")]
        verbose_name = "section sync"

    def __str__(self) -> str:
        sections = self.summary.get("sections", {})
        return (
            f"{self.created_at:%Y-%m-%d %H:%M} {sections.get('added', 0)} added, {sections.get('changed', 0)} changed, "
            f"{sections.get('removed', 0)} removed"
        )


class SectionSyncJob(models.Model):
    """A docs release sent to run in the background (POST .../section-syncs with
    "background": true): its request until it has run, then what it did or why it failed.
    A release of tens of thousands of sections takes longer than a request may."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    scope = models.ForeignKey("scopes.Scope", on_delete=models.CASCADE, related_name="sync_jobs")
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    by = models.CharField(max_length=200, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    # Who runs it and since when: a worker that dies leaves it running, and the claim (or the
    # reaper) takes it back past its deadline; a redelivered task (same id) takes it at once.
    claimed_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True, default="", db_default="")
    attempts = models.PositiveSmallIntegerField(default=0, db_default=0)
    request = models.JSONField(default=dict)  # emptied once run: the texts live in the section store
    summary = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "section sync job"

    def __str__(self) -> str:
        return f"{self.public_id} {self.state}"
