"""A trail (a recorded path to an answer) and its parts: steps, citations, band keys, signal history and reports; the one table of actions on it."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Sequence

from django.db import connection, models, transaction
from django.db.models import Q
from django.dispatch import Signal as DjangoSignal
from django.dispatch import receiver
from django.utils import timezone

from scopes.models import Scope, sections_changed
from trails.core.hint import RecordedStep
from trails.core.minhash import MinHashParams, MinHashSignature
from trails.core.validation import Citation as CoreCitation


class TrailStatus(models.TextChoices):
    PENDING = "pending", "Pending approval"
    ACTIVE = "active", "Active"
    STALE = "stale", "Stale"
    REJECTED = "rejected", "Rejected"


class Signal(models.TextChoices):
    ACCEPTED = "accepted", "Caller accepted the answer"
    USER = "user", "User thumbs-up"
    VERIFIER = "verifier", "Verifier approved"
    UP = "up", "Approved"
    DOWN = "down", "Rejected"
    REINSTATE = "reinstate", "Rejection reversed by an operator"
    DEMOTE = "demote", "Sent back to pending by an operator"
    REPORTED = "reported", "Reported not helpful by agents"


POSITIVE_SIGNALS = frozenset({Signal.ACCEPTED, Signal.USER, Signal.VERIFIER})


class ActionRefused(ValueError):
    """An action that does not apply to a trail in its state (the API answers 409, a page says why)."""


def is_agent(by: str) -> bool:
    """Whether an actor is an agent's API key ("key:<lookup>") rather than an operator."""
    return by.startswith("key:")


@dataclass(frozen=True)
class TrailAction:
    """One thing that can be done to a trail: from which statuses, to which, and how it reads."""

    signal: str
    allowed: tuple[str, ...]
    status: str | None  # None: the trail is deleted
    reason: str  # the status line afterwards; {by} and {reason} are filled in
    refusal: str
    verb: str
    operator_only: bool = False


# The one table of which action applies to which status: the API, the operator pages,
# Django admin and the bulk actions all act through it (Trail.act, TrailQuerySet.act).
TRAIL_ACTIONS: dict[str, TrailAction] = {
    Signal.UP: TrailAction(Signal.UP, (TrailStatus.PENDING, TrailStatus.ACTIVE), TrailStatus.ACTIVE, "",
                           "a {status} trail cannot be approved", "approve"),
    # A rejection is final for votes: only reinstate, an operator's act, reverses it.
    Signal.DOWN: TrailAction(Signal.DOWN, tuple(TrailStatus), TrailStatus.REJECTED, "rejected by {by}{reason}",
                             "a {status} trail cannot be rejected", "reject"),
    Signal.REINSTATE: TrailAction(Signal.REINSTATE, (TrailStatus.REJECTED,), TrailStatus.PENDING,
                                  "rejection reversed by {by}{reason}",
                                  "only a rejected trail can be reinstated; this one is {status}", "reinstate", operator_only=True),
    Signal.DEMOTE: TrailAction(Signal.DEMOTE, (TrailStatus.ACTIVE,), TrailStatus.PENDING, "sent back to pending by {by}{reason}",
                               "only an active trail can be sent back to pending; this one is {status}", "send back", operator_only=True),
    # Stale trails never come back; deleting them is housekeeping.
    "delete": TrailAction("delete", (TrailStatus.STALE,), None, "", "only a stale trail can be deleted; this one is {status}",
                          "delete", operator_only=True),
}

# Sent inside the transaction of every status change, with `trail`, `action`, `before`,
# `by` and `at`: the upper modules (labels and learning, re-signing) act on it, so the
# model never calls up into them.
trail_status_changed = DjangoSignal()


# What an operator sees a trail as: its status, except that an active trail past its
# expiry shows as expired (the sweep deletes it; recall never serves it meanwhile).
EXPIRED = "expired"
DISPLAY_STATUSES = [*TrailStatus.values, EXPIRED]


# Sent with the ids of trails about to be deleted in bulk, in the deleting transaction: rows
# of other models that point at them (recall events, match labels) unlink themselves, each
# in the module of its model, so this one needs to know none of them.
trails_deleting = DjangoSignal()


