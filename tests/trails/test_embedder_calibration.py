"""Switching the embedder asks for its own calibration: thresholds are fitted, stored and served
per embedder, and a scope fitted for another embedder is refused semantic matching."""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command

from scopes.demo import faq_questions
from scopes.models import ApiKey, Scope, Section
from tests.bypass import around_the_writer
from tests.conftest import ApiClient
from tests.embedding_endpoint import KEY, EmbeddingEndpoint
from trails.embedders import load_embedder
from trails.models import EmbedderCalibration, Trail

pytestmark = pytest.mark.django_db

SERVING = "stand-in-embedding-1-384d+words"


@pytest.fixture(scope="module")
def endpoint():
    served = EmbeddingEndpoint()
    yield served
    served.close()


@pytest.fixture
def on_endpoint(endpoint, settings):
    """The service configured for the stand-in endpoint, and a scope created before the switch."""
    scope = Scope.objects.create(slug="help")
    Section.upsert(scope, {"s1": "Visitors park in car park B."})
    settings.RAGTRAIL_EMBEDDER = "trails.embedders.openai_compatible"
    settings.RAGTRAIL_EMBEDDING_MODEL = "stand-in-embedding-1"
    settings.RAGTRAIL_EMBEDDING_URL = endpoint.url
    settings.RAGTRAIL_EMBEDDING_API_KEY = KEY
    load_embedder.cache_clear()
    endpoint.fail.clear()
    endpoint.mode = ""
    _, key = ApiKey.issue([scope])
    yield scope, ApiClient(key), endpoint
    endpoint.fail.clear()
    endpoint.mode = ""
    load_embedder.cache_clear()


@pytest.fixture
def pairs(tmp_path):
    """Labelled pairs from the FAQ's questions: each with a rewording (duplicates), and each
    with another question (non-duplicates)."""
    questions = [q["question"] for q in faq_questions()]
    rows = [{"a": q, "b": f"{q.rstrip('?')} please?", "duplicate": True} for q in questions]
    rows += [{"a": q, "b": questions[(i + 7) % len(questions)], "duplicate": False} for i, q in enumerate(questions)]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows[::2] + rows[1::2]))
    return path


def calibrate(**options) -> str:
    out = io.StringIO()
    call_command("calibrate_embedder", stdout=out, **options)
    return out.getvalue()


def test_a_scope_fitted_for_another_embedder_is_refused_semantic_matching_with_the_reason(on_endpoint):
    _, api, _ = on_endpoint
    answer = api.recall("help", query="Where do visitors park?")
    error = answer.json()["error"]
    assert answer.status_code == 503 and error["code"] == "embedder_not_calibrated"
    assert (error["fitted_for"], error["serving"]) == ("all-MiniLM-L6-v2+words", SERVING)
    assert "manage.py calibrate_embedder" in error["message"]


def test_a_lexical_scope_is_served_whatever_the_embedder(on_endpoint):
    scope, api, _ = on_endpoint
    scope.matcher = "lexical"
    scope.save()
    assert api.record("help", query="Where do visitors park?", cited=["s1"]).status_code == 201
    assert api.recall("help", query="where do visitors park").json()["outcome"] == "prefetch"


def test_calibration_prints_the_fit_and_held_out_rates_stores_it_by_model_and_serves_the_scopes(on_endpoint, pairs):
    scope, api, _ = on_endpoint
    printed = calibrate(pairs=str(pairs), bound=0.05)
    fit = EmbedderCalibration.objects.get(model=SERVING, scope=None).fit
    threshold = fit["matchers"]["embedding"]["threshold"]
    assert f"374 pairs from pairs.jsonl embedded by {SERVING}" in printed
    assert f"embedding threshold {threshold} for a false-hit bound of 5.0% (holds)" in printed
    assert "held out (75 pairs never fitted on): false hits " in printed and "paraphrases matched " in printed
    assert fit["held_out"]["pairs"] == 75 and fit["pairs"] == 299
    scope.refresh_from_db()
    # The scope's own bound (2 %) reads its threshold from the stored fit.
    assert (
        scope.embedding_fitted_for == SERVING
        and f"scope help: embedding threshold 0.9425 → {scope.embedding_threshold}" in printed
    )
    assert api.record("help", query="Where do visitors park?", cited=["s1"]).status_code == 201
    body = api.recall("help", query="Where do visitors park?").json()
    assert (body["outcome"], body["matcher"]) == ("prefetch", "embedding")
    # A scope created now takes the serving embedder's fit.
    created = Scope.objects.create(slug="later")
    assert (created.embedding_fitted_for, created.embedding_threshold) == (SERVING, scope.embedding_threshold)


