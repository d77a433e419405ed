"""Turning a scope's second chance on or off from an operator page, audited as admin audits a
settings change (docs/second-chance.md)."""

from __future__ import annotations

from django.db import transaction

from scopes import audit
from scopes.models import Scope


def switch_second_chance(scope: Scope, on: bool, by: str) -> bool:
    """Turns the scope's second chance on or off, recorded in its audit log with who; returns
    whether it changed (False: it already was)."""
    with transaction.atomic():
        changed = Scope.objects.filter(pk=scope.pk, second_chance=not on).update(second_chance=on)
        if changed:
            detail = {"second_chance": {"before": not on, "after": on}}
            audit.record(
                [scope], by, audit.AuditEvent.Kind.SETTINGS, what=f"second_chance: {not on} → {on}", detail=detail
            )
    scope.second_chance = on
    return bool(changed)