def delete_rows(rows: models.QuerySet) -> int:
    """Deletes a queryset's rows in one DELETE statement, without Django's per-row
    cascade collection and signals: for rows with no dependants left (callers delete
    children first), where collecting millions of rows one by one takes minutes.

    Returns:
        How many rows were deleted.
    """
    select, params = rows.values("pk").query.sql_with_params()
    meta = rows.model._meta
    # On PostgreSQL the ids are read first (an InitPlan) and the rows then by primary key:
    # with statistics from before a table grew, `IN (SELECT …)` ran for minutes over
    # 121,000 recall events of a benchmark scope.
    match = f"= ANY(ARRAY({select}))" if connection.vendor == "postgresql" else f"IN ({select})"
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {meta.db_table} WHERE {meta.pk.column} {match}", params)
        return cursor.rowcount



class TrailQuerySet(models.QuerySet):
    def showing(self, display_status: str, now: datetime | None = None) -> "TrailQuerySet":
        """The trails an operator sees with this display status (Trail.display_status)."""
        now = now or timezone.now()
        if display_status == EXPIRED:
            return self.filter(status=TrailStatus.ACTIVE, expires_at__lte=now)
        if display_status == TrailStatus.ACTIVE:
            return self.filter(status=TrailStatus.ACTIVE, expires_at__gt=now)
        return self.filter(status=display_status)

    def act(self, action: str, by: str, reason: str = "") -> tuple[int, int]:
        """Applies an action to each of these trails where it applies (Trail.act), in one
        transaction; returns (changed, skipped)."""
        changed = skipped = 0
        with transaction.atomic():
            for trail in self.select_for_update().order_by("id"):
                try:
                    trail.act(action, by=by, reason=reason)
                    changed += 1
                except ActionRefused:
                    skipped += 1
        return changed, skipped


