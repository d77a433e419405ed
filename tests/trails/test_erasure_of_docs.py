"""Erasure in what docs syncs leave beside the section texts: the built site's anchors, and the
background sync jobs queued, running or finished."""

from __future__ import annotations

import pytest

from scopes.models import SectionSync, SectionSyncJob
from tests.trails.test_races import Hold, Run, wait_for_lock_waiters
from trails.models import PurgeRun
from trails.upkeep import purge
from trails.upkeep.sync import run_sync_job

SUBJECT = "Zoë Ångström"
RUNNING_JOBS = "running docs sync jobs (purge again once they end)"


def sync(api, sections: list[dict], **body):
    return api.call("post", "/scopes/hospital/section-syncs", {"sections": sections, **body})


def erase(scope, subject: str = SUBJECT) -> tuple[dict[str, int], PurgeRun]:
    """What the preview counts, then the run, done."""
    run = PurgeRun.request(scope, subject, delete=False, requested_by="op")
    run.state = PurgeRun.State.PREVIEWED
    purge.preview(run)
    run.save()
    counted = purge.preview_records(run)
    return counted, purge.run_purge(run.id)


def test_an_anchor_holding_the_name_is_counted_blanked_and_the_link_falls_back_to_the_ids_fragment(api, scope):
    sections = [
        {"id": "sync-sec", "text": "Fire warden: Zoe Angstrom.", "anchor": "fire-warden-zoe-angstrom"},
        {"id": "safety#exits", "text": "Exits are marked.", "anchor": "id3_zoe_angstrom_exits"},
        {"id": "safety#night", "text": "Night porter: Mary Major.", "anchor": "night-porter-mary-major"},
    ]
    assert sync(api, sections).status_code == 200
    counted, done = erase(scope)
    assert counted["section anchors"] == 2
    assert done.counts["section anchors"] == [3, 2] and done.left == {}
    warden = api.call("get", "/scopes/hospital/sections/sync-sec").json()
    assert (warden["text"], warden["anchor"]) == ("Fire warden: [redacted].", "")
    assert api.call("get", "/scopes/hospital/sections/safety%23exits").json()["anchor"] == "exits"
    assert api.call("get", "/scopes/hospital/sections/safety%23night").json()["anchor"] == "night-porter-mary-major"


NIGHT = [{"id": "sync-sec", "text": "Night contact: Zoë Ångström", "anchor": "night-contact-zoe-angstrom"}]


def queued_job(api, monkeypatch, sections: list[dict] = NIGHT) -> int:
    """A background sync accepted (202) and left queued: the worker is this test."""
    from trails import tasks

    monkeypatch.setattr(tasks.sync_job_task, "delay", lambda job_id: None)
    accepted = sync(api, sections, background=True, source="bg zoe angstrom")
    assert accepted.status_code == 202 and accepted.json()["state"] == "queued", accepted.content
    return SectionSyncJob.objects.get(public_id=accepted.json()["job_id"]).pk


def night_contact_as_synced(api) -> tuple[str, str, list[str]]:
    """The section's text and anchor as the API gives them, and every docs sync's source."""
    got = api.call("get", "/scopes/hospital/sections/sync-sec").json()
    return got["text"], got["anchor"], list(SectionSync.objects.values_list("source", flat=True))


def test_a_queued_background_sync_is_counted_and_runs_with_the_name_redacted(api, scope, monkeypatch):
    job_id = queued_job(api, monkeypatch)
    failed = SectionSyncJob.objects.create(
        scope=scope,
        state="failed",
        error={"code": "invalid", "message": "section id 'staff/zoe-angstrom' appears more than once", "field": None},
    )
    counted, done = erase(scope)
    assert counted["docs sync job requests"] == 1 and counted["docs sync job errors"] == 1
    assert done.left == {} and done.counts["docs sync job requests"] == [1, 1]
    assert run_sync_job(job_id).state == "done"
    assert night_contact_as_synced(api) == ("Night contact: [redacted]", "", ["bg [redacted]"])
    assert (
        SectionSyncJob.objects.get(pk=failed.pk).error["message"]
        == "section id 'staff/[redacted]' appears more than once"
    )


def test_a_queued_sync_whose_section_id_holds_the_name_keeps_the_id_and_is_named_as_left(api, scope, monkeypatch):
    job_id = queued_job(api, monkeypatch, [{"id": "staff/zoe-angstrom", "text": "Ask Zoe Angstrom."}])
    _, done = erase(scope)
    assert done.left == {"docs sync job requests": 1}
    assert SectionSyncJob.objects.get(pk=job_id).request["sections"] == [
        {"id": "staff/zoe-angstrom", "text": "Ask [redacted]."}
    ]


