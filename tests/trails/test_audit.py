"""The audit log forgets nothing: every act is an event written with it and never changed;
the page filters in the database and the CSV holds every row the filters keep."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import DatabaseError, connection, transaction
from django.test import Client

from scopes.access import Access, OperatorGrant
from scopes.audit import AuditEvent
from scopes.keys import restore, revoke, set_aside
from scopes.models import ApiKey
from tests.trails.test_recall import record_icu
from trails.core.lifecycle import Actor
from trails.learning.thresholds import pin_thresholds
from trails.models import Trail, writes


@pytest.fixture
def root(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="x"))
    return client


def kinds(scope) -> list[str]:
    return list(AuditEvent.objects.filter(scope_id=scope.pk).order_by("at", "id").values_list("kind", flat=True))


def test_a_key_set_aside_then_counted_again_and_a_plain_revoke_stay_in_the_log(api, scope, root):
    flooder = ApiKey.issue([scope], name="scraper")[0]
    set_aside(flooder, by="root")
    restore(flooder, by="root")
    plain = ApiKey.issue([scope], name="old bot")[0]
    assert revoke(ApiKey.objects.filter(pk=plain.pk), by="ann") == 1
    assert kinds(scope) == ["key set aside", "key counted again", "key revoked"]
    page = root.get("/ops/hospital/audit/").content.decode()
    assert "key set aside" in page and "key counted again" in page and "old bot" in page


def test_an_operators_act_stays_after_the_trail_is_gone(api, scope, sections, root):
    trail = Trail.objects.get(public_id=record_icu(api))
    writes.act(trail, "down", Actor.OPERATOR, by="ann", reason="wrong")
    writes.delete_trails([trail.pk])
    event = AuditEvent.objects.get(scope_id=scope.pk, kind="rejected")
    assert (event.who, event.detail["trail"], event.detail["status"]) == (
        "ann",
        str(trail.public_id),
        {"before": "active", "after": "rejected"},
    )
    assert "ann" in root.get("/ops/hospital/audit/?kind=rejected").content.decode()


def test_a_persons_acts_are_found_among_many_and_the_csv_holds_every_row(scope, root):
    AuditEvent.objects.bulk_create(
        [AuditEvent(scope_id=scope.pk, scope_slug=scope.slug, who=f"bot-{n % 7}", kind="docs sync") for n in range(700)]
    )
    AuditEvent.objects.create(scope_id=scope.pk, scope_slug=scope.slug, who="ann", kind="approved", what="trail x")
    AuditEvent.objects.bulk_create(
        [AuditEvent(scope_id=scope.pk, scope_slug=scope.slug, who="bob", kind="docs sync") for _ in range(600)]
    )
    page = root.get("/ops/hospital/audit/?who=ann").content.decode()
    assert "trail x" in page
    assert "page 1 of 14" in root.get("/ops/hospital/audit/").content.decode()
    csv = b"".join(root.get("/ops/hospital/audit/?format=csv").streaming_content).decode()
    assert len(csv.strip().splitlines()) == 1 + 1301


def test_a_threshold_move_and_a_grant_change_are_recorded_with_their_values(scope, root):
    pin_thresholds(scope, by="root")
    event = AuditEvent.objects.get(scope_id=scope.pk, kind="threshold")
    assert event.detail["threshold"]["after"] == scope.lexical_threshold and "Pinned" in event.what
    ann = User.objects.create_user("ann", password="x", is_staff=True)
    grant = OperatorGrant.objects.create(user=ann, scope=scope, access=Access.VIEW)
    root.post(
        f"/admin/scopes/operatorgrant/{grant.pk}/change/", {"user": ann.pk, "scope": scope.pk, "access": Access.ACT}
    )
    changed = AuditEvent.objects.get(scope_id=scope.pk, kind="access changed")
    assert changed.detail == {"user": "ann", "access": {"before": "view", "after": "act"}} and changed.who == "root"


def test_an_event_is_never_changed_nor_deleted(scope):
    event = AuditEvent.objects.create(scope_id=scope.pk, scope_slug=scope.slug, who="ann", kind="approved")
    with pytest.raises(ValueError):
        event.save()
    with pytest.raises(ValueError):
        event.delete()
    if connection.vendor == "postgresql":
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            AuditEvent.objects.filter(pk=event.pk).update(who="mallory")
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            AuditEvent.objects.filter(pk=event.pk).delete()
    assert AuditEvent.objects.get(pk=event.pk).who == "ann"


def test_a_key_event_reads_as_written_whatever_the_keys_standing_now(scope, root):
    from scopes.keys import unrevoke

    bot = ApiKey.issue([scope], name="old bot")[0]
    revoke(ApiKey.objects.filter(pk=bot.pk), by="ann")
    written = f"old bot (key:{bot.lookup}): revoked"
    for _ in ("revoked", "restored"):
        page = root.get("/ops/hospital/audit/").content.decode()
        assert written in page and "old bot — revoked" not in page and "old bot (old bot" not in page
        unrevoke(bot, by="ann")
    assert f"old bot (key:{bot.lookup}): restored, let in again" in page
