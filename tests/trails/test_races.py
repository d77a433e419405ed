"""Races on PostgreSQL: two writes interleaved at the exact point each defect lay, with real
threads on their own connections. A write names the points where it holds its locks
(`pauses.pause_point`); `Hold` keeps the first thread that reaches one there until the test
lets it go, while another thread's write runs or waits on a row lock. Each test asserts what
docs/consistency.md states: no deadlock, no error, a state the lifecycle table allows."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection, connections, transaction
from django.test import Client
from django.utils import timezone

from scopes.keys import set_aside
from scopes.models import ApiKey, Scope, Section, SectionSyncJob
from tests.bypass import around_the_writer
from tests.trails.test_recall import record_icu
from tests.trails.test_recall_feedback import QUESTION, feedback, recall_id, second_key
from trails.core.lifecycle import Actor, State
from trails.learning.feedback import give_feedback
from trails.models import MatchLabel, RecallEvent, Trail, TrailReport, pauses, writes
from trails.serving.matching import matching_settings
from trails.upkeep.sync import JOB_ATTEMPTS, JOB_DEADLINE_SECONDS, reap_lost_sync_jobs, run_sync_job

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and their order are PostgreSQL's here"),
]

WAIT = 20  # seconds a thread may wait for another before the test says it hung


class Hold:
    """Holds the first thread that reaches the named pause point until `release()`."""

    def __init__(self, monkeypatch, point: str) -> None:
        self.point, self.reached, self.released = point, threading.Event(), threading.Event()
        self._taken = threading.Lock()
        earlier = pauses.pause_point

        def pause(name: str) -> None:
            earlier(name)
            if name == self.point and self._taken.acquire(blocking=False):
                self.reached.set()
                assert self.released.wait(WAIT), f"held at {name} past {WAIT} s"

        monkeypatch.setattr(pauses, "pause_point", pause)

    def wait(self) -> None:
        assert self.reached.wait(WAIT), f"no thread reached {self.point}"

    def release(self) -> None:
        self.released.set()


class Run(threading.Thread):
    """A write in a thread of its own (its own database connection), its result or error kept."""

    def __init__(self, work, *args, **kwargs) -> None:
        super().__init__(daemon=True)
        self.work, self.args, self.kwargs = work, args, kwargs
        self.result = self.error = None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.work(*self.args, **self.kwargs)
        except BaseException as problem:  # kept for the test to assert on
            self.error = problem
        finally:
            connections.close_all()

    def outcome(self):
        self.join(WAIT)
        assert not self.is_alive(), "the thread hung"
        if self.error is not None:
            raise self.error
        return self.result


def wait_for_lock_waiters(count: int = 1) -> None:
    """Until `count` other sessions wait on a lock (a row lock, here)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # a transaction's view of it is otherwise fixed
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            if cursor.fetchone()[0] >= count:
                return
        time.sleep(0.02)
    raise AssertionError(f"fewer than {count} session(s) waited on a lock within {WAIT} s")


def operator_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("olga", "olga@example.com", "pw"))
    return client


def _trail(trail_id: str) -> Trail:
    return Trail.objects.get(public_id=trail_id)


# -- the sweep against a renewal -----------------------------------------------------------------


def test_the_sweep_never_deletes_a_trail_renewed_after_it_read_the_trails_ids(api, scope, sections, monkeypatch):
    trail = _trail(record_icu(api))
    # The sweep runs on a clock a minute ahead of the approver's, past the trail's expiry.
    with around_the_writer():
        Trail.objects.filter(pk=trail.pk).update(expires_at=timezone.now() + timedelta(seconds=30))
    sweep_clock = timezone.now() + timedelta(minutes=1)
    held = Hold(monkeypatch, "sweep:read")
    sweep = Run(writes.sweep_expired_trails, sweep_clock)
    held.wait()  # the sweep has read the trail's id as expired
    writes.act(trail, "up", Actor.OPERATOR, by="olga")  # renewed: a full TTL from now
    held.release()
    assert sweep.outcome() == 0
    assert Trail.objects.filter(pk=trail.pk, expires_at__gt=sweep_clock).exists()


