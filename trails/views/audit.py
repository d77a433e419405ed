"""Who did what in a scope, from the audit log (scopes.audit: one row for every act, written
with the act, never changed): approvals, rejections, send-backs, reinstatements, undos,
deletions, releases, keys set aside, counted again and revoked, access changed, threshold
moves with their values, settings changed, purges and docs syncs. Filtered in the database by
kind, person and time, a page at a time; the CSV holds every row the filters keep."""

from __future__ import annotations

import uuid

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from scopes.access import Access, granted_scopes
from scopes.audit import AuditEvent
from scopes.keys import acknowledge_moved, operable, reached_scopes, revoke, set_aside, unrevoke
from scopes.models import ApiKey
from trails.learning.feedback import moved_by
from trails.models import Trail
from trails.views.common import (
    confirmed_or_ask,
    csv_response,
    key_names,
    scope_or_404,
    scope_page,
    staff_required,
    wants_csv,
)

PAGE_SIZE = 100


class AuditFilterForm(forms.Form):
    kind = forms.ChoiceField(choices=[("", "any"), *AuditEvent.Kind.choices], required=False)
    who = forms.CharField(max_length=150, required=False, label="Who")
    since = forms.DateTimeField(required=False, label="From (UTC)")
    until = forms.DateTimeField(required=False, label="Until (UTC)")


def events(scope, kind: str = "", who: str = "", since=None, until=None):
    """The scope's audit events the filters keep, newest first (a queryset: nothing is cut)."""
    rows = AuditEvent.objects.filter(scope_id=scope.pk)
    if kind:
        rows = rows.filter(kind=kind)
    if who:
        rows = rows.filter(who=who)
    if since:
        rows = rows.filter(at__gte=since)
    if until:
        rows = rows.filter(at__lt=until)
    return rows.order_by("-at", "-id")


def _with_trail_queries(scope, rows: list[AuditEvent]) -> list[AuditEvent]:
    """Each trail event shows the trail's question, where the trail is still there (one read)."""
    ids = {row.detail.get("trail") for row in rows if row.detail.get("trail")}
    queries = (
        dict(Trail.objects.filter(scope=scope, public_id__in=ids).values_list("public_id", "query")) if ids else {}
    )
    for row in rows:
        found = queries.get(_uuid(row.detail.get("trail")))
        row.trail_query = found[:100] if found else ""
    return rows


def _uuid(value):
    try:
        return uuid.UUID(value) if value else None
    except ValueError:
        return None


@staff_required
@require_GET
def audit(request: HttpRequest, scope_slug: str) -> HttpResponse:
    scope = scope_or_404(request, scope_slug)
    form = AuditFilterForm(request.GET or None)
    filters = {}
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        filters = {"kind": data["kind"], "who": data["who"].strip(), "since": data["since"], "until": data["until"]}
    rows = events(scope, **filters)
    if wants_csv(request):
        return csv_response(
            f"{scope.slug}-audit.csv",
            ["time_utc", "who", "kind", "what", "link"],
            ([e.at.isoformat(), e.who, e.kind, e.what, e.link] for e in rows.iterator(chunk_size=2000)),
        )
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    return scope_page(
        request,
        "trails/audit/audit.html",
        scope,
        {
            "form": form,
            "rows": _with_trail_queries(scope, list(page.object_list)),
            "page": page,
            "filters": query.urlencode(),
            "tab": "audit",
            "keys": scope_keys(request, scope),
            "names_as_written": key_names(scope, standing=False),
        },
    )


def scope_keys(request: HttpRequest, scope) -> list[dict]:
    """The keys granted this scope, each with whether this operator may suspend it (act access
    to every scope the key reaches: a key that reaches another tenant is a superuser's) and,
    where its reports are set aside, the trails here it reported or voted on, as they are now."""
    acting = set(granted_scopes(request.user, Access.ACT).values_list("pk", flat=True))
    found = []
    for key in ApiKey.objects.filter(scopes=scope).prefetch_related("scopes").order_by("-created_at")[:200]:
        reaches = reached_scopes(key)
        moved = (
            list(Trail.objects.filter(scope=scope, id__in=moved_by(key.reporter, scope.pk)).order_by("-id")[:50])
            if key.set_aside_at or key.moved_unacknowledged_at
            else []
        )
        found.append(
            {"key": key, "others": len(reaches - {scope.pk}), "may_suspend": reaches <= acting, "moved": moved}
        )
    return found


