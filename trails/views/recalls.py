"""The recall log and Replay (a dry-run recall with its explanation)."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from infra.errors import Refused
from scopes.models import Section
from trails.core.second_chance import SECOND_CHANCE_MATCHER
from trails.core.validation import SectionStatus
from trails.models import RecallEvent, RecallOutcome, Trail, validations_now
from trails.schemas import recall_json
from trails.serving.recall import recall
from trails.views.common import (
    CSV_ROW_LIMIT,
    ID_PART,
    csv_response,
    key_names,
    scope_or_404,
    scope_page,
    staff_required,
    uuids,
    wants_csv,
)
from trails.views.forms import RecallLogFilterForm, ReplayForm


@staff_required
@require_http_methods(["GET", "POST"])
def replay(request: HttpRequest, scope_slug: str) -> HttpResponse:
    """A question is posted, never put in the URL: server and proxy logs keep URLs."""
    scope = scope_or_404(request, scope_slug)
    result, status = None, 200
    data = request.POST if request.method == "POST" else None
    if request.method == "GET" and request.GET.get("trail"):
        # "Replay now" from a trail names the trail in the URL, never its question.
        source = Trail.objects.filter(scope=scope, public_id__in=uuids([request.GET["trail"]])).first()
        if source is not None:
            data = {"query": source.query, "partition": source.partition}
    elif request.method == "GET" and request.GET.get("recall"):
        # From the recall log: the event's id in the URL, its kept query read here.
        event = (
            RecallEvent.objects.filter(scope=scope, public_id__in=uuids([request.GET["recall"]]))
            .exclude(query="")
            .first()
        )
        if event is not None:
            data = {"query": event.query, "partition": event.partition}
    form = ReplayForm(data)
    form.fields["token_budget"].widget.attrs["placeholder"] = str(scope.token_budget)
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        try:
            answer = recall(
                scope, data["query"], data["partition"] or "", data["token_budget"], dry_run=True, explain=True
            )
        except Refused as refused:
            form.add_error(refused.field or None, refused.message)
            status = 422
        else:
            trail = Trail.objects.filter(id=answer.trail.id).first() if answer.trail else None
            # What the agent would receive: the explanation is the operator's.
            sent = {k: v for k, v in recall_json(answer).items() if k != "explanation"}
            result = {
                "answer": answer,
                "trail": trail,
                "why": answer.explanation,
                "json": json.dumps(sent, indent=2, ensure_ascii=False),
            }
    elif form.is_bound:
        status = 422
    return scope_page(
        request, "trails/recalls/replay.html", scope, {"form": form, "result": result, "tab": "replay"}, status
    )


RECALLS_PER_PAGE = 50


@staff_required
@require_GET
def recall_log(request: HttpRequest, scope_slug: str) -> HttpResponse:
    """Recent recalls, newest first, filtered; pages by id (no count over a million rows)."""
    scope = scope_or_404(request, scope_slug)
    keys = key_names(scope)
    form = RecallLogFilterForm(request.GET or None, keys=keys)
    events = (
        RecallEvent.objects.filter(scope=scope)
        .select_related("trail")
        .only(
            "id",
            "public_id",
            "created_at",
            "outcome",
            "similarity",
            "matcher",
            "latency_ms",
            "query",
            "helpful",
            "feedback_reason",
            "trail__public_id",
            "trail__query",
            "caller",
            "second_chance_at",
            "second_chance_reason",
        )
    )
    if form.is_bound and form.is_valid():
        f = form.cleaned_data
        if f["outcome"]:
            events = events.filter(outcome=f["outcome"])
        if f["min_similarity"] is not None:
            events = events.filter(similarity__gte=f["min_similarity"])
        if f["max_similarity"] is not None:
            events = events.filter(similarity__lte=f["max_similarity"])
        if f["since"]:
            events = events.filter(created_at__gte=f["since"])
        if f["until"]:
            events = events.filter(created_at__lt=f["until"])
        if f["feedback"] == "none":
            events = events.filter(feedback_at__isnull=True)
        elif f["feedback"]:
            events = events.filter(helpful=f["feedback"] == "helpful")
        if f["second_chance"]:
            # Every recall a second chance was asked for has its time (recallevent_second_chance).
            events = events.filter(second_chance_at__isnull=False)
        if f["second_chance"] == "given":
            events = events.filter(matcher=SECOND_CHANCE_MATCHER)
        elif f["second_chance"] == "not_given":
            events = events.filter(outcome=RecallOutcome.MISS)
        if f["key"]:
            events = events.filter(caller=f["key"])
        if f["before"]:
            events = events.filter(id__lt=f["before"])
    if wants_csv(request):
        fields = [
            "public_id",
            "created_at",
            "outcome",
            "similarity",
            "matcher",
            "trail__public_id",
            "latency_ms",
            "helpful",
            "feedback_reason",
            "caller",
            "second_chance_at",
            "second_chance_reason",
        ]
        if scope.keep_raw_queries:
            fields.append("query")
        rows = events.order_by("-created_at", "-id").values_list(*fields)[:CSV_ROW_LIMIT]
        header = [
            "recall_id",
            "time_utc",
            "outcome",
            "similarity",
            "matcher",
            "trail_id",
            "latency_ms",
            "helpful",
            "feedback_reason",
            "key",
            "second_chance_at_utc",
            "second_chance_reason",
        ]
        named = ((*row[:9], keys.get(row[9], row[9]), *row[10:]) for row in rows.iterator())
        return csv_response(f"{scope.slug}-recalls.csv", header + (["query"] if scope.keep_raw_queries else []), named)
    rows = list(events.order_by("-created_at", "-id")[: RECALLS_PER_PAGE + 1])
    older = None
    if len(rows) > RECALLS_PER_PAGE:
        rows = rows[:RECALLS_PER_PAGE]
        query = request.GET.copy()
        query["before"] = rows[-1].id
        older = query.urlencode()
    for event in rows:
        event.key_name = keys.get(event.caller, event.caller)
    return scope_page(
        request,
        "trails/recalls/recall_log.html",
        scope,
        {
            "form": form,
            "events": rows,
            "older": older,
            "tab": "recalls",
            "keeps_queries": scope.keep_raw_queries,
            "key_names": keys,  # read above for the filter and the column
        },
    )


@staff_required
@require_GET
def find(request: HttpRequest, scope_slug: str) -> HttpResponse:
    """The header's box: a recall id or a trail id lands on its page; words search the trails."""
    scope = scope_or_404(request, scope_slug)
    text = request.GET.get("q", "").strip()[:500]
    ids = uuids([text])
    if ids:
        if RecallEvent.objects.filter(scope=scope, public_id=ids[0]).exists():
            return redirect("ops:recall", scope_slug=scope.slug, recall_id=ids[0])
        if Trail.objects.filter(scope=scope, public_id=ids[0]).exists():
            return redirect("ops:trail", scope.slug, ids[0])
        messages.warning(request, f"No recall or trail {ids[0]} in {scope.slug}.")
        return redirect("ops:recalls", scope_slug=scope.slug)
    if ID_PART.fullmatch(text.lower()):
        # Part of a trail id, as a log prints it: the one trail it names, else the list of those it may.
        found = list(Trail.objects.filter(scope=scope, public_id__icontains=text.lower()).values_list("public_id")[:2])
        if len(found) == 1:
            return redirect("ops:trail", scope.slug, found[0][0])
    return redirect(reverse("ops:trails", args=[scope.slug]) + "?" + urlencode({"q": text}))