def _postgresql_only() -> None:
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's here")


@pytest.mark.django_db(transaction=True)
def test_a_sync_job_running_while_a_purge_runs_is_named_as_left_and_the_next_purge_finds_what_it_wrote(
    api, scope, monkeypatch
):
    _postgresql_only()
    job_id = queued_job(api, monkeypatch)
    held = Hold(monkeypatch, "sync-job:claimed")
    running = Run(run_sync_job, job_id, "task-1")
    held.wait()  # claimed: the job has read its request
    counted, done = erase(scope)
    assert counted[RUNNING_JOBS] == 1
    assert done.left == {RUNNING_JOBS: 1}
    held.release()
    assert running.outcome().state == "done"
    assert night_contact_as_synced(api) == (
        "Night contact: Zoë Ångström",
        "night-contact-zoe-angstrom",
        ["bg zoe angstrom"],
    )
    _, again = erase(scope)
    assert again.left == {}
    assert night_contact_as_synced(api) == ("Night contact: [redacted]", "", ["bg [redacted]"])


@pytest.mark.django_db(transaction=True)
def test_a_sync_job_claimed_while_a_purge_holds_it_waits_and_syncs_the_redacted_request(api, scope, monkeypatch):
    _postgresql_only()
    job_id = queued_job(api, monkeypatch)
    held = Hold(monkeypatch, "purge:sync-job-locked")
    purging = Run(erase, scope)
    held.wait()  # the purge holds the queued job's row
    claiming = Run(run_sync_job, job_id, "task-1")
    wait_for_lock_waiters()
    held.release()
    counted, done = purging.outcome()
    assert counted["docs sync job requests"] == 1 and done.left == {}
    assert claiming.outcome().state == "done"
    assert night_contact_as_synced(api) == ("Night contact: [redacted]", "", ["bg [redacted]"])


@pytest.mark.django_db(transaction=True)
def test_a_sync_job_claimed_after_the_purge_read_it_as_queued_is_left_as_it_read_it_and_named(api, scope, monkeypatch):
    _postgresql_only()
    job_id = queued_job(api, monkeypatch)
    held_purge = Hold(monkeypatch, "purge:sync-job-read")
    purging = Run(erase, scope)
    held_purge.wait()  # the purge read the job as queued, holding the name
    held_job = Hold(monkeypatch, "sync-job:claimed")
    running = Run(run_sync_job, job_id, "task-1")
    held_job.wait()  # claimed: the job has read its request, the name in it
    held_purge.release()
    counted, done = purging.outcome()
    assert counted["docs sync job requests"] == 1 and done.left == {RUNNING_JOBS: 1}
    held_job.release()
    assert running.outcome().state == "done"
    _, again = erase(scope)
    assert again.left == {} and night_contact_as_synced(api) == ("Night contact: [redacted]", "", ["bg [redacted]"])


@pytest.mark.django_db(transaction=True)
def test_a_sync_writing_a_section_while_a_purge_rewrites_it_is_kept_never_overwritten(api, scope, monkeypatch):
    # The purge reads a section's text and writes it back cleaned: a sync in between was overwritten by the old text.
    from scopes.models import Section

    _postgresql_only()
    assert api.put_sections(scope.slug, {"staff": "Night contact: Zoë Ångström"}).status_code == 200
    held = Hold(monkeypatch, "purge:section-read")
    purging = Run(erase, scope)
    held.wait()  # the purge read the section under its lock
    syncing = Run(Section.upsert, scope, {"staff": "New release: the night contact is the duty desk"})
    wait_for_lock_waiters()
    held.release()
    _, done = purging.outcome()
    syncing.outcome()
    assert done.left == {}
    assert (
        Section.objects.get(scope=scope, section_id="staff").text == "New release: the night contact is the duty desk"
    )


def test_a_failed_jobs_error_quotes_a_name_as_written_so_the_purge_finds_it(api, scope, monkeypatch):
    # Python's repr wrote a no-break space as \xa0: the matcher could not see the name, and "nothing left" was said.
    twice = [{"id": "staff/Zoë\u00a0Ångström", "text": "a"}, {"id": "staff/Zoë\u00a0Ångström", "text": "b"}]
    job_id = queued_job(api, monkeypatch, twice)
    assert run_sync_job(job_id, "task-1").state == "failed"
    assert "Zoë\u00a0Ångström" in SectionSyncJob.objects.get(pk=job_id).error["message"]
    counted, done = erase(scope)
    assert done.left == {}
    assert "Ångström" not in str(SectionSyncJob.objects.get(pk=job_id).error)
