"""Every write to a trail's lifecycle and to the rows it drags along: status, hold, expiry,
reports, history, the labels a rejection makes or an undo withdraws, an agent's verdict on
a recall, and deletion (with the recall events and labels that outlive a trail). Callers
(the API, the operator pages, Django admin, the sweep, purges, set-asides) call these
functions directly; no signal receiver writes under a lock held here.

Each write takes its locks, then re-reads and re-decides under them: the state (expiry
included: an expired trail is in no action's from-states but the sweep's and delete), a
reporter's standing (a key set aside after its request was let in counts nothing), the
sweep's condition (a trail renewed since it was read is not deleted). The clock is read
after the lock, so the history's order is the order writes applied.

Lock order (docs/consistency.md; tests/trails/test_races.py holds each claim):
  1. a scope's row, never while a trail's row is held (learning and threshold moves take it
     FOR NO KEY UPDATE; record takes it FOR SHARE to sign under the settings it commits with);
  2. trails' rows FOR UPDATE, several in id order;
  3. what a locked trail drags along: its recall events (an agent's verdict locks the event
     after the trail it served, never before), reports, labels, history, child rows.
What a write sets off beyond these rows (threshold learning, re-signing a trail back from
rejection) runs after the commit, in named hooks that log a failure and run the rest.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import models, transaction
from django.utils import timezone

from infra.guards import guard_on
from scopes import audit
from scopes.audit import AuditEvent
from scopes.keys import reporter_set_aside, set_aside_reporters
from trails.core import lifecycle as table
from trails.core.lifecycle import Actor, Expiry, Labels, Reports, Rule, State, state_of, status_of
from trails.models import pauses
from trails.models.bulk import (  # noqa: F401 -- writes, all here
    bulk_load,
    flag_trails_citing,
    forget_recall_events,
    implied_verdict,
    insert_labels,
    insert_trails,
    lock_scope_for_signing,
    purge_trails,
    redact_text,
    refold,
    resign,
)
from trails.models.deletion import _delete_locked, delete_scope, delete_trails, sweep_expired_trails  # noqa: F401
from trails.models.gate import writer
from trails.models.learning import MatchLabel
from trails.models.lifecycle import (
    HISTORY_SIGNAL,
    ActionRefused,
    Signal,
    TrailReport,
    TrailSignal,
    trail_status_changed,
)
from trails.models.recalls import RecallEvent, RecallOutcome
from trails.models.trail import Trail

logger = logging.getLogger(__name__)

# Who a trail's reason says acted: a role, never a name (the history keeps who and why).
ROLES = {Actor.AGENT: "an agent's key", Actor.OPERATOR: "an operator", Actor.SYSTEM: "the service"}
# What the audit log calls each status change an operator (or a set-aside, for a release) makes.
AUDITED = {
    table.VOTE_UP: AuditEvent.Kind.APPROVED,
    table.VOTE_DOWN: AuditEvent.Kind.REJECTED,
    table.DEMOTE: AuditEvent.Kind.SENT_BACK,
    table.REINSTATE: AuditEvent.Kind.REINSTATED,
    table.UNDO: AuditEvent.Kind.UNDONE,
    table.DELETE: AuditEvent.Kind.DELETED,
    table.RELEASE: AuditEvent.Kind.RELEASED,
    table.SET_ASIDE: AuditEvent.Kind.RELEASED,
}
# The most recalls one rejection labels: the recalls of one popular trail are not
# independent evidence about the scope's threshold.
REJECTION_LABELS = 20


def _lock(trail_id: int, scope_id: int) -> Trail | None:
    """The trail's row, locked for this transaction (None: it is gone)."""
    return (
        Trail.objects.select_for_update(of=("self",))
        .select_related("scope")
        .filter(pk=trail_id, scope_id=scope_id)
        .first()
    )


