"""A trail (a recorded path to an answer) and its parts: steps, citations, band keys; the
flagging of trails whose sections changed. Its lifecycle (status, history, reports) is
trails.models.lifecycle."""

from __future__ import annotations

import json
import uuid
import weakref
from datetime import datetime
from typing import Iterable

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models import Q
from django.utils import timezone

from scopes.models import Scope, Section
from trails.core.banding import scoped_keys
from trails.core.hint import RecordedStep
from trails.core.lifecycle import Hold
from trails.core.validation import Citation as CoreCitation
from trails.core.validation import Validation, as_read, as_stored, validate
from trails.models.lifecycle import EXPIRED, Lifecycle, Signal, TrailStatus


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
            return self.filter(expires_at__lte=now)
        return self.filter(status=display_status, expires_at__gt=now)

    def since(self, display_status: str, flag: str, since: datetime) -> "TrailQuerySet":
        """Those that came to their state in the window: rejected (a rejection since), stale
        (marked since), held by reports (the hold since), else any change since. The overview's
        numbers and the trails table they link to read this one definition."""
        from trails.models.lifecycle import Signal  # the history's vocabulary sits with the lifecycle

        if flag == "reported":
            return self.filter(signals__signal=Signal.REPORTED, signals__created_at__gte=since).distinct()
        if display_status == TrailStatus.REJECTED:
            return self.filter(signals__signal=Signal.DOWN, signals__created_at__gte=since).distinct()
        if display_status == TrailStatus.STALE:
            return self.filter(stale_at__gte=since)
        return self.filter(signals__created_at__gte=since).distinct()


class Trail(Lifecycle, models.Model):
    """The path an agent took to an answer: query, steps and cited sections with their hashes."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # Indexed with the id (trail_scope_id) though trail_scope_status_expiry leads with it:
    # without it the trails page at 100,000 trails went from 213 to 316 ms at p90
    # (benchmark_overview); and a statement naming a trail by scope and id (as every one
    # recall and record send does) is matched on both, never on the scope alone (what stale
    # statistics chose, reading a grown scope's every entry).
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="trails", db_index=False)
    partition = models.CharField(max_length=200, blank=True, default="")
    query = models.TextField()
    normalised_query = models.TextField()
    status = models.CharField(max_length=16, choices=TrailStatus.choices)
    # Why a pending trail is held out of service (agents' reports, an operator), blank
    # while it waits for its first approval: an agent's up vote approves only the latter.
    held_by = models.CharField(
        max_length=16, choices=[(h.value, h.name.lower()) for h in Hold], blank=True, default="", db_default=""
    )
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
            models.Index(fields=["scope", "id"], name="trail_scope_id"),
        ]

    def __str__(self) -> str:
        return f"{self.public_id} {self.query[:60]}"

    def core_citations(self) -> list[CoreCitation]:
        return [
            CoreCitation(c.section_id, c.hash)
            for c in self.citations.filter(scope_id=self.scope_id).order_by("position")
        ]

    def recorded_steps(self) -> list[RecordedStep]:
        rows = Step.objects.filter(trail_id=self.id).values_list("tool", "args", "section_ids")
        return [RecordedStep(tool, args, tuple(section_ids)) for tool, args, section_ids in rows]

    def is_expired(self, now: datetime | None = None) -> bool:
        return self.expires_at <= (now or timezone.now())

    @property
    def display_status(self) -> str:
        """The status an operator sees: a trail past its expiry shows as expired."""
        if self.is_expired():
            return EXPIRED
        return self.status


def validations_now(scope: Scope, trail_ids: Iterable[int] | models.QuerySet) -> dict[int, Validation]:
    """What recall would find of each of these trails' citations now: outcome (prefetch,
    hint, miss) and each section valid, changed or deleted, by recall's own rule
    (trails.core.validation.validate, each section's text hashed where the scope keeps it).
    The trail page, the recall page, the lists and the syncs page all read this.

    Two reads for all of them: their citations, then the sections those cite; each section's
    text is hashed once, however many trails cite it.
    """
    recorded: dict[int, list[CoreCitation]] = {}
    # A queryset goes in as a subquery: thousands of ids as parameters cost more to bind
    # than the read itself.
    wanted = trail_ids if isinstance(trail_ids, models.QuerySet) else list(trail_ids)
    for trail_id, section_id, digest in (
        Citation.objects.filter(trail_id__in=wanted)
        .order_by("trail_id", "position")
        .values_list("trail_id", "section_id", "hash")
    ):
        recorded.setdefault(trail_id, []).append(CoreCitation(section_id, digest))
    rows = Section.objects.filter(scope=scope, section_id__in={c.section_id for cs in recorded.values() for c in cs})
    columns = ("section_id", "hash", "text") if scope.keeps_text else ("section_id", "hash")
    current = {row[0]: as_read(as_stored(row[1], row[-1], scope.keeps_text)) for row in rows.values_list(*columns)}
    return {trail_id: validate(citations, current) for trail_id, citations in recorded.items()}


class Step(models.Model):
    """One tool call on a trail's path."""

    trail = models.ForeignKey(
        Trail, on_delete=models.CASCADE, related_name="steps", db_index=False
    )  # step_position_unique leads with it
    # The trail's scope, repeated: the key a partitioned or distributed table is found by.
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+", db_index=False)
    position = models.PositiveSmallIntegerField()
    tool = models.CharField(max_length=200)
    args = models.JSONField(default=dict)
    section_ids = models.JSONField(default=list)

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["trail", "position"], name="step_position_unique")]


