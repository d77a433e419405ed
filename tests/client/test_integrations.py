"""docs/integrations.md run as written: each section's Python blocks in order, against a live
server and a scope and key of the section's own, every `# → …` checked against what it printed.
The LangChain and LlamaIndex retrievers run on the real packages; so does the MCP SDK's client."""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from scopes.models import ApiKey, Scope, Section
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
    """A scope and key for one section of the page, in the environment the page reads."""

    def make(slug: str) -> Scope:
        scope = Scope.objects.create(slug=slug, matcher="lexical")
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
    scope = own_scope("mcp-example")
    Section.upsert(scope, VISITING)  # the page: "the scope must hold visiting/icu"
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
    retriever = RagtrailRetriever(client=RagtrailClient("http://127.0.0.1:9", "rt_x", "s"), retriever=wrapped)
    assert [d.id for d in retriever.invoke("ICU hours?")] == ["visiting/icu"] and wrapped.calls == ["ICU hours?"]
    assert retriever.accept("ICU hours?") is None


def test_a_hint_runs_the_wrapped_retriever_and_a_text_not_ragtrails_is_refused_on_accept(own_scope):
    from ragtrail_client import RagtrailClient, RagtrailError
    from ragtrail_client.langchain import RagtrailRetriever

    scope = own_scope("hints")
    client = RagtrailClient(os.environ["RAGTRAIL_URL"], os.environ["RAGTRAIL_API_KEY"], recall_timeout=5, timeout=5)
    client.put_sections(VISITING)
    wrapped = Listed.make({"visiting/icu": VISITING["visiting/icu"], "parking": VISITING["parking"]})
    retriever = RagtrailRetriever(client=client, retriever=wrapped)
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
                retriever = LangChainRetriever(client=client, retriever=wrapped)
                retrieve = retriever.ainvoke
                ids = lambda found: [d.id for d in found]  # noqa: E731
            else:
                retriever = LlamaRetriever(client, wrapped)
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
