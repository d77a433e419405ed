"""What a section said before it changed: kept by hash, so an operator sees the text a trail cited."""

from __future__ import annotations

from typing import Iterable

from django.db import models
from django.utils import timezone


class SectionRevision(models.Model):
    """A section's text as it was before it changed or was deleted, kept by its hash.

    Trails cite sections by hash; this lets an operator see what a changed section
    said when the trail was recorded. The sweep drops revisions no trail cites.
    """

    scope = models.ForeignKey("scopes.Scope", on_delete=models.CASCADE, related_name="+")
    section_id = models.CharField(max_length=512)
    hash = models.CharField(max_length=64)
    text = models.TextField()
    replaced_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "section_id", "hash"], name="section_revision_unique")]

    @classmethod
    def keep(cls, sections: Iterable, now=None) -> None:
        """Keeps the current text of these sections before they change or go."""
        now = now or timezone.now()
        cls.objects.bulk_create(
            [
                cls(scope_id=s.scope_id, section_id=s.section_id, hash=s.hash, text=s.text, replaced_at=now)
                for s in sections
            ],
            batch_size=500,
            ignore_conflicts=True,
        )
