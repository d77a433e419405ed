"""Purging personal data: preview, confirm, progress, the audit log."""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from scopes.access import Access, granted_scopes
from trails.core.pii import identifiers
from trails.models import PurgeRun
from trails.tasks import purge_task
from trails.upkeep.purge import preview as preview_purge
from trails.upkeep.purge import preview_records, run_purge
from trails.views.common import CSV_ROW_LIMIT, csv_response, scope_or_404, scope_page, staff_required, uuids, wants_csv
from trails.views.forms import PurgeForm

logger = logging.getLogger(__name__)


@staff_required
@require_http_methods(["GET", "POST"])
def purge(request: HttpRequest, scope_slug: str) -> HttpResponse:
    """Preview stores the matched trails on a run; confirming runs that run, whatever the
    form's fields say by then. Viewing the audit log needs view access; previewing and running
    a purge, act."""
    scope = scope_or_404(request, scope_slug, Access.ACT if request.method == "POST" else Access.VIEW)
    if request.method == "GET" and wants_csv(request):
        # The audit log: who purged what rule when, never the purged text.
        runs = PurgeRun.objects.filter(scope=scope).exclude(state=PurgeRun.State.PREVIEWED)[:CSV_ROW_LIMIT]
        return csv_response(
            f"{scope.slug}-purge-audit.csv",
            [
                "run_id",
                "created_at",
                "requested_by",
                "rule",
                "action",
                "state",
                "checked",
                "changed",
                "left",
                "finished_at",
            ],
            (
                [
                    run.public_id,
                    run.created_at,
                    run.requested_by,
                    run.rule,
                    run.action,
                    run.state,
                    run.checked,
                    run.changed,
                    "; ".join(f"{n} {kind}" for kind, n in (run.left or {}).items()),
                    run.finished_at,
                ]
                for run in runs.iterator()
            ),
        )
    form = PurgeForm(request.POST or None)
    preview, status, problem = None, 200, ""
    if request.method == "POST" and request.POST.get("step") == "run":
        run = PurgeRun.objects.filter(
            scope=scope, public_id__in=uuids([request.POST.get("run", "")]), state=PurgeRun.State.PREVIEWED
        ).first()
        if run is not None:
            return _start_purge(request, run)
        form, status, problem = (
            PurgeForm(),
            422,
            "Preview the purge first; only a previewed purge runs (or it already ran).",
        )
    elif request.method == "POST":
        if not form.is_valid():
            status = 422
        else:
            data = form.cleaned_data
            run = PurgeRun.request(
                scope, data["subject"], data["action"] == PurgeRun.Action.DELETE, request.user.get_username()
            )
            run.state = PurgeRun.State.PREVIEWED
            count, shown, unchecked, deleted = preview_purge(run)
            run.save()
            records = preview_records(run)
            preview = {
                "count": count,
                "redacted": count - deleted,
                "deleted": deleted,
                "shown": shown,
                "unchecked": unchecked,
                "run": run,
                "records": records,
                "any": any(records.values()) or unchecked,
                "confirm": confirm_words(run, count - deleted, deleted),
                "elsewhere": _elsewhere(request, scope, run) if run.subject else None,
                "subject_line": "; ".join(identifiers(run.subject)),
            }
    runs = list(PurgeRun.objects.filter(scope=scope).exclude(state=PurgeRun.State.PREVIEWED)[:50])
    shown_id = request.GET.get("run")
    return scope_page(
        request,
        "trails/purge/purge.html",
        scope,
        {
            "form": form,
            "preview": preview,
            "runs": runs,
            "tab": "purge",
            "problem": problem,
            "watched": [
                r
                for r in runs
                if r.state not in (PurgeRun.State.DONE, PurgeRun.State.FAILED) or str(r.public_id) == shown_id
            ],
        },
        status,
    )


def confirm_words(run: PurgeRun, redacted: int, deleted: int) -> str:
    """The confirm button's words: what the run does to the previewed trails, a trail deleted
    though the action redacts named apart, with why."""

    def trails(n: int) -> str:
        return f"{n} trail{'' if n == 1 else 's'}"

    if run.action == PurgeRun.Action.DELETE:
        return f"Delete {trails(deleted)} and redact the other records"
    if not deleted:
        return f"Redact {trails(redacted)} and the other records"
    why = f"{'its' if deleted == 1 else 'their'} section ids hold the match"
    if not redacted:
        return f"Delete {trails(deleted)} ({why}) and redact the other records"
    return f"Redact {trails(redacted)} and the other records, delete {trails(deleted)} ({why})"


# At most this many other scopes are offered; a preview never scans them (each costs a full preview).
ELSEWHERE_LIMIT = 20


def _elsewhere(request: HttpRequest, scope, run: PurgeRun) -> list[object]:
    """The other scopes this operator may act on, unchecked: an erasure covers one scope, and
    scanning every other one inside this request costs as much as previewing each, so the page
    offers a preview there instead of a count."""
    return list(granted_scopes(request.user, Access.ACT).exclude(pk=scope.pk).order_by("slug")[:ELSEWHERE_LIMIT])


def _start_purge(request: HttpRequest, run: PurgeRun) -> HttpResponse:
    """Small sets are purged in the request; larger ones go to a worker and the page shows
    progress. A run that cannot be queued fails at once, keeping no subject."""
    run.state = PurgeRun.State.QUEUED
    with transaction.atomic():
        run.save(update_fields=["state"])
        run.audit(run.started())
    if run.total <= settings.RAGTRAIL_PURGE_INLINE_LIMIT:  # the previewed set's size
        run_purge(run.id)
    else:
        try:
            purge_task.delay(run.id)
        except Exception as problem:  # the broker is away: say so, never leave it queued
            logger.error("purge %s could not be queued: %s", run.public_id, problem)
            run.fail(f"could not be queued: the job broker did not answer ({type(problem).__name__})")
            messages.error(
                request,
                "The purge could not be queued: the job broker is not answering. Nothing was purged; preview it again to retry.",
            )
    return redirect(reverse("ops:purge", args=[run.scope.slug]) + f"?run={run.public_id}")


@staff_required
@require_GET
def purge_progress(request: HttpRequest, scope_slug: str, run_id) -> HttpResponse:
    run = get_object_or_404(PurgeRun, scope=scope_or_404(request, scope_slug), public_id=run_id)
    return render(request, "trails/purge/purge.html#progress", {"run": run, "scope": run.scope})
