"""The one writer: rows a trail owns are written only through trails.models.writes (a write
from anywhere else fails in the tests), and saves that would undo another write do not."""

from __future__ import annotations

import pytest
from django.db import transaction

from scopes.models import Scope
from trails.models import bump_tool_policy_version


def test_a_scopes_full_save_keeps_a_tool_policy_change_committed_since_it_was_loaded(scope):
    loaded = Scope.objects.get(pk=scope.pk)  # the ops page's threshold form loads the scope
    bump_tool_policy_version([scope.pk])  # an agent replaces the tool policies meanwhile
    changed = Scope.objects.get(pk=scope.pk).tool_policy_version
    assert changed != loaded.tool_policy_version
    loaded.lexical_threshold = 0.8
    loaded.save()
    stored = Scope.objects.get(pk=scope.pk)
    assert stored.lexical_threshold == 0.8
    assert stored.tool_policy_version == changed, "the save put back the version the policies replaced"
    assert stored.cache_token == scope.cache_token


@pytest.mark.django_db
def test_a_new_scope_saves_every_field():
    made = Scope(slug="fresh", name="Fresh")
    made.save()
    assert Scope.objects.get(slug="fresh").tool_policy_version == made.tool_policy_version


def test_a_write_to_a_trails_rows_from_outside_the_writer_fails(api, sections):
    from tests.trails.test_recall import record_icu
    from trails.models import Trail, TrailSignal
    from trails.models.gate import WriteOutsideWriter

    trail = Trail.objects.get(public_id=record_icu(api))
    with pytest.raises(WriteOutsideWriter), transaction.atomic():
        Trail.objects.filter(pk=trail.pk).update(status="active", held_by="")
    with pytest.raises(WriteOutsideWriter), transaction.atomic():
        TrailSignal.objects.create(trail=trail, scope_id=trail.scope_id, signal="up", source="operator")
    assert Trail.objects.filter(pk=trail.pk, status=trail.status).exists()


def test_only_the_writers_modules_open_the_gate():
    import re
    from pathlib import Path

    from trails.models.gate import WRITER_MODULES

    root = Path(__file__).resolve().parents[2]
    opening = re.compile(r"\bfrom trails\.models\.gate import [^\n]*\b(writing|writer)\b|\bgate\.(writing|writer)\(")
    found = set()
    for path in root.glob("*/**/*.py"):
        if path.parts[len(root.parts)] in (".venv", "tests") or "site-packages" in path.parts:
            continue
        if opening.search(path.read_text(encoding="utf-8")):
            found.add(".".join(path.relative_to(root).with_suffix("").parts))
    assert found and found <= WRITER_MODULES, sorted(found - WRITER_MODULES)


def test_deleting_a_scope_in_django_admin_deletes_its_trails_through_the_deletion_path(
    api, scope, sections, monkeypatch
):
    from django.contrib.auth.models import User
    from django.test import Client

    from tests.trails.test_recall import record_icu
    from trails.models import MatchLabel, RecallEvent, Trail, pauses

    record_icu(api)
    api.recall("hospital", query="What are the ICU visiting hours?")
    reached = []
    earlier = pauses.pause_point
    monkeypatch.setattr(pauses, "pause_point", lambda name: (reached.append(name), earlier(name)))
    staff = Client()
    staff.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    response = staff.post(f"/admin/scopes/scope/{scope.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302, response.content[:500]
    assert not Scope.objects.filter(pk=scope.pk).exists()
    assert not Trail.objects.exists() and not RecallEvent.objects.exists() and not MatchLabel.objects.exists()
    assert "delete:locked" in reached  # each batch of trails locked in id order, then deleted with its rows


def test_every_guard_in_the_code_is_a_row_of_the_guard_table_and_each_row_names_a_test():
    import re
    from pathlib import Path

    from trails.management.commands.check_guards import guard_table

    root = Path(__file__).resolve().parents[2]
    table = guard_table(root / "docs" / "consistency.md")
    in_code = {
        name
        for folder in ("infra", "scopes", "trails")
        for path in (root / folder).rglob("*.py")
        for name in re.findall(r'guard_on\("([a-z0-9-]+)"\)', path.read_text(encoding="utf-8"))
    }
    assert in_code == {name for name, _ in table}
    for _, test in table:
        path, name = test.split("::")
        assert f"def {name}(" in (root / path).read_text(encoding="utf-8"), test


def test_saving_a_trails_admin_page_is_refused_and_writes_nothing(api, sections):
    from django.contrib.auth.models import User
    from django.test import Client

    from tests.trails.test_recall import record_icu
    from trails.models import Trail

    trail = Trail.objects.get(public_id=record_icu(api))
    client = Client(raise_request_exception=False)
    client.force_login(User.objects.create_superuser("olga", "olga@example.com", "pw"))
    url = f"/admin/trails/trail/{trail.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert client.post(url, {"_save": "Save"}).status_code == 403
    after = Trail.objects.get(pk=trail.pk)
    assert (after.status, after.expires_at, after.hit_count) == (trail.status, trail.expires_at, trail.hit_count)
    # The list keeps its actions: the table's rules, through the writer.
    assert 'value="reject"' in client.get("/admin/trails/trail/").content.decode()


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE public.trails_trail SET reason = 'x' WHERE id = %s",
        'UPDATE "public"."trails_trail" SET reason = \'x\' WHERE id = %s',
        "UPDATE ONLY trails_trail SET reason = 'x' WHERE id = %s",
        "UPDATE/**/trails_trail SET reason = 'x' WHERE id = %s",
        "UPDATE -- a comment\n trails_trail SET reason = 'x' WHERE id = %s",
        "MERGE INTO trails_trail t USING (SELECT %s AS id) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET reason = 'x'",
    ],
)
def test_a_write_outside_the_writer_fails_however_the_statement_is_spelled(api, sections, statement):
    from django.db import connection

    from tests.trails.test_recall import record_icu
    from trails.models import Trail
    from trails.models.gate import WriteOutsideWriter

    trail = Trail.objects.get(public_id=record_icu(api))
    with pytest.raises(WriteOutsideWriter), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, [trail.pk])
    assert Trail.objects.get(pk=trail.pk).reason == trail.reason


def test_a_composed_statement_outside_the_writer_fails_too(api, sections):
    from django.db import connection
    from psycopg import sql

    from tests.trails.test_recall import record_icu
    from trails.models import Trail
    from trails.models.gate import WriteOutsideWriter

    if connection.vendor != "postgresql":
        pytest.skip("psycopg's composed statements are PostgreSQL's")
    trail = Trail.objects.get(public_id=record_icu(api))
    statement = sql.SQL("UPDATE {} SET reason = 'x' WHERE id = %s").format(sql.Identifier("trails_trail"))
    with pytest.raises(WriteOutsideWriter), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, [trail.pk])