def test_the_sweep_waiting_on_a_renewals_lock_keeps_the_trail_it_renewed(api, scope, sections, monkeypatch):
    trail = _trail(record_icu(api))
    with around_the_writer():
        Trail.objects.filter(pk=trail.pk).update(expires_at=timezone.now() + timedelta(seconds=30))
    held = Hold(monkeypatch, "up:locked")
    renewal = Run(writes.act, trail, "up", Actor.OPERATOR, by="olga")
    held.wait()  # the renewal holds the trail's row
    sweep = Run(writes.sweep_expired_trails, timezone.now() + timedelta(minutes=1))
    wait_for_lock_waiters()
    held.release()
    renewal.outcome()
    assert sweep.outcome() == 0 and Trail.objects.filter(pk=trail.pk).exists()


# -- an agent's verdict against an operator's delete: one lock order -----------------------------


def _stale_trail_with_a_served_recall(api, scope) -> tuple[Trail, str]:
    trail = _trail(record_icu(api))
    served = recall_id(api)
    Section.upsert(scope, {"visiting/icu": "The ICU is closed to visitors.", "parking": "No parking."})
    assert api.recall("hospital", query=QUESTION).json()["outcome"] == "miss"
    trail.refresh_from_db()
    assert trail.lifecycle_state() is State.STALE
    return trail, served


@pytest.mark.parametrize("first", ["operator's delete", "agent's verdict"])
def test_an_agents_verdict_and_an_operators_delete_of_its_trail_never_deadlock(
    api, scope, sections, monkeypatch, first
):
    trail, served = _stale_trail_with_a_served_recall(api, scope)
    reporter = f"key:{ApiKey.objects.get().lookup}"
    delete = lambda: writes.act(Trail.objects.get(pk=trail.pk), "delete", Actor.OPERATOR, by="olga")  # noqa: E731
    verdict = lambda: give_feedback(scope, served, helpful=False, reason="wrong", reporter=reporter)  # noqa: E731
    held = Hold(monkeypatch, "delete:locked" if first == "operator's delete" else "judge:trail-locked")
    one = Run(delete if first == "operator's delete" else verdict)
    held.wait()
    other = Run(verdict if first == "operator's delete" else delete)
    wait_for_lock_waiters()  # the second waits on the trail's row, holding nothing the first needs
    held.release()
    one.outcome(), other.outcome()
    event = RecallEvent.objects.get(public_id=served)
    assert not Trail.objects.filter(pk=trail.pk).exists()
    assert event.helpful is False and event.trail_id is None
    assert MatchLabel.objects.filter(recall_event=event).count() == 1


# -- a rejection's labels against an agent's verdict on the same recall ---------------------------


def test_a_rejection_and_an_agents_verdict_on_the_same_recall_leave_one_label_and_no_error(
    api, scope, sections, monkeypatch
):
    trail = _trail(record_icu(api))
    served = recall_id(api)
    reporter = f"key:{ApiKey.objects.get().lookup}"
    held = Hold(monkeypatch, "down:locked")
    rejection = Run(writes.act, trail, "down", Actor.OPERATOR, by="olga", reason="wrong")
    held.wait()
    verdict = Run(give_feedback, scope, served, helpful=True, reporter=reporter)
    wait_for_lock_waiters()
    held.release()
    rejection.outcome()
    verdict.outcome()
    labels = MatchLabel.objects.filter(recall_event__public_id=served)
    assert [(label.source, label.false_hit) for label in labels] == [("rejection", True)]
    assert _trail(trail.public_id).status == "rejected"


