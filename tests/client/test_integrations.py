"""docs/integrations.md run as written: each section's Python blocks in order, against a live
server and a scope and key of the section's own, every `# → …` checked against what it printed.
The LangChain and LlamaIndex retrievers run on the real packages; so does the MCP SDK's client."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from scopes.models import ApiKey, Scope
from tests.conftest import VISITING
from trails.models import Trail, TrailStatus

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
EXPECTED = re.compile(r"#\s*→\s*(.*)$")


def sections() -> dict[str, list[str]]:
    """Each `## ` section's title and its Python blocks."""
    found = {}
    for part in PAGE.read_text(encoding="utf-8").split("\n## ")[1:]:
        title, _, body = part.partition("\n")
        blocks = re.findall(r"```python\n(.*?)```", body, flags=re.S)
        if blocks:
            found[title] = blocks
    return found


def run_blocks(blocks: list[str]) -> list[str]:
    """Runs the blocks in one namespace, in a thread of its own (the browser tests keep an event
    loop in this one), each block's printed lines checked against its `# →` comments."""
    namespace: dict = {}
    printed_everything: list[str] = []
    for block in blocks:
        expected = [m.group(1).strip() for m in map(EXPECTED.search, block.splitlines()) if m]
        out = io.StringIO()
        with contextlib.redirect_stdout(out), ThreadPoolExecutor(1) as pool:
            pool.submit(exec, compile(block, str(PAGE), "exec"), namespace).result()
        printed = out.getvalue().splitlines()
        assert printed == expected, f"block printed {printed}, the page says {expected}:\n{block}"
        printed_everything += printed
    return printed_everything


@pytest.fixture
def own_scope(live_server, transactional_db, monkeypatch):
    """A scope and key for one section of the page, in the environment the page reads: matched
    by embedding, as `create_scope` makes one, the model loaded as gunicorn loads it at start."""
    from trails.embedders import get_embedder

    get_embedder().embed("warm up")

    def make(slug: str) -> Scope:
        scope = Scope.objects.create(slug=slug)
        assert scope.matcher == "embedding"
        _, key = ApiKey.issue([scope], name=slug)
        monkeypatch.setenv("RAGTRAIL_URL", live_server.url)
        monkeypatch.setenv("RAGTRAIL_API_KEY", key)
        return scope

    # `ragtrail-mcp` is found where this Python's scripts are.
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return make


def test_the_page_has_each_integrations_example():
    assert [title.split(":")[0] for title in sections()] == ["LangChain", "LlamaIndex", "An MCP client"]


@pytest.mark.parametrize("framework", ["LangChain", "LlamaIndex"])
def test_a_wrapped_retriever_searches_on_a_miss_records_when_accepted_and_is_served_after(own_scope, framework):
    scope = own_scope(framework.lower())
    blocks = next(b for title, b in sections().items() if title.startswith(framework))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an example that warns is not one a newcomer trusts
        printed = run_blocks(blocks)
    assert printed.count("searching") == 1  # the second question was served without the wrapped retriever
    trail = Trail.objects.get(scope=scope)
    assert trail.status == TrailStatus.ACTIVE and trail.query == "What are the ICU visiting hours?"


def test_the_mcp_client_example_recalls_records_and_is_served(own_scope):
    scope = own_scope("mcp-example")  # a fresh scope: the page puts its sections first
    run_blocks(sections()["An MCP client"])
    assert Trail.objects.get(scope=scope).status == TrailStatus.ACTIVE


class Listed:
    """The LangChain retriever a test wraps: the sections it is given, counted."""

    @staticmethod
    def make(sections: dict[str, str]):
        from langchain_core.documents import Document
        from langchain_core.retrievers import BaseRetriever

        class ListedRetriever(BaseRetriever):
            calls: list = []

            def _get_relevant_documents(self, query, *, run_manager):
                self.calls.append(query)
                return [Document(page_content=text, id=id) for id, text in sections.items()]

        return ListedRetriever(calls=[])


