"""Trails (recorded paths to an answer), their steps, citations, band keys and recall events."""
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

from scopes.models import Scope, Section, new_policy_version, sections_changed
from trails.charts import HourCounts
from trails.core import toolkey
from trails.core.hint import RecordedStep
from trails.core.minhash import MinHashParams, MinHashSignature
from trails.core.validation import Citation as CoreCitation
from trails.core.validation import Outcome


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
        RecallEvent.objects.filter(trail_id__in=ids).update(trail=None)
        RecallEvent.objects.filter(nearest_trail_id__in=ids).update(nearest_trail=None)
        # Labels stay: they are the scope's evidence about its threshold, not the trail's.
        MatchLabel.objects.filter(trail_id__in=ids).update(trail=None)
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


def drop_scope(scope: Scope) -> None:
    """Deletes a scope with all its rows, by scope, in bulk: for benchmark and evaluation
    scopes, whose millions of rows row-by-row cascades would take minutes over."""
    trails = Trail.objects.filter(scope=scope)
    postgres = connection.vendor == "postgresql"
    if postgres:
        with connection.cursor() as cursor:
            # Bulk deletes of a whole scope may take longer than the request budget.
            cursor.execute("SET statement_timeout = 0")
    try:
        for queryset in (
            MatchLabel.objects.filter(scope=scope),
            ThresholdChange.objects.filter(scope=scope),
            RecallEvent.objects.filter(scope=scope),
            BandKey.objects.filter(scope=scope),
            Citation.objects.filter(scope=scope),
            Step.objects.filter(trail__in=trails),
            TrailSignal.objects.filter(trail__in=trails),
            TrailReport.objects.filter(trail__in=trails),
            trails,
            Section.objects.filter(scope=scope),
        ):
            delete_rows(queryset)
        scope.delete()
    finally:
        if postgres:
            with connection.cursor() as cursor:
                cursor.execute("RESET statement_timeout")  # back to the connection's own


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

    trail = models.ForeignKey(Trail, on_delete=models.CASCADE, related_name="steps")
    position = models.PositiveSmallIntegerField()
    tool = models.CharField(max_length=200)
    args = models.JSONField(default=dict)
    section_ids = models.JSONField(default=list)

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["trail", "position"], name="step_position_unique")]


class Citation(models.Model):
    """A section the answer cited, and its hash when the trail was recorded."""

    trail = models.ForeignKey(Trail, on_delete=models.CASCADE, related_name="citations")
    # The scope is repeated here so "which trails cite this section" is one index read.
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+")
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


def bump_tool_policy_version(scope_ids) -> None:
    # Processes cache policies by the scope's version; a new random one makes them reload.
    for scope_id in set(scope_ids):
        Scope.objects.filter(pk=scope_id).update(tool_policy_version=new_policy_version())


class ToolPolicyQuerySet(models.QuerySet):
    def delete(self):
        scope_ids = list(self.values_list("scope_id", flat=True))
        deleted = super().delete()
        bump_tool_policy_version(scope_ids)
        return deleted

    def bulk_create(self, objs, *args, **kwargs):
        created = super().bulk_create(objs, *args, **kwargs)
        bump_tool_policy_version(p.scope_id for p in created)
        return created

    def update(self, **kwargs):
        scope_ids = list(self.values_list("scope_id", flat=True))
        updated = super().update(**kwargs)
        bump_tool_policy_version(scope_ids)
        return updated

    def replace(self, scope: Scope, policies: Sequence[dict]) -> list["ToolPolicy"]:
        """Replaces a scope's policies in one transaction, under a lock on the scope's row
        (concurrent replacements apply one after the other); the version moves with them."""
        with transaction.atomic():
            Scope.objects.select_for_update().filter(pk=scope.pk).exists()
            self.filter(scope=scope).delete()
            return self.bulk_create(ToolPolicy(scope=scope, **p) for p in policies)


