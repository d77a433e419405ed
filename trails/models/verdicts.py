"""An agent's verdict on one recall (`POST …/recalls/{id}/feedback`), written in the lock
order of docs/consistency.md: part of the one writer, beside trails.models.writes."""

from __future__ import annotations

from datetime import datetime

from infra.errors import Conflict, NotFound
from infra.guards import guard_on
from trails.core.second_chance import SECOND_CHANCE_MATCHER
from trails.models import pauses
from trails.models.gate import writer
from trails.models.learning import MatchLabel
from trails.models.lifecycle import ActionRefused
from trails.models.recalls import RecallEvent, RecallOutcome
from trails.models.writes import _lock, insert_labels, report


@writer("verdict")
def judge_recall(
    event_id: int, trail_id: int | None, scope_id: int, helpful: bool, reason: str, reporter: str, now: datetime
) -> tuple[RecallEvent | None, bool, bool]:
    """An agent's verdict on one recall, in the lock order: the trail it served first, then
    the recall's event (re-read under its lock), then its label and, where not helpful, the
    report against the trail. Call inside a transaction.

    Returns:
        (the event as judged, whether a label was made, whether a report was counted).

    Raises:
        NotFound: the recall is gone. Conflict: a miss (it served nothing) or a recall
            that already has a verdict.
    """
    trail = _lock(trail_id, scope_id) if trail_id is not None else None
    pauses.pause_point("judge:trail-locked")
    event = RecallEvent.objects.select_for_update().filter(pk=event_id, scope_id=scope_id).first()
    if event is None:
        raise NotFound("not_found", "no such recall", field="recall_id")
    if event.outcome == RecallOutcome.MISS:
        raise Conflict("conflict", "this recall was a miss: it served no trail to judge", field="recall_id")
    if event.helpful is not None and guard_on("verdict-rechecks-no-verdict-yet"):
        raise Conflict("conflict", "this recall already has feedback", field="recall_id")
    event.helpful, event.feedback_reason, event.feedback_at, event.feedback_by = (
        helpful,
        reason[:500],
        now,
        reporter[:100],
    )
    event.save(update_fields=["helpful", "feedback_reason", "feedback_at", "feedback_by"])
    labelled = (
        event.similarity is not None
        and insert_labels(
            [
                MatchLabel(
                    scope_id=scope_id,
                    matcher=event.matcher,
                    similarity=event.similarity,
                    false_hit=not helpful,
                    source=MatchLabel.Source.FEEDBACK,
                    reporter=reporter[:100],
                    recall_event_id=event.pk,
                    trail_id=event.trail_id,
                    created_at=now,
                )
            ]
        )
        > 0
    )
    # The event's trail as it is now: a trail deleted while this waited left it unlinked.
    # A second chance served the trail to another question: a wrong one is the second chance's
    # mistake (counted in the scope's false hits), not the trail's, so no report against it.
    second_chance = event.matcher == SECOND_CHANCE_MATCHER
    reported = not helpful and trail is not None and event.trail_id == trail.pk and not second_chance
    if reported:
        try:
            report(trail, reporter, reason, now)
        except ActionRefused:
            reported = False  # expired meanwhile: no action applies to it, the verdict stands
    return event, labelled, reported