def test_a_retriever_whose_ragtrail_is_down_runs_the_wrapped_one_and_accept_records_nothing():
    from ragtrail_client import RagtrailClient
    from ragtrail_client.langchain import RagtrailRetriever

    wrapped = Listed.make({"visiting/icu": VISITING["visiting/icu"]})
    retriever = RagtrailRetriever(
        client=RagtrailClient("http://127.0.0.1:9", "rt_x", "s"), retriever=wrapped, shared=True
    )
    assert [d.id for d in retriever.invoke("ICU hours?")] == ["visiting/icu"] and wrapped.calls == ["ICU hours?"]
    assert retriever.accept("ICU hours?") is None


class EmbedderDown:
    """A stand-in ragtrail whose embedder is misconfigured: every call answers 503 with its reason."""

    @staticmethod
    def serve():
        from tests.client.test_python_client import JsonAnswers, serve

        class Answers(JsonAnswers):
            def answer(self, path):
                return 503, {"error": {"code": "embedder_unavailable", "message": "the endpoint refused the key"}}, {}

        return serve(Answers)


@pytest.mark.parametrize("framework", ["LangChain", "LlamaIndex"])
def test_a_failing_ragtrail_runs_the_wrapped_retriever_and_says_why_in_a_warning_and_failure(framework, caplog):
    from ragtrail_client import RagtrailClient

    server, url = EmbedderDown.serve()
    calls: list[str] = []
    wrapped = filtered_retrievers(framework, {"visiting/icu": (VISITING["visiting/icu"], {})}, calls)
    retriever, retrieve = wrap(framework, RagtrailClient(url, "rt_x", "s", retries=0), wrapped, shared=True)
    try:
        with caplog.at_level(logging.WARNING, logger="ragtrail_client.recall_first"):
            for question in ("ICU hours?", "ICU visiting hours?"):
                assert [i for i, _ in retrieve(question)] == ["visiting/icu"]
                assert retriever.accept(question) is None
    finally:
        server.shutdown()
    assert calls == ["ICU hours?", "ICU visiting hours?"]  # fail-open: the wrapped retriever answered
    failure = retriever.failure("ICU hours?")
    assert (failure.status, failure.code) == (503, "embedder_unavailable")
    assert str(failure) == "503 embedder_unavailable: the endpoint refused the key"
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1  # once per reason, not once per call
    assert "status 503, code embedder_unavailable: the endpoint refused the key" in warned[0]
    assert retriever.failure("never asked") is None


def test_a_hint_runs_the_wrapped_retriever_and_a_text_not_ragtrails_is_refused_on_accept(own_scope):
    from ragtrail_client import RagtrailClient, RagtrailError
    from ragtrail_client.langchain import RagtrailRetriever

    scope = own_scope("hints")
    client = RagtrailClient(os.environ["RAGTRAIL_URL"], os.environ["RAGTRAIL_API_KEY"], recall_timeout=5, timeout=5)
    client.put_sections(VISITING)
    wrapped = Listed.make({"visiting/icu": VISITING["visiting/icu"], "parking": VISITING["parking"]})
    retriever = RagtrailRetriever(client=client, retriever=wrapped, shared=True)
    retriever.invoke("ICU hours and parking?")
    assert retriever.accept("ICU hours and parking?").status == "active"
    assert retriever.accept("ICU hours and parking?") is None  # recorded once
    client.put_sections({"parking": "Car park B is closed."})  # one cited section changed: a hint
    documents = retriever.invoke("ICU hours and parking?")
    assert len(wrapped.calls) == 2 and "ragtrail" not in documents[0].metadata
    # The wrapped retriever read parking's old text, which ragtrail no longer holds: refused, not recorded.
    with pytest.raises(RagtrailError) as refused:
        retriever.accept("ICU hours and parking?")
    assert refused.value.status == 409 and Trail.objects.filter(scope=scope).count() == 1


def async_retrievers(sections: dict[str, str], calls: list[str]):
    """A LangChain and a LlamaIndex retriever with async-native paths, over these sections."""
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever as LangChainRetriever
    from llama_index.core.retrievers import BaseRetriever as LlamaRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    class LangChainListed(LangChainRetriever):
        def _get_relevant_documents(self, query, *, run_manager):
            raise AssertionError("the synchronous path was taken")

        async def _aget_relevant_documents(self, query, *, run_manager):
            calls.append(query)
            return [Document(page_content=text, id=id) for id, text in sections.items()]

    class LlamaListed(LlamaRetriever):
        def _retrieve(self, query_bundle):
            raise AssertionError("the synchronous path was taken")

        async def _aretrieve(self, query_bundle):
            calls.append(query_bundle.query_str)
            return [NodeWithScore(node=TextNode(id_=id, text=text), score=1.0) for id, text in sections.items()]

    return {"LangChain": LangChainListed(), "LlamaIndex": LlamaListed()}