def _operated_key(request: HttpRequest, scope_slug: str, key_id: int):
    """The scope and its key, where this operator may act on every scope the key reaches."""
    scope = scope_or_404(request, scope_slug, Access.ACT)
    key = get_object_or_404(ApiKey, pk=key_id, scopes=scope)
    if not operable(key, set(granted_scopes(request.user, Access.ACT).values_list("pk", flat=True))):
        raise PermissionDenied("this key reaches or judged scopes you may not act on: a superuser may revoke it")
    return scope, key


@staff_required
@require_http_methods(["GET", "POST"])
def suspend_key(request: HttpRequest, scope_slug: str, key_id: int) -> HttpResponse:
    """A scope operator stops a key of their scope (a flood, a leak), after a page that says
    what it does: revoked at once, and with "set aside" its reports and votes stop counting and
    the trails they moved are decided again. Recorded in the audit of every scope it reached;
    the keys table restores it."""
    scope, key = _operated_key(request, scope_slug, key_id)
    if request.method == "GET" or request.POST.get("confirm") != "yes":
        return scope_page(
            request,
            "trails/audit/suspend.html",
            scope,
            {
                "key": key,
                "tab": "audit",
                "moved": Trail.objects.filter(scope=scope, id__in=moved_by(key.reporter, scope.pk)),
            },
        )
    by, name = request.user.get_username(), key.name or key.lookup
    if request.POST.get("set_aside"):
        set_aside(key, by=by)
        messages.success(
            request,
            f"Key {name} suspended and its reports and votes set aside: the trails they moved are decided again "
            "and listed under the key. Restore lets it in and counts its reports again; those trails stay as "
            "decided unless an operator acts.",
        )
    elif revoke(ApiKey.objects.filter(pk=key.pk), by=by):
        messages.success(request, f"Key {name} suspended: it is refused from now on. Restore lets it in again.")
    else:
        messages.info(request, f"Key {name} was already revoked.")
    return redirect(reverse("ops:audit", args=[scope.slug]) + "#keys")


@staff_required
@require_POST
def restore_key(request: HttpRequest, scope_slug: str, key_id: int) -> HttpResponse:
    """Undoes a suspension: the key is let in again and its reports and votes count again."""
    scope, key = _operated_key(request, scope_slug, key_id)
    name = key.name or key.lookup
    if unrevoke(key, by=request.user.get_username()):
        messages.success(
            request,
            f"Key {name} restored: it is let in again, its reports and votes count again. Trails re-decided while "
            "they were set aside stay as decided unless an operator acts: they stay listed under the key.",
        )
    else:
        messages.info(request, f"Key {name} was not suspended.")
    return redirect(reverse("ops:audit", args=[scope.slug]) + "#keys")


@staff_required
@require_http_methods(["GET", "POST"])
def set_aside_key(request: HttpRequest, scope_slug: str, key_id: int) -> HttpResponse:
    """Sets aside the reports and votes of a key already suspended (a flood found later): asks
    first, as suspend does; the trails they moved are decided again and listed. Audited."""
    scope, key = _operated_key(request, scope_slug, key_id)
    name = key.name or key.lookup
    moved = Trail.objects.filter(scope=scope, id__in=moved_by(key.reporter, scope.pk)).count()
    asked = confirmed_or_ask(
        request,
        scope,
        f"Set aside the reports of key {name}?",
        f"Its reports and votes stop counting, in every scope it reached, and the {moved} trail"
        f"{'s' if moved != 1 else ''} here they moved {'is' if moved == 1 else 'are'} decided again without them, "
        "then listed under the key. Restore counts them again.",
        reverse("ops:audit", args=[scope.slug]) + "#keys",
    )
    if asked:
        return asked
    if key.set_aside_at:
        messages.info(request, f"The reports of key {name} were already set aside.")
    else:
        set_aside(key, by=request.user.get_username())
        messages.success(
            request, f"The reports and votes of key {name} are set aside: the trails they moved are listed."
        )
    return redirect(reverse("ops:audit", args=[scope.slug]) + "#keys")


@staff_required
@require_POST
def acknowledge_key_moved(request: HttpRequest, scope_slug: str, key_id: int) -> HttpResponse:
    """The operator has seen the trails a set-aside re-decided: the list under the key goes."""
    scope, key = _operated_key(request, scope_slug, key_id)
    acknowledge_moved(key)
    return redirect(reverse("ops:audit", args=[scope.slug]) + "#keys")
