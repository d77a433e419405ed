"""The OpenAPI document, the admin for scopes and keys, and the demo loader."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

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
    assert {
        "/api/v1/scopes/{scope}/recall",
        "/api/v1/scopes/{scope}/recalls/{recall_id}/second-chance",
        "/api/v1/scopes/{scope}/trails",
        "/api/v1/scopes/{scope}/sections",
    } <= paths
    second_chance = schema["paths"]["/api/v1/scopes/{scope}/recalls/{recall_id}/second-chance"]["post"]
    assert {"404", "409", "422"} <= set(second_chance["responses"])
    answer = schema["components"]["schemas"]["RecallOut"]["properties"]
    assert "second-chance" in str(answer["matcher"]) and "second_chance" in answer


def test_the_apis_address_answers_with_where_to_go_and_every_link_answers(db):
    """/api/v1/ is the address the README names: a small index of links, no key needed."""
    scope = Scope.objects.create(slug="docs")
    _, key = ApiKey.issue([scope], name="index")
    client = Client()
    answer = client.get("/api/v1/")
    assert answer.status_code == 200 and answer.json()["name"] == "ragtrail"
    links = answer.json()["links"]
    for name in ("docs", "openapi", "scopes"):
        path = links[name].removeprefix("http://testserver")
        assert client.get(path, headers={"Authorization": f"Bearer {key}"}).status_code == 200, name
    assert client.get("/api/v1/scopes").status_code == 401  # the index is open, the scopes are not
    assert "/api/v1/scopes/{scope}/recall" in links["recall"]


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


def test_the_demo_loader_under_test_leaves_the_checkouts_credentials_alone(db, settings):
    checkout = Path(settings.BASE_DIR) / ".demo-credentials.json"
    before = checkout.stat().st_mtime_ns if checkout.exists() else None
    call_command("load_demo", stdout=StringIO())
    assert (checkout.stat().st_mtime_ns if checkout.exists() else None) == before
    assert settings.RAGTRAIL_DEMO_CREDENTIALS.exists()  # written, in the test's own folder


def test_changing_the_threshold_in_admin_resigns_the_trails(admin_client):
    from tests.conftest import ApiClient
    from trails.models import BandKeys

    scope = Scope.objects.create(slug="docs", matcher="lexical")
    Section.upsert(scope, {"s": "text"})
    api = ApiClient(ApiKey.issue([scope])[1])
    api.record("docs", query="How do I reset the device?", cited=["s"])
    before = {key for keys in BandKeys.objects.values_list("keys", flat=True) for key in keys}
    form = {
        f: getattr(scope, f)
        for f in (
            "slug",
            "name",
            "matcher",
            "embedding_threshold",
            "token_budget",
            "active_ttl_days",
            "pending_ttl_days",
            "event_retention_days",
            "max_false_hit_rate",
            "false_hit_reporters_to_pending",
            "second_chance_margin",
            "second_chance_top",
        )
    }
    form.update({"lexical_threshold": 0.8, "synonyms": "", "band_count": "", "band_rows": ""})
    response = admin_client.post(f"/admin/scopes/scope/{scope.pk}/change/", form, follow=True)
    assert any("re-signed 1 trail" in str(m) for m in response.context["messages"])
    assert {key for keys in BandKeys.objects.values_list("keys", flat=True) for key in keys}.isdisjoint(before)
    assert api.recall("docs", query="How do I reset the device?").json()["outcome"] == "prefetch"


def test_a_stricter_false_hit_bound_in_admin_raises_both_thresholds_from_the_calibration(admin_client):
    from trails.learning.shipped import thresholds_for

    scope = Scope.objects.create(slug="docs", matcher="lexical")
    form = {
        f: getattr(scope, f)
        for f in (
            "slug",
            "name",
            "matcher",
            "embedding_threshold",
            "lexical_threshold",
            "token_budget",
            "active_ttl_days",
            "pending_ttl_days",
            "event_retention_days",
            "false_hit_reporters_to_pending",
            "second_chance_margin",
            "second_chance_top",
        )
    }
    form.update({"max_false_hit_rate": 0.005, "synonyms": "", "band_count": "", "band_rows": ""})
    response = admin_client.post(f"/admin/scopes/scope/{scope.pk}/change/", form, follow=True)
    assert any("Thresholds for a 0.5% false-hit bound" in str(m) for m in response.context["messages"])
    scope.refresh_from_db()
    expected = thresholds_for(0.005)
    assert (
        scope.embedding_threshold
        == expected["embedding_threshold"]
        > Scope._meta.get_field("embedding_threshold").default
    )
    assert scope.lexical_threshold == expected["lexical_threshold"] > Scope._meta.get_field("lexical_threshold").default


def test_choosing_both_matchers_in_admin_gives_each_half_the_bound(admin_client):
    from trails.learning.shipped import thresholds_for

    scope = Scope.objects.create(slug="docs")
    form = {
        f: getattr(scope, f)
        for f in (
            "slug",
            "name",
            "embedding_threshold",
            "lexical_threshold",
            "token_budget",
            "max_false_hit_rate",
            "active_ttl_days",
            "pending_ttl_days",
            "event_retention_days",
            "false_hit_reporters_to_pending",
            "second_chance_margin",
            "second_chance_top",
        )
    }
    form.update({"matcher": "both", "synonyms": "", "band_count": "", "band_rows": ""})
    admin_client.post(f"/admin/scopes/scope/{scope.pk}/change/", form, follow=True)
    scope.refresh_from_db()
    assert thresholds_for(0.01, "embedding") == thresholds_for(0.02, "both")
    assert {
        "lexical_threshold": scope.lexical_threshold,
        "embedding_threshold": scope.embedding_threshold,
    } == thresholds_for(0.01)
    assert scope.embedding_threshold > thresholds_for(0.02)["embedding_threshold"]


def test_speed_benchmark_runs_and_finds_every_stored_question(db):
    out = StringIO()
    call_command("benchmark_recall", "--sizes", "60", "--recalls", "20", "--records", "5", stdout=out)
    text = out.getvalue()
    assert "stored questions answered prefetch: 10/10" in text and "record: 5 trails" in text
    assert not Scope.objects.filter(slug__startswith="bench-").exists()


def test_matching_benchmark_counts_correct_false_and_other_hits(db, tmp_path):
    import json

    pairs = [
        {"a": "How do I copy an object in Python?", "b": "How can I copy an object in Python?", "duplicate": True},
        {"a": "What are the ICU visiting hours?", "b": "What are the general ward visiting hours?", "duplicate": False},
        {"a": "How do I install Python 3.11?", "b": "How do I install Python 3.11?", "duplicate": False},
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in pairs))
    out = StringIO()
    call_command("benchmark_matching", "--pairs", str(path), stdout=out)
    lines = out.getvalue().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("embedding default"))
    all_pairs, fit, held_out = lines[start + 1 : start + 4]
    # The paraphrase is found (1 of 1 duplicates), the look-alike is not, and the
    # identical question labelled "not duplicate" is a false hit (1 of 2), each with its interval.
    assert all_pairs.split()[:4] == ["all", "pairs", "correct", "100.00%"]
    assert "(1/1)" in all_pairs and "false 50.00% [1.26%, 98.74%] (1/2)" in all_pairs
    # Pair 0 is held out (every fifth pair): the paraphrase; pairs 1 and 2 are fitted on.
    assert "fit split (4 pairs in 5)" in fit and "false 50.00% [1.26%, 98.74%] (1/2)" in fit
    assert (
        "validation split (every 5th pair, not fitted)" in held_out
        and "correct 100.00%" in held_out
        and "(1/1)" in held_out
    )


def test_tool_cache_benchmark_runs(db):
    out = StringIO()
    call_command("benchmark_tool_results", "--entries", "40", "--lookups", "60", stdout=out)
    assert "60 lookups" in out.getvalue() and "lookups/s" in out.getvalue()


def test_demo_move_to_the_new_revision_flags_the_trails_it_touches(db, committed):
    call_command("load_demo", "--no-credentials", stdout=StringIO())
    with committed():
        call_command("load_demo", "--revision", "new", "--no-credentials", stdout=StringIO())
    flagged = Trail.objects.filter(scope__slug="python-faq", section_changed_at__isnull=False).count()
    assert flagged == 18  # 13 come back as hints and 5 as misses; 7 are untouched


def test_upkeep_benchmark_runs_and_checks_its_counts(db):
    out = StringIO()
    call_command("benchmark_upkeep", "--events", "300", "--trails", "20", "--batch-size", "7", stdout=out)
    text = out.getvalue()
    assert "counts sum 300 of 300" in text and "sweep: 10 trails" in text


def test_sync_benchmark_splits_a_release_with_this_splitter_and_the_previous_one(db, tmp_path):
    import json

    out = StringIO()
    call_command(
        "benchmark_sync", "--pages", "6", "--trails", "30", "--repeats", "1", "--out", str(tmp_path), stdout=out
    )
    text = out.getvalue()
    figures = json.loads(next(tmp_path.glob("sync-*.json")).read_text())["results"]
    this = figures["this"]
    assert this["release"]["changed"] > 0 and this["over_2000_tokens"] == 0 and this["trails"] > 0
    assert this["noop_rerun_s"] >= 0  # the rerun changed nothing (the command fails otherwise)
    if len(figures) == 2:  # the previous splitter comes from git history (a clone without it measures this one alone)
        assert "this splitter against previous" in text and "trails kept at prefetch" in text


def test_includes_benchmark_refuses_a_fan_out_and_a_fifo_beside_a_plain_split():
    out = StringIO()
    call_command("benchmark_includes", "--fan", "10", "--depth", "5", "--repeats", "1", stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and all("ratio" in line for line in lines)
    assert "would expand to 100,000 lines: 'index.rst:6: includes expand past 100,000 lines" in lines[0]
    assert "'index.md:5: includes expand past 100,000 lines" in lines[1]
    assert "'page.rst: is a FIFO, not a regular file: refused'" in lines[2]


def test_metrics_benchmark_compares_live_and_no_op_metrics_and_puts_them_back(db):
    from infra import metrics

    live = metrics.RECALLS
    out = StringIO()
    call_command("benchmark_metrics", "--rounds", "1", "--requests", "10", stdout=out)
    assert "metrics live" in out.getvalue() and "ratio" in out.getvalue() and metrics.RECALLS is live


def test_page_benchmark_times_every_operator_page(db):
    out = StringIO()
    call_command(
        "benchmark_overview", "--events", "400", "--trails", "60", "--requests", "2", "--phone-loads", "0", stdout=out
    )
    text = out.getvalue()
    for page in (
        "overview 30d",
        "trails by section",
        "trail ",
        "recalls an hour",
        "replay a recall",
        "purge",
        "one recall",
        "syncs 30d",
        "what-if 7d",
        "triage would miss",
        "triage reported",
    ):
        assert f"\n{page}" in "\n" + text, page
    assert "pages over 300 ms at p90:" in text and "the overview on the wire (gzip accepted):" in text
    assert not Scope.objects.filter(slug__startswith="overview-").exists()


def test_operator_pages_are_compressed_and_api_answers_are_not(admin_client, api, sections):
    page = admin_client.get("/ops/hospital/", headers={"Accept-Encoding": "gzip"})
    assert page.status_code == 200 and page["Content-Encoding"] == "gzip"
    answer = api.client.post(
        "/api/v1/scopes/hospital/recall",
        data={"query": "icu visiting hours"},
        content_type="application/json",
        headers={**api.headers, "Accept-Encoding": "gzip"},
    )
    assert answer.status_code == 200 and not answer.has_header("Content-Encoding")