def _locked_or_refused(trail: Trail) -> Trail:
    locked = _lock(trail.pk, trail.scope_id)
    if locked is None:
        raise ActionRefused("this trail no longer exists (deleted or expired)")
    return locked


def _copy_state(trail: Trail, locked: Trail) -> None:
    for name in ("status", "held_by", "reason", "expires_at", "false_hit_reports", "false_hit_reporters"):
        setattr(trail, name, getattr(locked, name))


@writer("act")
def act(trail: Trail, action: str, actor: Actor, by: str = "", reason: str = "", now: datetime | None = None) -> None:
    """Applies a named action of the table (approve, reject, reinstate, send back, delete,
    undo) by this actor, under the trail's row lock.

    `by` names who: "key:<lookup>" for an agent's key, an operator's user name. The actor is
    said, never guessed from `by`. Actions racing on one trail apply one at a time, each
    against the state the one before it left.

    Raises:
        ActionRefused: the action is not one a caller may name, the actor may not take it,
            or not from the trail's state now (the trail is left as it was, and `trail`
            shows its current state).
    """
    if action not in table.NAMED_ACTIONS:
        raise ActionRefused(f"unknown action {action!r}; one of {', '.join(table.NAMED_ACTIONS)}")
    if action == table.UNDO:
        undo(trail, actor, by, now)
        return
    _apply(trail, action, actor, by, reason, now)


@writer("report")
def report(
    trail: Trail, reporter: str, reason: str = "", now: datetime | None = None, actor: Actor = Actor.AGENT
) -> bool:
    """Counts an agent's "not helpful" on a recall that served this trail.

    Reports count per reporter (API key): once the scope's number of different reporters
    (never fewer than two) have reported an active trail since it was last approved, it is
    held out of service until an operator approves it again. A key repeating its report
    counts once; a key set aside counts nothing, even with its request already in flight.

    Returns:
        Whether this report took the trail out of service.
    """
    return _apply(trail, table.REPORT, actor, reporter, reason, now)


def _apply(trail: Trail, action: str, actor: Actor, by: str, reason: str, now: datetime | None) -> bool:
    with transaction.atomic():
        locked = _locked_or_refused(trail)
        pauses.pause_point(f"{action}:locked")
        at = now or timezone.now()  # after the lock: the history's order is the order writes applied
        before = locked.lifecycle_state(at)

        def decide(name: str) -> Rule:
            return table.decide(
                name,
                actor,
                before,
                reporters_after=locked.false_hit_reporters,
                reporters_to_hold=locked.scope.false_hit_reporters_to_pending,
            )

        try:
            rule = decide(action)
        except ActionRefused:
            _copy_state(trail, locked)
            raise
        action = rule.taken_as or action
        if rule.reports is Reports.COUNT:
            # A counted report may be the one that holds the trail: the table decides again with it.
            _count_report(locked, by, at)
            pauses.pause_point(f"{action}:counted")
            rule = decide(action)
        _write(locked, rule, by=by, reason=reason, at=at, before=before)
    _copy_state(trail, locked)
    return rule.to_state is State.HELD


def _count_report(locked: Trail, reporter: str, at: datetime) -> None:
    """Adds a report to the locked trail and counts its reporters afresh, without the keys
    set aside (read under the lock: a set-aside that committed before it is seen)."""
    excluded = set_aside_reporters()
    if not reporter_set_aside(reporter[:100]) and reporter[:100] not in excluded:
        TrailReport.objects.get_or_create(trail_id=locked.pk, reporter=reporter[:100], defaults={"created_at": at})
        locked.false_hit_reports += 1
    locked.false_hit_reporters = TrailReport.objects.filter(trail_id=locked.pk).exclude(reporter__in=excluded).count()


def _before(locked: Trail) -> dict:
    """What an undo restores: the state a trail was in before an operator changed it."""
    return {"status": locked.status, "held_by": locked.held_by, "expires_at": locked.expires_at.isoformat()}


