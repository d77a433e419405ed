"""A trail's lifecycle as stored: the only place a trail's status is written.

Every status change applies a rule of the declared table (trails.core.lifecycle.RULES)
under the trail's row lock and writes its history row: the initial status at record
(`Lifecycle.start`), votes, reports and operator actions (`Lifecycle.act`), recall's stale
marking (`mark_stale_statements`, batched with the recall's own writes) and the sweep
(`expiring`).

Lock order: a scope's row (FOR NO KEY UPDATE: learning, threshold moves, tool policies)
before its trails' rows, trails in id order. An action on a trail locks the trail's row
alone, never its scope; a docs sync holds its own advisory lock and the section rows, and
flags the citing trails in id order after it commits. What an action sets off beyond the
trail's own rows (labels and learning, re-signing) runs after the commit
(`trail_status_changed` is sent then), never under the trail's lock. So votes, reports,
operator actions and syncs queue behind one another for milliseconds instead of
deadlocking.
"""
from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Sequence

from django.db import connection, models, transaction
from django.db.models import Q
from django.dispatch import Signal as DjangoSignal
from django.utils import timezone

from scopes.models import Scope
from trails.core import lifecycle as table
from trails.core.lifecycle import Actor, Expiry, Hold, Reports, Rule, State, state_of, status_of

ActionRefused = table.Refused


class TrailStatus(models.TextChoices):
    PENDING = table.Status.PENDING.value, "Pending approval"
    ACTIVE = table.Status.ACTIVE.value, "Active"
    STALE = table.Status.STALE.value, "Stale"
    REJECTED = table.Status.REJECTED.value, "Rejected"


class Signal(models.TextChoices):
    """What a trail's history rows say happened."""

    ACCEPTED = "accepted", "Caller accepted the answer"
    USER = "user", "User thumbs-up"
    VERIFIER = "verifier", "Verifier approved"
    UP = "up", "Approved"
    DOWN = "down", "Rejected"
    REINSTATE = "reinstate", "Rejection reversed by an operator"
    DEMOTE = "demote", "Sent back to pending by an operator"
    REPORTED = "reported", "Reported not helpful by agents"
    STALE = "stale", "Marked stale: every cited section changed"
    RELEASED = "released", "Back in service: the reports that held it were set aside"


POSITIVE_SIGNALS = frozenset({Signal.ACCEPTED, Signal.USER, Signal.VERIFIER})
# The history row each status-changing rule writes.
HISTORY_SIGNAL = {table.VOTE_UP: Signal.UP, table.VOTE_DOWN: Signal.DOWN, table.REINSTATE: Signal.REINSTATE,
                  table.DEMOTE: Signal.DEMOTE, table.REPORT: Signal.REPORTED, table.MARK_STALE: Signal.STALE,
                  table.RELEASE: Signal.RELEASED}

# What an operator sees a trail as: its status, except that an active trail past its
# expiry shows as expired (the sweep deletes it; recall never serves it meanwhile).
EXPIRED = "expired"
DISPLAY_STATUSES = [*TrailStatus.values, EXPIRED]

# Sent once a status change has committed, with `trail`, `action`, `before` and `after`
# (statuses), `by` and `at`: the upper modules (labels and learning, re-signing) act on it, outside
# the trail's lock, so the model never calls up into them.
trail_status_changed = DjangoSignal()


def is_agent(by: str) -> bool:
    """Whether an actor is an agent's API key ("key:<lookup>") rather than an operator."""
    return by.startswith("key:")


def actor_of(by: str) -> Actor:
    return Actor.AGENT if is_agent(by) else Actor.OPERATOR


def statuses(states: Sequence[State]) -> list[str]:
    return sorted({status_of(s).value for s in states if status_of(s) is not None})


def _rule(action: str, actor: Actor) -> Rule:
    """The single rule of a system action (stale marking, expiry)."""
    (rule,) = table.rules_for(action, actor)
    return rule


