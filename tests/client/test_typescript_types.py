"""The TypeScript client's interfaces that hand the API's JSON through as it comes name the
fields the API sends (its OpenAPI document), so a typed caller never reads a field that is
always undefined."""

import re
from pathlib import Path

import pytest

INDEX = Path(__file__).resolve().parents[2] / "clients" / "typescript" / "src" / "index.ts"

# Interface in clients/typescript/src/index.ts -> the OpenAPI schema whose JSON it is, as sent.
PASSED_THROUGH = {
    "PutSectionsResult": "SectionsOut",
    "SectionRecord": "SectionOut",
    "SectionsPage": "SectionListOut",
}


def interface_fields(source: str, name: str) -> set[str]:
    body = re.search(r"export interface " + name + r" \{\n(.*?)\n\}", source, flags=re.S)
    assert body, f"interface {name} not found"
    return set(re.findall(r"^  (\w+)\??:", body.group(1), flags=re.M))


@pytest.mark.parametrize(("interface", "schema"), sorted(PASSED_THROUGH.items()))
def test_a_passed_through_interface_names_the_fields_the_api_sends(client, db, interface, schema):
    components = client.get("/api/v1/openapi.json").json()["components"]["schemas"]
    assert interface_fields(INDEX.read_text(encoding="utf-8"), interface) == set(components[schema]["properties"])
