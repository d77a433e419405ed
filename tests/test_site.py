"""The OpenAPI document, the admin for scopes and keys, and the demo loader."""
from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from scopes.models import ApiKey, Scope, Section
from trails.models import Trail


def test_openapi_document_lists_the_v1_endpoints(db):
    client = Client()
    assert client.get("/api/docs").status_code == 302
    schema = client.get("/api/v1/openapi.json").json()
    paths = set(schema["paths"])
    assert {"/api/v1/scopes/{scope}/recall", "/api/v1/scopes/{scope}/trails", "/api/v1/scopes/{scope}/sections"} <= paths


@pytest.fixture
def admin_client(db) -> Client:
    user = get_user_model().objects.create_superuser("root", "root@example.invalid", "pw-for-tests-only")
    client = Client()
    client.force_login(user)
    return client


def test_admin_creates_a_key_and_shows_it_once(admin_client):
    scope = Scope.objects.create(slug="docs")
    response = admin_client.post("/admin/scopes/apikey/add/", {"name": "agent", "scopes": [scope.pk]}, follow=True)
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"] if "shown only now" in str(m)]
    assert len(shown) == 1
    key_text = shown[0].rsplit(" ", 1)[1]
    key = ApiKey.objects.authenticate(key_text)
    assert key is not None and list(key.scopes.all()) == [scope]
    listing = admin_client.get("/admin/scopes/apikey/").content.decode()
    assert key_text not in listing


def test_admin_scope_page_shows_the_band_layout(admin_client):
    scope = Scope.objects.create(slug="docs")
    page = admin_client.get(f"/admin/scopes/scope/{scope.pk}/change/").content.decode()
    assert "25x5" in page


def test_demo_loader_is_repeatable(db):
    call_command("load_demo", stdout=StringIO())
    call_command("load_demo", stdout=StringIO())
    scope = Scope.objects.get(slug="python-faq")
    assert Section.objects.filter(scope=scope).count() == 174
    assert Trail.objects.filter(scope=scope, status="active").count() == 25
    assert ApiKey.objects.filter(name="demo").count() == 1
    call_command("load_demo", "--revision", "new", "--no-credentials", stdout=StringIO())
    assert Section.objects.filter(scope=scope).count() == 178
