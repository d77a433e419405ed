"""Operator pages: function views, each rendering its page or, for htmx, the fragment it swaps."""
from __future__ import annotations

import csv
import difflib
import json
import logging
import uuid
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from functools import wraps
from typing import Iterable

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.paginator import Paginator
from django.utils.functional import cached_property
from django.db import transaction
from django.db.models import Count, F, Q
from django.http import HttpRequest, HttpResponse, HttpResponseForbidden, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from scopes.models import Scope, Section, SectionRevision
from trails import calibration, charts, thresholds, tool_results
from trails.matching import matching_settings
from trails.core.validation import Citation as CoreCitation
from trails.core.validation import CurrentSection, SectionStatus, validate
from ragtrail_site.errors import Refused
from trails.forms import PurgeForm, RecallLogFilterForm, ReplayForm, TrailFilterForm
from trails.models import (
    SIMILARITY_BINS, TRAIL_ACTIONS, ActionRefused, Citation, PurgeRun, RecallEvent, RecallStat, Signal, SimilarityStat,
    ThresholdChange, Trail, TrailSignal, TrailStatus,
)
from trails.purge import findings as purge_findings
from trails.purge import scope_rules, trails_to_check
from trails.purge import preview as preview_purge
from trails.purge import run_purge
from trails.recall import recall
from trails.schemas import recall_json
from trails.tasks import purge_task

logger = logging.getLogger(__name__)

WINDOWS = {"24h": (timedelta(hours=24), timedelta(hours=1)), "7d": (timedelta(days=7), timedelta(hours=6)), "30d": (timedelta(days=30), timedelta(days=1))}
TRAILS_PER_PAGE = 25


class CappedPaginator(Paginator):
    """Counts at most CAP rows: an exact count of a text search over a scope's 100,000
    trails scans them all a second time (350 ms p90 in benchmark_overview)."""

    CAP = 10_000

    @cached_property
    def count(self) -> int:
        return self.object_list[: self.CAP + 1].count()

    @property
    def capped(self) -> bool:
        return self.count > self.CAP
SORTS = {"last_hit": F("last_hit_at").desc(nulls_last=True), "hits": F("hit_count").desc(), "age": F("created_at").desc()}


