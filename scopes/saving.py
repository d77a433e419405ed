"""How a scope is saved and deleted (Scope's own rules, kept beside it): a full save never
writes back the fields only their own updates write, and a deletion goes through the hook
the trails app registers (its trails through their deletion path, in batches)."""

from __future__ import annotations

import secrets

from django.db import models

from infra.guards import guard_on


def new_policy_version() -> str:
    return secrets.token_hex(16)


def new_cache_token() -> str:
    return secrets.token_hex(16)


# The hook that deletes a scope (registered by the trails app in its ready()): the rows its
# trails own go through that app's deletion path in batches, then `delete()` runs the cascade.
SCOPE_DELETERS: list = []


class ScopeQuerySet(models.QuerySet):
    def delete(self):
        """Each scope through Scope.delete (the trails' deletion path), never one cascade."""
        total, counts = 0, {}
        for scope in self:
            deleted, by_model = scope.delete()
            total += deleted
            for label, n in by_model.items():
                counts[label] = counts.get(label, 0) + n
        return total, counts


class KeptWrites:
    """Scope's save and delete (a mixin before models.Model)."""

    def delete(self, *args, **kwargs):
        """Deletes the scope through the hook its trails' app registered, or (none) a cascade."""
        cascade = lambda: super(KeptWrites, self).delete(*args, **kwargs)  # noqa: E731
        return SCOPE_DELETERS[0](self, cascade) if SCOPE_DELETERS else cascade()

    # Written only by their own updates (a tool-policy change, a new cache): never by a save.
    OWN_WRITES = ("tool_policy_version", "cache_token")

    def save(self, *args, **kwargs) -> None:
        """A save of a loaded scope writes every field but those with writes of their own, so
        a tool-policy change committed since the load is not undone (docs/consistency.md)."""
        if not self._state.adding and kwargs.get("update_fields") is None and guard_on("scope-save-skips-own-writes"):
            kwargs["update_fields"] = [
                f.name for f in self._meta.concrete_fields if not f.primary_key and f.name not in self.OWN_WRITES
            ]
        super().save(*args, **kwargs)
