"""An agent's verdict on a recall, and what the scope learns from its verdicts.

"Not helpful" on a prefetch or hint is a reported false hit: it counts against the
trail served (which goes back to pending at the scope's number of reports) and, with
the scope's other labels, can raise the threshold the scope runs at. A re-search is
a label too: a path recorded for the same question in the same session soon after a
prefetch or hint, citing none of the sections served.
"""
from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta
from typing import Iterable

from django.db import transaction
from django.utils import timezone

from scopes.models import Scope
from trails import calibration
from trails.core.calibration import Label, learned_threshold
from trails.core.normalise import normalise_query
from ragtrail_site.errors import RequestRefused
from trails.models import Citation, RecallEvent, RecallOutcome, Trail, TrailStatus

# The newest labels a scope's threshold is learned from: bounded work per feedback.
LABELS_READ = 5000
# How soon after a recall a path recorded for the same question counts as a re-search.
RESEARCH_WINDOW = timedelta(minutes=10)
RESEARCHED = "re-searched: a path citing none of the sections served was recorded for the same question"


def research_key(session: str, query: str) -> str:
    """Links a recall to a later record of the same question in the same session,
    without keeping either in clear."""
    return hashlib.sha256(f"{session}\x00{normalise_query(query)}".encode()).hexdigest()


def learn_from_research(scope: Scope, session: str, query: str, cited: Iterable[str], now: datetime) -> bool:
    """Labels the session's last prefetch or hint for this question a false hit when the
    path now recorded cites none of the sections it served.

    The label feeds the scope's threshold; it is not a report against the trail (the
    agent did not say the trail misled it). Returns whether a recall was labelled.
    """
    event = (
        RecallEvent.objects.filter(
            scope=scope, research_key=research_key(session, query), created_at__gte=now - RESEARCH_WINDOW,
            feedback_at__isnull=True, trail__isnull=False,
        )
        .exclude(outcome=RecallOutcome.MISS)
        .order_by("-created_at")
        .only("id", "trail_id")
        .first()
    )
    if event is None:
        return False
    served = set(Citation.objects.filter(trail_id=event.trail_id).values_list("section_id", flat=True))
    if served & set(cited):
        return False
    labelled = RecallEvent.objects.filter(pk=event.pk, feedback_at__isnull=True).update(
        helpful=False, feedback_reason=RESEARCHED, feedback_at=now
    )
    if labelled:
        learn_thresholds(scope)
    return bool(labelled)


def give_feedback(scope: Scope, recall_id: str, helpful: bool, reason: str = "", now: datetime | None = None) -> RecallEvent:
    """Records an agent's verdict on one of the scope's recalls, once.

    Raises:
        RequestRefused: 404 for an unknown recall (or another scope's); 409 for a miss,
            which served nothing, or a recall that already has feedback.
    """
    try:
        public_id = uuid.UUID(recall_id)
    except ValueError:
        raise RequestRefused(404, "not_found", "no such recall", field="recall_id") from None
    now = now or timezone.now()
    with transaction.atomic():
        event = RecallEvent.objects.select_for_update().filter(scope=scope, public_id=public_id).first()
        if event is None:
            raise RequestRefused(404, "not_found", "no such recall", field="recall_id")
        if event.outcome == RecallOutcome.MISS:
            raise RequestRefused(409, "conflict", "this recall was a miss: it served no trail to judge", field="recall_id")
        if event.helpful is not None:
            raise RequestRefused(409, "conflict", "this recall already has feedback", field="recall_id")
        event.helpful, event.feedback_reason, event.feedback_at = helpful, reason[:500], now
        event.save(update_fields=["helpful", "feedback_reason", "feedback_at"])
        if not helpful and event.trail_id is not None:
            Trail(pk=event.trail_id).report_false_hit(reason, now)
    if not helpful:
        learn_thresholds(scope)
    return event


def scope_labels(scope: Scope, matcher: str) -> list[Label]:
    """The scope's judged hits by one matcher: agents' feedback, and hits on trails an
    operator or user later rejected (counted as false where no agent said otherwise)."""
    judged = (
        RecallEvent.objects.filter(scope=scope, feedback_at__isnull=False, matcher=matcher, similarity__isnull=False)
        .order_by("-feedback_at")
        .values_list("similarity", "helpful")[:LABELS_READ]
    )
    labels = [Label(similarity, not helpful) for similarity, helpful in judged]
    rejected = (
        RecallEvent.objects.filter(
            scope=scope, feedback_at__isnull=True, matcher=matcher, similarity__isnull=False,
            trail__status=TrailStatus.REJECTED,
        )
        .exclude(outcome=RecallOutcome.MISS)
        .order_by("-created_at")
        .values_list("similarity", flat=True)[:LABELS_READ]
    )
    return labels + [Label(similarity, True) for similarity in rejected]


def learn_thresholds(scope: Scope) -> dict[str, float | None]:
    """Recomputes the scope's learned thresholds from its labels and stores them.

    Never below the configured threshold (that one was calibrated on labelled pairs
    with a confidence bound); raised only where the scope's own labels show with
    confidence that its false-hit bound is broken there.
    """
    fit = calibration.shipped()
    learned: dict[str, float | None] = {"lexical": None, "embedding": None}
    # Only the matchers the scope uses: the other's labels (if any) decide nothing.
    for matcher in [m for m, used in (("lexical", scope.uses_lexical), ("embedding", scope.uses_embedding)) if used]:
        grid = [point["threshold"] for point in fit["matchers"][matcher]["curve"]]
        learned[matcher] = learned_threshold(
            scope_labels(scope, matcher), getattr(scope, f"{matcher}_threshold"), grid, scope.max_false_hit_rate
        )
    Scope.objects.filter(pk=scope.pk).update(
        learned_lexical_threshold=learned["lexical"], learned_embedding_threshold=learned["embedding"]
    )
    scope.learned_lexical_threshold, scope.learned_embedding_threshold = learned["lexical"], learned["embedding"]
    return learned