def test_an_endpoint_that_fails_answers_503_and_records_nothing(on_endpoint, pairs):
    scope, api, endpoint = on_endpoint
    calibrate(pairs=str(pairs), bound=0.05)
    endpoint.fail[:] = [500] * 10
    answer = api.recall("help", query="Is there parking for visitors?")
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "embedder_unavailable"
    endpoint.fail[:] = [500] * 10
    assert api.record("help", query="Is there parking for visitors?", cited=["s1"]).status_code == 503
    assert not Trail.objects.filter(scope=scope).exists()


def test_a_dry_run_stores_and_changes_nothing(on_endpoint, pairs):
    scope, _, _ = on_endpoint
    printed = calibrate(pairs=str(pairs), bound=0.05, dry_run=True)
    assert "held out" in printed and "nothing stored" in printed
    assert not EmbedderCalibration.objects.exists()
    scope.refresh_from_db()
    assert scope.embedding_fitted_for == "" and scope.embedding_threshold == 0.9425


def test_without_a_pairs_file_the_command_says_what_to_pass(on_endpoint, tmp_path):
    with pytest.raises(CommandError) as missing:
        calibrate(pairs=str(tmp_path / "qqp-pairs-dev.jsonl"))
    said = str(missing.value)
    assert said.startswith(f"no pairs file at {tmp_path / 'qqp-pairs-dev.jsonl'}: pass --pairs FILE, a JSON lines file")
    assert '{"a": question, "b": question, "duplicate": true|false}' in said
    assert "Quora Question Pairs" in said and "--scope SLUG" in said


def test_a_scope_without_kept_labels_has_nothing_to_fit_on(on_endpoint):
    with pytest.raises(CommandError, match="no labelled pairs in labels of scope help"):
        calibrate(scope="help")


def test_the_docs_lines_point_the_service_at_an_endpoint_and_fit_it(on_endpoint, pairs, settings):
    """docs/matching.md's lines, run as written but for the address and key of the stand-in
    and the pairs file: every setting they name is one the service reads."""
    page = (Path(settings.BASE_DIR) / "docs" / "matching.md").read_text(encoding="utf-8")
    block = page.split("<!-- endpoint:start -->", 1)[1].split("<!-- endpoint:end -->", 1)[0]
    lines = [line for line in block.strip().strip("`").splitlines() if line and not line.startswith("sh")]
    exports = dict(line.removeprefix("export ").split("=", 1) for line in lines if line.startswith("export "))
    assert (
        all(hasattr(django_settings, name) for name in exports)
        and exports["RAGTRAIL_EMBEDDER"] == "trails.embedders.openai_compatible"
    )
    stand_in = {"RAGTRAIL_EMBEDDING_URL": on_endpoint[2].url, "RAGTRAIL_EMBEDDING_API_KEY": KEY}
    for name, value in {**exports, **stand_in}.items():
        setattr(settings, name, value)
    load_embedder.cache_clear()
    command = [word for word in shlex.split(next(line for line in lines if "manage.py" in line)) if "=" not in word]
    assert command[:4] == [".venv/bin/python", "manage.py", "calibrate_embedder", "--pairs"]
    printed = calibrate(pairs=str(pairs))
    assert f"embedded by {exports['RAGTRAIL_EMBEDDING_MODEL']}-384d+words" in printed and "held out" in printed
    assert Scope.objects.get(slug="help").embedding_fitted_for == f"{exports['RAGTRAIL_EMBEDDING_MODEL']}-384d+words"


