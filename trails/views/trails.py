"""The trails table and triage (filters, bulk votes), and one trail's page."""

from __future__ import annotations

import difflib
import json

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Count, F, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from scopes.access import Access, may
from scopes.models import Scope, Section, SectionRevision
from trails.core.lifecycle import VERBS, Actor
from trails.core.validation import SectionStatus, validate
from trails.models import ActionRefused, Citation, Signal, Trail, TrailReport, TrailStatus, validations_now, writes
from trails.upkeep.purge import findings as purge_findings
from trails.upkeep.purge import scope_rules, trails_to_check
from trails.views.common import (
    CSV_ROW_LIMIT,
    ID_PART,
    confirmed_or_ask,
    csv_response,
    scope_or_404,
    scope_page,
    staff_required,
    uuids,
    wants_csv,
    what_recall_gives,
)
from trails.views.forms import TrailFilterForm

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


SORTS = {
    "last_hit": F("last_hit_at").desc(nulls_last=True),
    "hits": F("hit_count").desc(),
    "age": F("created_at").desc(),
}


def _filtered_trails(scope: Scope, form: TrailFilterForm):
    now = timezone.now()
    trails = Trail.objects.filter(scope=scope).only(
        "public_id",
        "query",
        "normalised_query",
        "status",
        "hit_count",
        "last_hit_at",
        "created_at",
        "expires_at",
        "section_changed_at",
        "stale_at",
        "reason",
        "held_by",
    )
    status = form.cleaned_data.get("status") if form.is_valid() else ""
    if status:
        trails = trails.showing(status, now)
    text = form.cleaned_data.get("q") if form.is_valid() else ""
    if text and uuids([text.strip()]):
        trails = trails.filter(public_id=text.strip())  # a trail id pasted from a log or an agent
    elif text and ID_PART.fullmatch(text.strip().lower()):
        # Part of a trail id (a log's first eight characters) or of a question.
        trails = trails.filter(Q(query__icontains=text) | Q(public_id__icontains=text.strip().lower()))
    elif text:
        trails = trails.filter(query__icontains=text)
    section = form.cleaned_data.get("section") if form.is_valid() else ""
    if section:
        # Every trail citing a section, on the (scope, section_id) index of citations; a value
        # ending in * is an id prefix ("faq/programming.rst*": every section of a page), which
        # the index serves only under a C collation: slower on a huge scope, so asked for.
        wanted = section.strip()
        cited = (
            Citation.objects.filter(scope=scope, section_id__startswith=wanted[:-1])
            if wanted.endswith("*")
            else Citation.objects.filter(scope=scope, section_id=wanted)
        )
        # The citing ids are read first (the citations index), at most what the table counts:
        # as a subquery, a fresh table's statistics led PostgreSQL to a plan past the
        # statement timeout at 100,000 trails (benchmark_overview).
        trails = trails.filter(id__in=list(cited.values_list("trail_id", flat=True)[: CappedPaginator.CAP + 1]))
    flag = form.cleaned_data.get("flag") if form.is_valid() else ""
    if flag == "reported":
        trails = trails.filter(status=TrailStatus.PENDING, signals__signal=Signal.REPORTED).distinct()
    elif flag:
        trails = trails.filter(id__in=_pending_flagged(scope, flag))
    since = form.cleaned_data.get("since") if form.is_valid() else None
    if since:
        trails = trails.since(status, flag, since)
    sort = (form.cleaned_data.get("sort") if form.is_valid() else "") or "age"
    return trails.order_by(SORTS[sort], "-id")


# The pending queue is judged whole for the triage filters, up to this many trails (newest).
TRIAGE_LIMIT = 5_000


