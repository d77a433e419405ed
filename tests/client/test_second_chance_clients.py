"""The second chance where agents are: the Python clients, the recall-first retrievers and
the MCP server, against a live ragtrail whose scope gives second chances."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import anyio
import pytest
from django.db import connections

from scopes.models import ApiKey, Scope, Section
from tests.client.test_mcp_server import run_async, text_of
from tests.trails.test_second_chance import ASKED, SECTIONS, STORED
from trails.models import RecallEvent, Trail

FOUND = ["billing/cancel", "billing/refunds", "billing/invoices"]  # the search found the cited section first
NOT_FOUND = ["billing/refunds", "billing/invoices"]
UNRELATED = "Where is the car park?"  # no recorded question near it: no second chance is possible


@pytest.fixture
def helpdesk(live_server, transactional_db):
    """A scope that gives second chances, a path recorded for STORED, and a key's client."""
    from ragtrail_client import RagtrailClient

    from trails.embedders import get_embedder

    get_embedder().embed("warm up")
    scope = Scope.objects.create(slug="helpdesk", second_chance=True, second_chance_margin=0.1)
    assert scope.uses_embedding
    Section.upsert(scope, SECTIONS)
    _, key = ApiKey.issue([scope], name="agent")
    client = RagtrailClient(live_server.url, key, "helpdesk", timeout=10, recall_timeout=10)
    assert client.record(STORED, ["billing/cancel"], signal="accepted").status == "active"
    yield scope, client
    client.close()


def test_the_client_gets_a_second_chance_after_a_near_miss_once(helpdesk):
    from ragtrail_client import RagtrailError, SecondChance

    _, client = helpdesk
    missed = client.recall(ASKED)
    assert missed.outcome == "miss" and missed.second_chance is None and missed.second_chance_possible is True
    given = client.second_chance(missed.recall_id, FOUND)
    assert (given.outcome, given.matcher, given.matched_query) == ("prefetch", "second-chance", STORED)
    assert given.second_chance.given is True and isinstance(given.second_chance, SecondChance)
    assert [(s.id, s.text) for s in given.sections] == [("billing/cancel", SECTIONS["billing/cancel"])]
    with pytest.raises(RagtrailError) as again:
        client.second_chance(missed.recall_id, FOUND)
    assert (again.value.status, again.value.code, again.value.field) == (409, "conflict", "recall_id")
    with pytest.raises(RagtrailError) as unknown:
        client.second_chance("00000000-0000-0000-0000-000000000000", FOUND)
    assert unknown.value.status == 404


def test_a_miss_says_whether_a_second_chance_is_possible(helpdesk):
    scope, client = helpdesk
    assert client.recall(ASKED).second_chance_possible is True
    assert client.recall(UNRELATED).second_chance_possible is False
    assert client.explain(ASKED).second_chance_possible is False  # a dry run keeps no recall to ask about
    Scope.objects.filter(pk=scope.pk).update(second_chance=False)
    assert client.recall(ASKED).second_chance_possible is False


def test_the_client_hears_why_no_second_chance_was_given(helpdesk):
    _, client = helpdesk
    missed = client.recall(ASKED)
    answer = client.second_chance(missed.recall_id, NOT_FOUND, token_budget=500)
    assert answer.outcome == "miss" and answer.sections == () and answer.second_chance.given is False
    assert "not among the search's first 3" in answer.second_chance.reason


def test_the_async_client_gets_the_same_second_chance(helpdesk):
    from ragtrail_client import AsyncRagtrailClient

    _, client = helpdesk

    async def main():
        async with AsyncRagtrailClient(client.base_url, client.api_key, "helpdesk", timeout=10, recall_timeout=10) as a:
            missed = await a.recall(ASKED)
            return await a.second_chance(missed.recall_id, FOUND)

    with ThreadPoolExecutor(1) as pool:
        given = pool.submit(asyncio.run, main()).result()
    assert given.outcome == "prefetch" and given.matcher == "second-chance" and given.second_chance.given


