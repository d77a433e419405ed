"""An agent's verdict on a recall, and the labels a scope's threshold is learned from.

"Not helpful" on a prefetch or hint is a reported false hit: it counts against the
trail served (which goes back to pending once enough different reporters said so) and
is a label. Labels that cost the agent nothing come from the paths it records: a path
recorded for the same question in the same session soon after a recall says whether
what the recall served (a hit) or would have served (a miss's nearest candidate) was
right, by whether it cites any of those sections. A served trail that is rejected
labels the recalls that served it. Every label names its reporter (trails/learning/thresholds.py
bounds what one reporter can move).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta
from typing import Iterable

from django.db import transaction
from django.dispatch import receiver
from django.utils import timezone

from infra import metrics
from infra.errors import NotFound
from scopes.keys import key_set_aside, set_aside_reporters
from scopes.models import Scope
from trails.core.normalise import normalise_query
from trails.learning.thresholds import learn_thresholds
from trails.models import (
    Citation,
    MatchLabel,
    RecallEvent,
    RecallOutcome,
    Signal,
    Trail,
    TrailReport,
    TrailSignal,
    trail_status_changed,
    writes,
)
from trails.models.verdicts import judge_recall

# How soon after a recall a path recorded for the same question counts as a re-search.
RESEARCH_WINDOW = timedelta(minutes=10)
RESEARCHED = "re-searched: a path citing none of the sections served was recorded for the same question"


def research_key(session: str, query: str) -> str:
    """Links a recall to a later record of the same question in the same session,
    without keeping either in clear."""
    return hashlib.sha256(f"{session}\x00{normalise_query(query)}".encode()).hexdigest()


def learn_from_research(
    scope: Scope, session: str, query: str, cited: Iterable[str], now: datetime, reporter: str = ""
) -> MatchLabel | None:
    """Labels the session's last recall of this question by the path now recorded for it.

    A hit (prefetch or hint) is labelled right where the path cites any section it
    served, and a false hit where it cites none (the agent searched again; the recall
    then shows as not helpful). A miss whose nearest candidate was within reach is
    labelled the same way by that candidate's sections: these are the labels that can
    show a scope that a lower threshold would serve well. No label is a report against
    a trail (the agent did not say a trail misled it).

    Returns:
        The label made, or None where no recall of the session qualifies.
    """
    event = (
        RecallEvent.objects.filter(
            scope=scope,
            research_key=research_key(session, query),
            created_at__gte=now - RESEARCH_WINDOW,
            feedback_at__isnull=True,
        )
        .order_by("-created_at")
        .only("id", "trail_id", "outcome", "similarity", "matcher", "nearest_trail_id", "nearest_similarity")
        .first()
    )
    if event is None:
        return None
    hit = event.outcome != RecallOutcome.MISS and event.trail_id is not None
    judged_trail, similarity = (
        (event.trail_id, event.similarity) if hit else (event.nearest_trail_id, event.nearest_similarity)
    )
    if hit and similarity is None:
        return None
    if judged_trail is None:
        # A miss with nothing within reach: no threshold the scope may learn would have served
        # anything, which is evidence too (a question asked that no lowering puts at risk).
        source, false_hit, similarity = MatchLabel.Source.MISS, False, 0.0
    else:
        served = set(Citation.objects.filter(trail_id=judged_trail).values_list("section_id", flat=True))
        source = MatchLabel.Source.RESEARCH if hit else MatchLabel.Source.NEAR_MISS
        false_hit = not served & set(cited)
    made = _label(
        scope,
        event,
        event.matcher or scope_matcher(scope),
        similarity,
        false_hit,
        source,
        reporter,
        judged_trail,
        now,
        implies_verdict=hit and false_hit,
    )
    if made is not None:
        learn_thresholds(scope, now)
    return made


def scope_matcher(scope: Scope) -> str:
    """The matcher a miss's label counts for: the one a lower threshold would serve by."""
    return "embedding" if scope.uses_embedding else "lexical"


def _label(
    scope: Scope,
    event: RecallEvent | None,
    matcher: str,
    similarity: float,
    false_hit: bool,
    source: str,
    reporter: str,
    trail_id: int | None,
    now: datetime,
    implies_verdict: bool = False,
) -> MatchLabel | None:
    """Stores a label unless the recall already has one; returns it, or None."""
    made = MatchLabel(
        scope=scope,
        matcher=matcher,
        similarity=similarity,
        false_hit=false_hit,
        source=source,
        reporter=reporter[:100],
        recall_event_id=event.pk if event else None,
        trail_id=trail_id,
        created_at=now,
    )
    made_now = writes.implied_verdict(made, event.pk if event else None, implies_verdict, RESEARCHED, now)
    return made if made_now else None


