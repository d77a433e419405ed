"""A trail's lifecycle: the one declared table of who may do what to a trail, from which
state, to which, and what it does to the trail's reports and the scope's labels.

Plain data and one lookup, so the table can be read, tested and printed (the README's
lifecycle section is checked against `table_rows()`) without Django. The model layer
(trails.models.trail) applies a rule under the trail's row lock; nothing else changes a
trail's status.

States are a trail's status, except that a pending trail is one of two: waiting for its
first approval ("pending"), or held out of service by agents' reports or an operator
("held"), and that any recorded trail past its expiry is "expired" whatever its status:
nothing brings an expired trail back (no vote, no re-record, no undo), only the sweep or an
operator deletes it. An agent's up vote approves a pending trail and never a held one: only
an operator's approval answers reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Status(str, Enum):
    """What a trail's status column holds."""

    PENDING = "pending"
    ACTIVE = "active"
    STALE = "stale"
    REJECTED = "rejected"


class State(str, Enum):
    """Where a trail stands in the lifecycle (a status, with pending split in two)."""

    NEW = "new"  # not yet recorded
    PENDING = "pending"  # recorded without a positive signal: waiting for a first approval
    HELD = "held"  # pending again: taken out of service by reports or an operator
    ACTIVE = "active"
    STALE = "stale"
    REJECTED = "rejected"
    EXPIRED = "expired"  # any recorded trail past its expiry, whatever its status
    DELETED = "deleted"


class Hold(str, Enum):
    """Why a pending trail is held (the trail's `held_by` column); blank when it is not."""

    NONE = ""
    REPORTS = "reports"
    OPERATOR = "operator"


class Actor(str, Enum):
    AGENT = "agent"  # an API key
    OPERATOR = "operator"  # a signed-in person: operator pages, Django admin, a command
    SYSTEM = "system"  # recall's read-time check, the sweep


class Reports(str, Enum):
    """What an action does to the reports counted against a trail since its last approval."""

    KEEP = "kept"
    COUNT = "counted"  # this report is added (once per reporter)
    ANSWER = "answered"  # cleared: an operator's approval answers them
    RECOUNT = "counted without keys set aside"
    GONE = "deleted with the trail"


class Labels(str, Enum):
    """What an action does to the scope's labels (the evidence its threshold learns from)."""

    NONE = "none"
    REJECTION = "labels the recalls that served it as false hits"
    WITHDRAW = "withdraws the labels its rejection made"


class Expiry(str, Enum):
    """Which expiry the trail gets."""

    KEEP = "kept"
    ACTIVE = "the scope's TTL"
    PENDING = "the scope's pending TTL"


@dataclass(frozen=True)
class Rule:
    """One row of the table."""

    action: str
    actor: Actor
    from_states: tuple[State, ...]
    to_state: State | None  # None: the status stays as it was
    reports: Reports = Reports.KEEP
    labels: Labels = Labels.NONE
    expiry: Expiry = Expiry.KEEP
    hold: Hold = Hold.NONE  # why the trail is held, where to_state is HELD
    # Said with the new status ({who}: the actor's role, {reporters}, {reason}: admission's own
    # words), never who by name nor an operator's words: those are in the history, where the
    # operator pages show them and erasure finds them; an agent's key reads this.
    reason: str = ""
    # Taken as another action (an agent's down vote on an active trail is a report).
    taken_as: str = ""
    # The state goes back to what it was before the operator action being undone (kept
    # with that action's history row): status, hold and expiry; reports were never touched.
    restores: bool = False
    note: str = ""

    def applies_to(self, state: State) -> bool:
        return state in self.from_states


A, O, S = Actor.AGENT, Actor.OPERATOR, Actor.SYSTEM
NEW, PENDING, HELD, ACTIVE, STALE, REJECTED, EXPIRED, DELETED = (
    State.NEW,
    State.PENDING,
    State.HELD,
    State.ACTIVE,
    State.STALE,
    State.REJECTED,
    State.EXPIRED,
    State.DELETED,
)
ANY_RECORDED = (PENDING, HELD, ACTIVE, STALE, REJECTED)