def _pending_flagged(scope: Scope, flag: str) -> list[int]:
    """Ids of the newest pending trails that would miss / hint once approved, or may hold
    personal data: the same judgement the rows show, over the whole queue, in three reads."""
    newest = (
        Trail.objects.filter(scope=scope, status=TrailStatus.PENDING)
        .order_by("-id")
        .values_list("id", flat=True)[:TRIAGE_LIMIT]
    )
    if flag == "pii":
        rules = scope_rules(scope.id)
        return [t.id for t in trails_to_check(scope.id, list(newest)) if purge_findings(t, rules)[0]]
    _, would = what_recall_gives(scope, newest)
    wanted = {"would_miss": "miss", "would_hint": "hint"}[flag]
    # Read in one statement with the citations: a trail recorded meanwhile is in neither.
    return [trail_id for trail_id, outcome in would.items() if outcome == wanted]


def _trail_table(request: HttpRequest, scope: Scope, form: TrailFilterForm, notice: str = "") -> dict:
    page = CappedPaginator(_filtered_trails(scope, form), TRAILS_PER_PAGE).get_page(request.GET.get("page"))
    _triage(scope, list(page))
    query = request.GET.copy()
    query.pop("page", None)
    statuses = {t.status for t in page}
    return {
        "page": page,
        "form": form,
        "filters": query.urlencode(),
        "notice": notice,
        "has_pending": TrailStatus.PENDING in statuses,
        "has_stale": TrailStatus.STALE in statuses,
        "has_rejected": TrailStatus.REJECTED in statuses,
    }


def _triage(scope: Scope, trails: list[Trail]) -> None:
    """Gives each row of a page what triage needs, in three reads for the whole page:
    `cited` (section ids), `would` (what recall would do now from the cited sections'
    state) and, on pending rows, `pii` (rules of the purge that match what it holds)."""
    by_id = {t.id: t for t in trails}
    cited, would = what_recall_gives(scope, by_id)
    for trail in trails:
        trail.cited, trail.pii, trail.alike = cited.get(trail.id, []), [], 0
        trail.would = would.get(trail.id, "miss")  # nothing cited: nothing to serve
    pending = [t.id for t in trails if t.status == TrailStatus.PENDING]
    if pending:
        # Near-duplicates in the queue: other pending trails asking the same question (after
        # normalisation), so they can be judged together.
        asked = {by_id[t].normalised_query for t in pending}
        alike = dict(
            Trail.objects.filter(scope=scope, status=TrailStatus.PENDING, normalised_query__in=asked)
            .values_list("normalised_query")
            .annotate(n=Count("id"))
        )
        for trail_id in pending:
            by_id[trail_id].alike = alike.get(by_id[trail_id].normalised_query, 1) - 1
        rules = scope_rules(scope.id)
        for trail in trails_to_check(scope.id, pending):
            names, _ = purge_findings(trail, rules)
            by_id[trail.id].pii = sorted(names)


@staff_required
@require_GET
def trail_list(request: HttpRequest, scope_slug: str) -> HttpResponse:
    scope = scope_or_404(request, scope_slug)
    form = TrailFilterForm(request.GET)
    if wants_csv(request):
        rows = _filtered_trails(scope, form).values_list(
            "public_id", "status", "query", "hit_count", "last_hit_at", "created_at", "expires_at", "section_changed_at"
        )[:CSV_ROW_LIMIT]
        return csv_response(
            f"{scope.slug}-trails.csv",
            ["trail_id", "status", "query", "hits", "last_hit_at", "created_at", "expires_at", "section_changed_at"],
            rows.iterator(),
        )
    context = _trail_table(request, scope, form)
    if request.htmx:
        return render(
            request,
            "trails/trails/trail_list.html#table",
            {"scope": scope, "can_act": may(request.user, scope, Access.ACT), **context},
        )
    return scope_page(request, "trails/trails/trail_list.html", scope, {**context, "tab": "trails"})


def _trail(request: HttpRequest, scope_slug: str, trail_id, access: int = Access.VIEW) -> Trail:
    scope = scope_or_404(request, scope_slug, access)
    return get_object_or_404(Trail.objects.select_related("scope"), scope=scope, public_id=trail_id)


def _line_diff(old: str, new: str) -> list[tuple[str, str]]:
    """(kind, line) pairs of a line diff, kind being "+", "-" or " "."""
    lines = []
    for line in difflib.ndiff(old.splitlines(), new.splitlines()):
        if line[:1] in "+- ":
            lines.append((line[:1], line[2:]))
    return lines


