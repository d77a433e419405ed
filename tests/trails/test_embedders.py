"""Every embedder backend keeps one contract; the ONNX one gives the torch model's vectors."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings

from scopes.demo import faq_questions, faq_sections
from tests.embedding_endpoint import KEY, EmbeddingEndpoint
from trails.embedders import load_embedder, onnx, openai_compatible
from trails.embedders.base import EmbedderUnavailable
from trails.embedders.sentence_transformer import model_path

TEXTS = [
    "How do I copy an object in Python?",
    "What are the ICU visiting hours?",
    "why is python slow",
    "How do I copy an object in Python?",
]


class EmbedderContract:
    """What recall and record rely on, for one backend module."""

    module: str
    model: str

    @pytest.fixture(scope="class")
    @classmethod
    def embedder(cls):
        return importlib.import_module(cls.module).Embedder(cls.model)

    def test_rows_are_unit_vectors_of_the_stated_dimension(self, embedder):
        vectors = embedder.embed_many(TEXTS)
        assert vectors.shape == (len(TEXTS), embedder.dim) and vectors.dtype == np.float32
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)

    def test_a_text_gets_the_same_vector_alone_in_a_batch_and_repeated(self, embedder):
        batch = embedder.embed_many(TEXTS)
        assert float(batch[0] @ batch[3]) > 1 - 1e-6
        for text, row in zip(TEXTS, batch):
            assert float(embedder.embed(text) @ row) > 1 - 1e-6

    def test_different_questions_get_different_vectors(self, embedder):
        vectors = embedder.embed_many(TEXTS[:3])
        assert float(vectors[0] @ vectors[1]) < 0.9 and float(vectors[0] @ vectors[2]) < 0.9

    def test_no_texts_give_no_rows(self, embedder):
        assert embedder.embed_many([]).shape == (0, embedder.dim)

    def test_vectors_name_their_model(self, embedder):
        assert isinstance(embedder.name, str) and embedder.name


class TestHashingEmbedder(EmbedderContract):
    module, model = "trails.embedders.hashing", "hashing"


class TestSentenceTransformerEmbedder(EmbedderContract):
    module, model = "trails.embedders.sentence_transformer", "bundled:all-MiniLM-L6-v2"


class TestOnnxEmbedder(EmbedderContract):
    module, model = "trails.embedders.onnx", "bundled:all-MiniLM-L6-v2"


class TestInt8OnnxEmbedder(EmbedderContract):
    module, model = "trails.embedders.onnx_int8", "bundled:all-MiniLM-L6-v2"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def endpoint_settings(endpoint: EmbeddingEndpoint, **extra) -> override_settings:
    return override_settings(
        **{
            "RAGTRAIL_EMBEDDER": "trails.embedders.openai_compatible",
            "RAGTRAIL_EMBEDDING_MODEL": "stand-in-embedding-1",
            "RAGTRAIL_EMBEDDING_URL": endpoint.url,
            "RAGTRAIL_EMBEDDING_API_KEY": KEY,
            **extra,
        }
    )


@pytest.fixture(scope="module")
def endpoint():
    served = EmbeddingEndpoint()
    yield served
    served.close()


class TestOpenAICompatibleEmbedder(EmbedderContract):
    """The endpoint backend against a stand-in speaking the protocol (tests/embedding_endpoint.py)."""

    module, model = "trails.embedders.openai_compatible", "stand-in-embedding-1"

    @pytest.fixture(scope="class")
    @classmethod
    def embedder(cls, endpoint):
        with endpoint_settings(endpoint, RAGTRAIL_EMBEDDING_BATCH=2):
            yield importlib.import_module(cls.module).Embedder(cls.model)


@pytest.fixture
def asked(endpoint):
    """The stand-in with its log of requests emptied, and an embedder on it built by `make`."""
    endpoint.requests.clear()
    endpoint.fail.clear()
    endpoint.hang_s, endpoint.mode = 0.0, ""
    yield endpoint
    endpoint.fail.clear()
    endpoint.hang_s, endpoint.mode = 0.0, ""


def endpoint_embedder(endpoint: EmbeddingEndpoint, **extra):
    with endpoint_settings(endpoint, **extra):
        return openai_compatible.Embedder("stand-in-embedding-1")


def test_the_endpoint_is_asked_in_batches_with_the_model_and_key_and_vectors_come_back_in_order(asked):
    embedder = endpoint_embedder(asked, RAGTRAIL_EMBEDDING_BATCH=4, RAGTRAIL_EMBEDDING_DIMENSIONS=0)
    texts = [f"question number {n} about parking" for n in range(10)]
    together = embedder.embed_many(texts)
    sent = [r["body"]["input"] for r in asked.requests]
    assert [len(batch) for batch in sent] == [4, 4, 2] and sum(sent, []) == texts
    assert {r["body"]["model"] for r in asked.requests} == {"stand-in-embedding-1"}
    assert {r["headers"]["Authorization"] for r in asked.requests} == {f"Bearer {KEY}"}
    alone = np.stack([embedder.embed(t) for t in texts])
    assert np.allclose(together, alone, atol=1e-6) and np.allclose(np.linalg.norm(together, axis=1), 1, atol=1e-5)


def test_vectors_are_named_by_the_model_and_the_dimensions_the_endpoint_answers(asked):
    assert endpoint_embedder(asked).name == "stand-in-embedding-1-384d"  # none asked for: learnt from the answer
    smaller = endpoint_embedder(asked, RAGTRAIL_EMBEDDING_DIMENSIONS=128)
    assert smaller.name == "stand-in-embedding-1-128d" and smaller.embed("parking").shape == (128,)
    assert asked.requests[-1]["body"]["dimensions"] == 128


def test_a_changed_dimension_under_the_same_model_is_refused_clearly(asked):
    embedder = endpoint_embedder(asked)
    assert embedder.name == "stand-in-embedding-1-384d"
    asked.mode = "dim"
    with pytest.raises(
        EmbedderUnavailable, match="now answers vectors of 383 dimensions for stand-in-embedding-1, not the 384"
    ):
        embedder.embed("Where do visitors park?")


def test_a_provider_that_ignores_the_dimensions_asked_for_is_told_to_set_them_to_its_own(asked):
    embedder = endpoint_embedder(asked, RAGTRAIL_EMBEDDING_DIMENSIONS=128)
    asked.mode = "full"
    with pytest.raises(EmbedderUnavailable) as refused:
        embedder.embed("Where do visitors park?")
    said = str(refused.value)
    assert (
        "answered vectors of 384 dimensions for stand-in-embedding-1, not the 128 RAGTRAIL_EMBEDDING_DIMENSIONS" in said
    )
    assert (
        "ignored the requested dimensions; set RAGTRAIL_EMBEDDING_DIMENSIONS=384" in said and "leave it unset" in said
    )


def test_a_busy_endpoint_is_asked_again_within_the_deadline(asked):
    asked.fail[:] = [503, 429]
    vector = endpoint_embedder(asked).embed("Where do visitors park?")
    assert vector.shape == (384,) and len(asked.requests) == 3


def test_a_refused_key_is_said_at_once_and_never_retried(asked):
    embedder = endpoint_embedder(asked, RAGTRAIL_EMBEDDING_API_KEY="sk-wrong")
    with pytest.raises(EmbedderUnavailable, match="HTTP 401: Incorrect API key provided") as refused:
        embedder.embed_many(["Where do visitors park?"])
    assert refused.value.code == "embedder_unavailable" and len(asked.requests) == 1


def test_a_hung_endpoint_costs_one_deadline_then_says_so(asked):
    embedder = endpoint_embedder(asked, RAGTRAIL_EMBEDDING_DIMENSIONS=384, RAGTRAIL_EMBEDDING_TIMEOUT_MS=100)
    asked.hang_s = 1.0
    with pytest.raises(EmbedderUnavailable, match="no answer within 100 ms"):
        embedder.embed("Where do visitors park?")
    assert len(asked.requests) == 1  # the deadline was spent on the one attempt: none after it


def test_a_dripping_answer_is_given_up_at_the_deadline_not_read_to_its_end(asked):
    embedder = endpoint_embedder(asked, RAGTRAIL_EMBEDDING_DIMENSIONS=384, RAGTRAIL_EMBEDDING_TIMEOUT_MS=300)
    asked.mode = "trickle"  # 64 bytes every 20 ms: each read is quick, the whole answer takes seconds
    with pytest.raises(EmbedderUnavailable, match="no whole answer within 300 ms"):
        embedder.embed("Where do visitors park?")


def test_an_answer_stalling_halfway_is_given_up_at_the_deadline(asked):
    embedder = endpoint_embedder(asked, RAGTRAIL_EMBEDDING_DIMENSIONS=384, RAGTRAIL_EMBEDDING_TIMEOUT_MS=300)
    asked.mode = "stall"  # headers and half the body at once, then silence for 2 s
    with pytest.raises(EmbedderUnavailable, match="no whole answer within 300 ms"):
        embedder.embed("Where do visitors park?")
    asked.mode = ""
    assert embedder.embed("Where do visitors park?").shape == (384,)  # the next request is served


def test_an_answer_larger_than_its_vectors_could_be_is_refused(asked):
    asked.mode = "huge"
    with pytest.raises(EmbedderUnavailable, match="over the .* bytes its vectors could take"):
        endpoint_embedder(asked, RAGTRAIL_EMBEDDING_DIMENSIONS=384).embed("Where do visitors park?")


def test_an_echoed_key_is_redacted_from_the_error_and_the_log(asked, caplog):
    asked.mode = "echo"
    with pytest.raises(EmbedderUnavailable) as refused:
        endpoint_embedder(asked).embed("Where do visitors park?")
    assert "HTTP 401: Incorrect API key provided: Bearer [redacted]" in str(refused.value)
    assert KEY not in str(refused.value) and KEY not in caplog.text and "[redacted]" in caplog.text


def test_a_key_echoed_past_the_messages_cut_and_a_urls_credentials_are_never_shown(asked, caplog):
    # Redacted whole before the message is cut: a cut key (all but its last character) was shown.
    asked.mode = "echo-far"
    with pytest.raises(EmbedderUnavailable) as refused:
        endpoint_embedder(asked).embed("Where do visitors park?")
    assert KEY[:-1] not in str(refused.value) and KEY[:-1] not in caplog.text and "[redacted]" in str(refused.value)
    with_credentials = asked.url.replace("http://", "http://proxyuser:proxy%40pass-SECRET@") + "?v=1&key=query-SECRET"
    for mode in ("echo", "echo-all"):  # the bearer header, then every header and the path as received
        asked.mode = mode
        with pytest.raises(EmbedderUnavailable) as refused:
            endpoint_embedder(asked, RAGTRAIL_EMBEDDING_URL=with_credentials).embed("Where do visitors park?")
        assert "SECRET" not in str(refused.value) and "SECRET" not in caplog.text, mode
        assert "cHJveHl1c2VyOnByb3h5QHBhc3MtU0VDUkVU" not in str(refused.value)  # base64 of the Basic header
        assert asked.url.removeprefix("http://").split("/")[0] in str(refused.value)  # the host is still named
    assert asked.requests[-1]["path"].startswith("/v1/embeddings?")  # the path, then the query


@pytest.mark.parametrize("mode", ["nan", "inf", "zero"])
def test_a_vector_not_finite_or_all_zeros_is_a_malformed_answer(asked, mode):
    asked.mode = mode
    with pytest.raises(EmbedderUnavailable, match="malformed vector"):
        endpoint_embedder(asked).embed_many(["Where do visitors park?", "Is parking free?"])


def test_a_stopped_endpoint_is_said_to_be_unavailable(asked):
    with override_settings(
        RAGTRAIL_EMBEDDING_URL=f"http://127.0.0.1:{free_port()}/v1", RAGTRAIL_EMBEDDING_DIMENSIONS=384
    ):
        embedder = openai_compatible.Embedder("stand-in-embedding-1")
    with pytest.raises(EmbedderUnavailable, match="ConnectError"):
        embedder.embed("Where do visitors park?")


def test_a_deadline_past_recalls_budget_or_a_missing_model_name_is_refused_at_start(asked):
    with pytest.raises(ImproperlyConfigured, match="RAGTRAIL_RECALL_BUDGET_MS"):
        endpoint_embedder(asked, RAGTRAIL_EMBEDDING_TIMEOUT_MS=500, RAGTRAIL_RECALL_BUDGET_MS=500)
    with endpoint_settings(asked), pytest.raises(ImproperlyConfigured, match="RAGTRAIL_EMBEDDING_MODEL"):
        openai_compatible.Embedder("bundled:all-MiniLM-L6-v2")


def test_manage_py_check_fails_at_start_on_an_embedding_deadline_at_or_past_recalls_budget(asked, settings):
    from django.core.management.base import SystemCheckError

    settings.RAGTRAIL_RECALL_BUDGET_MS = 200  # the bundled model has no endpoint deadline: nothing to say
    call_command("check")
    for timeout in (800, 500):
        with endpoint_settings(asked, RAGTRAIL_EMBEDDING_TIMEOUT_MS=timeout, RAGTRAIL_RECALL_BUDGET_MS=500):
            with pytest.raises(SystemCheckError) as failed:
                call_command("check")
        assert f"RAGTRAIL_EMBEDDING_TIMEOUT_MS ({timeout}) must be under RAGTRAIL_RECALL_BUDGET_MS (500)" in str(
            failed.value
        )
    for timeout in (0, -5):  # no embedding could ever answer in time
        with endpoint_settings(asked, RAGTRAIL_EMBEDDING_TIMEOUT_MS=timeout), pytest.raises(SystemCheckError) as failed:
            call_command("check")
        assert f"RAGTRAIL_EMBEDDING_TIMEOUT_MS ({timeout}) must be a positive" in str(failed.value)
    with endpoint_settings(asked, RAGTRAIL_EMBEDDING_TIMEOUT_MS=800, RAGTRAIL_RECALL_BUDGET_MS=1200):
        call_command("check")


def test_the_int8_model_names_its_vectors_apart_from_the_float_models():
    """Its vectors are close to the float model's but not the same: a scope's stored vectors
    must never be compared across the two, so the names differ."""
    model = "bundled:all-MiniLM-L6-v2"
    cheap, exact = (
        load_embedder("trails.embedders.onnx_int8", model).inner,
        load_embedder("trails.embedders.onnx", model).inner,
    )
    assert cheap.name == f"{exact.name}-int8" and cheap.dim == exact.dim
    texts = [q["question"] for q in faq_questions()]
    cosines = np.sum(cheap.embed_many(texts) * exact.embed_many(texts), axis=1)
    assert float(np.median(cosines)) > 0.9 and float(np.max(cosines)) < 1 - 1e-4


def test_onnx_gives_the_torch_models_vectors_on_real_questions():
    """Issue 13: a faster inference path is welcome if its vectors are the model's to 1e-4 cosine.
    Measured here to float precision on the FAQ's questions and sections, one by one (as recall
    embeds) and in batches; most sections run past the model's 256-token limit, which both
    must cut at the same token. (On 2,000 QQP questions the largest gap was 1.2e-7.)"""
    model = "bundled:all-MiniLM-L6-v2"
    fast = load_embedder("trails.embedders.onnx", model).inner
    torch_model = load_embedder("trails.embedders.sentence_transformer", model).inner
    texts = (
        [q["question"] for q in faq_questions()]
        + list(faq_sections("new").values())[:60]
        + ["  padded   with spaces  ", "ÉCOLE? École!"]
    )
    expected = torch_model.embed_many(texts * 2)[: len(texts)]  # over 8 texts: through encode()
    for got in (fast.embed_many(texts), np.stack([fast.embed(t) for t in texts[:100] + texts[-3:]])):
        want = expected if len(got) == len(texts) else np.concatenate([expected[:100], expected[-3:]])
        assert float(np.max(1 - np.sum(got * want, axis=1))) < 1e-5
    assert fast.name == torch_model.name and fast.dim == torch_model.dim


def test_a_worker_serving_the_onnx_model_never_imports_torch(tmp_path):
    """torch costs a worker 350 MB and 5 s of start-up; the ONNX path must not pull it in."""
    load_embedder("trails.embedders.onnx", "bundled:all-MiniLM-L6-v2")  # the export exists from here on
    code = (
        "import sys, django; django.setup()\n"
        "from trails.embedders import get_embedder\n"
        "vector = get_embedder().embed('How do I copy an object in Python?')\n"
        "assert vector.shape == (384,), vector.shape\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "ragtrail_site.settings",
        "RAGTRAIL_EMBEDDER": "trails.embedders.onnx",
        "RAGTRAIL_MODEL_CACHE": settings.RAGTRAIL_MODEL_CACHE,
    }
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def copy_of_the_model(tmp_path: Path) -> Path:
    """The bundled model's files, the big ones linked rather than copied."""
    source = Path(model_path("bundled:all-MiniLM-L6-v2"))
    target = tmp_path / "model"
    for path in source.rglob("*"):
        if path.is_file():
            dest = target / path.relative_to(source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if path.stat().st_size > 1_000_000:
                dest.symlink_to(path)
            else:
                shutil.copy(path, dest)
    return target


def test_an_export_is_named_by_the_models_content_so_a_changed_model_is_never_served_an_old_one(tmp_path):
    model = copy_of_the_model(tmp_path)
    before = onnx.export_path(model, tmp_path / "cache")
    assert onnx.export_path(model, tmp_path / "cache") == before
    config = model / "config.json"
    config.write_text(config.read_text().replace("}", ', "note": "fine-tuned"}', 1))
    assert onnx.export_path(model, tmp_path / "cache") != before


def test_a_model_the_graph_cannot_reproduce_is_refused_and_nothing_is_written(tmp_path):
    model = copy_of_the_model(tmp_path)
    pooling = model / "1_Pooling" / "config.json"
    pooling.write_text(
        json.dumps(
            json.loads(pooling.read_text()) | {"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}
        )
    )
    with pytest.raises(onnx.ExportRefused, match="pools with"):
        onnx.ensure_export(model, tmp_path / "cache")
    assert not any(p.suffix == ".onnx" for p in (tmp_path / "cache").glob("*"))


def test_export_model_makes_the_export_once(tmp_path, settings, capsys):
    settings.RAGTRAIL_MODEL_CACHE = str(tmp_path / "cache")
    call_command("export_model")
    assert "exported in" in capsys.readouterr().out
    made = list((tmp_path / "cache").glob("*.onnx"))
    assert len(made) == 1 and not list((tmp_path / "cache").glob("*.partial"))
    stamp = made[0].stat().st_mtime_ns
    call_command("export_model")
    assert "already exported" in capsys.readouterr().out and made[0].stat().st_mtime_ns == stamp