def test_a_failing_receiver_after_a_bulk_rejection_neither_fails_the_request_nor_drops_the_other_labels(
    api, scope, sections, monkeypatch
):
    from trails.models import trail_status_changed

    first = _trail(record_icu(api))
    second = _trail(api.record("hospital", query="Where do visitors park?", cited=["parking"]).json()["trail_id"])
    recall_id(api)
    assert api.recall("hospital", query="where do visitors park").json()["outcome"] == "prefetch"

    def broken(**kwargs):
        raise RuntimeError("a receiver that fails")

    trail_status_changed.connect(broken, dispatch_uid="test-broken")
    try:
        # Active trails: the operator pages' bulk bar rejects pending ones only, Django admin any.
        response = operator_client().post(
            "/admin/trails/trail/", {"action": "reject", "_selected_action": [first.pk, second.pk]}
        )
    finally:
        trail_status_changed.disconnect(dispatch_uid="test-broken")
    assert response.status_code in (200, 302)
    assert set(MatchLabel.objects.filter(source="rejection").values_list("trail_id", flat=True)) == {
        first.pk,
        second.pk,
    }


# -- a report in flight when its key is set aside ------------------------------------------------


@pytest.mark.parametrize("point", ["judge:trail-locked", "report:counted"])
def test_a_report_in_flight_when_its_key_is_set_aside_counts_nothing(api, scope, sections, monkeypatch, point):
    trail = _trail(record_icu(api))
    other = second_key(scope, "flooder")
    assert feedback(api, recall_id(api), helpful=False).json()["false_hit_reporters"] == 1
    flooder = ApiKey.objects.get(name="flooder")
    served = recall_id(other)
    held = Hold(monkeypatch, point)
    report = Run(give_feedback, scope, served, helpful=False, reason="flood", reporter=f"key:{flooder.lookup}")
    held.wait()  # let in before the set-aside, holding the trail's row (and, once counted, the key's standing)
    aside = Run(set_aside, flooder, "root")  # commits, then recounts the flooder's trails
    _wait_for_lock_waiter_or_end(aside)
    held.release()
    report.outcome(), aside.outcome()
    trail.refresh_from_db()
    assert trail.lifecycle_state() is State.ACTIVE, "a set-aside key's report held the trail"
    assert trail.false_hit_reporters == 1
    assert api.recall("hospital", query=QUESTION).json()["outcome"] == "prefetch"


# -- a trail recorded while a matching change commits --------------------------------------------


def test_a_trail_recorded_while_a_matching_change_commits_is_signed_as_the_change_left_the_scope(
    api, scope, sections, monkeypatch
):
    held = Hold(monkeypatch, "record:signed")
    recording = Run(record_icu, api)
    held.wait()  # signed under the old threshold, not yet saved
    before = matching_settings(Scope.objects.get(pk=scope.pk)).lexical_layout.label
    changed = Scope.objects.get(pk=scope.pk)
    changed.lexical_threshold = 0.8
    changed.save()
    after = matching_settings(Scope.objects.get(pk=scope.pk)).lexical_layout.label
    assert before != after, "the change must move the band layout for this test to mean anything"
    held.release()
    trail = _trail(recording.outcome())
    assert trail.band_layout == after
    assert api.recall("hospital", query="What are the ICU visiting hours?").json()["outcome"] == "prefetch"


# -- bulk actions lock trails in id order ----------------------------------------------------------


def test_two_bulk_rejections_selecting_the_same_trails_in_opposite_orders_both_finish(
    api, scope, sections, monkeypatch
):
    first = _trail(record_icu(api))
    second = _trail(api.record("hospital", query="Where do visitors park?", cited=["parking"]).json()["trail_id"])
    held = Hold(monkeypatch, "down:locked")
    one = Run(writes.act_on_many, Trail.objects.filter(pk__in=[second.pk, first.pk]), "down", Actor.OPERATOR, "olga")
    held.wait()
    two = Run(writes.act_on_many, Trail.objects.filter(pk__in=[first.pk, second.pk]), "down", Actor.OPERATOR, "ann")
    wait_for_lock_waiters()
    held.release()
    assert one.outcome() == (2, 0)
    assert two.outcome() == (0, 2)  # the first rejected both; a rejected trail is not rejected again


# -- undo against a report -------------------------------------------------------------------------