class Lifecycle:
    """The lifecycle methods of Trail (a mixin: trails.models.trail.Trail)."""

    @classmethod
    def start(cls, scope: Scope, *, signalled: bool, refused_reason: str = "", now: datetime, **fields):
        """A new trail (unsaved) in the state the table gives a record: rejected where
        admission refused the answer, active with a positive signal, else pending."""
        action = table.RECORD_REFUSED if refused_reason else table.RECORD_SIGNALLED if signalled else table.RECORD_UNSIGNALLED
        rule = table.decide(action, Actor.AGENT, State.NEW)
        return cls(
            scope=scope, status=status_of(rule.to_state).value, held_by=rule.hold.value,
            reason=rule.reason.format(reason=refused_reason),
            expires_at=scope.expiry_for(active=rule.expiry is Expiry.ACTIVE, now=now), created_at=now, **fields,
        )

    def lifecycle_state(self) -> State:
        return state_of(self.status, self.held_by)

    def act(self, action: str, by: str = "", reason: str = "", now: datetime | None = None) -> None:
        """Applies an action of the table under a lock on the trail's row (not its scope's).

        `by` is the actor: "key:<lookup>" for an agent's API key, else an operator's name.
        Actions racing on one trail apply one at a time, each against the state the one
        before it left, each in the history with who and why.

        Raises:
            ActionRefused: the actor may not take the action, or not from the trail's state
                now (the trail is left as it was, and this instance shows its current state).
        """
        self._apply(action, actor_of(by), by, reason, now)

    def report_false_hit(self, reason: str = "", reporter: str = "", now: datetime | None = None) -> bool:
        """Counts an agent's "not helpful" report on a recall that served this trail.

        Reports count per reporter (API key): once the scope's number of different
        reporters (never fewer than two) have reported an active trail since it was last
        approved, it is held out of service until an operator approves it again. A key
        repeating its report counts once; racing reports each count once (row lock).

        Returns:
            Whether this report took the trail out of service.
        """
        return self._apply(table.REPORT, actor_of(reporter), reporter, reason, now)

    def vote(self, vote: str, by: str = "", now: datetime | None = None) -> None:
        """An agent's or operator's up or down vote (the table says what each may do)."""
        if vote not in (table.VOTE_UP, table.VOTE_DOWN):
            raise ActionRefused(f"unknown vote {vote!r}")
        self.act(vote, by=by, now=now)

    def _apply(self, action: str, actor: Actor, by: str, reason: str, now: datetime | None) -> bool:
        from_self = type(self).objects
        with transaction.atomic():
            locked = from_self.select_for_update(of=("self",)).select_related("scope").get(pk=self.pk, scope_id=self.scope_id)
            before = locked.lifecycle_state()

            def decide(name: str) -> Rule:
                return table.decide(name, actor, before, reporters_after=locked.false_hit_reporters,
                                    reporters_to_hold=locked.scope.false_hit_reporters_to_pending)

            try:
                rule = decide(action)
            except ActionRefused:
                self._copy_state(locked)
                raise
            action = rule.taken_as or action
            if rule.reports is Reports.COUNT:
                # A counted report may be the one that holds the trail: the table decides again with it.
                self._count_report(locked, by, now)
                rule = decide(action)
            # Read the clock after the lock: the history's order is the order actions applied.
            at = now or timezone.now()
            self._write(locked, rule, by=by, reason=reason, at=at, before=before)
        self._copy_state(locked)
        return rule.to_state is State.HELD

    @staticmethod
    def _count_report(locked, reporter: str, now: datetime | None) -> int:
        """Adds a report to the locked trail; returns 1 where the reporter is new, else 0."""
        _, new = TrailReport.objects.get_or_create(trail_id=locked.pk, reporter=reporter[:100],
                                                   defaults={"created_at": now or timezone.now()})
        locked.false_hit_reports += 1
        locked.false_hit_reporters += int(new)
        return int(new)

    @staticmethod
    def _write(locked, rule: Rule, *, by: str, reason: str, at: datetime, before: State) -> None:
        """Writes what a rule does to a locked trail: status, hold, reports, expiry, history."""
        fields = ["false_hit_reports", "false_hit_reporters"] if rule.reports is Reports.COUNT else []
        if rule.to_state is State.DELETED:
            type(locked).delete_by_ids([locked.pk])
            locked.status = "deleted"
            return
        if rule.to_state is not None:
            locked.status, locked.held_by = status_of(rule.to_state).value, rule.hold.value
            fields += ["status", "held_by"]
            if rule.reason:
                # Every key behind a hold by reports is named, not only the one whose report tipped it.
                names = ", ".join(TrailReport.objects.filter(trail_id=locked.pk).order_by("created_at")
                                  .values_list("reporter", flat=True)[:6]) if "{names}" in rule.reason else ""
                locked.reason = rule.reason.format(by=by or "an operator", reason=f": {reason}" if reason else "",
                                                   reporters=locked.false_hit_reporters, names=names)[:200]
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
            type(locked).objects.filter(pk=locked.pk, scope_id=locked.scope_id).update(**{f: getattr(locked, f) for f in dict.fromkeys(fields)})
        if rule.to_state is None:
            return  # a report counted, the status unchanged: TrailReport holds who
        source = TrailSignal.Source.FEEDBACK if rule.actor is Actor.AGENT else TrailSignal.Source.OPERATOR
        TrailSignal.objects.create(trail=locked, scope_id=locked.scope_id, signal=HISTORY_SIGNAL[rule.action], source=source, by=by[:150],
                                   reason=reason[:500], created_at=at)
        transaction.on_commit(partial(trail_status_changed.send, type(locked), trail=locked, action=rule.action,
                                      before=status_of(before).value, after=locked.status, by=by, at=at), robust=True)

    def recount_reports(self, set_aside: set[str], by: str, now: datetime | None = None) -> bool:
        """Counts the trail's reports again without the reporters set aside; a trail held by
        reports that no longer has the scope's number of reporters goes back into service
        (the table's release). Returns whether it did."""
        with transaction.atomic():
            locked = type(self).objects.select_for_update(of=("self",)).select_related("scope").get(pk=self.pk, scope_id=self.scope_id)
            reporters = TrailReport.objects.filter(trail_id=locked.pk).exclude(reporter__in=set_aside).count()
            locked.false_hit_reporters = reporters
            locked.false_hit_reports = reporters  # after a recount, once per reporter
            locked.save(update_fields=["false_hit_reporters", "false_hit_reports"])
            released = (locked.held_by == Hold.REPORTS.value and locked.status == TrailStatus.PENDING
                        and not table.held_by_reporters(reporters, locked.scope.false_hit_reporters_to_pending))
            if released:
                rule = table.decide(table.RELEASE, Actor.OPERATOR, locked.lifecycle_state())
                self._write(locked, rule, by=by, reason="", at=now or timezone.now(), before=locked.lifecycle_state())
        self._copy_state(locked)
        return released

    def _copy_state(self, locked) -> None:
        for name in ("status", "held_by", "reason", "expires_at", "false_hit_reports", "false_hit_reporters"):
            setattr(self, name, getattr(locked, name))

    def undo_last(self, by: str) -> str:
        """Reverses the latest operator action that took this trail out of service: a
        rejection (reinstate; and approve again if it was approved before) or a send-back
        (approve again). Each step is an act of its own in the history, with "undo" as why.

        Returns:
            what was done, in words.

        Raises:
            ActionRefused: the latest operator action is not one of those, or the trail has
                moved on since (it is no longer rejected or pending).
        """
        if is_agent(by):
            raise ActionRefused("only an operator can undo")
        with transaction.atomic():
            locked = type(self).objects.select_for_update(of=("self",)).get(pk=self.pk, scope_id=self.scope_id)
            last = locked.undoable()
            if last is None:
                raise ActionRefused("nothing to undo: the latest operator action neither rejected nor sent this trail back")
            signal, was_approved = last
            if signal == Signal.DOWN:
                locked.act(table.REINSTATE, by=by, reason="undo")
            if was_approved:
                locked.act(table.VOTE_UP, by=by, reason="undo")
        self._copy_state(locked)
        return f"{'rejection' if signal == Signal.DOWN else 'send-back'} undone: the trail is {locked.status}"

    def undoable(self) -> tuple[str, bool] | None:
        """The operator action an undo would reverse, as (its signal, whether the trail was
        approved before it), or None: only the latest change, and only an operator's
        rejection or send-back (what agents' reports did is answered by an approval)."""
        history = list(TrailSignal.objects.filter(trail_id=self.pk).order_by("-created_at", "-id")[:50])
        if not history or history[0].source != TrailSignal.Source.OPERATOR or history[0].signal not in (Signal.DOWN, Signal.DEMOTE):
            return None
        last, earlier = history[0], history[1:]
        was_approved = last.signal == Signal.DEMOTE or bool(earlier) and earlier[0].signal in (Signal.UP, *POSITIVE_SIGNALS, Signal.REPORTED)
        return last.signal, was_approved


