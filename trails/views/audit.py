"""Who did what in a scope: approvals, rejections, send-backs, reinstatements, releases,
threshold resets and pins, purges, docs syncs, keys set aside and settings changed in admin,
newest first; filtered by kind, person and time; as CSV too."""
from __future__ import annotations

from django import forms
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from scopes.models import ApiKey, Scope, SectionSync
from trails.models import PurgeRun, Signal, ThresholdChange, TrailSignal
from trails.views.common import CSV_ROW_LIMIT, csv_response, scope_or_404, scope_page, staff_required, wants_csv

SIGNAL_KINDS = {Signal.UP: "approved", Signal.DOWN: "rejected", Signal.DEMOTE: "sent back", Signal.REINSTATE: "reinstated",
                Signal.RELEASED: "released"}
KINDS = [*SIGNAL_KINDS.values(), "threshold", "purge", "docs sync", "key set aside", "settings changed"]
PER_SOURCE = 500  # newest rows read from each source; the page shows the newest of them all


class AuditFilterForm(forms.Form):
    kind = forms.ChoiceField(choices=[("", "any"), *((k, k) for k in KINDS)], required=False)
    who = forms.CharField(max_length=150, required=False, label="Who")
    since = forms.DateTimeField(required=False, label="From (UTC)")
    until = forms.DateTimeField(required=False, label="Until (UTC)")


def entries(scope: Scope, since=None, until=None) -> list[dict]:
    """Every recorded act on the scope, newest first: {at, who, kind, what, link}."""
    def window(rows, field="created_at"):
        if since:
            rows = rows.filter(**{f"{field}__gte": since})
        if until:
            rows = rows.filter(**{f"{field}__lt": until})
        return rows.order_by(f"-{field}")[:PER_SOURCE]

    found = []
    signals = TrailSignal.objects.filter(trail__scope=scope, source=TrailSignal.Source.OPERATOR,
                                         signal__in=list(SIGNAL_KINDS)).select_related("trail")
    for s in window(signals):
        found.append({"at": s.created_at, "who": s.by, "kind": SIGNAL_KINDS[s.signal],
                      "what": f"{s.trail.query[:100]}{f' ({s.reason})' if s.reason else ''}",
                      "link": reverse("ops:trail", args=[scope.slug, s.trail.public_id])})
    for c in window(ThresholdChange.objects.filter(scope=scope)):
        moved = f": {c.before} → {c.after}" if c.before is not None and c.after is not None else ""
        found.append({"at": c.created_at, "who": c.by or "the service", "kind": "threshold",
                      "what": f"{c.matcher or 'settings'} · {c.get_kind_display()}{moved}", "link": ""})
    for run in window(PurgeRun.objects.filter(scope=scope).exclude(state=PurgeRun.State.PREVIEWED)):
        left = "" if run.left is None else (" · nothing left" if not run.left else f" · still matching: {run.left}")
        found.append({"at": run.created_at, "who": run.requested_by, "kind": "purge",
                      "what": f"{run.rule} · {run.get_action_display().lower()} · {run.matched} matched · {run.state}{left}",
                      "link": reverse("ops:purge", args=[scope.slug]) + f"?run={run.public_id}"})
    for sync in window(SectionSync.objects.filter(scope=scope)):
        counts = sync.summary.get("sections", {})
        found.append({"at": sync.created_at, "who": sync.by, "kind": "docs sync",
                      "what": f"{sync.source or 'a sync'} · {counts.get('changed', 0)} changed, {counts.get('added', 0)} added, "
                              f"{counts.get('removed', 0)} removed", "link": reverse("ops:syncs", args=[scope.slug])})
    for key in window(ApiKey.objects.filter(scopes=scope, set_aside_at__isnull=False), "set_aside_at"):
        found.append({"at": key.set_aside_at, "who": key.set_aside_by, "kind": "key set aside",
                      "what": f"{key.name or key.lookup}: revoked, its reports and labels set aside", "link": ""})
    logged = LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(Scope), object_id=str(scope.pk))
    for entry in window(logged.select_related("user"), "action_time"):
        found.append({"at": entry.action_time, "who": entry.user.get_username(), "kind": "settings changed",
                      "what": entry.get_change_message() or str(entry), "link": ""})
    return sorted(found, key=lambda e: e["at"], reverse=True)


@staff_required
@require_GET
def audit(request: HttpRequest, scope_slug: str) -> HttpResponse:
    scope = scope_or_404(request, scope_slug)
    form = AuditFilterForm(request.GET or None)
    kind = who = since = until = None
    if form.is_bound and form.is_valid():
        kind, who = form.cleaned_data["kind"], form.cleaned_data["who"].strip()
        since, until = form.cleaned_data["since"], form.cleaned_data["until"]
    rows = [e for e in entries(scope, since, until) if (not kind or e["kind"] == kind) and (not who or e["who"] == who)]
    if wants_csv(request):
        return csv_response(f"{scope.slug}-audit.csv", ["time_utc", "who", "kind", "what"],
                            ([e["at"].isoformat(), e["who"], e["kind"], e["what"]] for e in rows[:CSV_ROW_LIMIT]))
    return scope_page(request, "trails/audit/audit.html", scope, {"form": form, "rows": rows[:PER_SOURCE], "tab": "audit"})
