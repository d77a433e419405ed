"""The audit log: one row for every act on a scope, written in the transaction of the act
itself, never changed or deleted (PostgreSQL refuses both with a trigger), so the audit page
reads what happened rather than deriving it from what is left now.

A row holds who, what kind of act, the values it changed (old and new) and a link; never an
operator's or a caller's free words (those stay where erasure finds them: a trail's history,
a sync's source), so the log keeps nothing a purge would have to reach.
"""

from __future__ import annotations

from datetime import datetime
from typing import Iterable

from django.db import models
from django.utils import timezone


class AuditEvent(models.Model):
    class Kind(models.TextChoices):
        APPROVED = "approved"
        REJECTED = "rejected"
        SENT_BACK = "sent back"
        REINSTATED = "reinstated"
        UNDONE = "undone"
        DELETED = "deleted"
        RELEASED = "released"
        KEY_SET_ASIDE = "key set aside"
        KEY_COUNTED_AGAIN = "key counted again"
        KEY_REVOKED = "key revoked"
        KEY_RESTORED = "key restored"
        ACCESS = "access changed"
        THRESHOLD = "threshold"
        SETTINGS = "settings changed"
        PURGE = "purge"
        DOCS_SYNC = "docs sync"

    # No database constraint: a deleted scope's events stay (with its slug) and are never updated.
    scope = models.ForeignKey(
        "scopes.Scope", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+", db_index=False
    )
    scope_slug = models.CharField(max_length=50)
    at = models.DateTimeField(default=timezone.now)
    who = models.CharField(max_length=150, blank=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    what = models.CharField(max_length=500, blank=True)
    link = models.CharField(max_length=300, blank=True)
    # The values the act changed ({"field": {"before": …, "after": …}}) and what it names (a trail's public id).
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["scope", "at"], name="auditevent_scope_time"),
            models.Index(fields=["scope", "kind", "at"], name="auditevent_scope_kind_time"),
            models.Index(fields=["scope", "who", "at"], name="auditevent_scope_who_time"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.scope_slug} {self.who} {self.kind}"

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise ValueError("an audit event is never changed")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("an audit event is never deleted")


def record(
    scopes: Iterable,
    who: str,
    kind: str,
    what: str = "",
    link: str = "",
    detail: dict | None = None,
    at: datetime | None = None,
) -> None:
    """Writes one event per scope (objects with `pk` and `slug`), in the caller's transaction."""
    at = at or timezone.now()
    AuditEvent.objects.bulk_create(
        [
            AuditEvent(
                scope_id=scope.pk,
                scope_slug=scope.slug,
                at=at,
                who=(who or "")[:150],
                kind=kind,
                what=what[:500],
                link=link[:300],
                detail=detail or {},
            )
            for scope in scopes
        ]
    )


def changes(before: dict, after: dict) -> dict:
    """{"field": {"before": old, "after": new}} for the fields whose value differs, as JSON text."""
    shown = lambda value: value if isinstance(value, (str, int, float, bool, type(None))) else str(value)  # noqa: E731
    return {
        name: {"before": shown(before.get(name)), "after": shown(after.get(name))}
        for name in sorted(set(before) | set(after))
        if before.get(name) != after.get(name)
    }