class ToolPolicy(models.Model):
    """Whether and how long one tool's results may be cached in a scope.

    Every save and delete, whichever path makes it (API, admin, shell), gives the
    scope a new policy version, so no process keeps serving by an old policy.
    """

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="tool_policies")
    tool = models.CharField(max_length=200)
    cacheable = models.BooleanField(default=False)
    ttl_s = models.PositiveIntegerField(default=300, help_text="Staleness budget in seconds (1 to 30 days).")
    ignore_args = models.JSONField(default=list, blank=True, help_text="Arguments left out of the key, e.g. a free-text reason.")
    path_args = models.JSONField(default=list, blank=True, help_text="Arguments holding paths, normalised in the key.")
    per_caller = models.BooleanField(default=False, help_text="Key results by the caller's identity.")

    objects = ToolPolicyQuerySet.as_manager()

    class Meta:
        verbose_name_plural = "tool policies"
        constraints = [models.UniqueConstraint(fields=["scope", "tool"], name="tool_policy_unique_in_scope")]

    def __str__(self) -> str:
        return f"{self.scope.slug}:{self.tool}"

    def save(self, *args, **kwargs) -> None:
        super().save(*args, **kwargs)
        bump_tool_policy_version([self.scope_id])

    def delete(self, *args, **kwargs):
        deleted = super().delete(*args, **kwargs)
        bump_tool_policy_version([self.scope_id])
        return deleted

    def as_rule(self) -> toolkey.ToolPolicy:
        return toolkey.ToolPolicy(
            self.tool, self.cacheable, self.ttl_s, frozenset(self.ignore_args), frozenset(self.path_args), self.per_caller
        )


# The database's choices of the one outcome enum (trails/core/validation.py).
RecallOutcome = models.TextChoices("RecallOutcome", [(o.name, o.value) for o in Outcome])


