"""Admission of a trail: validate, check the signal and the answer, sign, index."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime

from django.db import IntegrityError
from django.utils import timezone

from infra import metrics
from infra.errors import Conflict, Invalid, NotFound
from scopes.models import Scope, Section
from trails.core.banding import scoped_keys
from trails.core.budget import count_tokens
from trails.core.hint import RecordedStep
from trails.core.lifecycle import Actor
from trails.core.normalise import normalise_query
from trails.core.refusal import says_sources_do_not_answer
from trails.learning.feedback import learn_from_research
from trails.learning.thresholds import SIGNING_FIELDS
from trails.models import (
    POSITIVE_SIGNALS,
    ActionRefused,
    BandKeys,
    Citation,
    Step,
    Trail,
    TrailSignal,
    TrailStatus,
    pauses,
    writes,
)
from trails.serving.matching import QuestionSignature, matching_settings, sign


@dataclass(frozen=True)
class RecordInput:
    query: str
    cited: list[str]
    steps: list[RecordedStep] = field(default_factory=list)
    partition: str = ""
    hashes: dict[str, str] = field(default_factory=dict)
    signal: str | None = None
    answer: str | None = None
    idempotency_key: str | None = None
    # The caller's session id: a recall of this question in the same session whose
    # sections this path does not cite is labelled a false hit (feedback.learn_from_research).
    session: str | None = None
    # Who records (an API key, "key:<lookup>"): the labels this path gives are theirs.
    reporter: str = ""

    def fingerprint(self) -> str:
        """A hash of everything that defines the request, to spot a reused idempotency key."""
        payload = {
            "query": self.query,
            "cited": self.cited,
            "steps": [[s.tool, s.args, s.section_ids] for s in self.steps],
            "partition": self.partition,
            "hashes": self.hashes,
            "signal": self.signal,
            "answer": hashlib.sha256((self.answer or "").encode()).hexdigest(),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class RecordResult:
    trail: Trail
    created: bool
    # Set where the same question with the same sections was recorded before: that trail is
    # answered (renewed by a positive signal, as an agent's up vote would) instead of a twin.
    refreshed: str = ""


def record(scope: Scope, request: RecordInput, now: datetime | None = None) -> RecordResult:
    """Stores a trail in a scope, or refuses it.

    Returns:
        The trail and whether it was created now: False when an idempotency key returned the
        first result, or when the scope holds this question (normalised, in this partition)
        citing these sections at these hashes already (then `refreshed` says what was done).

    Raises:
        Invalid: input that cannot be a trail. Conflict: a sent hash
        differs from the store's current one or an idempotency key is reused with
        other input. Nothing is written when it raises.
    """
    now = now or timezone.now()
    fingerprint = request.fingerprint()
    if request.idempotency_key:
        earlier = _earlier_result(scope, request.idempotency_key, fingerprint)
        if earlier is not None:
            return RecordResult(earlier, created=False)

    if not normalise_query(request.query):
        raise Invalid("invalid", "query has no words to match on", field="query")
    cited = list(dict.fromkeys(request.cited))
    current = Section.objects.current(scope, cited)
    missing = [section_id for section_id in cited if section_id not in current]
    if missing:
        raise Invalid(
            "unknown_section", "cited sections are not in the scope's section store", field="cited", section_ids=missing
        )
    not_cited = [section_id for section_id in request.hashes if section_id not in current]
    if not_cited:
        raise Invalid("invalid", "hashes name sections that are not cited", field="hashes", section_ids=not_cited)
    changed = [section_id for section_id, sent in request.hashes.items() if current[section_id].hash != sent]
    if changed:
        raise Conflict(
            "section_changed",
            "the agent read a version of these sections that has since changed",
            field="hashes",
            section_ids=changed,
        )

    refused = (
        "the answer says its sources do not answer the question"
        if (request.answer is not None and says_sources_do_not_answer(request.answer))
        else ""
    )
    question = sign(scope, request.query, request.partition)
    if not refused:
        twin = _twin(scope, request, question, [(section_id, current[section_id].hash) for section_id in cited])
        if twin is not None:
            refreshed = _refresh(twin, request, now)
            if request.session:  # a re-search is evidence whether or not the path was new
                learn_from_research(scope, request.session, request.query, cited, now, request.reporter)
            return refreshed
    rows = TrailRows.build(scope, request, current, refused, now, fingerprint, question=question)
    rows.trail.path_tokens = path_tokens(scope, request.steps, current)
    pauses.pause_point("record:signed")
    try:
        TrailRows.save_all([rows], signed_by=scope)
    except IntegrityError:
        # Two requests with one idempotency key raced; the other one won.
        if request.idempotency_key:
            earlier = _earlier_result(scope, request.idempotency_key, fingerprint)
            if earlier is not None:
                return RecordResult(earlier, created=False)
        if not Scope.objects.filter(pk=scope.pk).exists():
            # The scope was deleted under the record: not found, never a 500.
            raise NotFound("not_found", "no such scope", field="scope") from None
        raise
    if request.session:
        learn_from_research(scope, request.session, request.query, cited, now, request.reporter)
    metrics.RECORDS.labels(request.signal or "none", rows.trail.status).inc()
    return RecordResult(rows.trail, created=True)


@dataclass
class TrailRows:
    """The rows one trail is stored as, built before any is written."""

    trail: Trail
    steps: list[Step]
    citations: list[Citation]
    # The question, for its band keys and sketch (none for a rejected trail, which can never be served).
    question: QuestionSignature | None
    signals: list[TrailSignal]

    @classmethod
    def build(
        cls,
        scope: Scope,
        request: RecordInput,
        current: dict[str, Section],
        refused: str,
        now: datetime,
        fingerprint: str = "",
        question: QuestionSignature | None = None,
    ) -> "TrailRows":
        """Signs the query (unless `question` is its signature already) and lays out every
        row; `current` holds each cited section; `refused` says why admission refused the
        answer (blank where it did not)."""
        question = question or sign(scope, request.query, request.partition)
        # The initial status is the lifecycle table's (record with or without a positive signal, or refused).
        trail = Trail.start(
            scope,
            signalled=request.signal in POSITIVE_SIGNALS,
            refused_reason=refused,
            now=now,
            partition=request.partition,
            query=request.query,
            normalised_query=normalise_query(request.query),
            signal=request.signal or "",
            idempotency_key=request.idempotency_key,
            request_fingerprint=fingerprint,
        )
        take_signature(scope, trail, question)
        cited = list(dict.fromkeys(request.cited))
        return cls(
            trail=trail,
            steps=[
                Step(trail=trail, scope=scope, position=i, tool=s.tool, args=s.args, section_ids=s.section_ids)
                for i, s in enumerate(request.steps)
            ],
            citations=[
                Citation(trail=trail, scope=scope, position=i, section_id=section_id, hash=current[section_id].hash)
                for i, section_id in enumerate(cited)
            ],
            question=None if trail.status == TrailStatus.REJECTED else question,
            signals=[
                TrailSignal(
                    trail=trail, scope=scope, signal=request.signal, source=TrailSignal.Source.RECORD, created_at=now
                )
            ]
            if request.signal
            else [],
        )

    @staticmethod
    def save_all(all_rows: list["TrailRows"], signed_by: Scope | None = None) -> None:
        """Writes the trails and their rows in one transaction, a few statements in all.

        With `signed_by` (the scope as the rows were signed), the scope's signing settings
        are read again under a share lock on its row inside the transaction, and the rows
        signed afresh where a matching change committed meanwhile: a change that commits
        later waits for this one, and its re-signing then finds these trails.
        """
        before = (lambda: _sign_as_committed(signed_by, all_rows)) if signed_by is not None else None
        writes.insert_trails(all_rows, lambda rows: band_key_rows(rows.trail, rows.question), before)


def _sign_as_committed(scope: Scope, all_rows: list[TrailRows]) -> None:
    """Re-signs the rows (in the caller's transaction) if the scope's signing settings are
    not the ones they were signed with, holding the scope's row FOR SHARE until commit."""
    fields = sorted(SIGNING_FIELDS)
    fresh = writes.lock_scope_for_signing(scope.pk)
    pauses.pause_point("record:scope-read")
    committed = None if fresh is None else {f: getattr(fresh, f) for f in fields}
    if committed is None or all(committed[f] == getattr(scope, f) for f in fields):
        return
    pauses.pause_point("record:resign")
    for rows in all_rows:
        question = sign(fresh, rows.trail.query, rows.trail.partition)
        take_signature(fresh, rows.trail, question)
        if rows.question is not None:
            rows.question = question


# The fields a trail's signature is stored in, beside its band keys.
SIGNED_FIELDS = ("lexical_params", "lexical_signature", "band_layout", "embedding_model", "embedding")


def take_signature(scope: Scope, trail: Trail, question: QuestionSignature) -> None:
    """Sets a trail's signed fields from its question: the one place record and re-signing
    both write them (band_key_rows gives the keys that go with them)."""
    trail.lexical_params = question.lexical.params.label
    # A scope that does not match lexically never reads the signature (re-signing after a
    # matcher change writes it): not stored, a sixth of an embedding trail's row.
    trail.lexical_signature = question.lexical.to_bytes() if scope.uses_lexical else b""
    trail.band_layout = matching_settings(scope).lexical_layout.label
    trail.embedding_model = question.embedding.model if question.embedding else ""
    trail.embedding = question.embedding.to_bytes() if question.embedding else None


def band_key_rows(trail: Trail, question: QuestionSignature | None) -> list[tuple[int, int, list[int], int, int]]:
    """A saved trail's band-key row as BandKeys.insert_many takes it: its keys as its scope
    stores them, with the sketch of its embedding (none without a question or keys: a
    rejected trail is never served)."""
    if question is None or not question.keys:
        return []
    high, low = question.sketch
    return [(trail.id, trail.scope_id, scoped_keys(question.keys, trail.scope_id), high, low)]


def path_tokens(scope: Scope, steps: list[RecordedStep], current: dict[str, Section]) -> int:
    """Estimates the tokens of what the steps returned: each step's sections, as they read now.

    Ids the store does not hold (a search hit outside it, say) count nothing.
    """
    wanted = {section_id for step in steps for section_id in step.section_ids}
    texts = {section_id: current[section_id].text for section_id in wanted & current.keys()}
    unread = wanted - texts.keys()
    if unread:
        texts.update(Section.objects.filter(scope=scope, section_id__in=list(unread)).values_list("section_id", "text"))
    tokens = {section_id: count_tokens(text) for section_id, text in texts.items()}
    return sum(tokens.get(section_id, 0) for step in steps for section_id in step.section_ids)


def _twin(
    scope: Scope, request: RecordInput, question: QuestionSignature, cited: list[tuple[str, str]]
) -> Trail | None:
    """A trail of the scope asking this very question (normalised, same partition) and citing
    the same sections at the same hashes, found through its first band key (an identical
    question has identical keys), never by reading the scope's trails. Stale trails are no
    twins: their sections all changed."""
    if not question.keys:
        return None
    same_key = BandKeys.trail_ids_with_key(scope, question.keys[0])
    # An expired trail is no twin either: nothing brings it back, so the path is recorded anew.
    alike = (
        Trail.objects.filter(
            id__in=same_key,
            scope=scope,
            partition=request.partition,
            normalised_query=normalise_query(request.query),
            expires_at__gt=timezone.now(),
        )
        .exclude(status=TrailStatus.STALE)
        .order_by("-id")[:8]
    )
    for trail in alike:
        if [(c.section_id, c.recorded_hash) for c in trail.core_citations()] == cited:
            return trail
    return None


def _refresh(twin: Trail, request: RecordInput, now: datetime) -> RecordResult:
    """Records again what the scope holds: a positive signal is the agent's approval of the
    trail it recorded before (the lifecycle's up vote: it activates a trail waiting for a
    first approval and renews an active one, never one taken out of service); without one,
    nothing changes. The first path's steps are kept."""
    if request.signal not in POSITIVE_SIGNALS:
        return RecordResult(twin, created=False, refreshed="already recorded: nothing changed (no positive signal)")
    try:
        writes.act(twin, "up", Actor.AGENT, by=request.reporter or "key:", now=now)
    except ActionRefused as refused:
        return RecordResult(twin, created=False, refreshed=f"already recorded, and not renewed: {refused}")
    return RecordResult(twin, created=False, refreshed="already recorded: renewed (its expiry starts again)")


def _earlier_result(scope: Scope, idempotency_key: str, fingerprint: str) -> Trail | None:
    earlier = Trail.objects.filter(scope=scope, idempotency_key=idempotency_key).first()
    if earlier is not None and earlier.request_fingerprint != fingerprint:
        raise Conflict(
            "idempotency_key_reused", "this idempotency key was used for a different trail", field="idempotency_key"
        )
    return earlier