def test_an_undo_racing_an_agents_report_keeps_the_report(api, scope, sections, monkeypatch):
    trail = _trail(record_icu(api))
    served = recall_id(api)
    writes.act(trail, "demote", Actor.OPERATOR, by="olga")
    held = Hold(monkeypatch, "undo:locked")
    undo = Run(writes.undo, trail, Actor.OPERATOR, "olga")
    held.wait()
    report = Run(
        give_feedback, scope, served, helpful=False, reason="late", reporter=f"key:{ApiKey.objects.get().lookup}"
    )
    wait_for_lock_waiters()
    held.release()
    undo.outcome(), report.outcome()
    trail.refresh_from_db()
    assert trail.lifecycle_state() is State.ACTIVE and trail.false_hit_reporters == 1
    assert TrailReport.objects.filter(trail=trail).count() == 1


# -- background sync jobs whose worker died --------------------------------------------------------


def _job(scope) -> SectionSyncJob:
    return SectionSyncJob.objects.create(
        scope=scope, by="key:test", request={"sections": [{"id": "faq", "text": "Hello."}]}
    )


def test_a_sync_job_redelivered_after_its_worker_died_runs_instead_of_saying_running_forever(scope):
    job = _job(scope)
    SectionSyncJob.objects.filter(pk=job.pk).update(
        state="running", claimed_by="task-1", claimed_at=timezone.now(), attempts=1
    )
    assert run_sync_job(job.pk, claimant="another-task").state == "running"  # someone else's live claim stands
    assert run_sync_job(job.pk, claimant="task-1").state == "done"  # the same task, redelivered: acks-late
    assert Section.objects.filter(scope=scope, section_id="faq").exists()


def test_the_reaper_queues_a_lost_job_again_then_says_it_failed(scope, monkeypatch):
    sent = []
    monkeypatch.setattr("trails.upkeep.sync.queue_sync_job", sent.append)
    job = _job(scope)
    long_ago = timezone.now() - timedelta(seconds=JOB_DEADLINE_SECONDS + 60)
    SectionSyncJob.objects.filter(pk=job.pk).update(
        state="running", claimed_by="task-1", claimed_at=long_ago, attempts=1
    )
    assert reap_lost_sync_jobs(timezone.now()) == {"requeued": 1, "failed": 0} and sent == [job.pk]
    assert run_sync_job(job.pk, claimant="task-2").state == "done"  # past its deadline: taken back
    lost = _job(scope)
    SectionSyncJob.objects.filter(pk=lost.pk).update(state="running", claimed_at=long_ago, attempts=JOB_ATTEMPTS)
    assert reap_lost_sync_jobs(timezone.now()) == {"requeued": 0, "failed": 1}
    lost.refresh_from_db()
    assert lost.state == "failed" and lost.error["code"] == "worker_lost"


def test_two_workers_given_one_job_run_it_once(scope, monkeypatch):
    job = _job(scope)
    held = Hold(monkeypatch, "sync-job:claimed")
    one = Run(run_sync_job, job.pk, "task-1")
    held.wait()
    assert run_sync_job(job.pk, "task-2").state == "running"
    held.release()
    assert one.outcome().state == "done"
    assert SectionSyncJob.objects.get(pk=job.pk).attempts == 1


def test_background_tasks_retry_on_a_lost_database_connection(scope, monkeypatch):
    from django.db import OperationalError

    from trails.tasks import sync_job_task

    job = _job(scope)
    calls = []

    def flaky(job_id, claimant=""):
        calls.append(claimant)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return run_sync_job(job_id, claimant=claimant)

    monkeypatch.setattr("trails.tasks.run_sync_job", flaky)
    monkeypatch.setattr(sync_job_task, "retry_backoff", False)
    result = sync_job_task.apply(args=[job.pk], task_id="task-9")
    assert result.get() == "done" and calls == ["task-9", "task-9"]


# -- recall's stale marking against an operator's action on the same trail ----------------------