class Trail(models.Model):
    """The path an agent took to an answer: query, steps and cited sections with their hashes."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # Keeps its own index though trail_scope_status_expiry leads with it: without it the trails
    # page at 100,000 trails went from 213 to 316 ms at p90 (benchmark_overview).
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="trails")
    partition = models.CharField(max_length=200, blank=True, default="")
    query = models.TextField()
    normalised_query = models.TextField()
    status = models.CharField(max_length=16, choices=TrailStatus.choices)
    signal = models.CharField(max_length=16, choices=Signal.choices, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    lexical_params = models.CharField(max_length=40)
    lexical_signature = models.BinaryField()
    band_layout = models.CharField(max_length=16)
    embedding_model = models.CharField(max_length=200, blank=True)
    embedding = models.BinaryField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    stale_at = models.DateTimeField(null=True, blank=True)
    # Set when a cited section changes after recording, so operators see trails that
    # will come back as hints or misses before an agent meets them. Recall still
    # validates on read; this flag never decides what is served.
    section_changed_at = models.DateTimeField(null=True, blank=True)
    # Estimated tokens of what the recorded steps returned: what an agent puts into
    # its context walking the path itself, against which a prefetch is a saving.
    path_tokens = models.PositiveIntegerField(default=0)
    hit_count = models.PositiveIntegerField(default=0)
    last_hit_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    request_fingerprint = models.CharField(max_length=64, blank=True)
    # Agents' "not helpful" reports on recalls that served this trail since it was last
    # approved, and how many different reporters (API keys) sent them: at the scope's
    # number of reporters it goes back to pending (TrailReport holds who).
    false_hit_reports = models.PositiveIntegerField(default=0, db_default=0)
    false_hit_reporters = models.PositiveIntegerField(default=0, db_default=0)

    objects = TrailQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["scope", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="trail_idempotency_key_unique_in_scope",
            )
        ]
        indexes = [
            models.Index(fields=["scope", "status", "expires_at"], name="trail_scope_status_expiry"),
            models.Index(fields=["expires_at"], name="trail_expiry"),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.query[:60]}"

    def signature(self) -> MinHashSignature:
        return MinHashSignature.from_bytes(MinHashParams.from_label(self.lexical_params), bytes(self.lexical_signature))

    def core_citations(self) -> list[CoreCitation]:
        return [CoreCitation(c.section_id, c.hash) for c in self.citations.order_by("position")]

    def recorded_steps(self) -> list[RecordedStep]:
        rows = Step.objects.filter(trail_id=self.id).values_list("tool", "args", "section_ids")
        return [RecordedStep(tool, args, tuple(section_ids)) for tool, args, section_ids in rows]

    @classmethod
    def delete_by_ids(cls, ids: Sequence[int]) -> int:
        """Deletes trails and their rows in bulk; their recall events keep no link.

        Returns how many trails were deleted. No per-row cascade collection: the
        child rows have no dependants of their own.
        """
        if not ids:
            return 0
        # Recall events and match labels outlive the trail, unlinked by their own modules.
        trails_deleting.send(sender=cls, ids=list(ids))
        for model in (BandKey, Citation, Step, TrailSignal, TrailReport):
            delete_rows(model.objects.filter(trail_id__in=ids))
        return delete_rows(cls.objects.filter(id__in=ids))

    def is_expired(self, now: datetime | None = None) -> bool:
        return self.expires_at <= (now or timezone.now())

    @property
    def display_status(self) -> str:
        """The status an operator sees: an active trail past its expiry shows as expired."""
        if self.status == TrailStatus.ACTIVE and self.is_expired():
            return EXPIRED
        return self.status

    def act(self, action: str, by: str = "", reason: str = "", now: datetime | None = None) -> None:
        """Applies an action (TRAIL_ACTIONS) under a lock on the trail's row.

        Actions racing on one trail are applied one at a time, each against the state
        the one before it left, and each is in the signal history with who and why.
        `by` is the actor: "key:<lookup>" for an agent's API key, else an operator's name.

        Raises:
            ActionRefused: the action does not apply to the trail's status now (the
                trail is left as it was, and this instance shows its current state).
        """
        rule = TRAIL_ACTIONS.get(action)
        if rule is None:
            raise ActionRefused(f"unknown action {action!r}; one of {', '.join(TRAIL_ACTIONS)}")
        if rule.operator_only and is_agent(by):
            raise ActionRefused(f"only an operator can {rule.verb} a trail")
        with transaction.atomic():
            locked = Trail.objects.select_for_update().select_related("scope").get(pk=self.pk)
            before = locked.status
            if before not in rule.allowed:
                self.status, self.reason, self.expires_at = locked.status, locked.reason, locked.expires_at
                raise ActionRefused(rule.refusal.format(status=locked.display_status))
            if action == Signal.DOWN and is_agent(by) and before == TrailStatus.ACTIVE:
                # One agent's key does not take an approved trail out of service: its down
                # vote is a report, and reports from enough reporters send it back to pending.
                self.report_false_hit(reason or "voted down", reporter=by, now=now)
                return
            # Read the clock after the lock: the history's order is the order actions applied.
            at = now or timezone.now()
            if rule.status is None:
                Trail.delete_by_ids([locked.pk])
                self.status = "deleted"
                return
            locked.status = rule.status
            locked.reason = rule.reason.format(by=by or "an operator", reason=f": {reason}" if reason else "")[:200]
            fields = ["status", "reason"]
            if rule.status == TrailStatus.ACTIVE:
                # An approval answers the reports so far: counting starts again.
                locked.false_hit_reports = locked.false_hit_reporters = 0
                fields += ["false_hit_reports", "false_hit_reporters"]
                TrailReport.objects.filter(trail_id=locked.pk).delete()
            if rule.status != TrailStatus.REJECTED:
                locked.expires_at = locked.scope.expiry_for(active=rule.status == TrailStatus.ACTIVE, now=at)
                fields.append("expires_at")
            locked.save(update_fields=fields)
            source = TrailSignal.Source.FEEDBACK if is_agent(by) or not by else TrailSignal.Source.OPERATOR
            TrailSignal.objects.create(trail=locked, signal=rule.signal, source=source, by=by[:150], reason=reason[:500], created_at=at)
            trail_status_changed.send(Trail, trail=locked, action=action, before=before, by=by, at=at)
        self.status, self.reason, self.expires_at = locked.status, locked.reason, locked.expires_at
        self.false_hit_reports, self.false_hit_reporters = locked.false_hit_reports, locked.false_hit_reporters

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
            locked = Trail.objects.select_for_update().get(pk=self.pk)
            history = list(TrailSignal.objects.filter(trail=locked).order_by("-created_at", "-id")[:50])
            last = next((s for s in history if s.source == TrailSignal.Source.OPERATOR), None)
            if last is None or last.signal not in (Signal.DOWN, Signal.DEMOTE):
                raise ActionRefused("nothing to undo: the latest operator action neither rejected nor sent this trail back")
            earlier = history[history.index(last) + 1:]
            was_approved = last.signal == Signal.DEMOTE or bool(earlier) and earlier[0].signal in (Signal.UP, *POSITIVE_SIGNALS, Signal.REPORTED)
            if last.signal == Signal.DOWN:
                locked.act(Signal.REINSTATE, by=by, reason="undo")
            if was_approved:
                locked.act(Signal.UP, by=by, reason="undo")
        self.status, self.reason, self.expires_at = locked.status, locked.reason, locked.expires_at
        return f"{'rejection' if last.signal == Signal.DOWN else 'send-back'} undone: the trail is {locked.status}"

    def vote(self, vote: str, by: str = "", now: datetime | None = None) -> None:
        """An up vote approves (activates a pending trail, refreshes an active one); a down
        vote rejects, final for votes: only `reinstate`, an operator's act, reverses it."""
        if vote not in (Signal.UP, Signal.DOWN):
            raise ActionRefused(f"unknown vote {vote!r}")
        self.act(vote, by=by, now=now)

    def reinstate(self, by: str, now: datetime | None = None) -> None:
        """Reverses a rejection: the trail goes back to pending, to be approved again."""
        self.act(Signal.REINSTATE, by=by, now=now)

    def report_false_hit(self, reason: str = "", reporter: str = "", now: datetime | None = None) -> bool:
        """Counts an agent's "not helpful" report on a recall that served this trail.

        Reports are counted per reporter: once `false_hit_reporters_to_pending` different
        reporters (API keys, never fewer than two) have reported it since it was last
        approved, an active trail goes back to pending (not served until an operator
        approves it again), with the reason in its signal history. One key repeating its
        report counts once. Reports are counted under the row lock, so racing reports
        each count once.

        Returns:
            Whether this report sent the trail back to pending.
        """
        with transaction.atomic():
            locked = Trail.objects.select_for_update().select_related("scope").get(pk=self.pk)
            at = now or timezone.now()
            locked.false_hit_reports += 1
            fields = ["false_hit_reports"]
            _, new_reporter = TrailReport.objects.get_or_create(trail_id=locked.pk, reporter=reporter[:100], defaults={"created_at": at})
            if new_reporter:
                locked.false_hit_reporters += 1
                fields.append("false_hit_reporters")
            demoted = (
                locked.status == TrailStatus.ACTIVE
                and locked.false_hit_reporters >= locked.scope.false_hit_reporters_to_pending
            )
            if demoted:
                locked.status = TrailStatus.PENDING
                # The agents' words go to the signal history, not to the status line.
                locked.reason = f"reported not helpful by {locked.false_hit_reporters} reporters"
                locked.expires_at = locked.scope.expiry_for(active=False, now=at)
                fields += ["status", "reason", "expires_at"]
            locked.save(update_fields=fields)
            if demoted:
                TrailSignal.objects.create(
                    trail=locked, signal=Signal.REPORTED, source=TrailSignal.Source.FEEDBACK, by=reporter[:150],
                    reason=reason[:500], created_at=at,
                )
        self.status, self.reason, self.expires_at = locked.status, locked.reason, locked.expires_at
        self.false_hit_reports, self.false_hit_reporters = locked.false_hit_reports, locked.false_hit_reporters
        return demoted