def _write(
    locked: Trail, rule: Rule, *, by: str, reason: str, at: datetime, before: State, restore: dict | None = None
) -> None:
    """Writes what a rule does to a locked trail: its row, its labels, then its history (with
    the audit log and the hooks after commit)."""
    if rule.to_state is State.DELETED:
        _audit(locked, rule, by, at, before, "deleted")
        _delete_locked([locked.pk])
        locked.status = "deleted"
        return
    prior = _before(locked)
    _write_row(locked, rule, at, restore)
    labels_changed = _write_labels(locked, rule, by, at, before, restore)
    if rule.to_state is None and restore is None:
        return  # a report counted, the status unchanged: TrailReport holds who
    _write_history(locked, rule, by, reason, at, before, prior, labels_changed)


def _write_row(locked: Trail, rule: Rule, at: datetime, restore: dict | None) -> None:
    """The trail's own row: status, hold, reason, reports, expiry (an undo's restored state first)."""
    fields = ["false_hit_reports", "false_hit_reporters"] if rule.reports is Reports.COUNT else []
    if restore is not None:
        locked.status, locked.held_by = restore["status"], restore["held_by"]
        locked.expires_at = datetime.fromisoformat(restore["expires_at"])
        fields += ["status", "held_by", "expires_at"]
    if rule.to_state is not None:
        locked.status, locked.held_by = status_of(rule.to_state).value, rule.hold.value
        fields += ["status", "held_by"]
    if rule.reason and (rule.to_state is not None or restore is not None):
        locked.reason = rule.reason.format(who=ROLES[rule.actor], reporters=locked.false_hit_reporters)[:200]
        fields.append("reason")
    if rule.reports is Reports.ANSWER:
        locked.false_hit_reports = locked.false_hit_reporters = 0
        fields += ["false_hit_reports", "false_hit_reporters"]
        TrailReport.objects.filter(trail_id=locked.pk).delete()
    if rule.expiry is not Expiry.KEEP:
        locked.expires_at = locked.scope.expiry_for(active=rule.expiry is Expiry.ACTIVE, now=at)
        fields.append("expires_at")
    if fields:
        # By id and scope (the key a partitioned table is found by), not save()'s id alone.
        Trail.objects.filter(pk=locked.pk, scope_id=locked.scope_id).update(
            **{f: getattr(locked, f) for f in dict.fromkeys(fields)}
        )


def _write_labels(locked: Trail, rule: Rule, by: str, at: datetime, before: State, restore: dict | None) -> bool:
    """The labels a rejection makes or its reversal withdraws. Returns whether any changed."""
    if rule.labels is Labels.REJECTION and before is not State.REJECTED:
        return _label_rejection(locked, by, at) > 0
    if (
        rule.labels is Labels.WITHDRAW
        and before is State.REJECTED
        and (restore is None or restore["status"] != "rejected")
    ):
        return MatchLabel.objects.filter(trail_id=locked.pk, source=MatchLabel.Source.REJECTION).delete()[0] > 0
    return False


def _write_history(
    locked: Trail, rule: Rule, by: str, reason: str, at: datetime, before: State, prior: dict, labels_changed: bool
) -> None:
    """A status change's history row, its audit entry and the hooks after commit."""
    source = (
        TrailSignal.Source.FEEDBACK
        if rule.actor is Actor.AGENT
        else (TrailSignal.Source.SYSTEM if rule.actor is Actor.SYSTEM else TrailSignal.Source.OPERATOR)
    )
    TrailSignal.objects.create(
        trail=locked,
        scope_id=locked.scope_id,
        signal=HISTORY_SIGNAL[rule.action],
        source=source,
        by=by[:150],
        reason=reason[:500],
        created_at=at,
        before=prior if rule.actor is not Actor.SYSTEM else None,  # an undo or a set-aside goes back to it
    )
    _audit(locked, rule, by, at, before, locked.status)
    _after_commit(
        locked,
        rule.action,
        status_of(before).value if status_of(before) else prior["status"],
        locked.status,
        by,
        at,
        labels_changed,
    )