def mark_stale_statements(trail_table: str, scope_id: int, ids: Sequence[int], now_db, by: str = "recall") -> list[tuple[str, list]]:
    """The statements that mark these trails of a scope stale (the table's stale-marking
    rule: active trails only) and write a history row for each trail they marked; run in the
    caller's transaction (recall sends them with its event in one round trip)."""
    rule = _rule(table.MARK_STALE, Actor.SYSTEM)
    ids = sorted(ids)  # the lock order: trails by id
    marks = ", ".join(["%s"] * len(ids))
    signal_table, q = TrailSignal._meta.db_table, connection.ops.quote_name
    return [
        (f"UPDATE {trail_table} SET status = %s, held_by = '', stale_at = %s, reason = %s "
         f"WHERE scope_id = %s AND id IN ({marks}) AND status IN ({', '.join(['%s'] * len(statuses(rule.from_states)))})",
         [status_of(rule.to_state).value, now_db, rule.reason, scope_id, *ids, *statuses(rule.from_states)]),
        (f"INSERT INTO {signal_table} (trail_id, scope_id, {q('signal')}, {q('source')}, {q('by')}, {q('reason')}, created_at) "
         f"SELECT id, scope_id, %s, %s, %s, '', %s FROM {trail_table} WHERE scope_id = %s AND id IN ({marks}) AND status = %s AND stale_at = %s",
         [Signal.STALE.value, TrailSignal.Source.SYSTEM.value, by, now_db, scope_id, *ids, status_of(rule.to_state).value, now_db]),
    ]