def search_over(framework: str, ids: list[str], calls: list[str]):
    """A wrapped retriever of this framework that returns these sections, in this order, sync and async."""
    if framework == "LangChain":
        from langchain_core.documents import Document
        from langchain_core.retrievers import BaseRetriever

        class Search(BaseRetriever):
            def _get_relevant_documents(self, query, *, run_manager):
                calls.append(query)
                return [Document(page_content=SECTIONS[i], id=i, metadata={"source": f"kb/{i}"}) for i in ids]

            async def _aget_relevant_documents(self, query, *, run_manager):
                return self._get_relevant_documents(query, run_manager=run_manager)

        return Search()
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    class SearchNodes(BaseRetriever):
        def _retrieve(self, query_bundle):
            calls.append(query_bundle.query_str)
            return [
                NodeWithScore(
                    node=TextNode(id_=i, text=SECTIONS[i], metadata={"source": f"kb/{i}"}), score=1.0 - n / 10
                )
                for n, i in enumerate(ids)
            ]

        async def _aretrieve(self, query_bundle):
            return self._retrieve(query_bundle)

    return SearchNodes()


def retrieve_with(framework: str, client, wrapped, asynchronous: bool):
    """The framework's RagtrailRetriever around `wrapped`, and its retrieve as [(id, text, metadata, score)]."""
    if framework == "LangChain":
        from ragtrail_client.langchain import RagtrailRetriever

        retriever = RagtrailRetriever(client=client, retriever=wrapped, shared=True)
        call = retriever.ainvoke if asynchronous else retriever.invoke
        seen = lambda found: [(d.id, d.page_content, d.metadata, None) for d in found]  # noqa: E731
    else:
        from ragtrail_client.llama_index import RagtrailRetriever

        retriever = RagtrailRetriever(client, wrapped, shared=True)
        call = retriever.aretrieve if asynchronous else retriever.retrieve
        seen = lambda found: [(n.node.node_id, n.node.get_content(), n.node.metadata, n.score) for n in found]  # noqa: E731
    if not asynchronous:
        return retriever, lambda q: seen(call(q))

    def run(q):
        async def main():
            return seen(await call(q))

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, main()).result()

    return retriever, run


WRAPPERS = [(f, c) for f in ("LangChain", "LlamaIndex") for c in ("sync", "async", "sync client, async retrieval")]


@pytest.mark.parametrize(("framework", "how"), WRAPPERS)
def test_a_wrapped_search_that_found_the_cited_section_comes_back_marked_as_the_second_chance(helpdesk, framework, how):
    from ragtrail_client import AsyncRagtrailClient

    _, client = helpdesk
    calls: list[str] = []
    wrapped = search_over(framework, FOUND, calls)
    if how == "async":
        client = AsyncRagtrailClient(client.base_url, client.api_key, "helpdesk", timeout=10, recall_timeout=10)
    retriever, retrieve = retrieve_with(framework, client, wrapped, asynchronous=how != "sync")
    found = retrieve(ASKED)
    assert calls == [ASKED]  # the search ran: the second chance comes after it, never instead
    assert [(i, text) for i, text, _, _ in found] == [(i, SECTIONS[i]) for i in FOUND]  # nothing added or dropped
    marked = {i: metadata["ragtrail"] for i, _, metadata, _ in found if "ragtrail" in metadata}
    assert list(marked) == ["billing/cancel"]
    about = marked["billing/cancel"]
    assert about["second_chance"] is True and about["matcher"] == "second-chance"
    assert about["outcome"] == "prefetch" and about["matched_query"] == STORED
    # The search's own metadata stays; its score too.
    assert all(metadata["source"] == f"kb/{i}" for i, _, metadata, _ in found)
    if framework == "LlamaIndex":
        assert [score for *_, score in found] == [1.0, 0.9, 0.8]
    event = RecallEvent.objects.get(public_id=about["recall_id"])
    assert (event.outcome, event.matcher) == ("prefetch", "second-chance")


@pytest.mark.parametrize("framework", ["LangChain", "LlamaIndex"])
def test_a_wrapped_search_that_missed_the_cited_section_comes_back_as_it_was(helpdesk, framework):
    _, client = helpdesk
    calls: list[str] = []
    retriever, retrieve = retrieve_with(framework, client, search_over(framework, NOT_FOUND, calls), False)
    found = retrieve(ASKED)
    assert [(i, metadata) for i, _, metadata, _ in found] == [(i, {"source": f"kb/{i}"}) for i in NOT_FOUND]
    event = RecallEvent.objects.get()
    assert event.outcome == "miss" and event.second_chance_at is not None  # asked, and refused
    assert retriever.reject(ASKED) is None  # nothing ragtrail served to report


