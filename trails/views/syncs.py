"""Syncs: the scope's section syncs in a window, the sections that changed (by a sync or any
other write), and what recall now does with the trails citing them."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from scopes.models import Section, SectionRevision, SectionSync
from trails.models import Citation, Trail
from trails.views.common import scope_or_404, scope_page, staff_required, what_recall_gives
from trails.views.overview import WINDOWS

SECTIONS_SHOWN = 200
TRAILS_PER_SECTION = 50


@staff_required
@require_GET
def syncs(request: HttpRequest, scope_slug: str) -> HttpResponse:
    scope = scope_or_404(request, scope_slug)
    window = request.GET.get("window", "7d") if request.GET.get("window") in WINDOWS else "7d"
    since = timezone.now() - WINDOWS[window][0]
    revisions = list(
        SectionRevision.objects.filter(scope=scope, replaced_at__gte=since)
        .order_by("-replaced_at", "section_id")
        .values_list("section_id", "replaced_at")[: SECTIONS_SHOWN * 4]
    )
    changed: dict[str, object] = {}
    for section_id, at in revisions:
        changed.setdefault(section_id, at)  # the latest change of each
        if len(changed) >= SECTIONS_SHOWN:
            break
    current = Section.objects.current(scope, changed)
    citing: dict[str, list[int]] = {}
    for trail_id, section_id in Citation.objects.filter(scope=scope, section_id__in=list(changed)).values_list(
        "trail_id", "section_id"
    ):
        citing.setdefault(section_id, []).append(trail_id)
    trail_ids = {t for ids in citing.values() for t in ids[:TRAILS_PER_SECTION]}
    trails = {
        t.id: t
        for t in Trail.objects.filter(id__in=trail_ids).only(
            "id", "public_id", "query", "status", "expires_at", "stale_at"
        )
    }
    _, would = what_recall_gives(scope, trail_ids)
    only_cited = request.GET.get("cited") == "1"
    rows = []
    for section_id, at in changed.items():
        if only_cited and not citing.get(section_id):
            continue
        rows.append(
            {
                "section_id": section_id,
                "at": at,
                "deleted": section_id not in current,
                "trails": [
                    {"trail": trails[t], "now": would.get(t, "miss")}
                    for t in citing.get(section_id, [])[:TRAILS_PER_SECTION]
                    if t in trails
                ],
                "more": max(0, len(citing.get(section_id, [])) - TRAILS_PER_SECTION),
            }
        )
    return scope_page(
        request,
        "trails/syncs/syncs.html",
        scope,
        {
            "rows": rows,
            "window": window,
            "windows": list(WINDOWS),
            "tab": "overview",
            "only_cited": only_cited,
            "syncs": _with_moved_trails(
                scope, list(SectionSync.objects.filter(scope=scope, created_at__gte=since)[:20])
            ),
        },
    )


def _with_moved_trails(scope, found: list[SectionSync]) -> list[dict]:
    """Each sync with the trails it moved (by move), as its summary lists them."""
    wanted = {public_id for sync in found for ids in sync.summary.get("moved_trails", {}).values() for public_id in ids}
    trails = {
        str(t.public_id): t
        for t in Trail.objects.filter(scope=scope, public_id__in=list(wanted)).only("public_id", "query")
    }
    return [
        {
            "sync": sync,
            # The summary lists some ids a move (SAMPLE_IDS) but counts them all: the count is the whole one.
            "moves": [
                (
                    move,
                    [trails[i] for i in ids if i in trails],
                    max(len(ids), sync.summary.get("trails", {}).get(move, 0)),
                )
                for move, ids in sorted(sync.summary.get("moved_trails", {}).items())
            ],
        }
        for sync in found
    ]