def test_recall_marking_a_trail_stale_waits_for_an_operators_rejection_and_then_leaves_it_rejected(
    api, scope, sections, monkeypatch
):
    trail = _trail(record_icu(api))
    Section.upsert(scope, {"visiting/icu": "The ICU is closed to visitors.", "parking": "No parking."})
    held = Hold(monkeypatch, "down:locked")
    rejection = Run(writes.act, trail, "down", Actor.OPERATOR, by="olga", reason="wrong")
    held.wait()  # the operator holds the trail's row; recall finds every cited section changed
    recalled = Run(api.recall, "hospital", query=QUESTION)
    wait_for_lock_waiters()
    held.release()
    rejection.outcome()
    assert recalled.outcome().json()["outcome"] == "miss"
    trail.refresh_from_db()
    assert trail.lifecycle_state() is State.REJECTED, "stale marking overwrote the rejection"


# -- a purge deleting a trail an agent is voting on ------------------------------------------------


def test_an_agents_vote_on_a_trail_a_purge_deletes_meanwhile_is_a_409_not_an_error(api, scope, sections, monkeypatch):
    trail = _trail(record_icu(api))
    held = Hold(monkeypatch, "delete:locked")
    purge = Run(writes.delete_trails, [trail.pk])
    held.wait()  # the purge holds the trail's row
    vote = Run(api.call, "post", f"/scopes/hospital/trails/{trail.public_id}/feedback", {"vote": "up"})
    wait_for_lock_waiters()
    held.release()
    assert purge.outcome() == 1
    answered = vote.outcome()
    assert answered.status_code in (404, 409), answered.content
    assert not Trail.objects.filter(pk=trail.pk).exists()


# -- a recall whose trail is deleted before its event is written -------------------------------


