"""Bad bytes never reach a 500, a log line with the request's values, or a stored value
another client cannot read (issue 24, items 1-3)."""

from __future__ import annotations

import json
import logging

import pytest
from django.core.cache import cache

from scopes.models import ApiKey
from trails.models import Step, Trail

EMAIL = "ann.archer@example.org"
BODY_ENDPOINTS = [
    ("post", "/scopes/hospital/recall"),
    ("post", "/scopes/hospital/trails"),
    ("put", "/scopes/hospital/sections"),
    ("post", "/scopes/hospital/tool-results/lookup"),
    ("put", "/scopes/hospital/tool-results"),
    ("put", "/scopes/hospital/tool-policies"),
]


@pytest.mark.parametrize("depth", [33, 1_000, 100_000])
@pytest.mark.parametrize("method, path", BODY_ENDPOINTS)
def test_deep_nesting_is_refused_with_a_json_422_on_every_body_endpoint_and_without_a_key_is_never_read(
    api, client, caplog, method, path, depth, monkeypatch
):
    body = '{"query": ' + "[" * depth + "]" * depth + "}"
    from infra import strict_json

    parsed = []
    monkeypatch.setattr(
        strict_json, "parse_strict", lambda raw, _parse=strict_json.parse_strict: parsed.append(1) or _parse(raw)
    )
    anonymous = getattr(client, method)(f"/api/v1{path}", data=body, content_type="application/json")
    assert anonymous.status_code == 401 and anonymous.json()["error"]["field"] == "Authorization" and parsed == []
    with caplog.at_level(logging.INFO):
        response = getattr(api.client, method)(
            f"/api/v1{path}", data=body, content_type="application/json", headers=api.headers
        )
    assert response.status_code == 422 and response["Content-Type"] == "application/json"
    assert response.json()["error"] == {
        "code": "too_deep",
        "message": "objects and arrays nest deeper than 32 levels",
        "field": "body",
    }
    assert "Traceback" not in caplog.text


def test_nesting_within_the_limit_and_brackets_inside_strings_are_read(api, sections):
    nested = {"n": 1}
    for _ in range(20):
        nested = {"n": nested}
    body = {
        "query": "ICU visiting [[[[" * 20,
        "cited": ["visiting/icu"],
        "steps": [{"tool": "t", "args": nested, "section_ids": []}],
    }
    assert api.record("hospital", **body).status_code == 201


# The last has more digits than Python converts to an int (4,300): it was a 400 naming the body.
@pytest.mark.parametrize("number", ["1e999", "-1e999", "9007199254740993", "-" + "9" * 5000])
def test_a_number_other_clients_cannot_read_in_a_record_is_refused_naming_its_field_and_logs_nothing_of_the_body(
    api, sections, caplog, number
):
    raw = (
        '{"query": "Where does ' + EMAIL + ' park?", "cited": ["parking"], "signal": "accepted", '
        '"steps": [{"tool": "search", "args": {"q": "'
        + EMAIL
        + '", "n": '
        + number
        + '}, "section_ids": ["parking"]}]}'
    )
    with caplog.at_level(logging.DEBUG):
        response = api.call("post", "/scopes/hospital/trails", raw=raw.encode())
    assert response.status_code == 422, response.content
    assert response.json()["error"]["field"] == "steps.0.args.n" and number[:40] in response.json()["error"]["message"]
    assert not Trail.objects.exists() and not Step.objects.exists()
    assert EMAIL not in caplog.text


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_or_infinity_is_refused_naming_the_field_it_was_sent_in(api, sections, constant):
    recall = api.call(
        "post", "/scopes/hospital/recall", raw=f'{{"query": "parking", "token_budget": {constant}}}'.encode()
    )
    assert recall.status_code == 422 and recall.json()["error"]["field"] == "token_budget"
    assert f"{constant} is not a JSON number" in recall.json()["error"]["message"]
    raw = (
        '{"query": "Where do visitors park?", "cited": ["parking"], "signal": "accepted", '
        f'"steps": [{{"tool": "calc", "args": {{"a": {constant}}}, "section_ids": ["parking"]}}]}}'
    )
    record = api.call("post", "/scopes/hospital/trails", raw=raw.encode())
    assert record.status_code == 422 and record.json()["error"]["field"] == "steps.0.args.a"
    assert not Trail.objects.exists()