@staff_required
@require_GET
def recall_detail(request: HttpRequest, scope_slug: str, recall_id) -> HttpResponse:
    """One recall, for an incident: what it served (each cited section's hash then and now),
    why it answered so (a dry run of its kept question, explained), its feedback, and the
    actions on the trail it served, each recorded with who and why."""
    scope = scope_or_404(request, scope_slug)
    event = get_object_or_404(RecallEvent.objects.select_related("trail"), scope=scope, public_id=recall_id)
    trail = event.trail
    served, why, replayed = [], None, None
    if trail is not None:
        citations = list(trail.citations.all())
        current = Section.objects.current(scope, [c.section_id for c in citations])
        checked = validations_now(scope, [trail.id]).get(trail.id)
        for citation, check in zip(citations, checked.sections if checked else []):
            now = current.get(citation.section_id)
            served.append(
                {
                    "section_id": citation.section_id,
                    "then": citation.hash,
                    "now": now.hash if now else None,
                    "same": check.status is SectionStatus.VALID,
                }
            )
    if event.query:
        # The question is kept (keep_raw_queries): what recall would answer it now, in the
        # partition it was asked in, and why.
        try:
            replayed = recall(scope, event.query, event.partition, None, dry_run=True, explain=True)
            why = replayed.explanation
        except Refused as refused:  # the embedder away or not calibrated: the page shows the rest
            messages.warning(request, f"No replay: {refused.message}")
    return scope_page(
        request,
        "trails/recalls/recall_detail.html",
        scope,
        {
            "event": event,
            "trail": trail,
            "served": served,
            "why": why,
            "replayed": replayed,
            "history": trail.signals.all()[:20] if trail is not None else [],
            "tab": "recalls",
            "undoable": trail is not None and trail.undoable() is not None,
            "actions": trail.available_actions() if trail is not None else [],
        },
    )
