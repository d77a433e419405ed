"""The tool-result cache, against whatever cache the settings name (Redis in CI)."""

from __future__ import annotations

import os
import time

import pytest
from django.core.cache import cache

from infra.hashing import section_hash
from tests.conftest import VISITING

POLICIES = [
    {"tool": "read_file", "cacheable": True, "ttl_s": 600, "ignore_args": ["intention"], "path_args": ["path"]},
    {"tool": "search", "cacheable": True, "ttl_s": 600},
    {"tool": "inbox", "cacheable": True, "ttl_s": 600, "per_caller": True},
    {"tool": "write_file", "cacheable": False},  # a tool that is never cached needs no ttl_s
    {"tool": "clock", "cacheable": True, "ttl_s": 1},
]
CONTEXT = {"commit": "abc123"}


@pytest.fixture(autouse=True)
def empty_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def tools(api, sections):
    response = api.call("put", "/scopes/hospital/tool-policies", {"policies": POLICIES})
    assert response.status_code == 200, response.json()
    return api


def put(api, tool, args, result="R", context=CONTEXT, **extra):
    return api.call(
        "put",
        "/scopes/hospital/tool-results",
        {"tool": tool, "args": args, "context": context, "result": result, **extra},
    )


def read(*section_ids: str) -> dict[str, str]:
    """The hashes an agent read the sections at, as the store returns them."""
    return {s: section_hash(VISITING[s]) for s in section_ids}


def look(api, tool, args, context=CONTEXT, scope="hospital", **extra):
    return api.call(
        "post", f"/scopes/{scope}/tool-results/lookup", {"tool": tool, "args": args, "context": context, **extra}
    ).json()


def test_a_stored_result_is_served_with_its_age(tools):
    assert put(tools, "search", {"q": "visiting hours", "limit": 5}, result={"ids": ["a", "b"]}).json() == {
        "stored": True,
        "ttl_s": 600,
        "reason": None,
    }
    body = look(tools, "search", {"limit": 5, "q": "visiting hours"})
    assert body["hit"] is True and body["result"] == {"ids": ["a", "b"]} and 0 <= body["age_s"] < 5


@pytest.mark.parametrize(
    "stored,asked,extra_stored,extra_asked",
    [
        ({"path": "b.py", "mode": "read"}, {"path": "b.py", "mode": "write"}, {}, {}),
        ({"path": "b.py", "limit": 1}, {"path": "b.py", "limit": "1"}, {}, {}),
        ({"path": "b.py", "offset": 0}, {"path": "b.py", "offset": 20}, {}, {}),
    ],
)
def test_calls_that_differ_never_collide(tools, stored, asked, extra_stored, extra_asked):
    put(tools, "read_file", stored)
    assert look(tools, "read_file", asked)["hit"] is False
    assert look(tools, "read_file", stored)["hit"] is True


def test_two_callers_never_share_a_per_caller_result(tools):
    put(tools, "inbox", {}, result="ann's mail", caller="ann")
    assert look(tools, "inbox", {}, caller="bob")["hit"] is False
    assert look(tools, "inbox", {}, caller="ann")["result"] == "ann's mail"


def test_a_per_caller_tool_without_a_caller_is_refused(tools):
    response = tools.call(
        "post", "/scopes/hospital/tool-results/lookup", {"tool": "inbox", "args": {}, "context": CONTEXT}
    )
    assert response.status_code == 422 and response.json()["error"]["field"] == "caller"


def test_an_old_context_version_is_unreachable(tools):
    put(tools, "search", {"q": "x"}, context={"commit": "old"})
    assert look(tools, "search", {"q": "x"}, context={"commit": "new"})["hit"] is False


def test_equivalent_calls_collide(tools):
    put(tools, "read_file", {"path": "./src/../b.py", "intention": "find the bug"})
    assert look(tools, "read_file", {"path": "b.py", "intention": "check the imports"})["hit"] is True


def test_entries_expire_after_the_tools_ttl(tools):
    put(tools, "clock", {})
    assert look(tools, "clock", {})["hit"] is True
    time.sleep(1.2)
    assert look(tools, "clock", {})["hit"] is False


def test_a_write_tool_is_never_cached(tools):
    stored = put(tools, "write_file", {"path": "b.py"}).json()
    assert stored["stored"] is False and "not cacheable" in stored["reason"]
    assert look(tools, "write_file", {"path": "b.py"}) == {
        "hit": False,
        "result": None,
        "age_s": None,
        "reason": "the tool's policy says it is not cacheable",
    }


def test_an_unknown_tool_is_never_cached(tools):
    assert put(tools, "delete_everything", {}).json()["stored"] is False
    assert "no policy" in look(tools, "delete_everything", {})["reason"]


def test_another_scope_never_sees_a_result(tools, other_api, other_scope):
    other_api.call("put", "/scopes/other/tool-policies", {"policies": POLICIES})
    put(tools, "search", {"q": "x"})
    assert look(other_api, "search", {"q": "x"}, scope="other")["hit"] is False
    assert (
        other_api.call(
            "post", "/scopes/hospital/tool-results/lookup", {"tool": "search", "args": {}, "context": {}}
        ).status_code
        == 404
    )