@pytest.mark.parametrize("framework", ["LangChain", "LlamaIndex"])
def test_with_the_async_client_the_retriever_awaits_ragtrail_and_the_wrapped_retriever(own_scope, framework):
    import asyncio

    from ragtrail_client import AsyncRagtrailClient, RagtrailClient
    from ragtrail_client.langchain import RagtrailRetriever as LangChainRetriever
    from ragtrail_client.llama_index import RagtrailRetriever as LlamaRetriever

    scope = own_scope(f"async-{framework.lower()}")
    url, key = os.environ["RAGTRAIL_URL"], os.environ["RAGTRAIL_API_KEY"]
    RagtrailClient(url, key, timeout=5).put_sections(VISITING)
    calls: list[str] = []
    wrapped = async_retrievers({"visiting/icu": VISITING["visiting/icu"]}, calls)[framework]
    question = "What are the ICU visiting hours?"

    async def main():
        async with AsyncRagtrailClient(url, key, recall_timeout=5, timeout=5) as client:
            if framework == "LangChain":
                retriever = LangChainRetriever(client=client, retriever=wrapped, shared=True)
                retrieve = retriever.ainvoke
                ids = lambda found: [d.id for d in found]  # noqa: E731
            else:
                retriever = LlamaRetriever(client, wrapped, shared=True)
                retrieve = retriever.aretrieve
                ids = lambda found: [n.node.node_id for n in found]  # noqa: E731
            first = ids(await retrieve(question))
            recorded = await retriever.aaccept(question)
            again = ids(await retrieve(question))
            with pytest.raises(TypeError, match="AsyncRagtrailClient"):
                retriever.accept(question)
            return first, recorded, again

    with ThreadPoolExecutor(1) as pool:
        first, recorded, again = pool.submit(asyncio.run, main()).result()
    assert first == again == ["visiting/icu"] and calls == [question]  # the second was ragtrail's
    assert recorded.status == "active" and Trail.objects.get(scope=scope).status == TrailStatus.ACTIVE


def wrap(framework: str, client, wrapped, **isolation):
    """The framework's RagtrailRetriever around `wrapped`, and its retrieve as (ids, metadata) pairs."""
    if framework == "LangChain":
        from ragtrail_client.langchain import RagtrailRetriever

        retriever = RagtrailRetriever(client=client, retriever=wrapped, **isolation)
        return retriever, lambda q: [(d.id, d.metadata) for d in retriever.invoke(q)]
    from ragtrail_client.llama_index import RagtrailRetriever

    retriever = RagtrailRetriever(client, wrapped, **isolation)
    return retriever, lambda q: [(n.node.node_id, n.node.metadata) for n in retriever.retrieve(q)]


def filtered_retrievers(framework: str, sections: dict[str, tuple[str, dict]], calls: list[str]):
    """A retriever of this framework over `sections` {id: (text, metadata)}, with the metadata as given."""
    if framework == "LangChain":
        from langchain_core.documents import Document
        from langchain_core.retrievers import BaseRetriever

        class Filtered(BaseRetriever):
            def _get_relevant_documents(self, query, *, run_manager):
                calls.append(query)
                return [Document(page_content=t, id=i, metadata=dict(m)) for i, (t, m) in sections.items()]

        return Filtered()
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    class FilteredNodes(BaseRetriever):
        def _retrieve(self, query_bundle):
            calls.append(query_bundle.query_str)
            return [
                NodeWithScore(node=TextNode(id_=i, text=t, metadata=dict(m)), score=1.0)
                for i, (t, m) in sections.items()
            ]

    return FilteredNodes()