# Actions an API caller or operator names; the others are the system's own.
VOTE_UP, VOTE_DOWN, REINSTATE, DEMOTE, DELETE, UNDO = "up", "down", "reinstate", "demote", "delete", "undo"
REPORT = "report"
RECORD_SIGNALLED, RECORD_UNSIGNALLED, RECORD_REFUSED = "record", "record-unsignalled", "record-refused"
MARK_STALE, EXPIRE = "mark-stale", "expire"
RELEASE = "release"
SET_ASIDE = "set-aside"

# The table. One row per (action, actor); an action absent for an actor is refused to it.
RULES: tuple[Rule, ...] = (
    Rule(
        RECORD_SIGNALLED,
        A,
        (NEW,),
        ACTIVE,
        expiry=Expiry.ACTIVE,
        note="recorded with a positive signal (accepted, user, verifier)",
    ),
    Rule(
        RECORD_UNSIGNALLED,
        A,
        (NEW,),
        PENDING,
        expiry=Expiry.PENDING,
        reason="no positive signal: waiting for approval",
        note="recorded without a positive signal",
    ),
    Rule(
        RECORD_REFUSED,
        A,
        (NEW,),
        REJECTED,
        expiry=Expiry.PENDING,
        reason="{reason}",
        note="the answer says its sources do not cover the question",
    ),
    Rule(
        VOTE_UP,
        A,
        (PENDING, ACTIVE),
        ACTIVE,
        expiry=Expiry.ACTIVE,
        note="approves a trail recorded pending, or renews an active one; reports stay counted",
    ),
    Rule(
        VOTE_DOWN,
        A,
        (PENDING, HELD, STALE),
        REJECTED,
        reason="rejected by {who}",
        labels=Labels.REJECTION,
        note="final for votes; a rejected trail is not rejected again (an operator's undo would restore it)",
    ),
    Rule(
        VOTE_DOWN,
        A,
        (ACTIVE,),
        None,
        reports=Reports.COUNT,
        taken_as=REPORT,
        note="on an active trail one key's down vote is that key's report",
    ),
    Rule(
        REPORT,
        A,
        (ACTIVE,),
        None,
        reports=Reports.COUNT,
        note="'not helpful' on a recall that served it; counted once per key",
    ),
    Rule(
        REPORT,
        A,
        (ACTIVE,),
        HELD,
        reports=Reports.COUNT,
        expiry=Expiry.PENDING,
        hold=Hold.REPORTS,
        reason="reported not helpful by {reporters} reporters",
        note="the report that brings the scope's number of different reporters",
    ),
    Rule(REPORT, A, (PENDING, HELD, STALE, REJECTED), None, reports=Reports.COUNT, note="counted; the status stays"),
    Rule(
        VOTE_UP,
        O,
        (PENDING, HELD, ACTIVE),
        ACTIVE,
        reports=Reports.ANSWER,
        expiry=Expiry.ACTIVE,
        note="approve: the only way back into service from held",
    ),
    Rule(
        VOTE_DOWN,
        O,
        (PENDING, HELD, ACTIVE, STALE),
        REJECTED,
        reason="rejected by {who}",
        labels=Labels.REJECTION,
        note="a rejected trail is not rejected again (its undo would restore the rejection)",
    ),
    Rule(
        DEMOTE,
        O,
        (ACTIVE,),
        HELD,
        expiry=Expiry.PENDING,
        hold=Hold.OPERATOR,
        reason="sent back to pending by {who}",
        note="send back",
    ),
    Rule(
        REINSTATE,
        O,
        (REJECTED,),
        HELD,
        expiry=Expiry.PENDING,
        hold=Hold.OPERATOR,
        labels=Labels.WITHDRAW,
        reason="rejection reversed by {who}",
        note="to be approved again by an operator",
    ),
    Rule(
        UNDO,
        O,
        (REJECTED,),
        None,
        labels=Labels.WITHDRAW,
        restores=True,
        reason="rejection undone by {who}",
        note="only the latest change, an operator's rejection: back to the state before it (a hold, its reports and expiry too)",
    ),
    Rule(
        UNDO,
        O,
        (HELD,),
        None,
        restores=True,
        reason="send-back undone by {who}",
        note="only the latest change, an operator's send-back: back to active with the expiry it had",
    ),
    Rule(
        UNDO,
        O,
        (REJECTED,),
        HELD,
        labels=Labels.WITHDRAW,
        expiry=Expiry.PENDING,
        hold=Hold.REPORTS,
        restores=True,
        reason="reported not helpful by {reporters} reporters",
        note="the state before was active, but the reports counted since hold it: held by reports",
    ),
    Rule(
        UNDO,
        O,
        (HELD,),
        HELD,
        expiry=Expiry.PENDING,
        hold=Hold.REPORTS,
        restores=True,
        reason="reported not helpful by {reporters} reporters",
        note="the state before was active, but the reports counted while it was sent back hold it: held by reports",
    ),
    Rule(DELETE, O, (STALE, EXPIRED), DELETED, reports=Reports.GONE),
    Rule(
        RELEASE,
        S,
        (HELD,),
        ACTIVE,
        reports=Reports.RECOUNT,
        expiry=Expiry.ACTIVE,
        reason="back in service: an operator set aside the reports that held it",
        note="the recount after an operator set a key's reports aside: only a trail held by reports that no longer "
        "has the scope's number of reporters",
    ),
    Rule(
        SET_ASIDE,
        S,
        (REJECTED, ACTIVE),
        None,
        labels=Labels.WITHDRAW,
        restores=True,
        reason="back to where it was: the vote that moved it was set aside with its key",
        note="an operator set a key aside and the trail's latest change was that key's vote (a rejection, an "
        "approval): back to the state before it, a rejection's labels withdrawn; then counted again as release does",
    ),
    Rule(
        MARK_STALE,
        S,
        (ACTIVE,),
        STALE,
        reason="every cited section changed",
        note="recall's read-time check found none of its sections unchanged; never comes back",
    ),
    Rule(EXPIRE, S, (*ANY_RECORDED, EXPIRED), DELETED, reports=Reports.GONE, note="the sweep, past the trail's expiry"),
)