@pytest.mark.parametrize("deleted_by", ["a purge", "the expiry sweep"])
def test_a_recall_whose_trail_is_deleted_meanwhile_is_a_miss_not_a_500(api, scope, sections, monkeypatch, deleted_by):
    trail = _trail(record_icu(api))
    held = Hold(monkeypatch, "recall:answered")
    recalled = Run(api.recall, "hospital", query=QUESTION)
    held.wait()  # recall chose the trail and validated it; its event is not yet written
    if deleted_by == "a purge":
        writes.delete_trails([trail.pk])
    else:
        with around_the_writer():
            Trail.objects.filter(pk=trail.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
        assert writes.sweep_expired_trails(timezone.now()) == 1
    held.release()
    answered = recalled.outcome()
    assert answered.status_code == 200, answered.content
    assert answered.json()["outcome"] == "miss" and answered.json()["trail_id"] is None
    assert RecallEvent.objects.get(public_id=answered.json()["recall_id"]).outcome == "miss"


# -- a sync job's retry, and jobs left running with no claim time ---------------------------------


def test_a_sync_jobs_retry_after_its_connection_dropped_reports_what_its_first_run_added(scope, monkeypatch):
    from django.db import OperationalError

    job = _job(scope)
    earlier = pauses.pause_point

    def drop_once(name: str) -> None:
        earlier(name)
        if name == "sync-job:synced" and not getattr(drop_once, "dropped", False):
            drop_once.dropped = True
            raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(pauses, "pause_point", drop_once)
    with pytest.raises(OperationalError):
        run_sync_job(job.pk, claimant="task-1")  # the sync committed; the job's result was never written
    retried = run_sync_job(job.pk, claimant="task-1")  # Celery's retry, the same task id
    assert retried.state == "done"
    assert retried.summary["sections"]["added"] == 1, retried.summary


def test_a_job_left_running_with_no_claim_time_is_reaped(scope, monkeypatch):
    sent = []
    monkeypatch.setattr("trails.upkeep.sync.queue_sync_job", sent.append)
    job = _job(scope)
    long_ago = timezone.now() - timedelta(seconds=JOB_DEADLINE_SECONDS + 60)
    SectionSyncJob.objects.filter(pk=job.pk).update(state="running", claimed_at=None, created_at=long_ago)
    assert reap_lost_sync_jobs(timezone.now()) == {"requeued": 1, "failed": 0} and sent == [job.pk]
    assert run_sync_job(job.pk, claimant="task-2").state == "done"


# -- signing under the scope's settings as committed ----------------------------------------------


def _wait_for_lock_waiter_or_end(thread: Run) -> None:
    """Until another session waits on a lock, or the thread has finished (it did not wait)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline and thread.is_alive():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # a transaction's view of it is otherwise fixed
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.01)


def _change_matching(scope_id: int) -> None:
    changed = Scope.objects.get(pk=scope_id)
    changed.lexical_threshold = 0.8
    changed.save()


def test_a_matching_change_waits_for_a_record_signing_under_the_old_settings_then_re_signs_it(
    api, scope, sections, monkeypatch
):
    before = matching_settings(Scope.objects.get(pk=scope.pk)).lexical_layout.label
    held = Hold(monkeypatch, "record:scope-read")
    recording = Run(record_icu, api)
    held.wait()  # the record read the scope's settings in its transaction, not yet committed
    change = Run(_change_matching, scope.pk)
    _wait_for_lock_waiter_or_end(change)
    held.release()
    trail = _trail(recording.outcome())
    change.outcome()
    after = matching_settings(Scope.objects.get(pk=scope.pk)).lexical_layout.label
    assert before != after
    assert Trail.objects.get(pk=trail.pk).band_layout == after
    assert api.recall("hospital", query="What are the ICU visiting hours?").json()["outcome"] == "prefetch"


def test_a_trail_reinstated_while_a_matching_change_commits_is_signed_as_the_change_left_the_scope(
    api, scope, sections, monkeypatch
):
    trail = _trail(record_icu(api))
    writes.act(trail, "down", Actor.OPERATOR, by="olga", reason="wrong")
    held = Hold(monkeypatch, "reinstate:locked")
    reinstating = Run(writes.act, _trail(trail.public_id), "reinstate", Actor.OPERATOR, by="olga")
    held.wait()  # the reinstatement read the trail with its scope, before the change
    _change_matching(scope.pk)
    after = matching_settings(Scope.objects.get(pk=scope.pk)).lexical_layout.label
    held.release()
    reinstating.outcome()
    assert Trail.objects.get(pk=trail.pk).band_layout == after
    writes.act(_trail(trail.public_id), "up", Actor.OPERATOR, by="olga")
    assert api.recall("hospital", query="What are the ICU visiting hours?").json()["outcome"] == "prefetch"


# -- a purge against deletions and an operator's bulk action ---------------------------------------


def _purge_pair(api, scope) -> tuple[Trail, Trail]:
    """A trail the purge redacts (its query holds an address) and, with a higher id, one it
    deletes (a section id it cites holds it)."""
    assert api.put_sections("hospital", {"people/jane.roe@example.org": "Jane's page."}).status_code in (200, 201)
    redacted = _trail(
        api.record("hospital", query="Can jane.roe@example.org visit?", cited=["parking"]).json()["trail_id"]
    )
    deleted = api.record("hospital", query="Who is on the people page?", cited=["people/jane.roe@example.org"])
    return redacted, _trail(deleted.json()["trail_id"])


def test_a_purge_finishes_when_a_trail_it_redacts_is_deleted_meanwhile(api, scope, sections, monkeypatch):
    from trails.models import PurgeRun
    from trails.upkeep.purge import run_purge

    redacted, deleted = _purge_pair(api, scope)
    run = PurgeRun.objects.create(scope=scope, rule="built-in patterns", action="redact", requested_by="op")
    held = Hold(monkeypatch, "purge:read")
    purging = Run(run_purge, run.pk)
    held.wait()  # the purge read its batch
    writes.delete_trails([redacted.pk])  # the sweep, or an operator, deletes one of them
    held.release()
    assert purging.outcome().state == "done"
    assert not Trail.objects.filter(pk__in=[redacted.pk, deleted.pk]).exists()


def test_a_purge_and_an_operators_bulk_rejection_of_the_same_trails_never_deadlock(api, scope, sections, monkeypatch):
    from trails.models import PurgeRun
    from trails.upkeep.purge import run_purge

    redacted, deleted = _purge_pair(api, scope)
    assert redacted.pk < deleted.pk
    run = PurgeRun.objects.create(scope=scope, rule="built-in patterns", action="redact", requested_by="op")
    held = Hold(monkeypatch, "purge:locked")
    purging = Run(run_purge, run.pk)
    held.wait()  # the purge holds its first rows
    bulk = Run(
        writes.act_on_many, Trail.objects.filter(pk__in=[redacted.pk, deleted.pk]), "down", Actor.OPERATOR, "olga"
    )
    wait_for_lock_waiters()
    held.release()
    assert purging.outcome().state == "done"
    assert bulk.outcome() == (1, 0)  # the one the purge redacted; the other is gone
    assert _trail(redacted.public_id).query == "Can [redacted] visit?"


# -- guards proven one by one (docs/consistency.md's table) ---------------------------------------


def test_a_bulk_action_waiting_on_a_lower_trail_holds_no_higher_one(api, scope, sections):
    low = _trail(record_icu(api))
    high = _trail(api.record("hospital", query="Where do visitors park?", cited=["parking"]).json()["trail_id"])
    assert low.pk < high.pk
    with transaction.atomic():
        Trail.objects.select_for_update().get(pk=low.pk)  # another writer, mid-way through its id order
        bulk = Run(writes.act_on_many, Trail.objects.filter(pk__in=[low.pk, high.pk]), "down", Actor.OPERATOR, "olga")
        wait_for_lock_waiters()
        # In id order, the bulk action waits for the lower trail holding nothing: the higher one is free.
        Trail.objects.select_for_update(nowait=True).get(pk=high.pk)
    assert bulk.outcome() == (2, 0)


def test_two_verdicts_racing_on_one_recall_apply_once(api, scope, sections, monkeypatch):
    from infra.errors import Conflict

    record_icu(api)
    served = recall_id(api)
    reporter = f"key:{ApiKey.objects.get().lookup}"
    held = Hold(monkeypatch, "judge:trail-locked")
    first = Run(give_feedback, scope, served, helpful=True, reporter=reporter)
    held.wait()
    second = Run(give_feedback, scope, served, helpful=False, reason="late", reporter=reporter)
    wait_for_lock_waiters()
    held.release()
    first.outcome()
    with pytest.raises(Conflict):
        second.outcome()
    assert RecallEvent.objects.get(public_id=served).helpful is True


def test_two_second_chances_racing_on_one_recall_serve_it_once(transactional_db, monkeypatch):
    from infra.errors import Conflict
    from tests.trails.test_second_chance import ASKED, helpdesk_with_a_trail
    from trails.serving.second_chance import second_chance

    scope, api = helpdesk_with_a_trail()
    missed = api.recall("helpdesk", query=ASKED).json()["recall_id"]
    caller = ApiKey.objects.get(name="agent").lookup
    held = Hold(monkeypatch, "second-chance:decided")
    first = Run(second_chance, scope, missed, ["billing/cancel"], caller=caller)
    held.wait()  # decided to serve, nothing locked yet
    assert second_chance(scope, missed, ["billing/cancel"], caller=caller).outcome.value == "prefetch"
    held.release()
    with pytest.raises(Conflict):
        first.outcome()
    assert Trail.objects.get(scope=scope).hit_count == 1


def test_a_second_sync_of_a_scope_waits_for_the_first_and_says_so(scope, monkeypatch):
    from infra.errors import Conflict
    from trails.upkeep.sync import source_sections, sync_sections

    held = Hold(monkeypatch, "sync:locked")
    first = Run(sync_sections, scope, source_sections([{"id": "faq", "text": "Hello."}]))
    held.wait()  # the first sync holds the scope's sync lock
    try:
        with pytest.raises(Conflict):
            sync_sections(scope, source_sections([{"id": "faq", "text": "Goodbye."}]), wait=0)
    finally:
        held.release()
    assert first.outcome().added == ["faq"]
    assert Section.objects.get(scope=scope, section_id="faq").text == "Hello."


def test_a_report_arriving_during_a_recount_is_counted_after_it(api, scope, sections, monkeypatch):
    trail = _trail(record_icu(api))
    second_key(scope, "flooder")
    flooder = f"key:{ApiKey.objects.get(name='flooder').lookup}"
    for reporter in (flooder, "key:first"):
        writes.report(_trail(trail.public_id), reporter, "wrong")
    assert _trail(trail.public_id).lifecycle_state() is State.HELD
    ApiKey.objects.filter(name="flooder").update(set_aside_at=timezone.now())  # its set-aside committed
    held = Hold(monkeypatch, "recount:counted")
    recounting = Run(writes.recount, _trail(trail.public_id), {flooder}, "root")
    held.wait()  # the recount counted one reporter without the flooder
    late = Run(writes.report, _trail(trail.public_id), "key:second", "wrong too")
    _wait_for_lock_waiter_or_end(late)
    held.release()
    recounting.outcome(), late.outcome()
    after = _trail(trail.public_id)
    assert set(TrailReport.objects.filter(trail=after).values_list("reporter", flat=True)) >= {
        "key:first",
        "key:second",
    }
    assert after.lifecycle_state() is State.HELD and after.false_hit_reporters == 2, (
        after.status,
        after.false_hit_reporters,
    )


def test_a_purge_never_overwrites_a_reason_written_after_it_read_it(api, scope, sections, monkeypatch):
    from trails.models import PurgeRun
    from trails.upkeep.purge import run_purge

    trail = _trail(record_icu(api))
    with around_the_writer():  # a reason as older versions wrote it, with a name in it
        Trail.objects.filter(pk=trail.pk).update(reason="approved by jane.roe@example.org")
    run = PurgeRun.objects.create(scope=scope, rule="built-in patterns", action="redact", requested_by="op")
    held = Hold(monkeypatch, "redact:read")
    purging = Run(run_purge, run.pk)
    held.wait()  # the purge read the reason and redacted it, not yet written
    writes.act(_trail(trail.public_id), "demote", Actor.OPERATOR, by="olga")
    held.release()
    assert purging.outcome().state == "done"
    assert _trail(trail.public_id).reason == "sent back to pending by an operator"


def test_a_record_whose_scope_is_deleted_meanwhile_is_not_found_not_a_500(api, scope, sections, monkeypatch):
    from tests.trails.test_recall import ICU_STEPS

    hold = Hold(monkeypatch, "record:signed")
    body = dict(query="What are the ICU visiting hours?", steps=ICU_STEPS, cited=["visiting/icu", "parking"])
    recording = Run(lambda: api.record("hospital", **body))
    hold.wait()
    Scope.objects.get(pk=scope.pk).delete()
    hold.release()
    response = recording.outcome()
    assert response.status_code == 404 and response.json()["error"]["field"] == "scope"
    assert not Trail.objects.filter(scope_id=scope.pk).exists()


def test_a_record_arriving_as_a_scopes_deletion_commits_waits_and_is_not_found(api, scope, sections, monkeypatch):
    record_icu(api)
    held = Hold(monkeypatch, "delete-scope:locked")
    deleting = Run(lambda: Scope.objects.get(pk=scope.pk).delete())
    held.wait()  # its trails deleted in batches, the last transaction open
    recording = Run(lambda: api.record("hospital", query="Where do visitors park?", cited=["parking"]))
    wait_for_lock_waiters()  # the record waits for the deletion to commit
    held.release()
    deleting.outcome()
    assert recording.outcome().status_code == 404
    assert not Scope.objects.filter(pk=scope.pk).exists() and not Trail.objects.filter(scope_id=scope.pk).exists()


def test_a_recall_whose_scope_is_deleted_meanwhile_is_not_found_not_a_500(api, scope, sections, monkeypatch):
    record_icu(api)
    hold = Hold(monkeypatch, "recall:answered")
    recalling = Run(lambda: api.recall("hospital", query="What are the ICU visiting hours?"))
    hold.wait()
    Scope.objects.get(pk=scope.pk).delete()
    hold.release()
    response = recalling.outcome()
    assert response.status_code == 404 and response.json()["error"]["field"] == "scope"
    assert not RecallEvent.objects.filter(scope_id=scope.pk).exists()
