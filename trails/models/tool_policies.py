"""Tool policies: which tools' results are cached, for how long, keyed on which arguments."""

from __future__ import annotations

from typing import Sequence

from django.db import models, transaction

from scopes.models import Scope, new_policy_version
from trails.core import toolkey


def bump_tool_policy_version(scope_ids) -> None:
    # Processes cache policies by the scope's version; a new random one makes them reload.
    for scope_id in set(scope_ids):
        Scope.objects.filter(pk=scope_id).update(tool_policy_version=new_policy_version())


class ToolPolicyQuerySet(models.QuerySet):
    def delete(self):
        scope_ids = list(self.values_list("scope_id", flat=True))
        deleted = super().delete()
        bump_tool_policy_version(scope_ids)
        return deleted

    def bulk_create(self, objs, *args, **kwargs):
        created = super().bulk_create(objs, *args, **kwargs)
        bump_tool_policy_version(p.scope_id for p in created)
        return created

    def update(self, **kwargs):
        scope_ids = list(self.values_list("scope_id", flat=True))
        updated = super().update(**kwargs)
        bump_tool_policy_version(scope_ids)
        return updated

    def replace(self, scope: Scope, policies: Sequence[dict]) -> list["ToolPolicy"]:
        """Replaces a scope's policies in one transaction, under a lock on the scope's row
        (concurrent replacements apply one after the other); the version moves with them."""
        with transaction.atomic():
            Scope.objects.select_for_update(no_key=True).filter(pk=scope.pk).exists()
            self.filter(scope=scope).delete()
            return self.bulk_create(ToolPolicy(scope=scope, **p) for p in policies)


class ToolPolicy(models.Model):
    """Whether and how long one tool's results may be cached in a scope.

    Every save and delete, whichever path makes it (API, admin, shell), gives the
    scope a new policy version, so no process keeps serving by an old policy.
    """

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="tool_policies")
    tool = models.CharField(max_length=200)
    cacheable = models.BooleanField(default=False)
    ttl_s = models.PositiveIntegerField(default=300, help_text="Staleness budget in seconds (1 to 30 days).")
    ignore_args = models.JSONField(
        default=list, blank=True, help_text="Arguments left out of the key, e.g. a free-text reason."
    )
    path_args = models.JSONField(default=list, blank=True, help_text="Arguments holding paths, normalised in the key.")
    per_caller = models.BooleanField(default=False, help_text="Key results by the caller's identity.")

    objects = ToolPolicyQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "tool policies"
        constraints = [models.UniqueConstraint(fields=["scope", "tool"], name="tool_policy_unique_in_scope")]

    def __str__(self) -> str:
        return f"{self.scope.slug}:{self.tool}"

    def save(self, *args, **kwargs) -> None:
        super().save(*args, **kwargs)
        bump_tool_policy_version([self.scope_id])

    def delete(self, *args, **kwargs):
        deleted = super().delete(*args, **kwargs)
        bump_tool_policy_version([self.scope_id])
        return deleted

    def as_rule(self) -> toolkey.ToolPolicy:
        return toolkey.ToolPolicy(
            self.tool,
            self.cacheable,
            self.ttl_s,
            frozenset(self.ignore_args),
            frozenset(self.path_args),
            self.per_caller,
        )
