"""Setting a key's reports and labels aside: what an operator does after a flood.

A key that flooded a scope with "not helpful" reports leaves them behind when it is only
revoked: the scope's false-hit verdict counts its judgements, its labels move the threshold,
and its reports keep trails one report from removal or out of service. Setting the key aside
(with its revocation) makes all of that stop counting, recorded (when, by whom) and reversible:
restoring the key's standing counts them again. The trails' side runs in trails (a receiver of
`key_set_aside`), which this app never imports.
"""

from __future__ import annotations

from django.db import connection, transaction
from django.dispatch import Signal
from django.utils import timezone

from infra.guards import guard_on
from scopes import audit
from scopes.audit import AuditEvent
from scopes.models import ApiKey

# Sent once a key's standing changed and committed: `key`, `by`, `set_aside` (True: set aside; False: restored).
key_set_aside = Signal()

# The hook giving the scopes whose trails a reporter judged (registered by the trails app in its ready()).
JUDGED_SCOPES: list = []


def reached_scopes(key: ApiKey) -> set[int]:
    """The ids of the scopes a key's standing reaches: those it is granted and those whose trails
    it judged (a key moved to another scope since still moved these, so setting it aside or
    restoring it decides their trails again)."""
    if not JUDGED_SCOPES:
        raise RuntimeError("no judged-scopes hook registered (the trails app registers it)")
    return {*key.scopes.values_list("pk", flat=True), *JUDGED_SCOPES[0](key.reporter)}


def operable(key: ApiKey, acting: set[int]) -> bool:
    """Whether an operator acting on these scopes may revoke, set aside or restore this key:
    every scope its standing reaches is among them (else it is a superuser's)."""
    return reached_scopes(key) <= acting


def revoke(keys, by: str) -> int:
    """Revokes these keys (those not revoked yet), each in its scopes' audit logs. Returns how many."""
    now = timezone.now()
    done = 0
    with transaction.atomic():
        for key in keys:
            if ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=now):
                audit.record(
                    key.scopes.all(),
                    by,
                    AuditEvent.Kind.KEY_REVOKED,
                    at=now,
                    detail={"key": key.lookup},
                    what=f"{key.name or key.lookup} (key:{key.lookup}): revoked",
                )
                done += 1
    return done


def unrevoke(key: ApiKey, by: str) -> bool:
    """Lets a suspended key in again, in its scopes' audit logs, its reports and labels counted
    again where they were set aside (the undo of a suspension). Returns whether it was revoked."""
    with transaction.atomic():
        changed = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=False).update(revoked_at=None)
        if changed:
            audit.record(
                key.scopes.all(),
                by,
                AuditEvent.Kind.KEY_RESTORED,
                detail={"key": key.lookup},
                what=f"{key.name or key.lookup} (key:{key.lookup}): restored, let in again",
            )
        restore(key, by)
    key.refresh_from_db()
    return bool(changed)


def set_aside_reporters() -> set[str]:
    """The reporters ("key:<lookup>") whose reports and labels no longer count."""
    return {
        f"key:{lookup}" for lookup in ApiKey.objects.filter(set_aside_at__isnull=False).values_list("lookup", flat=True)
    }


def reporter_set_aside(reporter: str) -> bool:
    """Whether this reporter's key is set aside, its row held FOR SHARE until the transaction
    ends: a set-aside then waits for the report being counted, and its recount sees it."""
    if not reporter.startswith("key:"):
        return False
    if connection.vendor == "postgresql" and guard_on("report-holds-its-keys-standing"):
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT set_aside_at FROM {ApiKey._meta.db_table} WHERE lookup = %s FOR SHARE", [reporter[4:]]
            )
            row = cursor.fetchone()
        return row is not None and row[0] is not None
    return ApiKey.objects.filter(lookup=reporter[4:], set_aside_at__isnull=False).exists()


def set_aside(key: ApiKey, by: str) -> None:
    """Revokes the key and sets its reports and labels aside (a no-op if already set aside)."""
    now = timezone.now()
    with transaction.atomic():
        changed = ApiKey.objects.filter(pk=key.pk, set_aside_at__isnull=True).update(
            set_aside_at=now, set_aside_by=by[:150], revoked_at=key.revoked_at or now, moved_unacknowledged_at=None
        )
        if changed:
            audit.record(
                key.scopes.all(),
                by,
                AuditEvent.Kind.KEY_SET_ASIDE,
                at=now,
                detail={"key": key.lookup},
                what=f"{key.name or key.lookup} (key:{key.lookup}): revoked, its reports and labels set aside",
            )
            transaction.on_commit(lambda: key_set_aside.send(ApiKey, key=key, by=by, set_aside=True))
    key.refresh_from_db()


def restore(key: ApiKey, by: str) -> None:
    """Counts the key's reports and labels again (the key stays revoked)."""
    with transaction.atomic():
        changed = ApiKey.objects.filter(pk=key.pk, set_aside_at__isnull=False).update(
            set_aside_at=None, set_aside_by="", moved_unacknowledged_at=timezone.now()
        )
        if changed:
            audit.record(
                key.scopes.all(),
                by,
                AuditEvent.Kind.KEY_COUNTED_AGAIN,
                detail={"key": key.lookup},
                what=f"{key.name or key.lookup} (key:{key.lookup}): its reports and labels count again (still revoked)",
            )
            transaction.on_commit(lambda: key_set_aside.send(ApiKey, key=key, by=by, set_aside=False))
    key.refresh_from_db()


def acknowledge_moved(key: ApiKey) -> bool:
    """An operator has seen the trails a set-aside re-decided: no longer listed under the key."""
    done = ApiKey.objects.filter(pk=key.pk, moved_unacknowledged_at__isnull=False).update(moved_unacknowledged_at=None)
    key.refresh_from_db()
    return bool(done)