def test_an_oversized_result_is_refused_and_not_stored(tools, settings):
    settings.RAGTRAIL_TOOL_RESULT_MAX_BYTES = 100
    response = put(tools, "search", {"q": "x"}, result="y" * 200)
    assert response.status_code == 413 and response.json()["error"]["field"] == "result"
    assert "limit is 100" in response.json()["error"]["message"]
    assert look(tools, "search", {"q": "x"})["hit"] is False


def test_a_result_listing_a_changed_section_is_not_served(tools):
    assert (
        put(tools, "search", {"q": "icu"}, section_ids=["visiting/icu"], hashes=read("visiting/icu")).json()["stored"]
        is True
    )
    assert look(tools, "search", {"q": "icu"})["hit"] is True
    tools.put_sections("hospital", {"visiting/icu": "new hours"})
    body = look(tools, "search", {"q": "icu"})
    assert body["hit"] is False and "changed" in body["reason"]


def test_listing_an_unknown_section_is_refused(tools):
    response = put(tools, "search", {"q": "icu"}, section_ids=["nope"])
    assert response.status_code == 422 and response.json()["error"]["field"] == "section_ids"


def test_every_lookup_is_counted(tools):
    put(tools, "search", {"q": "x"}, section_ids=["parking"], hashes=read("parking"))
    look(tools, "search", {"q": "x"})
    look(tools, "search", {"q": "y"})
    look(tools, "write_file", {})
    look(tools, "unknown", {})
    tools.put_sections("hospital", {"parking": "moved"})
    look(tools, "search", {"q": "x"})
    stats = tools.call("get", "/scopes/hospital/tool-results/stats").json()
    assert stats["search"] == {"hit": 1, "miss": 1, "refused": 0, "stale": 1}
    assert stats["write_file"]["refused"] == 1 and stats["*"]["refused"] == 1


def test_policy_changes_take_effect_at_once(tools):
    put(tools, "search", {"q": "x"})
    tools.call(
        "put", "/scopes/hospital/tool-policies", {"policies": [{"tool": "search", "cacheable": False, "ttl_s": 60}]}
    )
    assert look(tools, "search", {"q": "x"})["hit"] is False
    assert tools.call("get", "/scopes/hospital/tool-policies").json()["policies"][0]["cacheable"] is False


@pytest.mark.parametrize(
    "policies,field",
    [
        ([{"tool": "a", "cacheable": True, "ttl_s": 0}], "policies.0.ttl_s"),
        ([{"tool": "a", "cacheable": True, "ttl_s": 5}, {"tool": "a", "cacheable": False, "ttl_s": 5}], "policies"),
        ([{"tool": "a", "cacheable": "yes", "ttl_s": 5}], "policies.0.cacheable"),
    ],
)
def test_bad_policies_are_refused_and_change_nothing(tools, policies, field):
    response = tools.call("put", "/scopes/hospital/tool-policies", {"policies": policies})
    assert response.status_code == 422 and response.json()["error"]["field"] == field
    assert len(tools.call("get", "/scopes/hospital/tool-policies").json()["policies"]) == len(POLICIES)


@pytest.mark.skipif(not os.environ.get("CI"), reason="CI runs the tool cache against Redis")
def test_ci_runs_the_tool_cache_against_redis():
    from django.core.cache import caches
    from django.core.cache.backends.redis import RedisCache

    assert isinstance(caches["default"], RedisCache)


def test_a_recreated_scope_never_sees_the_old_scopes_policies(db):
    from scopes.models import Scope
    from trails import tool_results

    old = Scope.objects.create(slug="tmp")
    tool_results.replace_policies(old, POLICIES)
    assert "search" in tool_results.policies_for(old)
    old.delete()
    new = Scope.objects.create(slug="tmp")
    assert tool_results.policies_for(new) == {}


def test_every_write_path_of_a_policy_moves_the_scopes_version(db):
    from django.contrib.auth.models import User
    from django.test import Client

    from scopes.models import Scope
    from trails.models import ToolPolicy

    scope = Scope.objects.create(slug="policies")

    def version() -> str:
        return Scope.objects.values_list("tool_policy_version", flat=True).get(pk=scope.pk)

    seen = [version()]
    ToolPolicy.objects.bulk_create([ToolPolicy(scope=scope, tool="search", cacheable=True)])
    seen.append(version())
    ToolPolicy.objects.filter(scope=scope).update(ttl_s=60)
    seen.append(version())
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="x"))
    policy = ToolPolicy.objects.get(scope=scope)
    # The admin's bulk "delete selected" action.
    admin.post(
        "/admin/trails/toolpolicy/", {"action": "delete_selected", "_selected_action": [policy.pk], "post": "yes"}
    )
    assert not ToolPolicy.objects.exists()
    seen.append(version())
    assert len(set(seen)) == len(seen), seen