class TrailReport(models.Model):
    """One reporter's "not helpful" on a trail since its last approval: reports count per reporter."""

    trail = models.ForeignKey(Trail, on_delete=models.CASCADE, related_name="+")
    reporter = models.CharField(max_length=100)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["trail", "reporter"], name="trail_report_once_per_reporter")]



def flag_trails_citing(scope: Scope, section_ids: Sequence[str], now: datetime) -> int:
    """Flags the active trails of a scope that cite any of these sections.

    Reads the (scope, section_id) index of citations, never the scope's trails.

    Returns:
        How many trails were newly flagged.
    """
    if not section_ids:
        return 0
    citing = Citation.objects.filter(scope=scope, section_id__in=list(section_ids)).values("trail_id")
    return Trail.objects.filter(id__in=citing, status=TrailStatus.ACTIVE, section_changed_at__isnull=True).update(
        section_changed_at=now
    )


@receiver(sections_changed, dispatch_uid="trails.flag_trails_citing")
def _flag_trails_citing_changed_sections(sender, scope: Scope, section_ids: Sequence[str], at: datetime, **kwargs) -> None:
    # Every write of the section store (API, admin, demo, evaluation, shell) sends this.
    flag_trails_citing(scope, section_ids, at)


class Step(models.Model):
    """One tool call on a trail's path."""

    trail = models.ForeignKey(Trail, on_delete=models.CASCADE, related_name="steps", db_index=False)  # step_position_unique leads with it
    position = models.PositiveSmallIntegerField()
    tool = models.CharField(max_length=200)
    args = models.JSONField(default=dict)
    section_ids = models.JSONField(default=list)

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["trail", "position"], name="step_position_unique")]


