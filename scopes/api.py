"""The key's scopes, and the section store endpoints: bulk upsert, read, delete."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Query, Router, Status

from infra.errors import RequestRefused
from scopes.auth import granted_scope, section_writer
from scopes.models import Section
from scopes.schemas import GrantedScopesOut, SectionListIn, SectionListOut, SectionOut, SectionsIn, SectionsOut

router = Router(tags=["sections"])


@router.get("", response=GrantedScopesOut, tags=["scopes"])
def granted_scopes(request: HttpRequest):
    """The scopes this key is granted (a client with one needs no scope setting)."""
    scopes = request.auth.scopes.order_by("slug").values("slug", "name")
    return {"scopes": list(scopes)}


@router.put("/{scope}/sections", response=SectionsOut)
def upsert_sections(request: HttpRequest, scope: str, payload: SectionsIn):
    granted = section_writer(request, scope)
    return Section.upsert(granted, {s.id: s.text for s in payload.sections})


@router.get("/{scope}/sections", response=SectionListOut)
def list_sections(request: HttpRequest, scope: str, page: Query[SectionListIn]):
    """The scope's section ids and hashes, by id, a page at a time (`after` the last id of the
    one before): what an agent compares its own index with before recording a path."""
    rows = list(
        Section.objects.filter(scope=granted_scope(request, scope), section_id__gt=page.after)
        .order_by("section_id")
        .values_list("section_id", "hash", "updated_at")[: page.limit + 1]
    )
    more = len(rows) > page.limit
    rows = rows[: page.limit]
    return {
        "sections": [{"id": i, "hash": h, "updated_at": at.isoformat()} for i, h, at in rows],
        "next": rows[-1][0] if more else None,
    }


def _section(request: HttpRequest, scope: str, section_id: str) -> Section:
    section = Section.objects.filter(scope=granted_scope(request, scope), section_id=section_id).first()
    if section is None:
        raise RequestRefused(404, "not_found", "no such section", field="section_id")
    return section


@router.get("/{scope}/sections/{path:section_id}", response=SectionOut)
def get_section(request: HttpRequest, scope: str, section_id: str):
    section = _section(request, scope, section_id)
    return {
        "id": section.section_id,
        "text": section.text,
        "hash": section.hash,
        "updated_at": section.updated_at.isoformat(),
        "anchor": section.anchor or section.section_id.partition("#")[2],
    }


@router.delete("/{scope}/sections/{path:section_id}", response={204: None})
def delete_section(request: HttpRequest, scope: str, section_id: str):
    section_writer(request, scope)
    section = _section(request, scope, section_id)
    section.remove()
    return Status(204, None)
