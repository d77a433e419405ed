from __future__ import annotations

from typing import Annotated, Optional

from ninja import Schema
from pydantic import BeforeValidator, ConfigDict, Field, field_validator

from infra.errors import quoted

# No control characters: an id holding a newline is stored but can never be named again
# in a URL, a command line or a log line.
SectionId = Annotated[str, Field(min_length=1, max_length=512, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")]


def _integral(value):
    # JSON has one number type: 300.0 is the integer 300 (as JSON Schema's "integer" says),
    # while strict validation would refuse it. Strings stay refused.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def json_int(**bounds):
    """An integer field as JSON means it: 300 and 300.0 alike, never "300" or 300.5. (The
    bounds go before the validator, or pydantic leaves them out of the JSON Schema.)"""
    return Annotated[int, Field(**bounds), BeforeValidator(_integral)]


class StrictSchema(Schema):
    # Unknown fields are refused so a misspelt field is an error, not silently ignored.
    model_config = ConfigDict(extra="forbid", strict=True)


class SectionIn(StrictSchema):
    id: SectionId
    text: Annotated[str, Field(max_length=1_000_000)]


class SectionsIn(StrictSchema):
    sections: Annotated[list[SectionIn], Field(min_length=1, max_length=1000)]

    @field_validator("sections")
    @classmethod
    def ids_are_unique(cls, sections: list[SectionIn]) -> list[SectionIn]:
        seen: set[str] = set()
        for section in sections:
            if section.id in seen:
                raise ValueError(f"section id {quoted(section.id)} appears more than once")
            seen.add(section.id)
        return sections


class SectionsOut(Schema):
    created: int
    updated: int
    unchanged: int
    changed_ids: list[str]
    hashes: dict[str, str]


class SectionOut(Schema):
    id: str
    text: str
    hash: str
    updated_at: str
    # Where a link to the section goes on the built site (`page.html#<anchor>`): the id's
    # fragment, or the built anchor recorded beside a stable id (docutils' `idN`).
    anchor: str


class SectionListIn(Schema):
    # Query parameters arrive as text: numbers are parsed (not strict), unknown names refused.
    model_config = ConfigDict(extra="forbid")

    after: Annotated[
        str, Field(max_length=512, description="The last id of the previous page; empty for the first.")
    ] = ""
    limit: Annotated[int, Field(ge=1, le=1000, description="Sections a page (1 to 1,000).")] = 200


class SectionListed(Schema):
    id: str
    hash: str
    updated_at: str


class SectionListOut(Schema):
    sections: list[SectionListed]
    # The id to pass as `after` for the next page; null on the last page.
    next: Optional[str]


class GrantedScopeOut(Schema):
    slug: str
    name: str


class GrantedScopesOut(Schema):
    scopes: list[GrantedScopeOut]