def _audit(locked: Trail, rule: Rule, by: str, at: datetime, before: State, after: str) -> None:
    """An operator's act (and a release, which a set-aside made) in the scope's audit log, in
    the act's own transaction. Agents' votes and reports are not an operator's acts."""
    if rule.actor is Actor.AGENT or rule.action not in AUDITED:
        return
    audit.record(
        [locked.scope],
        by,
        AUDITED[rule.action],
        what=f"trail {locked.public_id}: {before.value} → {after}",
        link=f"/ops/{locked.scope.slug}/trails/{locked.public_id}/",
        at=at,
        detail={"trail": str(locked.public_id), "status": {"before": before.value, "after": after}},
    )


def _label_rejection(locked: Trail, by: str, at: datetime) -> int:
    """Labels the recent recalls that served a rejected trail (those no agent judged) as
    false hits, by whoever rejected it. Returns how many labels were made."""
    reporter = by if by.startswith("key:") else f"operator:{by or 'unknown'}"
    served = (
        RecallEvent.objects.filter(trail_id=locked.pk, helpful__isnull=True, similarity__isnull=False)
        .exclude(outcome=RecallOutcome.MISS)
        .order_by("-created_at")
        .values_list("id", "similarity", "matcher")[:REJECTION_LABELS]
    )
    return insert_labels(
        [
            MatchLabel(
                scope_id=locked.scope_id,
                matcher=matcher,
                similarity=similarity,
                false_hit=True,
                source=MatchLabel.Source.REJECTION,
                reporter=reporter[:100],
                recall_event_id=event_id,
                trail_id=locked.pk,
                created_at=at,
            )
            for event_id, similarity, matcher in served
        ]
    )


def _after_commit(
    trail: Trail, action: str, before: str, after: str, by: str, at: datetime, labels_changed: bool
) -> None:
    """Tells the upper modules (learning, re-signing) once the change has committed: each
    receiver runs outside every lock taken here; one that fails is logged and the others run."""

    def tell_trail_status_changed() -> None:
        for receiver, result in trail_status_changed.send_robust(
            Trail, trail=trail, action=action, before=before, after=after, by=by, at=at, labels_changed=labels_changed
        ):
            if isinstance(result, Exception):
                logger.error(
                    "after trail %s %s: %s failed: %r",
                    trail.pk,
                    action,
                    getattr(receiver, "__qualname__", receiver),
                    result,
                    exc_info=result,
                )

    transaction.on_commit(tell_trail_status_changed, robust=True)


@writer("undo")
def undo(trail: Trail, actor: Actor, by: str, now: datetime | None = None) -> str:
    """Reverses the latest change to this trail when it was an operator's rejection or
    send-back: the trail goes back to exactly the state before it (status, hold, expiry),
    its reports as they were, the labels a rejection made withdrawn.

    Returns:
        What was done, in words.

    Raises:
        ActionRefused: the latest change is not one of those, the trail has expired, or
            the actor is not an operator.
    """
    with transaction.atomic():
        locked = _locked_or_refused(trail)
        pauses.pause_point("undo:locked")
        at = now or timezone.now()
        before = locked.lifecycle_state(at)
        try:
            table.decide(table.UNDO, actor, before)  # refuses before the history is read
            last = locked.undoable()
            if last is None:
                raise ActionRefused(table.refusal(table.UNDO, actor, before))
            # The table decides again with the reports counted since: not "the state before" blindly.
            rule = table.decide(
                table.UNDO,
                actor,
                before,
                reporters_after=locked.false_hit_reporters,
                reporters_to_hold=locked.scope.false_hit_reporters_to_pending,
                restores_to=state_of(last.before["status"], last.before["held_by"], expired=False)
                if guard_on("undo-decides-on-reports")
                else None,
            )
        except ActionRefused:
            _copy_state(trail, locked)
            raise
        _write(locked, rule, by=by, reason="undo", at=at, before=before, restore=last.before)
    _copy_state(trail, locked)
    return f"{'rejection' if last.signal == Signal.DOWN else 'send-back'} undone: the trail is {locked.status}"


