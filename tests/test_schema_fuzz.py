"""Schema-driven fuzzing of the API (schemathesis, fixed seed): every generated request,
valid or not, gets an answer the OpenAPI document declares: no 5xx, no undocumented
status, the declared content type and JSON shape."""
from __future__ import annotations

import pytest
import schemathesis
from schemathesis import checks
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings

from scopes.models import ApiKey, Scope, Section

schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())
# What issue 24 asks of every answer. (Whether every schema-valid body is accepted is another
# question: a request naming one section twice is valid by the schema and refused, 422.)
CHECKS = [checks.not_a_server_error, checks.status_code_conformance, checks.content_type_conformance,
          checks.response_schema_conformance]


@pytest.fixture
def in_test_transaction():
    """Requests go through Django's WSGI handler in this thread, inside the test's
    transaction: as Django's test client does, its end-of-request connection closing is
    held off (it would close the test's connection under it)."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_key(db, in_test_transaction) -> str:
    scope = Scope.objects.create(slug="fuzz", matcher="lexical")
    Section.upsert(scope, {"s1": "Visiting hours are 10:00 to 20:00.", "s2": "Visitors park in car park B."})
    return ApiKey.issue([scope])[1]


@schema.parametrize()
@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_every_generated_request_is_answered_as_the_schema_documents(case, fuzz_key):
    if case.path_parameters and "scope" in case.path_parameters:
        case.path_parameters["scope"] = "fuzz"  # a granted scope, so requests reach the endpoints
    case.call_and_validate(headers={"Authorization": f"Bearer {fuzz_key}"}, checks=CHECKS)
