"""Embedding matching with the real bundled model: paraphrases match, look-alikes never do."""

from __future__ import annotations

import io

import numpy as np
import pytest

from scopes.models import ApiKey, Scope, Section
from tests.bypass import around_the_writer
from tests.conftest import ApiClient
from trails.embedders import get_embedder, load_embedder
from trails.upkeep.reindex import reindex_scope

SECTIONS = {"s1": "Section one.", "s2": "Section two."}


@pytest.fixture
def semantic(db):
    """A scope with the defaults a new scope gets (the embedding matcher), and its client. The
    model is loaded first, as gunicorn's worker init does: a first request that loaded it would
    spend its database deadline on the load on a busy machine."""
    get_embedder().embed("warm up")
    scope = Scope.objects.create(slug="help")
    Section.upsert(scope, SECTIONS)
    _, key = ApiKey.issue([scope])
    return scope, ApiClient(key)


def outcome(api: ApiClient, stored: str, asked: str, **extra) -> dict:
    assert (
        api.record(
            "help", query=stored, cited=["s1"], **{k: v for k, v in extra.items() if k == "partition"}
        ).status_code
        == 201
    )
    return api.recall("help", query=asked, **extra).json()


def test_new_scopes_default_to_the_thresholds_calibrated_for_their_bound(semantic):
    from trails.learning.shipped import thresholds_for

    scope, _ = semantic
    assert scope.matcher == "embedding" and scope.max_false_hit_rate == 0.02
    assert thresholds_for(0.02) == {
        "lexical_threshold": scope.lexical_threshold,
        "embedding_threshold": scope.embedding_threshold,
    }


@pytest.mark.parametrize(
    "stored,asked",
    [
        ("How do I copy an object in Python?", "What is the way to copy an object in Python?"),
        ("How do I sort a list in Python?", "How to sort a list in Python?"),
    ],
)
def test_paraphrases_match_by_embedding(semantic, stored, asked):
    body = outcome(semantic[1], stored, asked)
    assert body["outcome"] == "prefetch" and body["matcher"] == "embedding"
    assert 0.9375 <= body["similarity"] < 1.0


@pytest.mark.parametrize(
    "stored,asked",
    [
        ("What are the ICU visiting hours?", "What are the general ward visiting hours?"),
        ("How do I install Python 3.11 on Windows?", "How do I install Python 3.12 on Windows?"),
        ("Can I park in car park B?", "Can't I park in car park B?"),
        ("How do I convert a string to a number?", "How do I convert a number to a string?"),
        ("Who won the match between India and Pakistan?", "Who won the match between Pakistan and India?"),
        ("What are the advantages of WhatsApp?", "What are the disadvantages of WhatsApp?"),
        ("What is the minimum wage in California?", "What is the maximum wage in California?"),
        ("Who won the first Congo war?", "Who won the second Congo war?"),
    ],
)
def test_look_alikes_never_match(semantic, stored, asked):
    body = outcome(semantic[1], stored, asked)
    assert body["outcome"] == "miss" and body["trail_id"] is None


def test_synonym_lexicon_joins_terms_and_keeps_others_apart(semantic):
    scope, api = semantic
    scope.synonyms = "ICU, intensive care, critical care"
    scope.save()
    api.record("help", query="What are the ICU visiting hours?", cited=["s1"])
    assert api.recall("help", query="What are the intensive care visiting hours?").json()["outcome"] == "prefetch"
    assert api.recall("help", query="What are the critical care visiting hours?").json()["outcome"] == "prefetch"
    assert api.recall("help", query="What are the general ward visiting hours?").json()["outcome"] == "miss"


@pytest.mark.parametrize("matcher", ["embedding", "lexical", "both"])
def test_a_question_without_words_is_refused_naming_the_query_and_logs_nothing(semantic, matcher):
    from trails.models import RecallEvent

    scope, api = semantic
    scope.matcher = matcher
    scope.save()
    response = api.recall("help", query="?!  ...")
    assert response.status_code == 422 and response.json()["error"]["field"] == "query"
    assert not RecallEvent.objects.filter(scope=scope).exists()


def test_shared_context_belongs_in_the_partition_not_the_query(semantic):
    _, api = semantic
    embedder = get_embedder()
    titled = embedder.embed_many(
        [
            "In the Acme 3000 user manual, how do I reset the device?",
            "In the Acme 3000 user manual, how do I pair the device?",
        ]
    )
    plain = embedder.embed_many(["How do I reset the device?", "How do I pair the device?"])
    # The shared title pulls two different questions together...
    assert float(titled[0] @ titled[1]) > float(plain[0] @ plain[1]) + 0.1
    # ...and with the document as the partition they do not match.
    body = outcome(api, "How do I reset the device?", "How do I pair the device?", partition="acme-3000-manual")
    assert body["outcome"] == "miss"
    assert (
        api.recall("help", query="How do I reset the device?", partition="acme-3000-manual").json()["outcome"]
        == "prefetch"
    )


def test_both_matchers_report_which_one_decided(semantic):
    scope, api = semantic
    scope.matcher = "both"
    scope.save()
    api.record("help", query="What are the ICU visiting hours?", cited=["s1"])
    api.record("help", query="How do I copy an object in Python?", cited=["s2"])
    same_words = api.recall("help", query="what are the icu visiting hours").json()
    assert (same_words["outcome"], same_words["matcher"], same_words["similarity"]) == ("prefetch", "lexical", 1.0)
    reworded = api.recall("help", query="What is the way to copy an object in Python?").json()
    assert reworded["outcome"] == "prefetch" and reworded["matcher"] == "embedding"


