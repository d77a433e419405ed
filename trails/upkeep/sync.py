"""Keeping a scope's sections in step with the documents they come from (a sync).

One sync compares the full set of sections a source holds now with the store, writes only
what changed through the store's one write path (hash, kept revision, trails flagged in the
same transaction), removes what the source dropped when asked, and says what it did: sections
added / changed / unchanged / removed, and how the served trails move (what recall will
answer for each: prefetch → hint, → stale, or unaffected). A dry run says the same and
writes nothing. The whole sync is one transaction under the scope's sync lock, so two syncs
of one scope never interleave and a failure writes nothing; it locks no trail (the citing
trails are flagged for operators once it commits), so votes and reports go on beside it.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from celery import current_app
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from infra.errors import Conflict, Invalid, Refused, quoted
from infra.guards import guard_on
from infra.hashing import section_hash
from infra.statistics import analyse_after_large_write
from scopes import audit
from scopes.audit import AuditEvent
from scopes.models import Scope, Section, SectionSync, SectionSyncJob
from scopes.splitting import SourceSection
from trails.core.validation import Citation as CoreCitation
from trails.core.validation import outcome_once
from trails.models import Citation, Trail, TrailStatus, pauses

logger = logging.getLogger(__name__)

# The share of a scope's sections one sync may remove without being told it is meant.
MOST_REMOVED = 0.5
# The guard also adds up what the syncs of this long removed of the sections the scope held
# before it: adding junk, then syncing only the junk with delete_missing, removes most of the
# scope in steps that each look small.
GUARD_WINDOW = timedelta(hours=24)
OUTCOME_WORDS = {"prefetch": "prefetch", "hint": "hint", "miss": "stale"}
SAMPLE_IDS = 50  # ids listed per kind in a summary; counts are always whole


@dataclass
class SyncSummary:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    # In the store, not in the source, and kept (no --delete-missing).
    missing: list[str] = field(default_factory=list)
    # Served trails citing a `missing` section: still prefetched with text the source no longer has.
    citing_missing: int = 0
    # "prefetch → hint", "prefetch → stale", "hint → stale", "unaffected": served trails citing a
    # changed or removed section, by what recall answers before and after.
    trails: Counter = field(default_factory=Counter)
    # The public ids of the trails that move, by move ("unaffected" ones are not listed).
    moved: dict[str, list[str]] = field(default_factory=dict)
    dry_run: bool = False
    # Of `removed`, the sections stored before the guard's window began.
    removed_settled: int = 0
    sync_id: int | None = None
    # Why the sync would be refused, on a dry run (a real one raises).
    refusal: str = ""

    @property
    def changes_anything(self) -> bool:
        return bool(self.added or self.changed or self.removed)

    def as_json(self, complete: bool = False) -> dict:
        """The summary; ids listed SAMPLE_IDS per kind unless `complete` (counts are always whole)."""
        cut = (lambda ids: list(ids)) if complete else (lambda ids: list(ids)[:SAMPLE_IDS])
        lists = [self.added, self.changed, self.removed, self.missing, *self.moved.values()]
        return {
            "dry_run": self.dry_run,
            "sections": {
                "added": len(self.added),
                "changed": len(self.changed),
                "unchanged": self.unchanged,
                "removed": len(self.removed),
                "missing": len(self.missing),
            },
            # The usual moves always listed; any other (a section put back: hint → prefetch) as well.
            "trails": {
                **dict.fromkeys(("prefetch → hint", "prefetch → stale", "hint → stale", "unaffected"), 0),
                **self.trails,
            },
            "ids": {
                "added": cut(self.added),
                "changed": cut(self.changed),
                "removed": cut(self.removed),
                "missing": cut(self.missing),
            },
            "moved_trails": {move: cut(ids) for move, ids in sorted(self.moved.items())},
            "trails_citing_missing": self.citing_missing,
            "ids_complete": complete or all(len(ids) <= SAMPLE_IDS for ids in lists),
            "sync_id": self.sync_id,
            "refusal": self.refusal or None,
        }

    def lines(self) -> list[str]:
        summary = self.as_json()
        sections, trails = summary["sections"], summary["trails"]
        head = "would sync" if self.dry_run else "synced"
        text = [
            f"{head}: {sections['added']} added, {sections['changed']} changed, {sections['unchanged']} unchanged, "
            f"{sections['removed']} removed"
            + (f", {sections['missing']} in the store only (kept: no --delete-missing)" if sections["missing"] else ""),
            "served trails citing them: " + ", ".join(f"{n} {move}" for move, n in trails.items()),
        ]
        if self.citing_missing:
            text.append(
                f"{self.citing_missing} served trails still cite sections in the store only: they are prefetched "
                "with text the source no longer has until --delete-missing removes those sections"
            )
        if self.refusal:
            text.append(f"refused: {self.refusal}")
        return text


def _served_citing(scope: Scope, section_ids: list[str], now: datetime) -> int:
    """How many served trails cite any of `section_ids`."""
    if not section_ids:
        return 0
    citing = Citation.objects.filter(scope=scope, section_id__in=list(section_ids)).values("trail_id")
    return Trail.objects.filter(id__in=citing, status=TrailStatus.ACTIVE, expires_at__gt=now).count()


def _moves(
    scope: Scope, before: dict[str, str], after: dict[str, str], touched: set[str], now: datetime
) -> tuple[Counter, dict[str, list[str]]]:
    """How the scope's served trails citing `touched` sections move, judged as recall judges,
    and which trails (public ids) make each move."""
    moves: Counter = Counter()
    moved: dict[str, list[str]] = {}
    if not touched:
        return moves, moved
    citing = Citation.objects.filter(scope=scope, section_id__in=list(touched)).values_list("trail_id", flat=True)
    served = dict(
        Trail.objects.filter(id__in=citing, status=TrailStatus.ACTIVE, expires_at__gt=now).values_list(
            "id", "public_id"
        )
    )
    cited: dict[int, list[CoreCitation]] = {}
    for trail_id, section_id, recorded in (
        Citation.objects.filter(trail_id__in=served)
        .order_by("trail_id", "position")
        .values_list("trail_id", "section_id", "hash")
    ):
        cited.setdefault(trail_id, []).append(CoreCitation(section_id, recorded))
    for trail_id, citations in cited.items():
        was, now_is = outcome_once(citations, before).value, outcome_once(citations, after).value
        move = "unaffected" if was == now_is else f"{OUTCOME_WORDS[was]} → {OUTCOME_WORDS[now_is]}"
        moves[move] += 1
        if move != "unaffected":
            moved.setdefault(move, []).append(str(served[trail_id]))
    return moves, moved


# The first key of the advisory lock a sync holds (the second is the scope's id).
SYNC_LOCK = 7261  # a fixed number no other advisory lock of the service uses


# How long a sync waits for another sync of the same scope before it answers "running".
SYNC_WAIT_SECONDS = 3.0


def one_sync_at_a_time(scope: Scope, wait: float | None = None) -> None:
    """Holds the scope's sync lock until the transaction ends. Not the scope's row: learning
    and threshold moves lock that, and they must not wait for a whole sync.

    Raises:
        Conflict: another sync of the scope held the lock for all of `wait` seconds (a 409
            that says so, never a lock timeout's 503).
    """
    if not guard_on("one-sync-per-scope"):
        return
    if connection.vendor == "postgresql":
        import time

        deadline = time.monotonic() + (SYNC_WAIT_SECONDS if wait is None else wait)
        with connection.cursor() as cursor:
            while True:
                cursor.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", [SYNC_LOCK, scope.pk])
                if cursor.fetchone()[0]:
                    return
                if time.monotonic() >= deadline:
                    raise Conflict(
                        "sync_running",
                        "another sync of this scope is running; nothing was changed: send this one again when it ends",
                        field="sections",
                    )
                time.sleep(0.05)
    else:
        Scope.objects.select_for_update().filter(pk=scope.pk).first()  # SQLite: one writer at a time anyway


def sync_sections(
    scope: Scope,
    sections: list[SourceSection],
    *,
    delete_missing: bool = False,
    dry_run: bool = False,
    by: str = "",
    source: str = "",
    now: datetime | None = None,
    allow_removing_most: bool = False,
    wait: float | None = None,
) -> SyncSummary:
    """Makes the scope's store hold the source's sections (see the module's docstring).

    A sync that would remove more than half of a scope's sections (a wrong folder, a wrong
    format: the source then holds almost nothing the store does) is refused unless
    `allow_removing_most`; a dry run says it would be.

    Raises:
        Invalid: a section id twice, hashes without texts for a scope that keeps texts
            (except in a dry run, which only compares), or most of the scope removed unasked.
        Conflict: another sync of the scope ran for all of `wait` seconds.
    """
    now = now or timezone.now()
    incoming: dict[str, str] = {}
    texts: dict[str, str] = {}
    for section in sections:
        if section.id in incoming:
            raise Invalid("invalid", f"section id {quoted(section.id)} appears more than once", field="sections")
        if section.hash is not None:
            incoming[section.id] = section.hash
        else:
            incoming[section.id] = section_hash(section.text)
            texts[section.id] = section.text
    with transaction.atomic():
        one_sync_at_a_time(scope, wait)
        pauses.pause_point("sync:locked")
        current = dict(Section.objects.filter(scope=scope).values_list("section_id", "hash"))
        summary = SyncSummary(dry_run=dry_run)
        for section_id, digest in incoming.items():
            if section_id not in current:
                summary.added.append(section_id)
            elif current[section_id] != digest:
                summary.changed.append(section_id)
            else:
                summary.unchanged += 1
        gone = [section_id for section_id in current if section_id not in incoming]
        if delete_missing:
            summary.removed = gone
        else:
            summary.missing = gone
            summary.citing_missing = _served_citing(scope, gone, now)
        refusal = _wipe_refusal(scope, summary, current, now) if summary.removed and not allow_removing_most else ""
        if refusal:
            if not dry_run:
                raise Invalid("removes_most", refusal, field="delete_missing")
            summary.refusal = refusal
        to_write = summary.added + summary.changed
        unwritable = [section_id for section_id in to_write if section_id not in texts] if scope.keeps_text else []
        if unwritable and not dry_run:
            raise Invalid(
                "invalid",
                f"{len(unwritable)} sections came as hashes only, and this scope keeps the sections' "
                f"text: send their text (first: {quoted(unwritable[0])})",
                field="sections",
            )
        after = {**current, **{k: incoming[k] for k in to_write}}
        for section_id in summary.removed:
            after.pop(section_id, None)
        # Added ids too: a section put back (a release reverted) brings trails back from hint.
        summary.trails, summary.moved = _moves(
            scope, current, after, set(summary.changed) | set(summary.removed) | set(summary.added), now
        )
        if dry_run:
            return summary
        if to_write and scope.keeps_text:
            Section.upsert(scope, {section_id: texts[section_id] for section_id in to_write}, now)
        elif to_write:
            # Hashes only: a text sent is hashed and dropped, never stored.
            Section.upsert_hashes(scope, {section_id: incoming[section_id] for section_id in to_write}, now)
        if summary.removed:
            Section.objects.filter(scope=scope, section_id__in=summary.removed).delete()
        analyse_after_large_write({Section._meta.db_table: len(to_write) + len(summary.removed)})
        Section.set_anchors(scope, {section.id: section.anchor or "" for section in sections})
        if to_write or summary.removed:
            made = SectionSync.objects.create(
                scope=scope,
                created_at=now,
                by=by[:200],
                source=source[:500],
                summary={**summary.as_json(), "guard": {"removed_settled": summary.removed_settled}},
            )
            counts = summary.as_json()["sections"]
            audit.record(
                [scope],
                by,
                AuditEvent.Kind.DOCS_SYNC,
                at=now,
                link=f"/ops/{scope.slug}/syncs/",
                what=f"{counts['changed']} changed, {counts['added']} added, {counts['removed']} removed",
                detail={"sync": made.pk, "sections": counts},
            )
            summary.sync_id = made.pk
    return summary


# A background job waits this long for another sync of its scope before it fails.
JOB_WAIT_SECONDS = 600.0


def _wipe_refusal(scope: Scope, summary: SyncSummary, current: dict[str, str], now: datetime) -> str:
    """Why a sync removing sections is refused (blank: it is not): it removes more than half
    of the scope's sections, or, with the syncs of the last GUARD_WINDOW, more than half of
    the sections the scope held before them (each sync's share may look small). Sets
    `summary.removed_settled`."""
    ask = "is the source the right folder, in the right format? Pass allow_removing_most (--allow-removing-most) if it is meant"
    if len(summary.removed) > MOST_REMOVED * len(current):
        return f"this sync would remove {len(summary.removed):,} of the scope's {len(current):,} sections: {ask}"
    since = now - GUARD_WINDOW
    settled_now = set(
        Section.objects.filter(scope=scope)
        .filter(Q(first_stored_at__isnull=True) | Q(first_stored_at__lt=since))
        .values_list("section_id", flat=True)
    )
    summary.removed_settled = len(settled_now.intersection(summary.removed))
    earlier = sum(
        int(sync.summary.get("guard", {}).get("removed_settled", 0))
        for sync in SectionSync.objects.filter(scope=scope, created_at__gte=since).only("summary")
    )
    held_before = len(settled_now) + earlier
    removing = earlier + summary.removed_settled
    if summary.removed_settled and removing > MOST_REMOVED * held_before:
        return (
            f"with the syncs of the last {GUARD_WINDOW.total_seconds() / 3600:.0f} hours this would remove {removing:,} of "
            f"the {held_before:,} sections the scope held before them: {ask}"
        )
    return ""


def source_sections(rows: list[dict]) -> list[SourceSection]:
    """The API's section rows ({id, text} or {id, hash}, with the built anchor) as a sync reads them."""
    return [
        SourceSection(row["id"], row.get("text") or "", "", 0, hash=row.get("hash"), anchor=row.get("anchor"))
        for row in rows
    ]


# A job's run past this many seconds since its claim counts as lost (its worker died): the
# claim and the reaper take it back. A run waits up to JOB_WAIT_SECONDS for another sync first.
JOB_DEADLINE_SECONDS = JOB_WAIT_SECONDS + 1200.0
# Runs a job may start before a lost one is said failed rather than queued again.
JOB_ATTEMPTS = 3


def queue_sync_job(job_id: int) -> None:
    """To a worker; with no broker answering, the job runs here rather than waiting forever."""
    try:
        # By name: trails.tasks imports this module.
        current_app.tasks["trails.tasks.sync_job_task"].delay(job_id)
    except Exception as problem:
        logger.error("sync job %s could not be queued (%s): running it here", job_id, type(problem).__name__)
        run_sync_job(job_id)


def _lost(now: datetime) -> Q:
    """Running jobs past their deadline, those with no claim time (left running by a version
    before claims) by their age."""
    cutoff = now - timedelta(seconds=JOB_DEADLINE_SECONDS)
    unclaimed = Q(claimed_at__isnull=True, created_at__lt=cutoff) if guard_on("unclaimed-jobs-reaped") else Q(pk__in=[])
    return Q(state=SectionSyncJob.State.RUNNING) & (Q(claimed_at__lt=cutoff) | unclaimed)


def _claim(job_id: int, claimant: str, now: datetime) -> int | None:
    """Claims a job for one run (a conditional update): a queued one, one this same task
    claimed before (its redelivery after a worker died, or its retry), or one whose run is
    past its deadline. Returns the run's attempt number, or None where someone else has it."""
    lost = _lost(now)
    mine = Q(state=SectionSyncJob.State.RUNNING, claimed_by=claimant) if claimant else Q(pk__in=[])
    claimable = SectionSyncJob.objects.filter(
        Q(state=SectionSyncJob.State.QUEUED) | mine | lost, pk=job_id, attempts__lt=JOB_ATTEMPTS
    )
    if not claimable.update(
        state=SectionSyncJob.State.RUNNING, claimed_at=now, claimed_by=claimant[:200], attempts=F("attempts") + 1
    ):
        return None
    return SectionSyncJob.objects.filter(pk=job_id).values_list("attempts", flat=True).first()


def run_sync_job(job_id: int, claimant: str = "", now: datetime | None = None) -> SectionSyncJob | None:
    """Runs a queued sync job once (a second call, or a second worker, finds it claimed).

    `claimant` names the run (the Celery task's id, the same across its retries and
    redeliveries). The result is written only if this run still holds the claim.
    """
    attempt = _claim(job_id, claimant, now or timezone.now())
    job = SectionSyncJob.objects.select_related("scope").filter(pk=job_id).first()
    if attempt is None or job is None:
        return job
    pauses.pause_point("sync-job:claimed")
    asked = job.request
    try:
        if job.summary is not None and guard_on("sync-retry-reports-first-run"):
            summary = None  # an earlier run of this claim synced and committed: its summary is the answer
        else:
            with transaction.atomic():
                summary = sync_sections(
                    job.scope,
                    source_sections(asked.get("sections", [])),
                    delete_missing=asked.get("delete_missing", False),
                    dry_run=asked.get("dry_run", False),
                    by=job.by,
                    source=asked.get("source", ""),
                    allow_removing_most=asked.get("allow_removing_most", False),
                    wait=JOB_WAIT_SECONDS,
                )
                # With the sync's own commit: a retry after a lost connection answers what it did.
                SectionSyncJob.objects.filter(pk=job.pk, state=SectionSyncJob.State.RUNNING, attempts=attempt).update(
                    summary=summary.as_json(complete=asked.get("list_all", False))
                )
            pauses.pause_point("sync-job:synced")
    except (OperationalError, InterfaceError):
        raise  # the database is away: the task retries, and its claim lets the retry in
    except Refused as refused:
        job.state, job.error = (
            SectionSyncJob.State.FAILED,
            {"code": refused.code, "message": refused.message, "field": refused.field},
        )
    except Exception as problem:  # recorded, never lost: the job says it failed and why
        job.state, job.error = (
            SectionSyncJob.State.FAILED,
            {"code": "failed", "message": f"{type(problem).__name__}: {problem}", "field": None},
        )
    else:
        job.state = SectionSyncJob.State.DONE
        if summary is not None:
            job.summary = summary.as_json(complete=asked.get("list_all", False))
    job.request, job.finished_at = {}, timezone.now()
    # Only while this run holds the claim: a run taken back as lost does not overwrite the one after it.
    SectionSyncJob.objects.filter(pk=job.pk, state=SectionSyncJob.State.RUNNING, attempts=attempt).update(
        state=job.state, summary=job.summary, error=job.error, request=job.request, finished_at=job.finished_at
    )
    job.refresh_from_db()
    return job


def reap_lost_sync_jobs(now: datetime) -> dict[str, int]:
    """Jobs whose worker died (running past their deadline) are queued again, or said failed
    after JOB_ATTEMPTS runs; queued jobs older than the deadline (their message lost with a
    broker restart) are sent again. Safe to rerun.

    Returns:
        {"requeued": jobs sent again, "failed": jobs said failed}.
    """
    cutoff = now - timedelta(seconds=JOB_DEADLINE_SECONDS)
    lost = SectionSyncJob.objects.filter(_lost(now))
    failed = lost.filter(attempts__gte=JOB_ATTEMPTS).update(
        state=SectionSyncJob.State.FAILED,
        finished_at=now,
        request={},
        error={
            "code": "worker_lost",
            "message": f"no run finished within {JOB_DEADLINE_SECONDS:.0f} s in {JOB_ATTEMPTS} attempts "
            "(the workers running it stopped); nothing after the last committed step was changed",
            "field": None,
        },
    )
    waiting = list(
        SectionSyncJob.objects.filter(
            Q(state=SectionSyncJob.State.QUEUED, created_at__lt=cutoff) | Q(pk__in=lost.values("pk"))
        ).values_list("pk", flat=True)
    )
    for job_id in waiting:
        queue_sync_job(job_id)
    return {"requeued": len(waiting), "failed": failed}
