"""Purging personal data: a scope's own patterns, and each purge run with its audit."""

from __future__ import annotations

import uuid

from django.db import models, transaction
from django.utils import timezone

from scopes import audit
from scopes.audit import AuditEvent
from scopes.models import Scope


class PiiPattern(models.Model):
    """A scope's own pattern of personal data (a patient number, a customer id), checked by purges."""

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="pii_patterns")
    name = models.CharField(max_length=100)
    pattern = models.CharField(max_length=500, help_text="A Python regular expression.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "name"], name="pii_pattern_unique_in_scope")]

    def __str__(self) -> str:
        return f"{self.scope.slug}:{self.name}"

    def clean(self) -> None:
        import re

        from django.core.exceptions import ValidationError

        try:
            re.compile(self.pattern)
        except re.error as problem:
            raise ValidationError({"pattern": f"not a valid regular expression: {problem}"}) from None


class PurgeRun(models.Model):
    """One purge of personal data: its preview, its progress, and afterwards its audit record.

    The audit keeps who, when, which scope and rule, and how many; never the purged
    text (an erasure subject is held only while the run is previewed or unfinished).
    A previewed run stores the trails it matched, and confirming it purges exactly those.
    """

    class Action(models.TextChoices):
        REDACT = "redact", "Redact the query text"
        DELETE = "delete", "Delete the trails"

    class State(models.TextChoices):
        PREVIEWED = "previewed"
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="purge_runs")
    rule = models.CharField(
        max_length=200, help_text="What was looked for: built-in rules, scope patterns, or an erasure subject."
    )
    subject = models.TextField(blank=True)
    action = models.CharField(max_length=16, choices=Action.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    requested_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    total = models.PositiveIntegerField(default=0)
    processed = models.PositiveIntegerField(default=0)
    matched = models.PositiveIntegerField(default=0)
    # Of the matched trails, those deleted: all for a deletion, else those whose section ids hold it.
    deleted = models.PositiveIntegerField(default=0, db_default=0)
    last_trail_id = models.BigIntegerField(default=0)
    # The previewed set (trail ids); None purges every matching trail of the scope at run time.
    trail_ids = models.JSONField(null=True, blank=True, editable=False)
    error = models.CharField(max_length=300, blank=True)
    # After the run, what still matched (by kind of record; empty: nothing left), checked
    # before the subject was forgotten.
    left = models.JSONField(null=True, blank=True, editable=False)
    # After the run, per kind of record: [how many it checked, how many it changed].
    counts = models.JSONField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at", "-id"]

    def finish(self) -> None:
        self.state, self.finished_at, self.subject, self.trail_ids = self.State.DONE, timezone.now(), "", None
        left = (
            "nothing left in any store"
            if not self.left
            else "still matching: " + ", ".join(f"{n} {kind}" for kind, n in self.left.items())
        )
        others = ", ".join(
            f"{changed} of {checked} {kind}"
            for kind, (checked, changed) in (self.counts or {}).items()
            if kind != "trails"
        )
        with transaction.atomic():
            self.save(update_fields=["state", "finished_at", "subject", "trail_ids", "left", "counts"])
            self.audit(
                f"done: {self.trails_done()}; "
                f"{others or 'no other records'} changed; {self.checked} records checked, {self.changed} changed; {left}"
            )

    @property
    def redacted(self) -> int:
        """Of the matched trails, those redacted (the others were deleted)."""
        return self.matched - self.deleted

    def trails_done(self) -> str:
        """What the run did to trails, in words: a trail deleted though the action redacts says why."""
        if self.action == self.Action.DELETE:
            return f"{self.matched} of {self.processed} trails deleted"
        done = f"{self.redacted} of {self.processed} trails' queries redacted"
        if self.deleted:
            whose = "its section ids" if self.deleted == 1 else "their section ids"
            done += f", {self.deleted} deleted ({whose} held the match: a citation cannot be redacted)"
        return done

    def started(self) -> str:
        """What the audit log says when a previewed run is confirmed, a sentence for either action."""
        one = self.total == 1
        trails = f"{self.total} previewed trail{'' if one else 's'}"
        if self.action == self.Action.DELETE:
            return f"started: {trails} to be deleted"
        whose = "its section ids hold" if one else "their section ids hold"
        return f"started: {trails} to be redacted, or deleted where {whose} the match"

    def fail(self, error: str) -> None:
        """Ends the run unfinished; it forgets its erasure subject and what it matched."""
        self.state, self.finished_at, self.subject, self.trail_ids = self.State.FAILED, timezone.now(), "", None
        self.error = error[:300]
        with transaction.atomic():
            self.save(update_fields=["state", "finished_at", "subject", "trail_ids", "error"])
            self.audit(f"failed: {self.error}")

    def audit(self, what: str) -> None:
        """The run in its scope's audit log (never its subject)."""
        audit.record(
            [self.scope],
            self.requested_by,
            AuditEvent.Kind.PURGE,
            what=f"{self.rule} · {what}",
            link=f"/ops/{self.scope.slug}/purge/?run={self.public_id}",
            detail={
                "run": str(self.public_id),
                "action": self.action,
                "matched": self.matched,
                "deleted": self.deleted,
                "processed": self.processed,
                "left": self.left,
                "counts": self.counts,
            },
        )

    @classmethod
    def request(cls, scope: Scope, subject: str, delete: bool, requested_by: str) -> "PurgeRun":
        """An unsaved run: an erasure request for `subject`, or the built-in rules and scope patterns."""
        return cls(
            scope=scope,
            subject=subject,
            rule="erasure request" if subject else "built-in rules and scope patterns",
            action=cls.Action.DELETE if delete else cls.Action.REDACT,
            requested_by=requested_by,
        )

    @property
    def checked(self) -> int:
        """Every record the run checked, in every store (trails alone before it finished)."""
        return sum(checked for checked, _ in self.counts.values()) if self.counts else self.processed

    @property
    def changed(self) -> int:
        """Every record the run changed or deleted, in every store."""
        return sum(changed for _, changed in self.counts.values()) if self.counts else self.matched

    @property
    def percent(self) -> int:
        return 100 if self.state == self.State.DONE else int(100 * self.processed / self.total) if self.total else 0