def test_after_a_second_chance_reject_reports_it_and_accept_records_the_question_s_own_path(helpdesk):
    scope, client = helpdesk
    retriever, retrieve = retrieve_with("LangChain", client, search_over("LangChain", FOUND, []), False)
    retrieve(ASKED)
    verdict = retriever.reject(ASKED, reason="it was about pausing")
    assert verdict is not None and verdict.helpful is False and verdict.trail_id
    recorded = retriever.accept(ASKED, cited=["billing/cancel"])
    assert recorded.status == "active" and Trail.objects.filter(scope=scope, query=ASKED).exists()


@pytest.mark.parametrize(("framework", "how"), [w for w in WRAPPERS if w[1] != "async"])
def test_a_miss_where_no_second_chance_is_possible_asks_none_and_leaves_the_search_as_it_was(helpdesk, framework, how):
    scope, client = helpdesk
    calls: list[str] = []
    _, retrieve = retrieve_with(framework, client, search_over(framework, FOUND, calls), asynchronous=how != "sync")
    Scope.objects.filter(pk=scope.pk).update(second_chance=False)
    assert all("ragtrail" not in metadata for _, _, metadata, _ in retrieve(ASKED))
    Scope.objects.filter(pk=scope.pk).update(second_chance=True)
    assert all("ragtrail" not in metadata for _, _, metadata, _ in retrieve(UNRELATED))
    events = list(RecallEvent.objects.order_by("id"))
    assert [e.outcome for e in events] == ["miss", "miss"] and calls == [ASKED, UNRELATED]
    assert [e.second_chance_at for e in events] == [None, None]  # neither miss was followed by a second chance
    # The next possible one is asked at once: no pause after the misses that were not.
    marked = [i for i, _, metadata, _ in retrieve(ASKED) if "ragtrail" in metadata]
    assert marked == ["billing/cancel"]
    assert RecallEvent.objects.order_by("id").last().second_chance_at is not None


@pytest.mark.parametrize("framework", ["LangChain", "LlamaIndex"])
def test_with_the_async_client_a_miss_where_no_second_chance_is_possible_asks_none(helpdesk, framework):
    from ragtrail_client import AsyncRagtrailClient

    _, client = helpdesk
    client = AsyncRagtrailClient(client.base_url, client.api_key, "helpdesk", timeout=10, recall_timeout=10)
    _, retrieve = retrieve_with(framework, client, search_over(framework, FOUND, []), asynchronous=True)
    assert all("ragtrail" not in metadata for _, _, metadata, _ in retrieve(UNRELATED))
    event = RecallEvent.objects.get()
    assert event.outcome == "miss" and event.second_chance_at is None


@pytest.mark.parametrize("framework", ["LangChain", "LlamaIndex"])
@pytest.mark.parametrize(
    "failure", [(0, "deadline"), (404, "not_found"), (409, "conflict"), (422, "invalid"), (503, "overloaded")]
)
def test_a_second_chance_that_fails_never_breaks_the_search(framework, failure):
    from ragtrail_client import RagtrailClient, RagtrailError, Recall

    status, code = failure
    asked = []

    class Failing(RagtrailClient):
        def recall(self, query, **_):
            return Recall.from_json(
                {"outcome": "miss", "recall_id": "r-1", "sections": [], "steps": [], "second_chance_possible": True}
            )

        def second_chance(self, recall_id, section_ids, **_):
            asked.append((recall_id, list(section_ids)))
            raise RagtrailError(status, {"error": {"code": code, "message": "refused"}})

    calls: list[str] = []
    _, retrieve = retrieve_with(
        framework, Failing("http://127.0.0.1:9", "rt_x", "s"), search_over(framework, FOUND, calls), False
    )
    found = retrieve(ASKED)
    assert [i for i, *_ in found] == FOUND and all("ragtrail" not in m for _, _, m, _ in found)
    assert asked == [("r-1", FOUND)] and calls == [ASKED]


@pytest.mark.parametrize("said", [{}, {"second_chance_possible": False}, {"second_chance_possible": "yes"}])
def test_a_miss_that_does_not_say_a_second_chance_is_possible_asks_none(said):
    from ragtrail_client import RagtrailClient, Recall
    from ragtrail_client.recall_first import Found, RecallFirst

    asked = []

    class Older(RagtrailClient):  # {}: a server from before the flag, which may lack the endpoint too
        def recall(self, query, **_):
            return Recall.from_json({"outcome": "miss", "recall_id": "r-1", "sections": [], "steps": [], **said})

        def second_chance(self, *args, **_):
            asked.append(args)

    memory = RecallFirst(Older("http://127.0.0.1:9", "rt_x", "s"), "search", shared=True)
    for _ in range(2):
        memory.recall(ASKED)
        assert memory.second_chance(ASKED, [Found("billing/cancel", "x")]) is None
    assert asked == []


