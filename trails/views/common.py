"""What every operator page shares: the staff check, the scope in the URL and the last one looked at, CSV exports."""

from __future__ import annotations

import csv
import logging
import re
import uuid
from datetime import datetime
from datetime import timezone as dt_timezone
from functools import wraps
from typing import Iterable

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils.functional import SimpleLazyObject

from scopes.access import Access, access_to, granted_scopes, may
from scopes.models import Scope
from trails.models import Trail, validations_now

logger = logging.getLogger(__name__)


def staff_required(view):
    """Anonymous users go to the login page; signed-in users who are not staff get a 403."""

    @wraps(view)
    def checked(request: HttpRequest, *args, **kwargs):
        if not request.user.is_authenticated:
            if getattr(request, "htmx", False):
                # An htmx action whose session expired: the whole page goes to the login, which
                # returns to the page the operator was on (not the fragment's URL), and the
                # action is not half done: nothing was changed.
                back = request.htmx.current_url_abs_path or request.get_full_path()
                response = HttpResponse(status=204)
                response["HX-Redirect"] = redirect_to_login(back)["Location"]
                return response
            return redirect_to_login(request.get_full_path())
        if not (request.user.is_active and request.user.is_staff):
            return render(request, "403.html", {"why": "not staff"}, status=403)
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


def scope_or_404(request: HttpRequest, scope_slug: str, access: int = Access.VIEW) -> Scope:
    """The one lookup of a page's scope by the slug in its URL, for this operator
    (scopes.access): a scope not granted is a 404, as if it did not exist; one granted below
    `access` (viewing only, asked to act) is a 403."""
    scope = get_object_or_404(granted_scopes(request.user, with_scratch=True), slug=scope_slug)
    if access > Access.VIEW and not may(request.user, scope, access):
        held = Access(access_to(request.user, scope)).label.split(":")[0].lower()
        needed = Access(access).label.split(":")[0].lower()
        raise PermissionDenied(f"your access to {scope.slug} is {held}; this needs {needed}")
    return scope


LAST_SCOPE = "ops_last_scope"


def operator_scopes(request: HttpRequest):
    """The scopes this operator may open (never the benchmarks' scratch scopes)."""
    return granted_scopes(request.user)


def scope_page(
    request: HttpRequest, template: str, scope: Scope | None, context: dict, status: int = 200
) -> HttpResponse:
    # /ops/ opens it next time; set only when it changes, so reading a page writes no session.
    if scope is not None and scope.pk and request.session.get(LAST_SCOPE) != scope.slug:
        request.session[LAST_SCOPE] = scope.slug
    context = {
        "scope": scope,
        "scopes": operator_scopes(request).only("slug", "name"),
        # What the page offers (the views check again): actions need act, settings configure.
        "can_act": scope is not None and may(request.user, scope, Access.ACT),
        "can_configure": scope is not None and may(request.user, scope, Access.CONFIGURE),
        # Read only by a page that shows a key (the keys_named filter).
        "key_names": SimpleLazyObject(lambda: key_names(scope)) if scope is not None and scope.pk else {},
        **context,
    }
    return render(request, template, context, status=status)


def last_scope(request: HttpRequest) -> Scope | None:
    """The scope this operator last looked at; else the one the latest trail was recorded
    in (a scope in use, not the newest empty one); else any."""
    scopes = operator_scopes(request)
    remembered = request.session.get(LAST_SCOPE)
    scope = scopes.filter(slug=remembered).first() if remembered else None
    if scope is None:
        latest = Trail.objects.filter(scope__in=scopes).order_by("-id").values_list("scope_id", flat=True).first()
        scope = scopes.filter(pk=latest).first() if latest else scopes.first()
    return scope


# What may be part of a trail id as it is printed (hex digits and hyphens, six or more).
ID_PART = re.compile(r"[0-9a-f-]{6,36}")


def uuids(values: list[str]) -> list[str]:
    valid = []
    for value in values:
        try:
            valid.append(str(uuid.UUID(value)))
        except ValueError:
            continue
    return valid


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A form or htmx action sent without a valid security token (a page left open past a
    sign-out or a new session): nothing was done, and the answer is a 403 that logs and metrics
    count as refused. htmx reloads the whole page on it (HX-Refresh; it swaps no 4xx into a
    row); a plain form gets the app's 403 page."""
    logger.warning("CSRF check refused %s %s: %s", request.method, request.path, reason)
    if getattr(request, "htmx", False):
        response = HttpResponse(status=403)
        response["HX-Refresh"] = "true"
        return response
    return render(request, "403.html", {"why": "csrf"}, status=403)


def what_recall_gives(scope: Scope, trail_ids: Iterable[int]) -> tuple[dict[int, list[str]], dict[int, str]]:
    """For these trails: the section ids each cites (in order), and what recall would answer
    with them now (prefetch, hint or miss: trails.models.validations_now)."""
    checked = validations_now(scope, trail_ids)
    cited = {trail_id: [s.section_id for s in validation.sections] for trail_id, validation in checked.items()}
    return cited, {trail_id: validation.outcome.value for trail_id, validation in checked.items()}


def key_names(scope, standing: bool = True) -> dict[str, str]:
    """The scope's API keys by lookup, named as an operator knows them ("name (owner)"), with
    " — revoked" where it is now (standing=False: not, for a record that must read as written)."""
    from scopes.models import ApiKey

    return {
        lookup: f"{name or 'key ' + lookup}{f' ({owner})' if owner else ''}{' — revoked' if revoked and standing else ''}"
        for lookup, name, owner, revoked in ApiKey.objects.filter(scopes=scope).values_list(
            "lookup", "name", "owner", "revoked_at"
        )
    }


def confirmed_or_ask(
    request: HttpRequest,
    scope: Scope,
    question: str,
    detail: str,
    back: str,
    fields: list[tuple[str, str]] | None = None,
) -> HttpResponse | None:
    """None where the POST says confirm=yes; otherwise the page that asks, changing nothing: it
    posts the same fields again (or `fields`: what the question counted) with confirm=yes
    (confirm.js adds that after a JavaScript yes)."""
    if request.POST.get("confirm") == "yes":
        return None
    if fields is None:
        fields = [
            (k, v) for k, values in request.POST.lists() if k not in ("csrfmiddlewaretoken", "confirm") for v in values
        ]
    context = {"question": question, "detail": detail, "fields": fields, "action": request.get_full_path()}
    return scope_page(request, "trails/confirm.html", scope, {**context, "back": back})