@pytest.mark.parametrize("framework", ["LangChain", "LlamaIndex"])
def test_a_retriever_is_built_with_a_partition_or_shared_said_never_by_default(framework):
    from ragtrail_client import RagtrailClient

    client = RagtrailClient("http://127.0.0.1:9", "rt_x", "s")
    wrapped = filtered_retrievers(framework, {}, [])
    for isolation in ({}, {"partition": ""}, {"partition": "alice", "shared": True}):
        with pytest.raises(ValueError, match="partition"):
            wrap(framework, client, wrapped, **isolation)
    assert wrap(framework, client, wrapped, partition="alice")[0]._memory.partition == "alice"
    assert wrap(framework, client, wrapped, shared=True)[0]._memory.partition == ""


@pytest.mark.parametrize("framework", ["LangChain", "LlamaIndex"])
def test_two_users_with_partitions_never_see_each_others_sections(own_scope, framework):
    from ragtrail_client import RagtrailClient

    own_scope(f"users-{framework.lower()}")
    client = RagtrailClient(os.environ["RAGTRAIL_URL"], os.environ["RAGTRAIL_API_KEY"], recall_timeout=5, timeout=5)
    private = {
        "notes/alice": "Alice's ICU visit is booked for 14:00.",
        "notes/bob": "Bob's ICU visit is booked for 18:00.",
    }
    client.put_sections(private)
    question = "When is my ICU visit booked?"
    seen = {}
    for user in ("alice", "bob", "alice", "bob"):
        calls: list[str] = []
        mine = {f"notes/{user}": (private[f"notes/{user}"], {"owner": user})}
        retriever, retrieve = wrap(framework, client, filtered_retrievers(framework, mine, calls), partition=user)
        found = retrieve(question)
        if user not in seen:
            assert retriever.accept(question).status == "active"
        seen.setdefault(user, []).append((found, calls))
    for user in ("alice", "bob"):
        (first, searched), (again, served) = seen[user]
        assert [i for i, _ in first] == [i for i, _ in again] == [f"notes/{user}"]
        assert searched == [question] and served == []  # the second time ragtrail served it, from the user's partition
        assert again[0][1]["ragtrail"]["outcome"] == "prefetch" and again[0][1]["owner"] == user


@pytest.mark.parametrize("framework", ["LangChain", "LlamaIndex"])
def test_a_chain_citing_its_sources_reads_the_same_metadata_on_a_miss_and_a_hit(own_scope, framework):
    import datetime

    from ragtrail_client import RagtrailClient

    own_scope(f"metadata-{framework.lower()}")
    client = RagtrailClient(os.environ["RAGTRAIL_URL"], os.environ["RAGTRAIL_API_KEY"], recall_timeout=5, timeout=5)
    client.put_sections({"visiting/icu": VISITING["visiting/icu"]})
    calls: list[str] = []
    given = {"source": "https://hospital.example/visiting", "page": 3, "when": datetime.date(2026, 1, 1)}
    wrapped = filtered_retrievers(framework, {"visiting/icu": (VISITING["visiting/icu"], given)}, calls)
    retriever, retrieve = wrap(framework, client, wrapped, shared=True)

    def cite(question: str) -> list[str]:
        return [f"[{metadata['source']} p.{metadata['page']}]" for _, metadata in retrieve(question)]

    question = "What are the ICU visiting hours?"
    on_a_miss = cite(question)
    retriever.accept(question)
    on_a_hit = cite(question)
    assert on_a_miss == on_a_hit == ["[https://hospital.example/visiting p.3]"] and calls == [question]
    served = retrieve(question)[0][1]
    assert "when" not in served and served["section_id"] == "visiting/icu"  # a date JSON cannot carry is left out