# Words for refusals: what the action would be called by whoever tried it.
VERBS = {
    VOTE_UP: "approve",
    VOTE_DOWN: "reject",
    REINSTATE: "reinstate",
    DEMOTE: "send back",
    DELETE: "delete",
    UNDO: "undo",
    REPORT: "report",
    MARK_STALE: "mark stale",
    EXPIRE: "expire",
    RELEASE: "release",
    SET_ASIDE: "set aside",
}
# The actions an API caller or operator may name (the others are the system's or record's).
NAMED_ACTIONS = (VOTE_UP, VOTE_DOWN, REINSTATE, DEMOTE, DELETE, UNDO)


class ActionRefused(ValueError):
    """The action does not apply: to this actor, or to the trail's state now."""


def state_of(status: str, held_by: str = "", expired: bool = False) -> State:
    """A stored trail's state from its status, hold and whether it is past its expiry."""
    if expired:
        return EXPIRED
    if status == Status.PENDING:
        return HELD if held_by else PENDING
    return State(status)


def status_of(state: State) -> Status | None:
    """The status column a state is stored as (None: the trail is deleted, or an expired
    trail, which keeps whatever status it had)."""
    if state in (DELETED, EXPIRED):
        return None
    return Status.PENDING if state in (PENDING, HELD) else Status(state.value)


def rules_for(action: str, actor: Actor) -> list[Rule]:
    return [r for r in RULES if r.action == action and r.actor is actor]


def available_actions(state: State, actor: Actor, moving_only: bool = False) -> list[str]:
    """The named actions this actor may take on a trail in this state, in the table's order:
    what pages, Django admin and the API offer (undo needs its history too: Trail.undoable).
    `moving_only` leaves out those that keep the state (renewing an active trail)."""
    return [
        action
        for action in NAMED_ACTIONS
        if any(r.applies_to(state) and not (moving_only and r.to_state is state) for r in rules_for(action, actor))
    ]