def test_a_model_change_needs_a_reindex_and_never_compares_across_models(semantic, settings):
    scope, api = semantic
    serving = (settings.RAGTRAIL_EMBEDDER, settings.RAGTRAIL_EMBEDDING_MODEL)
    settings.RAGTRAIL_EMBEDDER = "trails.embedders.hashing"
    settings.RAGTRAIL_EMBEDDING_MODEL = "hashing"
    api.record("help", query="How do I copy an object in Python?", cited=["s1"])
    settings.RAGTRAIL_EMBEDDER, settings.RAGTRAIL_EMBEDDING_MODEL = serving
    # The stored vector is the hashing model's: it is not compared with the new model's.
    assert api.recall("help", query="How do I copy an object in Python?").json()["outcome"] == "miss"
    assert reindex_scope(scope) == 1
    body = api.recall("help", query="How do I copy an object in Python?").json()
    assert body["outcome"] == "prefetch" and body["matcher"] == "embedding"


@pytest.mark.parametrize(
    "asked",
    ["where do visitors park", "Where do visitors park ?", "WHERE DO VISITORS PARK?!", "Where do visitors park？"],
)
def test_punctuation_case_and_unicode_variants_are_the_same_question(semantic, asked):
    """The model reads the words lexical matching shingles: dropping a `?` is no other question."""
    body = outcome(semantic[1], "Where do visitors park?", asked)
    assert body["outcome"] == "prefetch" and body["matcher"] == "embedding" and body["similarity"] > 0.9999


def test_trails_signed_from_raw_text_are_not_compared_until_re_signed(semantic, settings):
    """Vectors of another question form carry another name: never compared, found again
    after `reindex_scope --all` (the upgrade step)."""
    from django.core.management import call_command

    from trails.core.simhash import encode_vector
    from trails.models import Trail

    scope, api = semantic
    api.record("help", query="Where do visitors park?", cited=["s1"])
    trail = Trail.objects.get(scope=scope)
    # As signed before: the model's vector of the raw text, under the model's bare name.
    raw = get_embedder().inner.embed("Where do visitors park?").astype(np.float32)
    with around_the_writer():
        Trail.objects.filter(pk=trail.pk).update(
            embedding_model=get_embedder().inner.name, embedding=encode_vector(raw)
        )
    assert api.recall("help", query="Where do visitors park?").json()["outcome"] == "miss"
    call_command("reindex_scope", "--all", stdout=io.StringIO(), stderr=io.StringIO())
    assert Trail.objects.get(pk=trail.pk).embedding_model == get_embedder().name
    assert api.recall("help", query="where do visitors park").json()["outcome"] == "prefetch"


def test_embedder_is_loaded_once_per_process():
    assert get_embedder() is get_embedder()
    vector = get_embedder().embed("hello")
    assert vector.shape == (384,) and abs(float(np.linalg.norm(vector)) - 1) < 1e-4


def test_the_model_runs_one_thread_per_process_by_default(settings):
    import torch

    # Under gunicorn each worker runs its own model: one thread each keeps 2 workers on
    # 2 cores from oversubscribing the CPU (issue 12), in ONNX Runtime and in torch.
    assert settings.RAGTRAIL_MODEL_THREADS == 1
    assert get_embedder().inner._session.get_session_options().intra_op_num_threads == 1
    load_embedder("trails.embedders.sentence_transformer", settings.RAGTRAIL_EMBEDDING_MODEL).embed("hello")
    assert torch.get_num_threads() == 1


def test_an_explained_embedding_miss_gives_cosines_and_the_guards_rule(semantic):
    _, api = semantic
    assert api.record("help", query="How do I convert a string to a number?", cited=["s1"]).status_code == 201
    body = api.recall("help", query="How do I convert a number to a string?", dry_run=True, explain=True).json()
    why = body["explanation"]
    assert (
        body["outcome"] == "miss"
        and why["matcher"] == "embedding"
        and why["embedding_threshold"] == semantic[0].embedding_threshold
    )
    nearest = why["candidates"][0]
    # Nearly the same words, so a cosine over the threshold: the guard's order rule refuses it.
    assert nearest["embedding"] >= semantic[0].embedding_threshold and nearest["lexical"] is None
    assert nearest["verdict"] == "refused by the guard: terms in another order"


def test_the_direct_path_for_a_few_questions_gives_encodes_vectors(settings):
    """Recall embeds one question by calling the model's modules directly; the vectors
    must be encode()'s to within 1e-4 cosine (issue 13), here to float precision."""
    model = load_embedder("trails.embedders.sentence_transformer", settings.RAGTRAIL_EMBEDDING_MODEL).inner
    texts = ["How do I copy an object in Python?", "What are the ICU visiting hours on weekends?", "why is python slow"]
    direct = model.embed_many(texts)
    batched = model.embed_many(texts * 4)[: len(texts)]  # over DIRECT_BATCH: through encode()
    one_by_one = np.stack([model.embed(t) for t in texts])
    for vectors in (batched, one_by_one):
        assert float(np.min(np.sum(direct * vectors, axis=1))) > 1 - 1e-6