def test_an_overflowing_tool_result_is_never_stored_so_no_client_reads_infinity(api, sections):
    cache.clear()
    api.call("put", "/scopes/hospital/tool-policies", {"policies": [{"tool": "calc", "cacheable": True, "ttl_s": 60}]})
    raw = b'{"tool": "calc", "args": {"x": 1}, "context": {}, "result": {"n": 1e999}}'
    response = api.call("put", "/scopes/hospital/tool-results", raw=raw)
    assert response.status_code == 422 and response.json()["error"]["field"] == "result.n"
    lookup = api.call("post", "/scopes/hospital/tool-results/lookup", {"tool": "calc", "args": {"x": 1}, "context": {}})
    assert lookup.status_code == 200 and lookup.json()["hit"] is False
    json.loads(lookup.content, parse_constant=lambda name: pytest.fail(f"{name} in a response"))


def test_a_database_error_is_logged_by_its_class_never_its_message(api, sections, caplog, monkeypatch):
    from django.db import DataError

    from trails.serving import record as record_module

    def refuse(*args, **kwargs):
        raise DataError(f"invalid input syntax for type json: {EMAIL}")

    monkeypatch.setattr(record_module.TrailRows, "save_all", staticmethod(refuse))
    with caplog.at_level(logging.DEBUG):
        response = api.record("hospital", query=f"Where does {EMAIL} park?", cited=["parking"])
    assert response.status_code == 500 and response.json()["error"]["code"] == "server_error"
    assert "DataError" in caplog.text and EMAIL not in caplog.text


@pytest.mark.parametrize("layer", ["middleware", "auth", "view"])
def test_a_failure_in_any_layer_answers_the_json_error_shape(api, sections, monkeypatch, layer):
    from django.test import Client

    from infra.strict_json import StrictJsonMiddleware
    from scopes.auth import ApiKeyAuth
    from trails import api as trails_api

    def fail(*args, **kwargs):
        raise RuntimeError(f"boom in the {layer}")

    target = {
        "middleware": (StrictJsonMiddleware, "__call__"),
        "auth": (ApiKeyAuth, "authenticate"),
        "view": (trails_api, "recall"),
    }[layer]
    monkeypatch.setattr(*target, fail)
    client = Client(raise_request_exception=False)
    response = client.post(
        "/api/v1/scopes/hospital/recall",
        data=json.dumps({"query": "parking"}),
        content_type="application/json",
        headers=api.headers,
    )
    assert response.status_code == 500 and response["Content-Type"] == "application/json"
    assert response.json() == {"error": {"code": "server_error", "message": "the server failed to answer this request"}}


def test_the_openapi_document_lists_every_error_response_with_its_json_shape(client, db):
    schema = client.get("/api/v1/openapi.json").json()
    assert schema["components"]["schemas"]["Error"]["properties"]["error"]["required"] == ["code", "message"]
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            documented = set(operation["responses"])
            assert {"401", "404", "422", "500", "503"} <= documented, (method, path)
            if method in ("post", "put"):
                assert {"400", "413", "415"} <= documented, (method, path)
            assert (
                operation["responses"]["422"]["content"]["application/json"]["schema"]["$ref"]
                == "#/components/schemas/Error"
            )
    record = schema["paths"]["/api/v1/scopes/{scope}/trails"]["post"]["responses"]
    assert "409" in record


def test_domain_refusals_carry_no_status_and_the_edge_chooses_it():
    from infra.errors import Conflict, Invalid, NotFound, RequestRefused, StoreUnavailable, TooLarge

    for kind, status in ((Invalid, 422), (NotFound, 404), (Conflict, 409), (TooLarge, 413), (StoreUnavailable, 503)):
        refusal = kind("code", "message", field="f", section_ids=["s"])
        assert not hasattr(refusal, "status")
        answer = RequestRefused.of(refusal)
        assert answer.status == status and answer.as_json() == {
            "error": {"code": "code", "message": "message", "field": "f", "section_ids": ["s"]}
        }


@pytest.mark.parametrize("path", ["/api/v1/scopes/hospital/trails/a/b/c", "/api/v1/no-such-endpoint", "/api/v2/"])
def test_a_path_no_route_matches_answers_the_json_error_shape(client, db, path):
    response = client.get(path)
    assert response.status_code == 404 and response["Content-Type"] == "application/json"
    assert response.json()["error"]["code"] == "not_found"


