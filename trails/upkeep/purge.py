"""Purging personal data from everything a caller can write into a trail or an event.

A caller writes a trail's query, partition, idempotency key, steps (tool names, their
arguments' keys and values, the section ids they returned) and cited section ids, and a
recall event's query and partition. A purge checks all of them: text is redacted where it can be (and
the trail re-signed, so matching follows the new text), and so are the reasons agents
give with feedback (on recall events and in trails' signal history); a trail whose section ids hold
the data is deleted, since a citation cannot be redacted without breaking the path.
Documentation text is redacted here too, through the section store's one write path (the
trails citing a changed section are flagged, as after a sync), and so are the texts it keeps
of sections as they were (revisions); a section whose id holds the data is left to be renamed
at the source, and said to be left. A section's built anchor holding it is blanked, a background
sync not yet run has its stored request redacted, and one already running is said to be left
(trails/upkeep/purge_stores.py). Every purge also drops the scope's cached tool results,
whose contents are opaque, and tells every process to forget what it holds in memory.

Resumable, and the same end state when rerun.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterable

from django.db import transaction
from django.db.models import Prefetch

from scopes.models import Scope, Section
from scopes.revisions import SectionRevision
from trails import memory, tool_results
from trails.core import pii
from trails.core.normalise import normalise_query
from trails.models import Citation, PiiPattern, PurgeRun, Step, Trail, pauses, writes
from trails.serving.record import SIGNED_FIELDS
from trails.upkeep.purge_stores import count_matching, redact_store, stores
from trails.upkeep.reindex import sign_one

# A previewed run holds its erasure subject until it is confirmed; unconfirmed, it is
# forgotten after this long (by the sweep).
PREVIEW_LIFETIME = timedelta(hours=1)


def purge_rules(run: PurgeRun) -> list[pii.Rule]:
    """Built-in rules and the scope's patterns, or only the subject for an erasure request."""
    if run.subject:
        return pii.rules_for(subject=run.subject, builtin=False)
    return scope_rules(run.scope_id)


def scope_rules(scope_id: int) -> list[pii.Rule]:
    """The built-in personal-data rules and the scope's own patterns."""
    return pii.rules_for(PiiPattern.objects.filter(scope_id=scope_id).values_list("name", "pattern"))


def trails_to_check(scope_id: int, ids: Iterable[int] | None = None, after_id: int = 0, limit: int | None = None):
    trails = (
        Trail.objects.filter(scope_id=scope_id)
        .order_by("id")
        .only("id", "public_id", "scope_id", "query", "normalised_query", "partition", "idempotency_key")
        .prefetch_related(
            Prefetch("steps", queryset=Step.objects.order_by("position")),
            Prefetch("citations", queryset=Citation.objects.only("id", "trail_id", "section_id")),
        )
    )
    if ids is not None:
        trails = trails.filter(id__in=list(ids))
    if after_id:
        trails = trails.filter(id__gt=after_id)
    return trails[:limit] if limit else trails


@dataclass(frozen=True)
class TrailText:
    """What a purge reads of one trail: its caller-written texts and the section ids it cites."""

    id: int
    public_id: str
    query: str
    texts: tuple[str, ...]  # query, normalised form, partition, idempotency key, step tools and args
    section_ids: tuple[str, ...]  # cited and returned by steps

    @classmethod
    def of(cls, trail: Trail) -> "TrailText":
        """From a trail with its steps and citations prefetched."""
        steps = [(s.tool, s.args, s.section_ids) for s in trail.steps.all()]
        return cls.build(trail, steps, [c.section_id for c in trail.citations.all()])

    @classmethod
    def build(cls, trail, steps: list[tuple[str, Any, list[str]]], cited: list[str]) -> "TrailText":
        texts = [trail.query, trail.normalised_query, trail.partition, trail.idempotency_key or ""]
        for tool, args, _ in steps:
            texts.append(tool)
            texts.extend(pii.strings_in(args))
        ids = cited + [i for _, _, returned in steps for i in returned]
        return cls(trail.id, str(trail.public_id), trail.query, tuple(t for t in texts if t), tuple(ids))