@staff_required
@require_GET
def trail_detail(request: HttpRequest, scope_slug: str, trail_id) -> HttpResponse:
    trail = _trail(request, scope_slug, trail_id)
    citations = list(trail.citations.all())
    current = Section.objects.current(trail.scope, [c.section_id for c in citations])
    validation = validations_now(trail.scope, [trail.id]).get(trail.id) or validate([], {})
    old_texts = {
        (r.section_id, r.hash): r.text
        for r in SectionRevision.objects.filter(scope=trail.scope, section_id__in=[c.section_id for c in citations])
    }
    rows = []
    for citation, checked in zip(citations, validation.sections):
        section = current.get(citation.section_id)
        old = old_texts.get((citation.section_id, citation.hash))
        rows.append(
            {
                "section_id": citation.section_id,
                "stored_hash": citation.hash,
                "current_hash": section.hash if section else None,
                "status": checked.status.value,
                "text": section.text if section else "",
                "diff": _line_diff(old, section.text if section else "")
                if checked.status is not SectionStatus.VALID and old is not None
                else None,
                "old_missing": checked.status is not SectionStatus.VALID and old is None,
            }
        )
    return scope_page(
        request,
        "trails/trails/trail_detail.html",
        trail.scope,
        {
            "trail": trail,
            "steps": [(step, json.dumps(step.args, ensure_ascii=False)) for step in trail.steps.all()],
            "citations": rows,
            "outcome": validation.outcome.value,
            "signals": trail.signals.all(),
            "undoable": trail.undoable() is not None,
            "actions": trail.available_actions(Actor.OPERATOR),
            "reporters": list(
                TrailReport.objects.filter(trail_id=trail.pk).order_by("created_at").values_list("reporter", flat=True)
            ),
            # The recalls this trail answered, newest first, and how closely they matched.
            "recalls": trail.recall_events.order_by("-created_at", "-id").only(
                "public_id", "created_at", "outcome", "similarity", "matcher", "helpful", "trail_id"
            )[:20],
            "tab": "trails",
        },
    )


