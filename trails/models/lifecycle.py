"""A trail's lifecycle as stored: statuses, the history and reports, and what a trail's
state is read as (expiry included). The initial status at record is `Lifecycle.start`;
recall's stale marking is `mark_stale_statements` (batched with the recall's own writes).
Every other write of a status, a report, a label a status change makes or a deletion is
trails.models.writes, which also states the lock order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Sequence

from django.db import connection, models, transaction
from django.db.models import Q
from django.dispatch import Signal as DjangoSignal
from django.utils import timezone

from scopes.models import Scope
from trails.core import lifecycle as table
from trails.core.lifecycle import Actor, Expiry, Hold, Rule, State, state_of, status_of
from trails.models.gate import writer

ActionRefused = table.ActionRefused  # the one name, defined with the table


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
    UNDONE = "undone", "An operator's rejection or send-back undone"
    SET_ASIDE = "set-aside", "Back to where it was: the vote that moved it was set aside with its key"


POSITIVE_SIGNALS = frozenset({Signal.ACCEPTED, Signal.USER, Signal.VERIFIER})
# The history row each status-changing rule writes.
HISTORY_SIGNAL = {
    table.VOTE_UP: Signal.UP,
    table.VOTE_DOWN: Signal.DOWN,
    table.REINSTATE: Signal.REINSTATE,
    table.DEMOTE: Signal.DEMOTE,
    table.REPORT: Signal.REPORTED,
    table.MARK_STALE: Signal.STALE,
    table.RELEASE: Signal.RELEASED,
    table.UNDO: Signal.UNDONE,
    table.SET_ASIDE: Signal.SET_ASIDE,
}

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
        action = (
            table.RECORD_REFUSED
            if refused_reason
            else table.RECORD_SIGNALLED
            if signalled
            else table.RECORD_UNSIGNALLED
        )
        rule = table.decide(action, Actor.AGENT, State.NEW)
        return cls(
            scope=scope,
            status=status_of(rule.to_state).value,
            held_by=rule.hold.value,
            reason=rule.reason.format(reason=refused_reason),
            expires_at=scope.expiry_for(active=rule.expiry is Expiry.ACTIVE, now=now),
            created_at=now,
            **fields,
        )

    def lifecycle_state(self, now: datetime | None = None) -> State:
        """Where the trail stands now: expired once past its expiry, whatever its status."""
        return state_of(self.status, self.held_by, expired=self.expires_at <= (now or timezone.now()))

    def available_actions(self, actor: Actor = Actor.OPERATOR) -> list[str]:
        """The named actions this actor may take on the trail now (the table's), undo only
        where the latest change is an operator's rejection or send-back."""
        actions = table.available_actions(self.lifecycle_state(), actor)
        if table.UNDO in actions and self.undoable() is None:
            actions.remove(table.UNDO)
        return actions

    @property
    def row_actions(self) -> list[str]:
        """What an operator may do to move the trail from a list row (undo needs its history:
        the trail's page; renewing an active trail too)."""
        return table.available_actions(self.lifecycle_state(), Actor.OPERATOR, moving_only=True)

    def undoable(self) -> "TrailSignal | None":
        """The operator action an undo would reverse (its history row, with `before`: the
        state to go back to), or None: only the latest change, and only an operator's
        rejection or send-back (what agents' reports did is answered by an approval)."""
        history = list(TrailSignal.objects.filter(trail_id=self.pk).order_by("-created_at", "-id")[:2])
        if (
            not history
            or history[0].source != TrailSignal.Source.OPERATOR
            or history[0].signal not in (Signal.DOWN, Signal.DEMOTE)
        ):
            return None
        last = history[0]
        if not last.before:
            # Written before the history kept the state it changed: the nearest reading of it.
            earlier = history[1:]
            approved = (
                last.signal == Signal.DEMOTE or bool(earlier) and earlier[0].signal in (Signal.UP, *POSITIVE_SIGNALS)
            )
            last.before = {
                "status": TrailStatus.ACTIVE.value if approved else TrailStatus.PENDING.value,
                "held_by": Hold.REPORTS.value if earlier and earlier[0].signal == Signal.REPORTED else "",
                "expires_at": self.expires_at.isoformat(),
            }
            if last.before["held_by"]:
                last.before["status"] = TrailStatus.PENDING.value
        return last


def mark_stale_statements(
    trail_table: str, scope_id: int, ids: Sequence[int], now_db, by: str = "recall"
) -> list[tuple[str, list]]:
    """The statements that mark these trails of a scope stale (the table's stale-marking
    rule: active trails only) and write a history row for each trail they marked; run in the
    caller's transaction (recall sends them with its event in one round trip)."""
    rule = _rule(table.MARK_STALE, Actor.SYSTEM)
    ids = sorted(ids)  # the lock order: trails by id
    marks = ", ".join(["%s"] * len(ids))
    signal_table, q = TrailSignal._meta.db_table, connection.ops.quote_name
    return [
        (
            f"UPDATE {trail_table} SET status = %s, held_by = '', stale_at = %s, reason = %s "
            f"WHERE scope_id = %s AND id IN ({marks}) AND status IN ({', '.join(['%s'] * len(statuses(rule.from_states)))})",
            [status_of(rule.to_state).value, now_db, rule.reason, scope_id, *ids, *statuses(rule.from_states)],
        ),
        (
            f"INSERT INTO {signal_table} (trail_id, scope_id, {q('signal')}, {q('source')}, {q('by')}, {q('reason')}, created_at) "
            f"SELECT id, scope_id, %s, %s, %s, '', %s FROM {trail_table} WHERE scope_id = %s AND id IN ({marks}) AND status = %s AND stale_at = %s",
            [
                Signal.STALE.value,
                TrailSignal.Source.SYSTEM.value,
                by,
                now_db,
                scope_id,
                *ids,
                status_of(rule.to_state).value,
                now_db,
            ],
        ),
    ]


@writer("stale")
def mark_stale(scope_id: int, trail_ids: Sequence[int], now: datetime, by: str = "recall") -> None:
    """Marks these trails of a scope stale on their own (recall sends the same statements with its event)."""
    if not trail_ids:
        return
    trail_table = TrailSignal._meta.get_field("trail").related_model._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        for sql, params in mark_stale_statements(
            trail_table, scope_id, trail_ids, models.DateTimeField().get_db_prep_value(now, connection), by
        ):
            cursor.execute(sql, params)


def expired(now: datetime) -> Q:
    """What the sweep deletes now (the table's expiry rule), as a condition on the trail's own
    row: PostgreSQL re-checks such a condition on a row it waited to lock (a subquery it does not)."""
    rule = _rule(table.EXPIRE, Actor.SYSTEM)
    return Q(expires_at__lte=now, status__in=statuses(rule.from_states))


def expiring(trails: models.QuerySet, now: datetime) -> models.QuerySet:
    """The trails the sweep deletes now."""
    return trails.filter(expired(now))


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
    # An operator's change keeps the state it changed (status, hold, expiry): what an undo restores.
    before = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        # The overview counts a window's down-votes and reports: a few rows among every trail's record signal.
        indexes = [
            models.Index(
                fields=["created_at"], name="trailsignal_complaints", condition=Q(signal__in=["down", "reported"])
            )
        ]