def trail_texts(scope_id: int, chunk: int = 2000) -> Iterable[TrailText]:
    """Every trail of a scope as a purge reads it, in id order, by plain reads in chunks (a
    preview reads a whole scope: model instances with prefetched rows cost it most of its time)."""
    after = 0
    while True:
        rows = list(
            Trail.objects.filter(scope_id=scope_id, id__gt=after)
            .order_by("id")
            .values_list("id", "public_id", "query", "normalised_query", "partition", "idempotency_key")[:chunk]
        )
        if not rows:
            return
        after = rows[-1][0]
        ids = [row[0] for row in rows]
        steps: dict[int, list] = {}
        for trail_id, tool, args, returned in (
            Step.objects.filter(trail_id__in=ids)
            .order_by("trail_id", "position")
            .values_list("trail_id", "tool", "args", "section_ids")
        ):
            steps.setdefault(trail_id, []).append((tool, args, returned))
        cited: dict[int, list[str]] = {}
        for trail_id, section_id in Citation.objects.filter(trail_id__in=ids).values_list("trail_id", "section_id"):
            cited.setdefault(trail_id, []).append(section_id)
        for row in rows:
            trail = _Row(*row)
            yield TrailText.build(trail, steps.get(trail.id, []), cited.get(trail.id, []))


@dataclass(frozen=True)
class _Row:
    id: int
    public_id: Any
    query: str
    normalised_query: str
    partition: str
    idempotency_key: str | None


def findings(trail: Trail | TrailText, rules: list[pii.Rule]) -> tuple[set[str], bool]:
    """Names of the rules matching any caller-written field of a trail, and whether the
    data sits in a section id (the trail must then go rather than be redacted).

    A `Trail` needs its steps and citations prefetched.
    """
    read = trail if isinstance(trail, TrailText) else TrailText.of(trail)
    names: set[str] = set()
    for text in read.texts:
        names.update(name for name, _, _ in pii.find(text, rules))
    in_ids = False
    for section_id in read.section_ids:
        found = pii.find(section_id, rules)
        if found:
            in_ids = True
            names.update(name for name, _, _ in found)
    return names, in_ids


# A preview folds at most this many characters of one trail's non-ASCII text (ASCII is cheap):
# a longer trail is not checked in the request but handed to the run, which checks it.
PREVIEW_FOLD_CAP = 100_000


def fate(names: set[str], in_ids: bool, action: str) -> str:
    """What a run does to a trail, from its `findings`: "delete" where the action deletes or a
    section id it cites or was returned holds the match (a citation cannot be redacted without
    breaking the path), "redact" where only its texts match, "" where nothing does."""
    if names and (in_ids or action == PurgeRun.Action.DELETE):
        return "delete"
    return "redact" if names else ""


def preview(run: PurgeRun, limit: int = 50) -> tuple[int, list[tuple[str, str, list[str], list[str], bool]], int, int]:
    """Finds the trails a run would touch and stores them on the run (which must be
    saved), so that confirming it purges exactly this set. Each text is folded once; a trail
    with more non-ASCII text than `PREVIEW_FOLD_CAP` is left unchecked here and added to the
    set, so the run checks it (and changes it only where something matches).

    Returns:
        How many trails match, some (trail id, query, names of the rules that matched, each
        match in its context, whether the run deletes it), how many trails were too long to
        check in the preview, and how many of the matching ones the run deletes (`fate`).
    """
    rules = purge_rules(run)
    matched, shown, unchecked, doomed = [], [], [], 0
    for trail in trail_texts(run.scope_id):
        if sum(len(text) for text in trail.texts + trail.section_ids if not text.isascii()) > PREVIEW_FOLD_CAP:
            unchecked.append(trail.id)
            continue
        names, in_ids = findings(trail, rules)
        if names:
            matched.append(trail.id)
            deleted = fate(names, in_ids, run.action) == "delete"
            doomed += deleted
            if len(shown) < limit:
                texts = trail.texts + trail.section_ids
                contexts = [shown_text for text in texts for shown_text in pii.in_context(text, rules)]
                shown.append((trail.public_id, trail.query, sorted(names), contexts[:5], deleted))
    run.trail_ids, run.total = matched + unchecked, len(matched) + len(unchecked)
    return len(matched), shown, len(unchecked), doomed


def preview_records(run: PurgeRun) -> dict[str, int]:
    """Every kind of record the run would touch, counted: the previewed trails (`run.total`,
    from preview) and the others (documentation text and its kept revisions included)."""
    return records_matching(run.scope_id, purge_rules(run), trails=run.total, documents=bool(run.subject))