def test_a_scopes_few_labels_do_not_hold_so_nothing_is_stored_and_no_other_scope_moves(on_endpoint, pairs):
    scope, api, _ = on_endpoint
    calibrate(pairs=str(pairs), bound=0.05)
    other = Scope.objects.create(slug="other")
    other_threshold = other.embedding_threshold
    Scope.objects.filter(pk=scope.pk).update(keep_raw_queries=True)
    questions = [f"Where do visitors park on level {n}?" for n in range(6)]
    for n, question in enumerate(questions):
        assert api.record("help", query=question, cited=["s1"]).status_code == 201
        served = api.recall("help", query=question).json()
        assert served["outcome"] == "prefetch"
        feedback = api.call("post", f"/scopes/help/recalls/{served['recall_id']}/feedback", {"helpful": n % 2 == 0})
        assert feedback.status_code == 200
    threshold = Scope.objects.get(pk=scope.pk).embedding_threshold
    with pytest.raises(CommandError, match="the fit does not hold.*nothing stored"):
        calibrate(scope="help")
    assert not EmbedderCalibration.objects.filter(model=SERVING, scope=scope).exists()
    other.refresh_from_db()
    assert other.embedding_threshold == other_threshold
    assert Scope.objects.get(pk=scope.pk).embedding_threshold == threshold


def test_a_fit_that_does_not_hold_is_refused_and_the_scope_keeps_refusing(on_endpoint, pairs):
    _, api, endpoint = on_endpoint
    endpoint.mode = "const"  # every text the same vector: every pair looks a duplicate
    with pytest.raises(CommandError, match="the fit does not hold: .*nothing stored, no scope changed"):
        calibrate(pairs=str(pairs), bound=0.05)
    assert not EmbedderCalibration.objects.exists()
    scope = Scope.objects.get(slug="help")
    assert (scope.embedding_fitted_for, scope.embedding_threshold) == ("", 0.9425)
    answer = api.recall("help", query="Where do visitors park?")
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "embedder_not_calibrated"


def test_a_holding_fit_is_not_replaced_by_one_on_fewer_pairs_without_replace(on_endpoint, pairs):
    calibrate(pairs=str(pairs), bound=0.2)
    stored = EmbedderCalibration.objects.get(model=SERVING, scope=None).fit
    with pytest.raises(CommandError, match="fewer than the .* give --replace"):
        calibrate(pairs=str(pairs), bound=0.2, limit=200)
    assert EmbedderCalibration.objects.get(model=SERVING, scope=None).fit == stored
    calibrate(pairs=str(pairs), bound=0.2, limit=200, replace=True)
    assert EmbedderCalibration.objects.get(model=SERVING, scope=None).fit["pairs"] == 160


@pytest.mark.parametrize(
    "trouble, said",
    [
        ("down", "the embedder could not embed the pairs: the embedding endpoint .* failed: ConnectError"),
        (
            "key",
            "the embedder could not embed the pairs: .*HTTP 401: Incorrect API key provided: Bearer \\[redacted\\]",
        ),
        ("json", "pairs.jsonl, line 3: not JSON"),
    ],
)
def test_an_endpoint_down_a_refused_key_or_a_bad_line_is_one_clear_error(on_endpoint, pairs, settings, trouble, said):
    endpoint = on_endpoint[2]
    if trouble == "down":
        settings.RAGTRAIL_EMBEDDING_URL = "http://127.0.0.1:9/v1"
    elif trouble == "key":
        endpoint.mode = "echo"
    else:
        lines = pairs.read_text().splitlines()
        pairs.write_text("\n".join([*lines[:2], "{not json", *lines[2:]]) + "\n")
    load_embedder.cache_clear()
    with pytest.raises(CommandError, match=said) as refused:
        calibrate(pairs=str(pairs))
    assert "\n" not in str(refused.value) and KEY not in str(refused.value)
    assert not EmbedderCalibration.objects.exists()


def test_explain_counts_the_trails_carrying_another_embedders_vectors_and_names_reindex(on_endpoint, pairs):
    scope, api, _ = on_endpoint
    calibrate(pairs=str(pairs), bound=0.05)
    for question in ("Where do visitors park?", "Is parking free for visitors?"):
        assert api.record("help", query=question, cited=["s1"]).status_code == 201
    with around_the_writer():  # a trail recorded while the bundled model served
        Trail.objects.filter(scope=scope, query="Is parking free for visitors?").update(
            embedding_model="all-MiniLM-L6-v2+words"
        )
    answer = api.recall("help", query="Where do visitors park?", dry_run=True, explain=True)
    why = answer.json()["explanation"]
    assert why["other_embedder_trails"] == 1
    assert (
        f"1 trail(s) of this scope carry another embedder's vectors than the serving {SERVING}" in why["summary"]
        and "manage.py reindex_scope --scope help" in why["summary"]
    )
