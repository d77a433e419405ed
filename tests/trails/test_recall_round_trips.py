"""Recall's statements: a miss is one (its candidate read writes its event), a hit two; and
an event the read wrote as a miss is rewritten with whatever recall answered instead."""

from __future__ import annotations

import time
import uuid

import pytest
from django.db import OperationalError, connection

from scopes.models import Scope
from tests.trails.test_races import Hold, Run
from tests.trails.test_recall import record_icu
from trails.models import LoggedMiss, RecallEvent, Trail, TrailSignal, TrailStatus, writes
from trails.serving import candidates as candidates_module
from trails.serving import recall as recall_module

QUESTION = "What are the ICU visiting hours?"


@pytest.fixture
def postgres():
    if connection.vendor != "postgresql":
        pytest.skip("the candidate read writes the event on PostgreSQL only (SQLite writes it after)")


@pytest.fixture
def every_read_logs(monkeypatch):
    """Every candidate read writes the event as a miss, as a read that finds no likely hit does."""
    monkeypatch.setattr(LoggedMiss, "cte", lambda self, unless: f"logged AS ({self.insert} RETURNING 1)")


def statements_of(call) -> tuple[object, list[str]]:
    captured: list[str] = []

    def capture(execute, sql, params, many, context):
        captured.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        answer = call()
    return answer, captured


def test_a_miss_is_one_statement_and_its_event_is_there_when_recall_returns(postgres, api, sections):
    record_icu(api)
    response, statements = statements_of(lambda: api.recall("hospital", query="Where do visitors park?"))
    body = response.json()
    recalls = [s for s in statements if "trails_recallevent" in s]
    assert body["outcome"] == "miss" and [s[: len("WITH found")] for s in recalls] == ["WITH found"]
    event = RecallEvent.objects.get(public_id=body["recall_id"])
    assert (event.outcome, event.trail_id, event.matcher, event.stale_marked) == ("miss", None, "", 0)
    assert event.latency_ms > 0


def test_a_hit_is_written_after_its_read_in_one_statement(postgres, api, sections):
    trail_id = record_icu(api)
    response, statements = statements_of(lambda: api.recall("hospital", query=QUESTION))
    body = response.json()
    recalls = [s for s in statements if "trails_recallevent" in s or "WITH found" in s]
    assert body["outcome"] == "prefetch" and len(recalls) == 2
    event = RecallEvent.objects.get(public_id=body["recall_id"])
    trail = Trail.objects.get(public_id=trail_id)
    assert (event.outcome, event.trail_id, event.similarity) == ("prefetch", trail.id, 1.0)
    assert trail.hit_count == 1 and trail.last_hit_at is not None


def test_a_miss_whose_read_found_a_likely_hit_is_written_after_it(postgres, api, sections):
    record_icu(api)
    # A look-alike shares band keys with the recorded question (so the read leaves the event), then the guard refuses it.
    response, statements = statements_of(
        lambda: api.recall("hospital", query="What are the ICU visiting hours for children?")
    )
    body = response.json()
    read, *written = [s for s in statements if "trails_recallevent" in s or "WITH found" in s]
    assert body["outcome"] == "miss" and read.startswith("WITH found")
    assert [s[: len("WITH quick")] for s in written] == ["WITH quick"]  # the read's CTE wrote nothing
    event = RecallEvent.objects.get(public_id=body["recall_id"])
    assert (event.outcome, event.trail_id, event.similarity, event.stale_marked) == ("miss", None, None, 0)


def test_a_hit_rewrites_the_event_its_read_wrote_as_a_miss(postgres, every_read_logs, api, sections):
    trail_id = record_icu(api)
    body = api.recall("hospital", query=QUESTION).json()
    assert body["outcome"] == "prefetch"
    trail = Trail.objects.get(public_id=trail_id)
    event = RecallEvent.objects.get()
    assert str(event.public_id) == body["recall_id"]
    assert (event.outcome, event.trail_id, event.matcher, event.similarity) == ("prefetch", trail.id, "lexical", 1.0)
    assert event.calls_saved > 0 and trail.hit_count == 1


def test_a_hint_rewrites_the_logged_event_too(postgres, every_read_logs, api, sections):
    record_icu(api)
    api.put_sections("hospital", {"visiting/icu": "ICU visiting hours are now 13:00 to 17:00."})
    body = api.recall("hospital", query=QUESTION).json()
    assert body["outcome"] == "hint"
    assert RecallEvent.objects.get().outcome == "hint"


def test_a_stale_trail_rewrites_the_logged_miss_with_its_mark(postgres, every_read_logs, api, sections):
    trail_id = record_icu(api)
    api.put_sections("hospital", {"visiting/icu": "changed", "parking": "changed too"})
    body = api.recall("hospital", query=QUESTION).json()
    trail = Trail.objects.get(public_id=trail_id)
    event = RecallEvent.objects.get()
    assert body["outcome"] == "miss" and trail.status == TrailStatus.STALE
    assert (event.outcome, event.stale_marked, event.trail_id, event.similarity) == ("miss", 1, trail.id, 1.0)
    assert TrailSignal.objects.filter(trail=trail, signal="stale").count() == 1


