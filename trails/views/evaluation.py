"""The evaluation reports the benchmarks write."""

from __future__ import annotations

import json

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from trails.views.common import last_scope, scope_page, staff_required


def _report_folders() -> list:
    root = settings.RAGTRAIL_REPORTS_DIR
    return (
        sorted((p.parent for p in root.glob("*/report.json")), key=lambda p: p.name, reverse=True)
        if root.is_dir()
        else []
    )


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
        entries.append(
            {
                "name": folder.name,
                "report": report,
                "has_html": (folder / "report.html").is_file(),
                "headline": report.get("headline", []),
            }
        )
    # The Evaluation page keeps the operator's scope in the navigation.
    return scope_page(
        request,
        "trails/evaluation/reports.html",
        last_scope(request),
        {"entries": entries, "root": settings.RAGTRAIL_REPORTS_DIR, "tab": "reports"},
    )


@staff_required
@require_GET
def report_html(request: HttpRequest, name: str) -> HttpResponse:
    folder = next((f for f in _report_folders() if f.name == name), None)
    if folder is None or not (folder / "report.html").is_file():
        return HttpResponse("No such report.", status=404)
    return HttpResponse((folder / "report.html").read_bytes(), content_type="text/html; charset=utf-8")