class Citation(models.Model):
    """A section the answer cited, and its hash when the trail was recorded."""

    trail = models.ForeignKey(
        Trail, on_delete=models.CASCADE, related_name="citations", db_index=False
    )  # citation_position_unique leads with it
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


class BandKeyArray(models.Field):
    """A list of signed 64-bit band keys: `bigint[]` on PostgreSQL, where an inverted (GIN)
    index finds a row by any of them; JSON text elsewhere (SQLite, the laptop default, reads
    a scope's rows through the scope index and `json_each`)."""

    description = "band keys"

    def db_type(self, connection) -> str:
        return "bigint[]" if connection.vendor == "postgresql" else "text"

    def from_db_value(self, value, expression, connection):
        if value is None or isinstance(value, list):
            return value
        return json.loads(value)

    def to_python(self, value):
        return json.loads(value) if isinstance(value, str) else value

    def get_db_prep_value(self, value, connection, prepared=False):
        if value is None:
            return None
        keys = [int(key) for key in value]
        return keys if connection.vendor == "postgresql" else json.dumps(keys)


class BandKeys(models.Model):
    """A trail's band keys (one per LSH band of its signatures) and its embedding sketch, one
    row a trail; recall finds candidates by any key (trails.serving.candidates).

    One row a trail, not one a key: at a million trails a row and a B-tree entry per key
    cost 4.3 kB a trail, the array and its inverted index a tenth of that. Keys are stored
    XOR their scope's salt (trails.core.banding.scoped_keys), so the one index never mixes
    scopes. A trail out of service (rejected at record) has no row.
    """

    trail = models.OneToOneField(Trail, on_delete=models.CASCADE, primary_key=True, related_name="band_keys")
    # No index on the scope: with statistics older than a scope's growth, PostgreSQL read a
    # scope's every row through it instead of the keys' index (SQLite, which has no inverted
    # index, gets one in the migration).
    scope = models.ForeignKey(Scope, on_delete=models.CASCADE, related_name="+", db_index=False)
    keys = BandKeyArray()
    # The trail's 128-bit embedding sketch (trails.core.simhash.sketch), 0 without an
    # embedding: the candidate read drops embedding collisions by Hamming distance before
    # any trail row is read.
    sketch_high = models.BigIntegerField(default=0, db_default=0)
    sketch_low = models.BigIntegerField(default=0, db_default=0)

    @classmethod
    def insert_many(cls, rows: list[tuple[int, int, list[int], int, int]]) -> None:
        """Inserts (trail id, scope id, scoped keys, sketch high, sketch low) rows, 500 per statement."""
        field = cls._meta.get_field("keys")
        columns = "trail_id, scope_id, keys, sketch_high, sketch_low"
        with connection.cursor() as cursor:
            for start in range(0, len(rows), 500):
                chunk = rows[start : start + 500]
                values = ", ".join(["(%s, %s, %s, %s, %s)"] * len(chunk))
                cursor.execute(
                    f"INSERT INTO {cls._meta.db_table} ({columns}) VALUES {values}",
                    [
                        v
                        for trail, scope, keys, high, low in chunk
                        for v in (trail, scope, field.get_db_prep_value(keys, connection), high, low)
                    ],
                )

    @classmethod
    def trail_ids_with_key(cls, scope: Scope, key: int) -> models.expressions.RawSQL:
        """The ids of the scope's trails holding this (unscoped) key, as a subquery."""
        stored = scoped_keys([key], scope.id)[0]
        table = cls._meta.db_table
        if connection.vendor == "postgresql":
            return models.expressions.RawSQL(
                f"SELECT trail_id FROM {table} WHERE scope_id = %s AND keys @> ARRAY[%s]::bigint[]", [scope.id, stored]
            )
        return models.expressions.RawSQL(
            f"SELECT trail_id FROM {table} WHERE scope_id = %s AND EXISTS (SELECT 1 FROM json_each(keys) WHERE value = %s)",
            [scope.id, stored],
        )


# Whether the trails table a connection reads is partitioned by scope (docs/scaling.md), by connection.
_partitioned: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def trails_partitioned() -> bool:
    """Whether the trails table the default connection reads is partitioned (PostgreSQL; read once a connection)."""
    wrapper = connections[DEFAULT_DB_ALIAS]
    if wrapper not in _partitioned:
        with connection.cursor() as cursor:
            cursor.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(%s)", [Trail._meta.db_table])
            row = cursor.fetchone()
        _partitioned[wrapper] = bool(row and row[0])
    return _partitioned[wrapper]