def test_a_dry_run_writes_no_event_from_its_read(postgres, every_read_logs, api, sections):
    record_icu(api)
    assert api.recall("hospital", query="Where do visitors park?", dry_run=True).json()["recall_id"] is None
    assert RecallEvent.objects.count() == 0


def test_the_logged_event_is_the_asking_scopes(postgres, every_read_logs, api, other_api, sections, other_scope):
    record_icu(api)
    body = other_api.recall(other_scope.slug, query=QUESTION).json()
    assert body["outcome"] == "miss"
    assert RecallEvent.objects.get(public_id=body["recall_id"]).scope_id == other_scope.id
    assert not RecallEvent.objects.filter(scope=Scope.objects.get(slug="hospital")).exists()


@pytest.mark.django_db(transaction=True)
def test_a_logged_recall_whose_scope_is_deleted_meanwhile_is_not_found(
    postgres, every_read_logs, api, scope, sections, monkeypatch
):
    record_icu(api)
    hold = Hold(monkeypatch, "recall:answered")
    recalling = Run(lambda: api.recall("hospital", query=QUESTION))
    hold.wait()  # the read wrote the event as a miss; the hit is not yet written
    assert RecallEvent.objects.filter(scope_id=scope.pk, outcome="miss").count() == 1
    Scope.objects.get(pk=scope.pk).delete()
    hold.release()
    response = recalling.outcome()
    assert response.status_code == 404 and response.json()["error"]["field"] == "scope"
    assert not RecallEvent.objects.filter(scope_id=scope.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_logged_recall_whose_trail_is_deleted_meanwhile_stays_a_miss(
    postgres, every_read_logs, api, sections, monkeypatch
):
    trail = Trail.objects.get(public_id=record_icu(api))
    hold = Hold(monkeypatch, "recall:answered")
    recalling = Run(lambda: api.recall("hospital", query=QUESTION))
    hold.wait()
    writes.delete_trails([trail.pk])
    hold.release()
    body = recalling.outcome().json()
    assert body["outcome"] == "miss" and body["trail_id"] is None
    assert RecallEvent.objects.get(public_id=body["recall_id"]).outcome == "miss"


def test_a_recall_that_fails_after_its_read_logged_a_miss_leaves_no_event(
    postgres, every_read_logs, api, sections, monkeypatch
):
    trail = Trail.objects.get(public_id=record_icu(api))

    def connection_lost(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(recall_module, "write_recall_effects", connection_lost)
    with pytest.raises(OperationalError):
        recall_module.recall(Scope.objects.get(slug="hospital"), QUESTION)
    # Neither a miss the caller never got nor a hit it never saw is counted.
    assert not RecallEvent.objects.exists()
    assert Trail.objects.get(pk=trail.pk).hit_count == 0
    monkeypatch.undo()
    body = api.recall("hospital", query=QUESTION).json()
    assert RecallEvent.objects.get().public_id == uuid.UUID(body["recall_id"])


def test_a_recall_that_fails_reading_the_rows_of_a_read_that_logged_it_leaves_no_event(
    postgres, every_read_logs, api, sections, monkeypatch
):
    record_icu(api)

    def unreadable(row):
        raise ValueError("a row recall cannot read")

    # The event is committed with the read; the row saying so comes last and is never reached.
    monkeypatch.setattr(candidates_module, "decode", unreadable)
    with pytest.raises(ValueError):
        recall_module.recall(Scope.objects.get(slug="hospital"), QUESTION)
    assert not RecallEvent.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_recall_cut_by_its_database_deadline_after_its_read_leaves_no_event(
    postgres, every_read_logs, api, sections, settings, monkeypatch
):
    record_icu(api)
    settings.RAGTRAIL_DB_DEADLINE_S = 1.0

    def stuck(**kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(3)")  # the watchdog shuts the connection's socket at the deadline

    monkeypatch.setattr(recall_module, "write_recall_effects", stuck)
    response = api.recall("hospital", query=QUESTION)
    assert response.status_code == 503 and response.json()["error"]["code"] == "deadline"
    assert not RecallEvent.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_recall_whose_read_waits_past_the_deadline_leaves_no_event_once_the_wait_ends(
    postgres, api, scope, sections, settings
):
    """The watchdog shuts the socket, but the server goes on with the read: waiting on the scope's row
    (a sync or a deletion holds it), it would commit the event after the cleanup had looked for it."""
    import threading

    from django.db import connections, transaction

    settings.RAGTRAIL_DB_DEADLINE_S = 0.5
    locked, release = threading.Event(), threading.Event()

    def hold_the_scope() -> None:
        try:
            with transaction.atomic():
                Scope.objects.select_for_update().get(pk=scope.pk)
                locked.set()
                release.wait(10)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_scope)
    holder.start()
    try:
        assert locked.wait(10)
        response = api.recall("hospital", query="Where do visitors park?")
        assert response.status_code == 503 and response.json()["error"]["code"] == "deadline"
    finally:
        release.set()
        holder.join()
    waiting = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'WITH found%%' AND pid <> pg_backend_pid()"
    for _ in range(250):  # until no read of the recall is left on the server
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(waiting + " AND state = 'active'")
            if cursor.fetchone()[0] == 0:
                break
        time.sleep(0.02)
    assert not RecallEvent.objects.filter(scope=scope).exists()