def test_a_miss_without_a_recall_id_or_a_search_without_ids_asks_nothing():
    from ragtrail_client import RagtrailClient, Recall
    from ragtrail_client.recall_first import Found, RecallFirst

    asked = []

    class Counting(RagtrailClient):
        def recall(self, query, **_):
            return Recall.from_json(
                {"outcome": "miss", "recall_id": None, "sections": [], "steps": [], "second_chance_possible": True}
            )

        def second_chance(self, *args, **_):
            asked.append(args)

    memory = RecallFirst(Counting("http://127.0.0.1:9", "rt_x", "s"), "search", shared=True)
    memory.recall(ASKED)  # ragtrail down, or a dry run: no recall to give a second chance
    assert memory.second_chance(ASKED, [Found("billing/cancel", "x")]) is None and asked == []
    memory._missed[ASKED] = "r-1"
    assert memory.second_chance(ASKED, [Found("\x00bad", "x")]) is None and asked == []


def test_the_mcp_tool_gives_the_second_chance_after_a_miss(helpdesk):
    from mcp import Client
    from ragtrail_client.mcp_server import build_server

    _, client = helpdesk
    server = build_server(client.base_url, client.api_key, "helpdesk", timeout=10, recall_timeout=10)
    seen: dict = {}

    async def main():
        async with Client(server) as mcp:
            tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
            seen["tool"] = tools["ragtrail_second_chance"]
            for search in (FOUND, NOT_FOUND):
                missed = await mcp.call_tool("ragtrail_recall", {"query": ASKED})
                recall_id = missed.structured_content["recall_id"]
                seen[len(search)] = (
                    missed,
                    await mcp.call_tool("ragtrail_second_chance", {"recall_id": recall_id, "section_ids": search}),
                )
            seen["again"] = await mcp.call_tool(
                "ragtrail_second_chance", {"recall_id": recall_id, "section_ids": FOUND}
            )

    run_async(main)
    tool = seen["tool"]
    assert "after searching" in tool.description and "miss" in tool.description
    assert tool.input_schema["required"] == ["recall_id", "section_ids"]
    missed, given = seen[len(FOUND)]
    assert missed.structured_content["outcome"] == "miss" and "ragtrail_second_chance" in text_of(missed)
    assert missed.structured_content["second_chance_possible"] is True
    assert given.structured_content["second_chance_possible"] is False  # a hit: nothing more to ask
    assert given.structured_content["matcher"] == "second-chance" and given.structured_content["second_chance"]["given"]
    assert "second chance given" in text_of(given) and SECTIONS["billing/cancel"] in text_of(given)
    missed, refused = seen[len(NOT_FOUND)]
    assert missed.structured_content["outcome"] == "miss", text_of(missed)
    assert refused.structured_content["outcome"] == "miss" and not refused.structured_content["second_chance"]["given"]
    assert "no second chance" in text_of(refused) and "Answer from your search" in text_of(refused)
    assert seen["again"].is_error and "409" in text_of(seen["again"])


def test_the_mcp_recall_names_the_second_chance_only_where_the_miss_says_it_is_possible(helpdesk):
    from mcp import Client
    from ragtrail_client.mcp_server import build_server

    scope, client = helpdesk
    server = build_server(client.base_url, client.api_key, "helpdesk", timeout=10, recall_timeout=10)
    said: list = []

    def switch(on: bool) -> None:
        Scope.objects.filter(pk=scope.pk).update(second_chance=on)
        connections.close_all()  # this worker thread's connection, which would outlive the test database

    async def main():
        async with Client(server) as mcp:  # one server and session throughout, as a model's
            for query, on in ((ASKED, False), (UNRELATED, True), (ASKED, True)):
                await anyio.to_thread.run_sync(switch, on)
                said.append(await mcp.call_tool("ragtrail_recall", {"query": query}))

    run_async(main)
    off, unrelated, near = said
    for missed in (off, unrelated):
        assert missed.structured_content["outcome"] == "miss"
        assert missed.structured_content["second_chance_possible"] is False
        assert "ragtrail_second_chance" not in text_of(missed) and "ragtrail_record" in text_of(missed)
    # Possible again at once: nothing about the earlier misses is kept.
    assert near.structured_content["second_chance_possible"] is True and "ragtrail_second_chance" in text_of(near)