def staff_required(view):
    """Anonymous users go to the login page; signed-in users who are not staff get a 403."""

    @wraps(view)
    def checked(request: HttpRequest, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not (request.user.is_active and request.user.is_staff):
            return HttpResponseForbidden("Operator pages are for staff users.")
        return view(request, *args, **kwargs)

    return checked


# The most rows one CSV export streams.
CSV_ROW_LIMIT = 100_000


def _csv_cell(value) -> str:
    """A value for a spreadsheet: times in UTC ISO form, and text that a spreadsheet
    would run as a formula (caller-written queries may start with = + - @) quoted."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.astimezone(dt_timezone.utc).isoformat()
    text = str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def csv_response(filename: str, header: list[str], rows: Iterable[Iterable]) -> StreamingHttpResponse:
    """Streams rows as CSV (a download), so a large export never sits in memory."""

    class Line:
        def write(self, value: str) -> str:
            return value

    writer = csv.writer(Line())

    def lines():
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow([_csv_cell(v) for v in row])

    response = StreamingHttpResponse(lines(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def wants_csv(request: HttpRequest) -> bool:
    return request.GET.get("format") == "csv"


def scope_or_404(slug: str) -> Scope:
    """The one lookup of a page's scope by the slug in its URL (staff see every scope)."""
    return get_object_or_404(Scope, slug=slug)


LAST_SCOPE = "ops_last_scope"


def operator_scopes():
    # Scopes the benchmarks and the evaluation make (and drop when done) are never offered.
    return Scope.objects.filter(scratch=False)


def _scope_page(request: HttpRequest, template: str, scope: Scope | None, context: dict, status: int = 200) -> HttpResponse:
    if scope is not None and scope.pk:
        request.session[LAST_SCOPE] = scope.slug  # /ops/ opens it next time
    context = {"scope": scope, "scopes": operator_scopes().only("slug", "name"), **context}
    return render(request, template, context, status=status)


def _last_scope(request: HttpRequest) -> Scope | None:
    """The scope this operator last looked at; else the one the latest trail was recorded
    in (a scope in use, not the newest empty one); else any."""
    scopes = operator_scopes()
    remembered = request.session.get(LAST_SCOPE)
    found = scopes.filter(slug=remembered).first() if remembered else None
    if found is None:
        latest = Trail.objects.filter(scope__in=scopes).order_by("-id").values_list("scope_id", flat=True).first()
        found = scopes.filter(pk=latest).first() if latest else scopes.first()
    return found


@staff_required
@require_GET
def index(request: HttpRequest) -> HttpResponse:
    found = _last_scope(request)
    if found is None:
        return render(request, "trails/no_scopes.html")
    return redirect("ops:overview", scope=found.slug)


@staff_required
@require_GET
def overview(request: HttpRequest, scope: str) -> HttpResponse:
    found = scope_or_404(scope)
    window = request.GET.get("window", "24h")
    if window not in WINDOWS:
        window = "24h"
    span, bucket = WINDOWS[window]
    now = timezone.now()
    end = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    start = end - span
    if bucket >= timedelta(days=1):
        # Daily buckets start at midnight so a day's bar is that calendar day.
        start = start.replace(hour=0)
    rows = RecallStat.hourly(found, start - span)
    current_rows = [r for r in rows if r.hour >= start]
    data = charts.series(current_rows, start, end, bucket)
    matching = matching_settings(found)
    thresholds = {
        name: value for name, value, used in (
            ("embedding", matching.embedding_threshold, found.uses_embedding), ("lexical", matching.lexical_threshold, found.uses_lexical)
        ) if used
    }
    figures = {
        "outcomes": charts.outcomes_figure(data, reverse("ops:recalls", args=[found.slug]), bucket),
        "hit-rate": charts.hit_rate_figure(data),
        "similarity": charts.similarity_figure(SimilarityStat.histogram(found, start), SIMILARITY_BINS, thresholds),
    }
    totals = charts.totals(current_rows)
    # The window before, for comparison (the same roll-up rows, read once).
    previous = charts.totals(r for r in rows if start - span <= r.hour < start)
    judged = RecallEvent.objects.filter(scope=found, feedback_at__gte=start).aggregate(
        judged=Count("id"), reported=Count("id", filter=Q(helpful=False))
    )
    voted_down = TrailSignal.objects.filter(
        trail__scope=found, created_at__gte=start, signal__in=[Signal.DOWN, Signal.REPORTED]
    ).aggregate(down=Count("id", filter=Q(signal=Signal.DOWN)), reported=Count("id", filter=Q(signal=Signal.REPORTED)))
    try:
        tool_counts, tool_error = tool_results.lookup_counts(found), ""
    except Refused as refused:
        tool_counts, tool_error = {}, refused.message
    return _scope_page(request, "trails/overview.html", found, {
        "judged": judged["judged"],
        "false_hit_reports": judged["reported"],
        "voted_down": voted_down["down"],
        "reported_to_pending": voted_down["reported"],
        "previous": previous,
        "tool_counts": {tool: counts for tool, counts in tool_counts.items() if any(counts.values())},
        "tool_error": tool_error,
        "window": window,
        "windows": list(WINDOWS),
        "totals": totals,
        **{f"{outcome}_share": totals.share(outcome) for outcome in charts.OUTCOMES},
        "pending": Trail.objects.filter(scope=found, status=TrailStatus.PENDING, expires_at__gt=now).count(),
        "last_hour": RecallStat.last_hour(found),
        "figures": figures,
        "tab": "overview",
        **threshold_context(found),
    })


def threshold_context(scope: Scope) -> dict:
    """The thresholds configured and in use, why the scope waits for an operator (if it
    does), and the latest moves with their evidence."""
    return {
        "thresholds_in_use": [
            {"matcher": matcher, "configured": getattr(scope, f"{matcher}_threshold"), "in_use": thresholds.in_use(scope, matcher),
             "ceiling": calibration.limits_for(matcher, getattr(scope, f"{matcher}_threshold")).ceiling}
            for matcher in thresholds.used_matchers(scope)
        ],
        "threshold_flags": [thresholds.describe_flag(flag) for flag in scope.threshold_flags.split(",") if flag],
        "threshold_changes": list(ThresholdChange.objects.filter(scope=scope)[:5]),
    }


@staff_required
@require_POST
def threshold_action(request: HttpRequest, scope: str) -> HttpResponse:
    """Reset the learned threshold, or pin / unpin the configured one: recorded with who."""
    found = scope_or_404(scope)
    action, by = request.POST.get("action"), request.user.get_username()
    if action == "reset":
        thresholds.reset_learning(found, by=by)
        messages.info(request, "Learned thresholds reset: the configured ones are in use, and labels so far are set aside.")
    elif action in ("pin", "unpin"):
        thresholds.pin_thresholds(found, by=by, pinned=action == "pin")
        messages.info(request, "Configured thresholds pinned: labels no longer move them." if action == "pin"
                      else "Learning on again, from labels given from now on.")
    else:
        return HttpResponse("action must be reset, pin or unpin", status=400)
    return redirect(reverse("ops:overview", args=[scope]) + "#thresholds")


def _filtered_trails(scope: Scope, form: TrailFilterForm):
    now = timezone.now()
    trails = Trail.objects.filter(scope=scope).only(
        "public_id", "query", "status", "hit_count", "last_hit_at", "created_at", "expires_at", "section_changed_at"
    )
    status = form.cleaned_data.get("status") if form.is_valid() else ""
    if status:
        trails = trails.showing(status, now)
    text = form.cleaned_data.get("q") if form.is_valid() else ""
    if text and _uuids([text.strip()]):
        trails = trails.filter(public_id=text.strip())  # a trail id pasted from a log or an agent
    elif text:
        trails = trails.filter(query__icontains=text)
    section = form.cleaned_data.get("section") if form.is_valid() else ""
    if section:
        # Every trail citing a section, on the (scope, section_id) index of citations.
        trails = trails.filter(id__in=Citation.objects.filter(scope=scope, section_id=section.strip()).values("trail_id"))
    sort = (form.cleaned_data.get("sort") if form.is_valid() else "") or "age"
    return trails.order_by(SORTS[sort], "-id")


def _trail_table(request: HttpRequest, scope: Scope, form: TrailFilterForm, notice: str = "") -> dict:
    page = CappedPaginator(_filtered_trails(scope, form), TRAILS_PER_PAGE).get_page(request.GET.get("page"))
    _triage(scope, list(page))
    query = request.GET.copy()
    query.pop("page", None)
    statuses = {t.status for t in page}
    return {"page": page, "form": form, "filters": query.urlencode(), "notice": notice,
            "has_pending": TrailStatus.PENDING in statuses, "has_stale": TrailStatus.STALE in statuses,
            "has_rejected": TrailStatus.REJECTED in statuses}


def _triage(scope: Scope, trails: list[Trail]) -> None:
    """Gives each row of a page what triage needs, in three reads for the whole page:
    `cited` (section ids), `would` (what recall would do now from the cited sections'
    state) and, on pending rows, `pii` (rules of the purge that match what it holds)."""
    by_id = {t.id: t for t in trails}
    for trail in trails:
        trail.cited, trail.pii = [], []
    citations = Citation.objects.filter(trail_id__in=list(by_id)).order_by("trail_id", "position").values_list("trail_id", "section_id", "hash")
    recorded: dict[int, list[CoreCitation]] = {}
    for trail_id, section_id, recorded_hash in citations:
        by_id[trail_id].cited.append(section_id)
        recorded.setdefault(trail_id, []).append(CoreCitation(section_id, recorded_hash))
    current = {
        s.section_id: CurrentSection(s.hash, s.text)
        for s in Section.objects.filter(scope=scope, section_id__in={c.section_id for cs in recorded.values() for c in cs})
    }
    for trail in trails:
        trail.would = validate(recorded.get(trail.id, []), current).outcome.value
    pending = [t.id for t in trails if t.status == TrailStatus.PENDING]
    if pending:
        rules = scope_rules(scope.id)
        for trail in trails_to_check(scope.id, pending):
            names, _ = purge_findings(trail, rules)
            by_id[trail.id].pii = sorted(names)


@staff_required
@require_GET
def trail_list(request: HttpRequest, scope: str) -> HttpResponse:
    found = scope_or_404(scope)
    form = TrailFilterForm(request.GET)
    if wants_csv(request):
        rows = _filtered_trails(found, form).values_list(
            "public_id", "status", "query", "hit_count", "last_hit_at", "created_at", "expires_at", "section_changed_at"
        )[:CSV_ROW_LIMIT]
        return csv_response(f"{found.slug}-trails.csv", ["trail_id", "status", "query", "hits", "last_hit_at", "created_at",
                                                         "expires_at", "section_changed_at"], rows.iterator())
    context = _trail_table(request, found, form)
    if request.htmx:
        return render(request, "trails/trail_list.html#table", {"scope": found, **context})
    return _scope_page(request, "trails/trail_list.html", found, {**context, "tab": "trails"})


def _trail(scope: str, trail_id) -> Trail:
    return get_object_or_404(Trail.objects.select_related("scope"), scope__slug=scope, public_id=trail_id)


def _line_diff(old: str, new: str) -> list[tuple[str, str]]:
    """(kind, line) pairs of a line diff, kind being "+", "-" or " "."""
    lines = []
    for line in difflib.ndiff(old.splitlines(), new.splitlines()):
        if line[:1] in "+- ":
            lines.append((line[:1], line[2:]))
    return lines


@staff_required
@require_GET
def trail_detail(request: HttpRequest, scope: str, trail_id) -> HttpResponse:
    trail = _trail(scope, trail_id)
    citations = list(trail.citations.all())
    current = Section.objects.current(trail.scope, [c.section_id for c in citations])
    validation = validate(
        [CoreCitation(c.section_id, c.hash) for c in citations], {sid: CurrentSection(s.hash, s.text) for sid, s in current.items()}
    )
    old_texts = {
        (r.section_id, r.hash): r.text
        for r in SectionRevision.objects.filter(scope=trail.scope, section_id__in=[c.section_id for c in citations])
    }
    rows = []
    for citation, checked in zip(citations, validation.sections):
        section = current.get(citation.section_id)
        old = old_texts.get((citation.section_id, citation.hash))
        rows.append({
            "section_id": citation.section_id,
            "stored_hash": citation.hash,
            "current_hash": section.hash if section else None,
            "status": checked.status.value,
            "text": section.text if section else "",
            "diff": _line_diff(old, section.text if section else "") if checked.status is not SectionStatus.VALID and old is not None else None,
            "old_missing": checked.status is not SectionStatus.VALID and old is None,
        })
    return _scope_page(request, "trails/trail_detail.html", trail.scope, {
        "trail": trail,
        "steps": [(step, json.dumps(step.args, ensure_ascii=False)) for step in trail.steps.all()],
        "citations": rows,
        "outcome": validation.outcome.value,
        "signals": trail.signals.all(),
        # The recalls this trail answered, newest first, and how closely they matched.
        "recalls": trail.recall_events.order_by("-created_at", "-id").only(
            "public_id", "created_at", "outcome", "similarity", "matcher", "helpful", "trail_id"
        )[:20],
        "tab": "trails",
    })


@staff_required
@require_POST
def trail_vote(request: HttpRequest, scope: str, trail_id) -> HttpResponse:
    trail = _trail(scope, trail_id)
    action = request.POST.get("vote", "")
    error = ""
    try:
        trail.act(action, by=request.user.get_username(), reason=request.POST.get("reason", "").strip()[:500])
    except ActionRefused as problem:
        error = str(problem)
    if trail.status == "deleted":
        return redirect(reverse("ops:trails", args=[scope]))
    if request.htmx:
        _triage(trail.scope, [trail])
        return render(request, "trails/trail_list.html#row", {"scope": trail.scope, "trail": trail, "row_error": error})
    if error:
        return HttpResponse(error, status=400)
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        back = reverse("ops:trail", args=[scope, trail.public_id])
    return redirect(back)


@staff_required
@require_POST
def trail_bulk_vote(request: HttpRequest, scope: str) -> HttpResponse:
    """Acts on the selected rows where the action applies: approve or reject pending
    trails, reinstate rejected ones, delete stale ones."""
    found = scope_or_404(scope)
    action = request.POST.get("vote")
    ids = _uuids(request.POST.getlist("trail"))
    form = TrailFilterForm(request.GET)
    done = {Signal.UP: "approved", Signal.DOWN: "rejected", Signal.REINSTATE: "reinstated (pending again)",
            Signal.DEMOTE: "sent back to pending", "delete": "deleted"}
    if action not in TRAIL_ACTIONS:
        notice = "Choose approve, reject, reinstate, send back or delete."
    elif not ids:
        notice = "Select the trails to act on first."
    else:
        changed, _ = Trail.objects.filter(scope=found, public_id__in=ids).act(action, by=request.user.get_username())
        skipped = len(ids) - changed
        notice = f"{changed} trail{'s' if changed != 1 else ''} {done[action]}." + (
            f" {skipped} selected trail{'s' if skipped != 1 else ''} left as {'they were' if skipped != 1 else 'it was'}: "
            f"the action does not apply to {'their' if skipped != 1 else 'its'} status." if skipped else ""
        )
    if request.htmx:
        return render(request, "trails/trail_list.html#table", {"scope": found, **_trail_table(request, found, form, notice)})
    return redirect(reverse("ops:trails", args=[scope]) + ("?" + request.GET.urlencode() if request.GET else ""))


def _uuids(values: list[str]) -> list[str]:
    valid = []
    for value in values:
        try:
            valid.append(str(uuid.UUID(value)))
        except ValueError:
            continue
    return valid


@staff_required
@require_http_methods(["GET", "POST"])
def replay(request: HttpRequest, scope: str) -> HttpResponse:
    """A question is posted, never put in the URL: server and proxy logs keep URLs."""
    found = scope_or_404(scope)
    result, status = None, 200
    data = request.POST if request.method == "POST" else None
    if request.method == "GET" and request.GET.get("trail"):
        # "Replay now" from a trail names the trail in the URL, never its question.
        source = Trail.objects.filter(scope=found, public_id__in=_uuids([request.GET["trail"]])).first()
        if source is not None:
            data = {"query": source.query, "partition": source.partition}
    elif request.method == "GET" and request.GET.get("recall"):
        # From the recall log: the event's id in the URL, its kept query read here.
        event = RecallEvent.objects.filter(scope=found, public_id__in=_uuids([request.GET["recall"]])).exclude(query="").first()
        if event is not None:
            data = {"query": event.query, "partition": ""}
    form = ReplayForm(data)
    form.fields["token_budget"].widget.attrs["placeholder"] = str(found.token_budget)
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        try:
            answer = recall(found, data["query"], data["partition"] or "", data["token_budget"], dry_run=True, explain=True)
        except Refused as refused:
            form.add_error(refused.field or None, refused.message)
            status = 422
        else:
            trail = Trail.objects.filter(id=answer.trail.id).first() if answer.trail else None
            # What the agent would receive: the explanation is the operator's.
            sent = {k: v for k, v in recall_json(answer).items() if k != "explanation"}
            result = {"answer": answer, "trail": trail, "why": answer.explanation,
                      "json": json.dumps(sent, indent=2, ensure_ascii=False)}
    elif form.is_bound:
        status = 422
    return _scope_page(request, "trails/replay.html", found, {"form": form, "result": result, "tab": "replay"}, status)


RECALLS_PER_PAGE = 50


@staff_required
@require_GET
def recall_log(request: HttpRequest, scope: str) -> HttpResponse:
    """Recent recalls, newest first, filtered; pages by id (no count over a million rows)."""
    found = scope_or_404(scope)
    form = RecallLogFilterForm(request.GET or None)
    events = RecallEvent.objects.filter(scope=found).select_related("trail").only(
        "id", "public_id", "created_at", "outcome", "similarity", "matcher", "latency_ms", "query", "helpful",
        "feedback_reason", "trail__public_id", "trail__query",
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
        if f["before"]:
            events = events.filter(id__lt=f["before"])
    if wants_csv(request):
        fields = ["public_id", "created_at", "outcome", "similarity", "matcher", "trail__public_id", "latency_ms", "helpful", "feedback_reason"]
        if found.keep_raw_queries:
            fields.append("query")
        rows = events.order_by("-created_at", "-id").values_list(*fields)[:CSV_ROW_LIMIT]
        header = ["recall_id", "time_utc", "outcome", "similarity", "matcher", "trail_id", "latency_ms", "helpful", "feedback_reason"]
        return csv_response(f"{found.slug}-recalls.csv", header + (["query"] if found.keep_raw_queries else []), rows.iterator())
    rows = list(events.order_by("-created_at", "-id")[: RECALLS_PER_PAGE + 1])
    older = None
    if len(rows) > RECALLS_PER_PAGE:
        rows = rows[:RECALLS_PER_PAGE]
        query = request.GET.copy()
        query["before"] = rows[-1].id
        older = query.urlencode()
    return _scope_page(request, "trails/recall_log.html", found, {
        "form": form, "events": rows, "older": older, "tab": "recalls", "keeps_queries": found.keep_raw_queries,
    })


@staff_required
@require_http_methods(["GET", "POST"])
def purge(request: HttpRequest, scope: str) -> HttpResponse:
    """Preview stores the matched trails on a run; confirming runs that run, whatever the
    form's fields say by then."""
    found = scope_or_404(scope)
    if request.method == "GET" and wants_csv(request):
        # The audit log: who purged what rule when, never the purged text.
        runs = PurgeRun.objects.filter(scope=found).exclude(state=PurgeRun.State.PREVIEWED).values_list(
            "public_id", "created_at", "requested_by", "rule", "action", "state", "total", "matched", "finished_at"
        )[:CSV_ROW_LIMIT]
        return csv_response(f"{found.slug}-purge-audit.csv", ["run_id", "created_at", "requested_by", "rule", "action", "state",
                                                              "checked", "matched", "finished_at"], runs.iterator())
    form = PurgeForm(request.POST or None)
    preview, status, problem = None, 200, ""
    if request.method == "POST" and request.POST.get("step") == "run":
        run = PurgeRun.objects.filter(
            scope=found, public_id__in=_uuids([request.POST.get("run", "")]), state=PurgeRun.State.PREVIEWED
        ).first()
        if run is not None:
            return _start_purge(request, run)
        form, status, problem = PurgeForm(), 422, "Preview the purge first; only a previewed purge runs (or it already ran)."
    elif request.method == "POST":
        if not form.is_valid():
            status = 422
        else:
            data = form.cleaned_data
            run = PurgeRun.request(found, data["subject"], data["action"] == PurgeRun.Action.DELETE, request.user.get_username())
            run.state = PurgeRun.State.PREVIEWED
            count, shown = preview_purge(run)
            run.save()
            preview = {"count": count, "shown": shown, "run": run, "verb": "deleted" if run.action == PurgeRun.Action.DELETE else "redacted"}
    runs = list(PurgeRun.objects.filter(scope=found).exclude(state=PurgeRun.State.PREVIEWED)[:50])
    shown_id = request.GET.get("run")
    return _scope_page(request, "trails/purge.html", found, {
        "form": form, "preview": preview, "runs": runs, "tab": "purge", "problem": problem,
        "watched": [r for r in runs if r.state not in (PurgeRun.State.DONE, PurgeRun.State.FAILED) or str(r.public_id) == shown_id],
    }, status)


def _start_purge(request: HttpRequest, run: PurgeRun) -> HttpResponse:
    """Small sets are purged in the request; larger ones go to a worker and the page shows
    progress. A run that cannot be queued fails at once, keeping no subject."""
    run.state = PurgeRun.State.QUEUED
    run.save(update_fields=["state"])
    if run.total <= settings.RAGTRAIL_PURGE_INLINE_LIMIT:  # the previewed set's size
        run_purge(run.id)
    else:
        try:
            purge_task.delay(run.id)
        except Exception as problem:  # the broker is away: say so, never leave it queued
            logger.error("purge %s could not be queued: %s", run.public_id, problem)
            run.fail(f"could not be queued: the job broker did not answer ({type(problem).__name__})")
            messages.error(request, "The purge could not be queued: the job broker is not answering. Nothing was purged; preview it again to retry.")
    return redirect(reverse("ops:purge", args=[run.scope.slug]) + f"?run={run.public_id}")


@staff_required
@require_GET
def purge_progress(request: HttpRequest, scope: str, run_id) -> HttpResponse:
    run = get_object_or_404(PurgeRun, scope__slug=scope, public_id=run_id)
    return render(request, "trails/purge.html#progress", {"run": run, "scope": run.scope})


def _report_folders() -> list:
    root = settings.RAGTRAIL_REPORTS_DIR
    return sorted((p.parent for p in root.glob("*/report.json")), key=lambda p: p.name, reverse=True) if root.is_dir() else []


@staff_required
@require_GET
def reports(request: HttpRequest) -> HttpResponse:
    entries = []
    for folder in _report_folders()[:50]:
        try:
            report = json.loads((folder / "report.json").read_text())
        except (OSError, ValueError):
            entries.append({"name": folder.name, "broken": True})
            continue
        entries.append({
            "name": folder.name, "report": report, "has_html": (folder / "report.html").is_file(),
            "headline": report.get("headline", []),
        })
    # The Evaluation page keeps the operator's scope in the navigation.
    return _scope_page(request, "trails/reports.html", _last_scope(request), {
        "entries": entries, "root": settings.RAGTRAIL_REPORTS_DIR, "tab": "reports",
    })


@staff_required
@require_GET
def report_html(request: HttpRequest, name: str) -> HttpResponse:
    folder = next((f for f in _report_folders() if f.name == name), None)
    if folder is None or not (folder / "report.html").is_file():
        return HttpResponse("No such report.", status=404)
    return HttpResponse((folder / "report.html").read_bytes(), content_type="text/html; charset=utf-8")