class RecallEvent(models.Model):
    """One recall, for the hit-rate charts; the query text only where the scope keeps it."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="recall_events")
    created_at = models.DateTimeField(default=timezone.now)
    outcome = models.CharField(max_length=16, choices=RecallOutcome.choices)
    similarity = models.FloatField(null=True, blank=True)
    latency_ms = models.FloatField()
    trail = models.ForeignKey(Trail, on_delete=models.SET_NULL, null=True, blank=True, related_name="recall_events")
    matcher = models.CharField(max_length=16, blank=True)
    stale_marked = models.PositiveSmallIntegerField(default=0)
    # Estimates of what the answer spared the agent (trails/core/savings.py).
    calls_saved = models.PositiveSmallIntegerField(default=0)
    tokens_saved = models.PositiveIntegerField(default=0)
    query = models.TextField(blank=True)
    # The agent's verdict on what the recall served (POST .../recalls/{id}/feedback).
    helpful = models.BooleanField(null=True, blank=True)
    feedback_reason = models.CharField(max_length=500, blank=True, db_default="")
    feedback_at = models.DateTimeField(null=True, blank=True)
    # A hash of the caller's session id and the normalised query (never either in
    # clear): a path recorded for the same question in the same session finds it.
    research_key = models.CharField(max_length=64, blank=True, db_default="")
    # For a miss by embedding: the nearest candidate the guard allowed, under the threshold.
    # A path the agent then records for the same question says whether serving it would
    # have been right (a label that can lower the threshold: trails/feedback.py).
    nearest_trail = models.ForeignKey(
        Trail, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    nearest_similarity = models.FloatField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["scope", "created_at"], name="recallevent_scope_time"),
            # The recall log filtered by outcome, newest first: without it a plan without
            # statistics sorted every event of the scope (303 ms p90 at 1M events).
            models.Index(fields=["scope", "outcome", "created_at"], name="recallevent_scope_outcome_time"),
            models.Index(fields=["scope", "research_key"], name="recallevent_research", condition=~Q(research_key="")),
            # Deleting a trail unlinks the misses it was nearest to; most events have none.
            models.Index(fields=["nearest_trail"], name="recallevent_nearest", condition=Q(nearest_trail__isnull=False)),
            # The scope's labelled recalls, which its learned threshold is computed from.
            models.Index(fields=["scope", "feedback_at"], name="recallevent_labelled", condition=Q(feedback_at__isnull=False)),
        ]


def _prep(model: type[models.Model], field: str, value):
    return model._meta.get_field(field).get_db_prep_value(value, connection)


def write_recall_effects(
    *,
    scope: Scope,
    outcome: str,
    similarity: float | None,
    latency_ms: float,
    trail_id: int | None,
    hit: bool,
    stale_ids: Sequence[int],
    matcher: str | None,
    query: str,
    now: datetime,
    calls_saved: int = 0,
    tokens_saved: int = 0,
    research_key: str = "",
    nearest_trail_id: int | None = None,
    nearest_similarity: float | None = None,
) -> uuid.UUID:
    """Marks trails stale, counts the hit and logs the recall event, in one transaction.

    Returns:
        The event's public id (the recall id).
    """
    public_id = uuid.uuid4()
    trail, event = Trail._meta.db_table, RecallEvent._meta.db_table
    statements: list[tuple[str, list]] = []
    if stale_ids:
        statements.append((
            f"UPDATE {trail} SET status = %s, stale_at = %s, reason = %s WHERE id IN ({', '.join(['%s'] * len(stale_ids))}) AND status = %s",
            [TrailStatus.STALE.value, _prep(Trail, "stale_at", now), "every cited section changed", *stale_ids, TrailStatus.ACTIVE.value],
        ))
    if hit and trail_id is not None:
        statements.append((
            f"UPDATE {trail} SET hit_count = hit_count + 1, last_hit_at = %s WHERE id = %s",
            [_prep(Trail, "last_hit_at", now), trail_id],
        ))
    statements.append((
        f"INSERT INTO {event} (public_id, scope_id, created_at, outcome, similarity, latency_ms, trail_id, matcher, "
        "stale_marked, calls_saved, tokens_saved, query, research_key, nearest_trail_id, nearest_similarity) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [_prep(RecallEvent, "public_id", public_id), scope.id, _prep(RecallEvent, "created_at", now), outcome,
         similarity, latency_ms, trail_id, matcher or "", len(stale_ids), calls_saved, tokens_saved, query, research_key,
         nearest_trail_id, nearest_similarity],
    ))
    if connection.vendor == "postgresql":
        # One round trip: psycopg's client-side binding (Django's default) sends the
        # statements as one query string, which PostgreSQL runs as one transaction.
        # These writes are bookkeeping: a crash may lose the last few hits and events,
        # and a lost stale mark is found again by the next recall, which validates on
        # read; so the commit need not wait for the WAL flush.
        with connection.cursor() as cursor:
            cursor.execute(
                "SET LOCAL synchronous_commit TO OFF; " + "; ".join(sql for sql, _ in statements),
                [p for _, params in statements for p in params],
            )
    else:
        with transaction.atomic(), connection.cursor() as cursor:
            for sql, params in statements:
                cursor.execute(sql, params)
    return public_id


class MatchLabel(models.Model):
    """A judged match: was serving a trail at this similarity right or wrong, and who said so.

    The scope's thresholds are learned from these (trails/thresholds.py). Sources: an
    agent's feedback on a recall, a re-search (a path recorded for the same question in
    the same session: citing the served sections or not), a near miss (the nearest
    candidate of a miss, judged by the path then recorded), a rejection of a trail that
    was served. Each names its reporter, so no one reporter's labels weigh without bound.
    """

    class Source(models.TextChoices):
        FEEDBACK = "feedback", "Agent's feedback"
        RESEARCH = "research", "Re-search after a hit"
        NEAR_MISS = "near_miss", "Path recorded after a near miss"
        MISS = "miss", "Path recorded after a miss with nothing near"
        REJECTION = "rejection", "Served trail rejected"

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+", db_index=False)
    matcher = models.CharField(max_length=16)
    similarity = models.FloatField()
    false_hit = models.BooleanField()
    source = models.CharField(max_length=16, choices=Source.choices)
    reporter = models.CharField(max_length=100, blank=True)
    recall_event = models.ForeignKey("RecallEvent", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False)
    trail = models.ForeignKey(Trail, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            models.Index(fields=["scope", "matcher", "created_at"], name="matchlabel_scope_time"),
            models.Index(fields=["trail", "source"], name="matchlabel_trail", condition=Q(trail__isnull=False)),
        ]
        constraints = [
            # One label per recall: feedback, a re-search and a rejection do not count one recall twice.
            models.UniqueConstraint(fields=["recall_event"], condition=Q(recall_event__isnull=False), name="matchlabel_once_per_recall"),
        ]


class ThresholdChange(models.Model):
    """Every move of a scope's threshold in use, with its cause and evidence: what the
    overview and Django admin show, and what an operator resets or pins against."""

    class Kind(models.TextChoices):
        LEARNED = "learned", "Learned from labels"
        FLAGGED = "flagged", "Flagged for an operator"
        RESET = "reset", "Reset by an operator"
        PINNED = "pinned", "Pinned by an operator (learning off)"
        UNPINNED = "unpinned", "Unpinned by an operator (learning on)"
        CONFIGURED = "configured", "Matching settings changed"

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="threshold_changes")
    matcher = models.CharField(max_length=16, blank=True)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    before = models.FloatField(null=True, blank=True)
    after = models.FloatField(null=True, blank=True)
    by = models.CharField(max_length=150, blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["scope", "created_at"], name="thresholdchange_scope_time")]


class RecallStat(models.Model):
    """Recalls per scope, hour, outcome and matcher: what the charts read instead of raw events."""

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    outcome = models.CharField(max_length=16, choices=RecallOutcome.choices)
    matcher = models.CharField(max_length=16, blank=True)
    count = models.PositiveIntegerField()
    similarity_sum = models.FloatField(default=0.0)
    stale_marked = models.PositiveIntegerField(default=0)
    calls_saved = models.PositiveBigIntegerField(default=0)
    tokens_saved = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "hour", "outcome", "matcher"], name="recallstat_unique_bucket")
        ]
        indexes = [models.Index(fields=["scope", "hour"], name="recallstat_scope_hour")]

    @classmethod
    def hourly(cls, scope: Scope, start: datetime) -> list[HourCounts]:
        """The scope's counts per hour and outcome from `start` on, summed over matchers."""
        rows = (
            cls.objects.filter(scope=scope, hour__gte=start)
            .values_list("hour", "outcome")
            .annotate(models.Sum("count"), models.Sum("stale_marked"), models.Sum("calls_saved"), models.Sum("tokens_saved"))
            .order_by()
        )
        return [HourCounts(*row) for row in rows]

    @classmethod
    def last_hour(cls, scope: Scope) -> datetime | None:
        return cls.objects.filter(scope=scope).aggregate(last=models.Max("hour"))["last"]


