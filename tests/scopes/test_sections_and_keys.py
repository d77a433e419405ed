"""The section store API, API keys and the commands scripts use."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.utils import timezone

from infra.hashing import section_hash
from scopes.models import ApiKey, Scope, Section
from tests.conftest import ApiClient


def test_upsert_reports_created_updated_unchanged_and_hashes(api, scope):
    first = api.put_sections("hospital", {"a": "alpha", "b": "beta"}).json()
    assert first == {
        "created": 2,
        "updated": 0,
        "unchanged": 0,
        "changed_ids": ["a", "b"],
        "hashes": {"a": section_hash("alpha"), "b": section_hash("beta")},
    }
    second = api.put_sections("hospital", {"a": "alpha", "b": "beta 2", "c": "gamma"}).json()
    assert (second["created"], second["updated"], second["unchanged"], second["changed_ids"]) == (1, 1, 1, ["b", "c"])


def test_section_read_and_delete_with_ids_containing_slashes_and_hashes(api, scope):
    api.put_sections("hospital", {"Doc/faq/general.rst#what-is-python": "Python is a language."})
    path = "/scopes/hospital/sections/Doc/faq/general.rst%23what-is-python"
    body = api.call("get", path).json()
    assert body["id"] == "Doc/faq/general.rst#what-is-python" and body["hash"] == section_hash("Python is a language.")
    assert api.call("delete", path).status_code == 204
    assert api.call("get", path).status_code == 404
    assert not Section.objects.exists()


@pytest.mark.parametrize(
    "body,field",
    [
        ({"sections": []}, "sections"),
        ({"sections": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, "sections"),
        ({"sections": [{"id": "", "text": "x"}]}, "sections.0.id"),
        ({"sections": [{"id": "a", "text": 5}]}, "sections.0.text"),
        ({"sections": [{"id": "a"}]}, "sections.0.text"),
        ({}, "sections"),
    ],
)
def test_bad_section_input_is_refused_and_changes_nothing(api, scope, body, field):
    response = api.call("put", "/scopes/hospital/sections", body)
    assert response.status_code == 422 and response.json()["error"]["field"] == field
    assert not Section.objects.exists()


def test_requests_without_a_valid_key_are_refused(api, scope):
    client = Client()
    assert (
        client.post("/api/v1/scopes/hospital/recall", {"query": "x"}, content_type="application/json").status_code
        == 401
    )
    bad = client.post(
        "/api/v1/scopes/hospital/recall",
        {"query": "x"},
        content_type="application/json",
        headers={"Authorization": "Bearer rt_nope_nope"},
    )
    assert bad.status_code == 401 and bad.json()["error"]["field"] == "Authorization"


def test_revoked_key_is_refused(scope):
    key, text = ApiKey.issue([scope])
    client = ApiClient(text)
    assert client.recall("hospital", query="hello there").status_code == 200
    key.revoked_at = timezone.now()
    key.save()
    assert client.recall("hospital", query="hello there").status_code == 401


def test_a_scope_the_key_does_not_grant_looks_exactly_like_a_missing_one(api, other_scope):
    granted_elsewhere = api.recall("other", query="hello there")
    missing = api.recall("does-not-exist", query="hello there")
    assert granted_elsewhere.status_code == missing.status_code == 404
    assert granted_elsewhere.json() == missing.json()


def test_only_a_hash_of_the_key_is_stored(scope):
    key, text = ApiKey.issue([scope])
    secret = text.split("_", 2)[2]
    assert secret not in key.secret_hash and text.startswith(f"rt_{key.lookup}_")
    assert ApiKey.objects.authenticate(text) == key
    assert ApiKey.objects.authenticate(text[:-1] + ("A" if text[-1] != "A" else "B")) is None


def test_create_scope_and_create_api_key_commands(db):
    out = StringIO()
    call_command("create_scope", "docs", stdout=out)
    call_command("create_scope", "wiki", stdout=StringIO())
    assert out.getvalue().strip() == "docs"
    assert Scope.objects.get(slug="docs").token_budget == 2000
    with pytest.raises(CommandError):
        call_command("create_scope", "docs", stdout=StringIO())
    with pytest.raises(CommandError, match="slug"):
        call_command("create_scope", "Bad Slug!", stdout=StringIO())
    out = StringIO()
    call_command("create_api_key", "--scope", "docs", "--scope", "wiki", stdout=out)
    printed = out.getvalue().strip()
    assert printed.startswith("rt_") and "\n" not in printed
    key = ApiKey.objects.authenticate(printed)
    assert sorted(key.scopes.values_list("slug", flat=True)) == ["docs", "wiki"]
    with pytest.raises(CommandError):
        call_command("create_api_key", "--scope", "missing", stdout=StringIO())


def test_a_right_lookup_with_a_wrong_secret_is_refused_on_a_granted_scope(scope):
    """The key and the scope it names are read in one query: the secret is still checked."""
    key, text = ApiKey.issue([scope])
    tampered = text[:-1] + ("A" if text[-1] != "A" else "B")
    assert ApiClient(text).recall("hospital", query="hello there").status_code == 200
    response = ApiClient(tampered).recall("hospital", query="hello there")
    assert response.status_code == 401
    assert ApiKey.objects.authenticate(tampered, scope_slug="hospital") is None
    assert ApiKey.objects.authenticate(text, scope_slug="hospital").grants("hospital") == scope


def test_the_scope_read_with_its_key_is_the_scope_the_orm_reads(scope, other_scope):
    """Authentication reads the scope in a hand-written query: every setting must come back
    as the ORM gives it (types included), and a revoked key or an ungranted scope never."""
    scope.synonyms = "ICU, intensive care"
    scope.learned_embedding_threshold = 0.97
    scope.save()
    key, text = ApiKey.issue([scope])
    queries = []
    # Counted at the connection: on PostgreSQL the query runs on a server-binding cursor,
    # which Django's query log does not see.
    with connection.execute_wrapper(lambda execute, sql, *args: queries.append(sql) or execute(sql, *args)):
        granted = ApiKey.objects.authenticate(text, scope_slug="hospital").grants("hospital")
    assert len(queries) == 1
    expected = Scope.objects.get(pk=scope.pk)
    for field in Scope._meta.concrete_fields:
        got, want = getattr(granted, field.attname), getattr(expected, field.attname)
        assert (got, type(got)) == (want, type(want)), field.name
    assert not granted._state.adding  # a loaded row: saving it updates, never inserts
    assert ApiKey.objects.authenticate(text, scope_slug="other").grants("other") is None
    key.revoked_at = timezone.now()
    key.save()
    assert ApiKey.objects.authenticate(text, scope_slug="hospital") is None


def test_an_agent_lists_its_scopes_sections_a_page_at_a_time(api, sections, other_api, other_scope):
    Section.upsert(other_scope, {"zz/other": "[other] not yours"})
    first = api.call("get", "/scopes/hospital/sections?limit=2").json()
    assert [s["id"] for s in first["sections"]] == ["parking", "visiting/icu"] and first["next"] == "visiting/icu"
    assert first["sections"][0]["hash"] == section_hash(sections["parking"])
    rest = api.call("get", f"/scopes/hospital/sections?limit=2&after={first['next']}").json()
    assert [s["id"] for s in rest["sections"]] == ["visiting/ward"] and rest["next"] is None
    # Another scope's sections are never listed, and its list answers 404 to this key.
    assert api.call("get", "/scopes/other/sections").status_code == 404
    refused = api.call("get", "/scopes/hospital/sections?limit=5000")
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "limit"


def test_an_agents_key_without_section_writes_asks_and_records_but_cannot_change_the_store(scope):
    # One key could otherwise switch any trail off: change a cited section, recall (stale for good), put it back.
    docs, docs_text = ApiKey.issue([scope], name="docs ci")
    agent_key, agent_text = ApiKey.issue([scope], name="agent", writes_sections=False)
    docs_api, agent = ApiClient(docs_text), ApiClient(agent_text)
    assert docs_api.put_sections("hospital", {"cafe": "The cafe opens at 8."}).status_code == 200
    before = list(Section.objects.filter(scope=scope).values_list("section_id", "hash"))
    refusals = [
        agent.put_sections("hospital", {"cafe": "The cafe opens at 8. "}),
        agent.call("delete", "/scopes/hospital/sections/cafe"),
        agent.call("post", "/scopes/hospital/section-syncs", {"sections": [{"id": "cafe", "text": "x"}]}),
        agent.call("post", "/scopes/hospital/section-syncs", {"sections": [], "background": True}),
        # Tool policies decide what every caller is served from the cache: a docs key's too.
        agent.call("put", "/scopes/hospital/tool-policies", {"policies": []}),
    ]
    for refused in refusals:
        assert refused.status_code == 403, refused.content
        assert refused.json()["error"]["field"] == "Authorization"
        assert "may not write sections or tool policies" in refused.json()["error"]["message"]
    assert list(Section.objects.filter(scope=scope).values_list("section_id", "hash")) == before
    # It still reads the store, records paths citing it and is served them.
    assert agent.call("get", "/scopes/hospital/sections/cafe").status_code == 200
    assert agent.record("hospital", query="When does the cafe open?", cited=["cafe"]).status_code == 201
    assert agent.recall("hospital", query="When does the cafe open?").json()["outcome"] == "prefetch"
    # A key is a docs key unless made an agent's: the command's flag, as the admin's box.
    out = StringIO()
    call_command("create_api_key", "--scope", scope.slug, "--no-section-writes", stdout=out)
    assert ApiKey.objects.authenticate(out.getvalue().strip()).writes_sections is False
    assert docs.writes_sections and not ApiKey.objects.get(pk=agent_key.pk).writes_sections