@writer("set-aside")
def set_aside_vote(trail: Trail, reporter: str, by: str, now: datetime | None = None) -> bool:
    """Where the trail's latest change was this reporter's vote (a rejection, an approval),
    the table's set-aside puts it back in the state before that vote, a rejection's labels
    withdrawn (by the system on `by`'s set-aside; a change made since is left for an
    operator). Call before `recount`. Returns whether it did."""
    with transaction.atomic():
        locked = _lock(trail.pk, trail.scope_id)
        if locked is None:
            return False
        at = now or timezone.now()
        last = TrailSignal.objects.filter(trail_id=locked.pk).order_by("-created_at", "-id").first()
        if (
            last is None
            or last.by != reporter[:150]
            or last.source != TrailSignal.Source.FEEDBACK
            or last.signal not in (Signal.UP, Signal.DOWN)
            or not last.before
        ):
            return False
        state = locked.lifecycle_state(at)
        try:
            rule = table.decide(table.SET_ASIDE, Actor.SYSTEM, state)
        except ActionRefused:
            return False  # expired meanwhile: only the sweep or a deletion applies
        _write(locked, rule, by=by, reason=f"{reporter}'s vote set aside", at=at, before=state, restore=last.before)
    _copy_state(trail, locked)
    return True


@writer("recount")
def recount(trail: Trail, set_aside: set[str], by: str, now: datetime | None = None) -> bool:
    """Counts the trail's reports again without the reporters set aside; a trail held by
    reports that no longer has the scope's number of reporters goes back into service (the
    table's release, by the system on `by`'s set-aside). Returns whether it did."""
    with transaction.atomic():
        if guard_on("recount-locks-the-trail"):
            locked = _lock(trail.pk, trail.scope_id)
        else:
            locked = Trail.objects.select_related("scope").filter(pk=trail.pk, scope_id=trail.scope_id).first()
        if locked is None:
            return False
        pauses.pause_point("recount:locked")
        at = now or timezone.now()
        set_aside = set(set_aside) | set_aside_reporters()  # as committed now, under the trail's lock
        reporters = TrailReport.objects.filter(trail_id=locked.pk).exclude(reporter__in=set_aside).count()
        pauses.pause_point("recount:counted")
        locked.false_hit_reporters = locked.false_hit_reports = reporters  # after a recount, once per reporter
        Trail.objects.filter(pk=locked.pk, scope_id=locked.scope_id).update(
            false_hit_reporters=reporters, false_hit_reports=reporters
        )
        state = locked.lifecycle_state(at)
        released = (
            state is State.HELD
            and locked.held_by == table.Hold.REPORTS.value
            and not table.held_by_reporters(reporters, locked.scope.false_hit_reporters_to_pending)
        )
        if released:
            _write(locked, table.decide(table.RELEASE, Actor.SYSTEM, state), by=by, reason="", at=at, before=state)
    _copy_state(trail, locked)
    return released


@writer("act")
def act_on_many(trails: models.QuerySet, action: str, actor: Actor, by: str, reason: str = "") -> tuple[int, int]:
    """Applies an action to each of these trails where it applies, in one transaction, the
    trails locked in id order; returns (changed, skipped)."""
    changed = skipped = 0
    with transaction.atomic():
        order = "id" if guard_on("bulk-actions-lock-in-id-order") else "-id"
        for trail in trails.select_for_update(of=("self",)).order_by(order):
            try:
                act(trail, action, actor, by=by, reason=reason)
                changed += 1
            except ActionRefused:
                skipped += 1
    return changed, skipped