def run_purge(run_id: int, batch_size: int = 500) -> PurgeRun:
    """Runs (or resumes) a purge: the previewed trails, or (not previewed) every trail of
    the scope; then every other store of the scope (`stores`) and its cached tool results.

    Each batch of trails is redacted or deleted in the same transaction that advances
    the run's checkpoint, so a crash loses at most the batch in flight and a rerun
    finishes the work.

    Returns:
        The run, done, with what it checked and changed per store and what is left.
    """
    claimed = PurgeRun.objects.filter(
        id=run_id, state__in=[PurgeRun.State.PREVIEWED, PurgeRun.State.QUEUED, PurgeRun.State.RUNNING]
    ).update(state=PurgeRun.State.RUNNING)
    run = PurgeRun.objects.select_related("scope").get(id=run_id)
    if not claimed:
        return run
    rules = purge_rules(run)
    if run.trail_ids is None and run.total == 0:
        run.total = Trail.objects.filter(scope=run.scope).count()
        run.save(update_fields=["total"])
    targets = sorted(run.trail_ids) if run.trail_ids is not None else None
    while True:
        if targets is None:
            batch = list(
                Trail.objects.filter(scope_id=run.scope_id, id__gt=run.last_trail_id)
                .order_by("id")
                .values_list("id", flat=True)[:batch_size]
            )
        else:  # the previewed ids, those deleted since included: the checkpoint moves past them too
            batch = [i for i in targets if i > run.last_trail_id][:batch_size]
        if not batch:
            break

        def decide(trail: Trail) -> str:
            return fate(*findings(trail, rules), run.action)

        pauses.pause_point("purge:read")
        with transaction.atomic():
            # Through the writer: the batch's trails locked in id order, decided again under the locks.
            deleted, redacted = writes.purge_trails(
                run.scope_id,
                batch,
                decide,
                lambda trail: _redact_trail(trail, rules),
                sign_one,
                SIGNED_FIELDS,
            )
            run.last_trail_id, run.processed = batch[-1], run.processed + len(batch)
            run.matched, run.deleted = run.matched + deleted + redacted, run.deleted + deleted
            run.save(update_fields=["last_trail_id", "processed", "matched", "deleted"])
    counts = {"trails": [run.processed, run.matched]}
    for store in stores(run.scope, documents=bool(run.subject)):
        counts[store.kind] = list(redact_store(run.scope, store, rules))
    tool_results.forget_scope(run.scope)
    run.counts = counts
    # What still matches, checked while the subject is known (it is forgotten at the end).
    left = records_matching(run.scope_id, rules, documents=bool(run.subject))
    run.left = {kind: n for kind, n in left.items() if n}
    run.finish()
    # This process forgets now; every other one at its next request or task (trails.memory).
    memory.forget_here()
    return run


def records_matching(scope_id: int, rules: list, trails: int | None = None, documents: bool = False) -> dict[str, int]:
    """How many of each kind of record in the scope hold a match: trails (unless counted
    already, as a preview has), then every other store (`stores`)."""
    if trails is None:
        trails = sum(1 for trail in trail_texts(scope_id) if findings(trail, rules)[0])
    counts = {"trails": trails}
    scope = Scope.objects.get(pk=scope_id)
    for store in stores(scope, documents):
        counts[store.kind] = count_matching(store, rules)
    if documents and scope.keeps_text:
        # Rewriting a section keeps its old text as a revision, which the purge redacts next: counted there too.
        kept = set(SectionRevision.objects.filter(scope_id=scope_id).values_list("section_id", "hash"))
        counts["kept section revisions"] += sum(
            1
            for section_id, digest, text in Section.objects.filter(scope_id=scope_id)
            .values_list("section_id", "hash", "text")
            .iterator()
            if (section_id, digest) not in kept and pii.holds(text, rules)
        )
    return counts


def _redact_trail(trail: Trail, rules: list[pii.Rule]) -> list[Step]:
    """Redacts a trail's caller-written fields in place (steps prefetched); returns its steps."""
    trail.query = pii.redact(trail.query, rules)
    trail.normalised_query = normalise_query(trail.query)
    trail.partition = pii.redact(trail.partition, rules)
    if trail.idempotency_key and pii.find(trail.idempotency_key, rules):
        trail.idempotency_key = None
    steps = list(trail.steps.all())
    for step in steps:
        step.tool, step.args = pii.redact(step.tool, rules), pii.redact_json(step.args, rules)
    return steps


def forget_unconfirmed_previews(now: datetime) -> int:
    """Deletes previews never confirmed (they hold an erasure subject) and fails runs
    that were queued or running for a day without progress, forgetting their subject.

    Returns:
        How many runs were deleted or failed.
    """
    deleted, _ = PurgeRun.objects.filter(state=PurgeRun.State.PREVIEWED, created_at__lt=now - PREVIEW_LIFETIME).delete()
    failed = 0
    for run in PurgeRun.objects.filter(
        state__in=[PurgeRun.State.QUEUED, PurgeRun.State.RUNNING], created_at__lt=now - timedelta(days=1)
    ):
        run.fail("did not finish within a day; start it again")
        failed += 1
    return deleted + failed