class SimilarityStat(models.Model):
    """Hits per scope, hour and similarity bin (of width 1/SIMILARITY_BINS): the histogram's source."""

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField()
    bin = models.PositiveSmallIntegerField()
    count = models.PositiveIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "hour", "bin"], name="similaritystat_unique_bucket")]

    @classmethod
    def histogram(cls, scope: Scope, start: datetime) -> list[tuple[int, int]]:
        """(bin, hits) of the scope from `start` on, by bin."""
        rows = cls.objects.filter(scope=scope, hour__gte=start).values_list("bin").annotate(models.Sum("count")).order_by("bin")
        return list(rows)


SIMILARITY_BINS = 100


class PiiPattern(models.Model):
    """A scope's own pattern of personal data (a patient number, a customer id), checked by purges."""

    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="pii_patterns")
    name = models.CharField(max_length=100)
    pattern = models.CharField(max_length=500, help_text="A Python regular expression.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["scope", "name"], name="pii_pattern_unique_in_scope")]

    def __str__(self) -> str:
        return f"{self.scope.slug}:{self.name}"

    def clean(self) -> None:
        import re

        from django.core.exceptions import ValidationError

        try:
            re.compile(self.pattern)
        except re.error as problem:
            raise ValidationError({"pattern": f"not a valid regular expression: {problem}"}) from None


class PurgeRun(models.Model):
    """One purge of personal data: its preview, its progress, and afterwards its audit record.

    The audit keeps who, when, which scope and rule, and how many; never the purged
    text (an erasure subject is held only while the run is previewed or unfinished).
    A previewed run stores the trails it matched, and confirming it purges exactly those.
    """

    class Action(models.TextChoices):
        REDACT = "redact", "Redact the query text"
        DELETE = "delete", "Delete the trails"

    class State(models.TextChoices):
        PREVIEWED = "previewed"
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="purge_runs")
    rule = models.CharField(max_length=200, help_text="What was looked for: built-in rules, scope patterns, or an erasure subject.")
    subject = models.TextField(blank=True)
    action = models.CharField(max_length=16, choices=Action.choices)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    requested_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    total = models.PositiveIntegerField(default=0)
    processed = models.PositiveIntegerField(default=0)
    matched = models.PositiveIntegerField(default=0)
    last_trail_id = models.BigIntegerField(default=0)
    # The previewed set (trail ids); None purges every matching trail of the scope at run time.
    trail_ids = models.JSONField(null=True, blank=True, editable=False)
    error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def finish(self) -> None:
        self.state, self.finished_at, self.subject, self.trail_ids = self.State.DONE, timezone.now(), "", None
        self.save(update_fields=["state", "finished_at", "subject", "trail_ids"])

    def fail(self, error: str) -> None:
        """Ends the run unfinished; it forgets its erasure subject and what it matched."""
        self.state, self.finished_at, self.subject, self.trail_ids = self.State.FAILED, timezone.now(), "", None
        self.error = error[:300]
        self.save(update_fields=["state", "finished_at", "subject", "trail_ids", "error"])

    @classmethod
    def request(cls, scope: Scope, subject: str, delete: bool, requested_by: str) -> "PurgeRun":
        """An unsaved run: an erasure request for `subject`, or the built-in rules and scope patterns."""
        return cls(
            scope=scope,
            subject=subject,
            rule="erasure request" if subject else "built-in rules and scope patterns",
            action=cls.Action.DELETE if delete else cls.Action.REDACT,
            requested_by=requested_by,
        )

    @property
    def percent(self) -> int:
        return 100 if self.state == self.State.DONE else int(100 * self.processed / self.total) if self.total else 0