@staff_required
@require_POST
def trail_vote(request: HttpRequest, scope_slug: str, trail_id) -> HttpResponse:
    trail = _trail(request, scope_slug, trail_id, Access.ACT)
    action = request.POST.get("vote", "")
    if action == "delete" and (
        asked := confirmed_or_ask(
            request,
            trail.scope,
            "Delete this trail?",
            f"“{trail.query[:100]}”: its history and reports go with it; this cannot be undone.",
            reverse("ops:trail", args=[scope_slug, trail.public_id]),
        )
    ):
        return asked
    if action == "up" and not request.htmx and request.POST.get("confirm") != "yes":
        # htmx's dialog asks on the row; without JavaScript this page asks the same.
        _, would = what_recall_gives(trail.scope, {trail.id: trail})
        would = would.get(trail.id, "miss")
        if would != "prefetch" and trail.status != TrailStatus.ACTIVE:
            return confirmed_or_ask(
                request,
                trail.scope,
                "Approve anyway?",
                f"Its cited sections have changed: once approved, recall would give a {would}, not the sections.",
                reverse("ops:trail", args=[scope_slug, trail.public_id]),
            )
    error = ""
    try:
        if action == "undo":
            messages.info(request, writes.undo(trail, Actor.OPERATOR, by=request.user.get_username()))
        else:
            writes.act(
                trail,
                action,
                Actor.OPERATOR,
                by=request.user.get_username(),
                reason=request.POST.get("reason", "").strip()[:500],
            )
    except ActionRefused as problem:
        error = str(problem)
    if trail.status == "deleted":
        if request.htmx:  # the row swapped for nothing: it is gone
            return HttpResponse("")
        messages.info(request, "The trail was deleted.")
        back = request.POST.get("next", "")  # the table's filters, where the row's form came from
        if not back.startswith(reverse("ops:trails", args=[scope_slug])) or not url_has_allowed_host_and_scheme(
            back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            back = reverse("ops:trails", args=[scope_slug])
        return redirect(back)
    if request.htmx:
        _triage(trail.scope, [trail])
        return render(
            request,
            "trails/trails/trail_list.html#row",
            {"scope": trail.scope, "trail": trail, "row_error": error, "can_act": True},
        )  # the vote was allowed: the operator may act
    if error:
        # Said on the page the operator comes back to, never as a bare error page.
        messages.error(request, f"Nothing was done: {error}.")
    elif action != "undo":  # undo says its own outcome above
        messages.info(request, f"Done ({VERBS[action]}): the trail is {trail.get_status_display().lower()} now.")
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        back = reverse("ops:trail", args=[scope_slug, trail.public_id])
    return redirect(back)


# The status each bulk button names ("Reject selected pending"): its action touches no other, even
# where the lifecycle table would let an operator take it from there (a stale trail rejected).
BULK_ACTS_ON = {
    Signal.UP: TrailStatus.PENDING,
    Signal.DOWN: TrailStatus.PENDING,
    Signal.REINSTATE: TrailStatus.REJECTED,
    Signal.DEMOTE: TrailStatus.ACTIVE,
    "delete": TrailStatus.STALE,
}


def _applicable(scope: Scope, ids: list, action: str):
    """The selected trails of the scope in the status the bulk action names."""
    return Trail.objects.filter(scope=scope, public_id__in=ids, status=BULK_ACTS_ON[action])


@staff_required
@require_POST
def trail_bulk_vote(request: HttpRequest, scope_slug: str) -> HttpResponse:
    """Acts on the selected rows where the action applies: approve or reject pending
    trails, reinstate rejected ones, delete stale ones."""
    scope = scope_or_404(request, scope_slug, Access.ACT)
    action = request.POST.get("vote")
    ids = uuids(request.POST.getlist("trail"))
    form = TrailFilterForm(request.GET)
    done = {
        Signal.UP: "approved",
        Signal.DOWN: "rejected",
        Signal.REINSTATE: "reinstated (pending again)",
        Signal.DEMOTE: "sent back to pending",
        "delete": "deleted",
    }
    if action not in done:
        notice = "Choose approve, reject, reinstate, send back or delete."
    elif not ids:
        notice = "Select the trails to act on first."
    elif action == "delete" and not (
        stale := [str(i) for i in _applicable(scope, ids, action).values_list("public_id", flat=True)]
    ):
        notice = "None of the selected trails is stale: nothing was deleted."
    elif action == "delete" and (
        asked := confirmed_or_ask(
            request,
            scope,
            f"Delete the {len(stale)} selected stale trail{'s' if len(stale) != 1 else ''}?",
            "They are deleted with their history and reports; this cannot be undone. The other selected trails "
            "are left as they are.",
            reverse("ops:trails", args=[scope_slug]) + ("?" + request.GET.urlencode() if request.GET else ""),
            # The confirmed post names the trails counted here: none that went stale meanwhile.
            fields=[("vote", action), *(("trail", trail_id) for trail_id in stale)],
        )
    ):
        return asked
    else:
        changed, _ = writes.act_on_many(
            _applicable(scope, ids, action), action, Actor.OPERATOR, by=request.user.get_username()
        )
        skipped = len(ids) - changed
        notice = f"{changed} trail{'s' if changed != 1 else ''} {done[action]}." + (
            f" {skipped} selected trail{'s' if skipped != 1 else ''} left as {'they were' if skipped != 1 else 'it was'}: "
            f"the action applies to {BULK_ACTS_ON[action].value} trails only."
            if skipped
            else ""
        )
    if request.htmx:
        return render(
            request,
            "trails/trails/trail_list.html#table",
            {
                "scope": scope,
                "can_act": True,  # bulk votes need act
                **_trail_table(request, scope, form, notice),
            },
        )
    messages.info(request, notice)  # without JavaScript, said on the list the operator comes back to
    return redirect(reverse("ops:trails", args=[scope_slug]) + ("?" + request.GET.urlencode() if request.GET else ""))