class Citation(models.Model):
    """A section the answer cited, and its hash when the trail was recorded."""

    trail = models.ForeignKey(Trail, on_delete=models.CASCADE, related_name="citations", db_index=False)  # citation_position_unique leads with it
    # The scope is repeated here so "which trails cite this section" is one index read
    # (citation_scope_section, which also serves the scope alone).
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+", db_index=False)
    position = models.PositiveSmallIntegerField()
    section_id = models.CharField(max_length=512)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["position"]
        indexes = [models.Index(fields=["scope", "section_id"], name="citation_scope_section")]
        constraints = [models.UniqueConstraint(fields=["trail", "position"], name="citation_position_unique")]


class BandKey(models.Model):
    """One LSH band of a trail's signature; recall finds candidates by reading these."""

    trail = models.ForeignKey(Trail, on_delete=models.CASCADE, related_name="band_keys")
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+", db_index=False)
    key = models.BigIntegerField()
    # The trail's 128-bit embedding sketch (trails.core.simhash.sketch), 0 without an
    # embedding: the candidate read drops embedding collisions by Hamming distance from
    # the index alone, before any trail row is read.
    sketch_high = models.BigIntegerField(default=0, db_default=0)
    sketch_low = models.BigIntegerField(default=0, db_default=0)

    @classmethod
    def insert_many(cls, rows: list[tuple[int, int, int, int, int]]) -> None:
        """Inserts (trail id, scope id, key, sketch high, sketch low) rows, a thousand per statement.

        A trail has 30 to 55 band keys; building a model instance for each cost more than
        signing the question (0.75 ms a trail).
        """
        columns = "trail_id, scope_id, key, sketch_high, sketch_low"
        with connection.cursor() as cursor:
            for start in range(0, len(rows), 1000):
                chunk = rows[start:start + 1000]
                values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(chunk))
                cursor.execute(f"INSERT INTO {cls._meta.db_table} ({columns}) VALUES {values}", [v for row in chunk for v in row])

    class Meta:
        # The key leads: a band key (a 64-bit hash) is selective on its own, and with the
        # scope first a plan built on stale statistics ("this new scope has no rows")
        # read every band key of the scope and filtered them (issue 12). The sketch is
        # included so the distance filter needs no heap (PostgreSQL; others ignore it).
        indexes = [
            models.Index(fields=["key", "scope", "trail"], include=["sketch_high", "sketch_low"], name="bandkey_key_scope_sketch")
        ]


class TrailSignal(models.Model):
    """The history of signals and votes a trail received."""

    class Source(models.TextChoices):
        RECORD = "record", "At record time"
        FEEDBACK = "feedback", "Feedback"
        OPERATOR = "operator", "Operator"

    trail = models.ForeignKey(Trail, on_delete=models.CASCADE, related_name="signals")
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