def held_by_reporters(reporters: int, reporters_to_hold: int) -> bool:
    """Whether this many different reporters take a trail out of service (never fewer than two)."""
    return reporters >= max(reporters_to_hold, 2)


def decide(
    action: str,
    actor: Actor,
    state: State,
    *,
    reporters_after: int = 0,
    reporters_to_hold: int = 2,
    restores_to: State | None = None,
) -> Rule:
    """The rule that applies to an actor's action on a trail in this state.

    Args:
        reporters_after: for a report, the different reporters counted once it is added;
            for an undo, those counted now.
        reporters_to_hold: the scope's number of reporters that takes an active trail out.
        restores_to: for an undo, the state it goes back to (active, with enough reporters
            counted meanwhile, is held by reports instead).

    Raises:
        ActionRefused: the actor may not take this action at all, or not from this state
            (the message says which, in an operator's words).
    """
    rules = rules_for(action, actor)
    verb = VERBS.get(action, action)
    if not rules:
        if any(r.action == action for r in RULES):
            who = {A: "an agent's key", O: "an operator", S: "the service itself"}
            allowed = " or ".join(who[a] for a in Actor if any(r.action == action and r.actor is a for r in RULES))
            raise ActionRefused(f"only {allowed} can {verb} a trail")
        raise ActionRefused(f"unknown action {action!r}; one of {', '.join(NAMED_ACTIONS)}")
    applicable = [r for r in rules if r.applies_to(state)]
    if not applicable:
        raise ActionRefused(refusal(action, actor, state))
    if action == REPORT and state is ACTIVE:
        held = held_by_reporters(reporters_after, reporters_to_hold)
        return next(r for r in applicable if (r.to_state is HELD) == held)
    if action == UNDO:
        held = restores_to is ACTIVE and held_by_reporters(reporters_after, reporters_to_hold)
        return next(r for r in applicable if (r.to_state is HELD) == held)
    return applicable[0]


def refusal(action: str, actor: Actor, state: State) -> str:
    """Why the action does not apply from this state, in an operator's words."""
    verb = VERBS.get(action, action)
    if state is EXPIRED:
        return f"this trail has expired: it can no longer be {'approved' if action == VOTE_UP else verb + 'ed'}, only deleted"
    if state is HELD and action == VOTE_UP and actor is A:
        return (
            "this trail was taken out of service (by agents' reports or an operator): "
            "only an operator's approval serves it again"
        )
    shown = "pending" if state is HELD else state.value
    if action == REINSTATE:
        return f"only a rejected trail can be reinstated; this one is {shown}"
    if action == DEMOTE:
        return f"only an active trail can be sent back to pending; this one is {shown}"
    if action == DELETE:
        return f"only a stale or expired trail can be deleted; this one is {shown}"
    if action == UNDO:
        return f"nothing to undo: the latest change was not an operator's rejection or send-back (the trail is {shown})"
    return f"a {shown} trail cannot be {'approved' if action == VOTE_UP else verb + 'ed'}"


def table_rows() -> list[tuple[str, ...]]:
    """The table as text rows: action, actor, from, to, reports, labels, note."""
    rows = []
    for r in RULES:
        to = (
            "(the state before)"
            if r.restores and r.to_state is None
            else "(unchanged)"
            if r.to_state is None
            else r.to_state.value + (f" (by {r.hold.value})" if r.hold is not Hold.NONE else "")
        )
        rows.append(
            (
                r.action,
                r.actor.value,
                ", ".join(s.value for s in r.from_states),
                to,
                r.reports.value,
                "" if r.labels is Labels.NONE else r.labels.value,
                r.note,
            )
        )
    return rows


def markdown_table() -> str:
    """The table as the README shows it (a test holds the README to it)."""
    head = ("action", "who", "from", "to", "reports", "labels", "note")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell or "" for cell in row) + " |" for row in table_rows()]
    return "\n".join(lines)