@pytest.mark.parametrize("framework", ["LangChain", "LlamaIndex"])
def test_results_without_section_ids_are_said_on_accept_not_silently_dropped(framework):
    from ragtrail_client import RagtrailClient

    client = RagtrailClient("http://127.0.0.1:9", "rt_x", "s")
    if framework == "LangChain":
        from langchain_core.documents import Document
        from langchain_core.retrievers import BaseRetriever

        class Anonymous(BaseRetriever):
            def _get_relevant_documents(self, query, *, run_manager):
                return [Document(page_content="ICU visiting hours are 14:00 to 16:00.")]

        wrapped = Anonymous()
    else:
        from llama_index.core.retrievers import BaseRetriever
        from llama_index.core.schema import NodeWithScore, TextNode

        class AnonymousNodes(BaseRetriever):
            def _retrieve(self, query_bundle):
                return [NodeWithScore(node=TextNode(id_="", text="ICU visiting hours are 14:00 to 16:00."), score=1.0)]

        wrapped = AnonymousNodes()
    retriever, retrieve = wrap(framework, client, wrapped, shared=True)
    assert len(retrieve("ICU hours?")) == 1
    with pytest.raises(ValueError, match="none of the 1 results .* has a section id"):
        retriever.accept("ICU hours?")


def test_reject_when_ragtrail_is_down_returns_none_as_accept_does(own_scope):
    from ragtrail_client import AsyncRagtrailClient, RagtrailClient
    from ragtrail_client.langchain import RagtrailRetriever

    own_scope("reject-down")
    url, key = os.environ["RAGTRAIL_URL"], os.environ["RAGTRAIL_API_KEY"]
    client = RagtrailClient(url, key, recall_timeout=5, timeout=5)
    client.put_sections({"visiting/icu": VISITING["visiting/icu"]})
    retriever = RagtrailRetriever(
        client=client, retriever=Listed.make({"visiting/icu": VISITING["visiting/icu"]}), shared=True
    )
    question = "What are the ICU visiting hours?"
    retriever.invoke(question)
    retriever.accept(question)
    assert retriever.invoke(question)[0].metadata["ragtrail"]["outcome"] == "prefetch"
    client.base_url = "http://127.0.0.1:9"  # ragtrail stops
    assert retriever.reject(question, reason="wrong ward") is None

    import asyncio

    async def areject():
        async with AsyncRagtrailClient("http://127.0.0.1:9", key, "s") as down:
            served = RagtrailRetriever(client=down, retriever=Listed.make({}), shared=True)
            served._memory._served["q"] = "some-recall-id"  # as a prefetch leaves it
            return await served.areject("q")

    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(asyncio.run, areject()).result() is None


@pytest.mark.parametrize("framework", ["LangChain", "LlamaIndex"])
def test_async_retrieval_with_the_sync_client_leaves_the_event_loop_free(framework):
    import asyncio
    import threading

    from ragtrail_client import RagtrailClient, RagtrailError

    started, released = threading.Event(), threading.Event()

    class WaitingClient(RagtrailClient):
        """A recall that waits until the event loop has run something else (or gives up)."""

        def recall(self, query, **_):
            started.set()
            self.loop_was_free = released.wait(5)
            raise RagtrailError(0, None, "ragtrail down")

    client = WaitingClient("http://127.0.0.1:9", "rt_x", "s")
    calls: list[str] = []
    wrapped = async_retrievers({"visiting/icu": VISITING["visiting/icu"]}, calls)[framework]
    retriever, _ = wrap(framework, client, wrapped, shared=True)

    async def main():
        async def release():
            while not started.is_set():
                await asyncio.sleep(0.01)
            released.set()

        other = asyncio.create_task(release())
        found = await (retriever.ainvoke if framework == "LangChain" else retriever.aretrieve)("ICU hours?")
        await other
        return found

    with ThreadPoolExecutor(1) as pool:
        found = pool.submit(asyncio.run, main()).result()
    # The loop ran while the recall waited, and the wrapped retriever's own async path answered.
    assert client.loop_was_free and len(found) == 1 and calls == ["ICU hours?"]


def test_the_extras_take_ranges_from_the_versions_tested():
    import tomllib

    root = Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "clients/python/pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = dict(
        line.split("#")[0].strip().split("==")
        for line in (root / "requirements/test.txt").read_text().splitlines()
        if "==" in line.split("#")[0]
    )
    for extra, requirements in extras.items():
        for requirement in requirements:
            name, _, spec = requirement.partition(">=")
            lower, upper = spec.split(",<")
            assert "==" not in requirement and upper, f"{extra}: {requirement} is not a range"
            if name in pins:
                assert pins[name] == lower, f"{name}: the extra starts at {lower}, the tests pin {pins[name]}"