def test_an_integral_number_is_an_integer_as_json_schema_says(api, sections):
    answer = api.call("post", "/scopes/hospital/recall", {"query": "parking", "token_budget": 300.0})
    assert answer.status_code == 200
    refused = api.call("post", "/scopes/hospital/recall", {"query": "parking", "token_budget": 300.5})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "token_budget"
    refused = api.call("post", "/scopes/hospital/recall", {"query": "parking", "token_budget": "300"})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "token_budget"


def test_the_openapi_document_says_which_schema_valid_input_is_refused(client, db, api, sections):
    """A rule the JSON Schema cannot express is in the operation's 422 description, under the
    field a refusal of it names."""
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    sections_422 = paths["/api/v1/scopes/{scope}/sections"]["put"]["responses"]["422"]["description"]
    twice = api.call(
        "put", "/scopes/hospital/sections", {"sections": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}
    )
    assert twice.status_code == 422 and f"`{twice.json()['error']['field']}`:" in sections_422
    recall_422 = paths["/api/v1/scopes/{scope}/recall"]["post"]["responses"]["422"]["description"]
    explained = api.call("post", "/scopes/hospital/recall", {"query": "parking", "explain": True})
    assert explained.status_code == 422 and f"`{explained.json()['error']['field']}`:" in recall_422
    record_422 = paths["/api/v1/scopes/{scope}/trails"]["post"]["responses"]["422"]["description"]
    unknown = api.record("hospital", query="Where do visitors park?", cited=["no/such/section"])
    assert unknown.status_code == 422 and f"`{unknown.json()['error']['field']}`:" in record_422
    assert "no NUL" in record_422 and "2^53" in record_422


def test_an_unauthenticated_or_other_scopes_body_is_never_unpacked(api, client, other_scope, monkeypatch):
    """A large gzip body from no key, a wrong key or a key of another scope: refused on the key
    alone, before a byte of the body is read (the sync limit is for callers allowed to send it)."""
    import gzip

    from infra import strict_json

    unpacked = []
    monkeypatch.setattr(
        strict_json, "read_body", lambda request, _read=strict_json.read_body: unpacked.append(1) or _read(request)
    )
    bomb = gzip.compress(b'{"sections": [' + b" " * 5_000_000 + b"]}")
    path = "/api/v1/scopes/hospital/section-syncs"
    send = dict(data=bomb, content_type="application/json", headers={"Content-Encoding": "gzip"})
    assert client.post(path, **send).status_code == 401
    assert (
        client.post(
            path, **{**send, "headers": {**send["headers"], "Authorization": "Bearer rt_nope_nope"}}
        ).status_code
        == 401
    )
    other = ApiKey.issue([other_scope], name="other tenant")[1]
    refused = client.post(path, **{**send, "headers": {**send["headers"], "Authorization": f"Bearer {other}"}})
    assert refused.status_code == 404 and refused.json()["error"]["field"] == "scope"
    assert unpacked == []


def test_every_member_of_a_multi_member_gzip_body_is_read(api, sections):
    import gzip

    body = json.dumps(
        {"query": "What are the ICU visiting hours?", "cited": ["visiting/icu"], "signal": "accepted"}
    ).encode()
    half = len(body) // 2
    packed = gzip.compress(body[:half]) + gzip.compress(body[half:])
    response = api.client.post(
        "/api/v1/scopes/hospital/trails",
        data=packed,
        content_type="application/json",
        headers={**api.headers, "Content-Encoding": "gzip"},
    )
    assert response.status_code == 201, response.json()


@pytest.mark.parametrize("where", ["query", "path"])
def test_a_nul_in_the_query_string_or_the_path_is_a_4xx_naming_where(api, sections, where):
    if where == "query":
        response = api.call("get", "/scopes/hospital/sections?after=%00")
        assert response.status_code == 422 and response.json()["error"]["field"] == "after"
    else:
        response = api.call("get", "/scopes/hospital/sections/visiting%00icu")
        assert response.status_code == 400 and response.json()["error"]["field"] == "path"


def test_an_unknown_query_parameter_is_refused_naming_it(api, sections):
    response = api.call("get", "/scopes/hospital/sections?limt=5")
    assert response.status_code == 422 and response.json()["error"]["field"] == "limt"
    assert api.call("get", "/scopes/hospital/sections?limit=5").status_code == 200