def mark_stale(scope_id: int, trail_ids: Sequence[int], now: datetime, by: str = "recall") -> None:
    """Marks these trails of a scope stale on their own (recall sends the same statements with its event)."""
    if not trail_ids:
        return
    trail_table = TrailSignal._meta.get_field("trail").related_model._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        for sql, params in mark_stale_statements(trail_table, scope_id, trail_ids, models.DateTimeField().get_db_prep_value(now, connection), by):
            cursor.execute(sql, params)


def expiring(trails: models.QuerySet, now: datetime) -> models.QuerySet:
    """The trails the sweep deletes now (the table's expiry rule)."""
    rule = _rule(table.EXPIRE, Actor.SYSTEM)
    return trails.filter(expires_at__lte=now, status__in=statuses(rule.from_states))


class TrailReport(models.Model):
    """One reporter's "not helpful" on a trail since its last approval: reports count per reporter."""

    trail = models.ForeignKey("trails.Trail", on_delete=models.CASCADE, related_name="+")
    reporter = models.CharField(max_length=100)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["trail", "reporter"], name="trail_report_once_per_reporter")]


class TrailSignal(models.Model):
    """The history of a trail: its record signal, votes, reports, operator actions, stale marking."""

    class Source(models.TextChoices):
        RECORD = "record", "At record time"
        FEEDBACK = "feedback", "Feedback"
        OPERATOR = "operator", "Operator"
        SYSTEM = "system", "The service"

    trail = models.ForeignKey("trails.Trail", on_delete=models.CASCADE, related_name="signals")
    # The trail's scope, repeated so every row a trail owns carries the key its tables can be
    # partitioned or distributed by (docs/scaling.md).
    scope = models.ForeignKey("scopes.Scope", on_delete=models.CASCADE, related_name="+", db_index=False)
    signal = models.CharField(max_length=16, choices=Signal.choices)
    source = models.CharField(max_length=16, choices=Source.choices)
    by = models.CharField(max_length=150, blank=True, help_text="The operator, where one acted.")
    # An agent's words with its report: caller-written, so purged like a query.
    reason = models.CharField(max_length=500, blank=True, db_default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        # The overview counts a window's down-votes and reports: a few rows among every trail's record signal.
        indexes = [models.Index(fields=["created_at"], name="trailsignal_complaints", condition=Q(signal__in=["down", "reported"]))]