def give_feedback(
    scope: Scope, recall_id: str, helpful: bool, reason: str = "", reporter: str = "", now: datetime | None = None
) -> RecallEvent:
    """Records an agent's verdict on one of the scope's recalls, once.

    The verdict labels the recall; "not helpful" is also a report against the trail
    served, counted per reporter (trails.models.writes.report).

    Raises:
        NotFound: an unknown recall (or another scope's). Conflict: a miss,
            which served nothing, or a recall that already has feedback.
    """
    try:
        public_id = uuid.UUID(recall_id)
    except ValueError:
        raise NotFound("not_found", "no such recall", field="recall_id") from None
    now = now or timezone.now()
    # Read without a lock to learn which trail to lock first (the lock order: the trail, then its recalls).
    found = RecallEvent.objects.filter(scope=scope, public_id=public_id).values_list("id", "trail_id").first()
    if found is None:
        raise NotFound("not_found", "no such recall", field="recall_id")
    with transaction.atomic():
        event, labelled, reported = judge_recall(found[0], found[1], scope.id, helpful, reason, reporter, now)
    if reported:
        metrics.FALSE_HIT_REPORTS.inc()
    if labelled:
        learn_thresholds(scope, now)
    return event


def moved_by(reporter: str, scope_id: int | None = None) -> list[int]:
    """The ids of the trails a reporter reported or voted on (held, pending, rejected or
    approved by it), in one scope or in all."""
    reported = TrailReport.objects.filter(reporter=reporter)
    voted = TrailSignal.objects.filter(
        by=reporter[:150], source=TrailSignal.Source.FEEDBACK, signal__in=[Signal.UP, Signal.DOWN]
    )
    if scope_id is not None:
        reported, voted = reported.filter(trail__scope_id=scope_id), voted.filter(scope_id=scope_id)
    return sorted({*reported.values_list("trail_id", flat=True), *voted.values_list("trail_id", flat=True)})


def judged_scopes(reporter: str) -> set[int]:
    """The ids of the scopes whose trails a reporter reported or voted on, or whose threshold
    its labels teach: a key moved to another scope since still moved these, so setting it
    aside reaches them too."""
    reported = TrailReport.objects.filter(reporter=reporter).values_list("trail__scope_id", flat=True)
    voted = TrailSignal.objects.filter(
        by=reporter[:150], source=TrailSignal.Source.FEEDBACK, signal__in=[Signal.UP, Signal.DOWN]
    ).values_list("scope_id", flat=True)
    labelled = MatchLabel.objects.filter(reporter=reporter[:100]).values_list("scope_id", flat=True)
    # A verdict counts in the scope's false-hit figures even where it left no label (the recall had one).
    verdicts = RecallEvent.objects.filter(feedback_by=reporter[:100], feedback_at__isnull=False)
    return {
        *reported.distinct(),
        *voted.distinct(),
        *labelled.distinct(),
        *verdicts.values_list("scope_id", flat=True).distinct(),
    }


@receiver(key_set_aside, dispatch_uid="trails.learning.feedback.recount_after_set_aside")
def recount_after_set_aside(sender, key, by: str, set_aside: bool, **kwargs) -> None:
    """A key's standing changed: the trails it reported or voted on are decided again (in id
    order, one lock at a time): set aside, its vote taken back where it was the trail's latest
    change, then every trail counted again, one its reports held going back into service; the
    scopes it judged learn again from the labels that still count."""
    excluded = set_aside_reporters()
    for trail in Trail.objects.filter(id__in=moved_by(key.reporter)).order_by("id"):
        with transaction.atomic():
            if set_aside:  # its vote, where nothing changed the trail since, goes first (the table's set-aside)
                writes.set_aside_vote(trail, key.reporter, by=by)
            writes.recount(trail, excluded, by=by)
    for scope in Scope.objects.filter(pk__in={*key.scopes.values_list("pk", flat=True), *judged_scopes(key.reporter)}):
        learn_thresholds(scope, timezone.now())


@receiver(trail_status_changed, dispatch_uid="trails.learning.feedback.learn_after_labels_changed")
def learn_after_labels_changed(
    sender, trail: Trail, labels_changed: bool = False, at: datetime | None = None, **kwargs
) -> None:
    """A rejection labelled the recalls that served the trail, or an undo or reinstatement
    withdrew those labels (both written with the status, trails.models.writes): the scope
    learns again, after the commit, outside the trail's lock."""
    if labels_changed:
        learn_thresholds(Scope.objects.get(pk=trail.scope_id), at)
