"""`RagtrailRetriever` for LlamaIndex: ragtrail first, your retriever on a miss.

    from ragtrail_client.llama_index import RagtrailRetriever
    retriever = RagtrailRetriever(client, your_retriever, partition=user_id)
    nodes = retriever.retrieve(question)   # a prefetch: the sections as NodeWithScore; else your retriever's nodes
    retriever.accept(question)             # the application accepted the answer: the path is recorded

A prefetch bypasses the wrapped retriever and its filters: `partition=` (one per user or
access group) is what keeps one caller's sections from another; `shared=True` says every
caller may read every section. One of the two is required.

With an `AsyncRagtrailClient`, `await retriever.aretrieve(question)` and `await
retriever.aaccept(question)` call ragtrail and the wrapped retriever asynchronously; with a
`RagtrailClient`, `aretrieve` runs the recall in an executor and awaits the wrapped
retriever's `aretrieve`.

After a miss whose answer says a second chance is possible, the ids of the nodes the
wrapped retriever returned are handed back to ragtrail for one: where the path of a near
miss cites only nodes among its first results, those nodes come back marked
`metadata["ragtrail"]["second_chance"]` (True), in the wrapped retriever's order and with
its scores, with nothing added or removed. After any other miss nothing more is asked.

A node's section id is `metadata["section_id"]`, else its `node_id`; its hash is the
SHA-256 of its content (without metadata), the text read.
Needs `llama-index-core` (`pip install 'ragtrail-client[llama-index]'`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

try:
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle, TextNode
except ImportError as missing:  # the extra not installed: say which
    raise ImportError(f"{missing}: pip install 'ragtrail-client[llama-index]'") from missing

from ragtrail_client.aio import AsyncRagtrailClient
from ragtrail_client.client import RagtrailClient, Recall
from ragtrail_client.recall_first import (
    RAGTRAIL_KEYS,
    AnswerSignals,
    Found,
    RecallFirst,
    second_chance_about,
    second_chance_sections,
)


def node_section_id(node: BaseNode) -> str | None:
    """The section a node is: `metadata["section_id"]`, else its `node_id`."""
    return node.metadata.get("section_id") or node.node_id


class RagtrailRetriever(AnswerSignals, BaseRetriever):
    """Wraps any LlamaIndex retriever: ragtrail's prefetch where the path is known and every
    section it cites unchanged (nodes scored by the question's similarity), the wrapped
    retriever otherwise; `accept(question)` records the path once the application accepts
    the answer.

    Args:
        client: the ragtrail client.
        retriever: the retriever a miss runs.
        partition: the scope's partition, one per user or access group (a prefetch bypasses
            the wrapped retriever's filters: the partition is what isolates).
        shared: True where every caller may read every section (no partition); one of the two is required.
        tool: the step's name in a recorded path; the wrapped retriever's class by default.
        section_id: a node's section id (`node_section_id` by default).
    """

    def __init__(
        self,
        client: RagtrailClient | AsyncRagtrailClient,
        retriever: BaseRetriever,
        *,
        partition: str | None = None,
        shared: bool = False,
        tool: str | None = None,
        section_id: Callable[[BaseNode], str | None] = node_section_id,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.retriever, self.section_id = retriever, section_id
        self._memory = RecallFirst(client, tool or type(retriever).__name__, partition, shared=shared)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        served = self._memory.recall(query_bundle.query_str)
        if served is not None:
            return _nodes(served, self._memory.metadata(served))
        query, nodes = query_bundle.query_str, self.retriever.retrieve(query_bundle)
        return self._marked(nodes, self._memory.second_chance(query, self._searched(query, nodes)))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self._memory.is_async:
            served = await self._memory.arecall(query_bundle.query_str)
        else:  # the synchronous client's recall, off the event loop
            served = await asyncio.get_running_loop().run_in_executor(None, self._memory.recall, query_bundle.query_str)
        if served is not None:
            return _nodes(served, self._memory.metadata(served))
        query, nodes = query_bundle.query_str, await self.retriever.aretrieve(query_bundle)
        found = self._searched(query, nodes)
        if self._memory.is_async:
            chance = await self._memory.asecond_chance(query, found)
        else:
            chance = await asyncio.get_running_loop().run_in_executor(None, self._memory.second_chance, query, found)
        return self._marked(nodes, chance)

    def _searched(self, query: str, nodes: list[NodeWithScore]) -> list[Found]:
        found = [Found(i, n.node.get_content(), n.node.metadata) for n in nodes if (i := self.section_id(n.node))]
        self._memory.searched(query, found, len(nodes))
        return found

    def _marked(self, nodes: list[NodeWithScore], chance: Recall | None) -> list[NodeWithScore]:
        """The wrapped retriever's nodes, those a second chance's path cites marked as such."""
        served = second_chance_sections(chance)
        if not served:
            return nodes
        about = second_chance_about(chance)  # type: ignore[arg-type]
        marked = []
        for n in nodes:
            section_id = self.section_id(n.node)
            if section_id not in served:
                marked.append(n)
                continue
            node = n.node.model_copy(deep=True)
            node.metadata = {**node.metadata, "section_id": section_id, "ragtrail": about}
            for excluded in (node.excluded_llm_metadata_keys, node.excluded_embed_metadata_keys):
                excluded.extend(k for k in ("section_id", "ragtrail") if k not in excluded)
            marked.append(NodeWithScore(node=node, score=n.score))
        return marked


def _nodes(served: Recall, kept: dict[str, dict[str, Any]]) -> list[NodeWithScore]:
    """A prefetch's sections as nodes, scored by the question's similarity to the recorded one,
    with the metadata the wrapped retriever gave them."""
    about = {
        "outcome": served.outcome,
        "recall_id": served.recall_id,
        "trail_id": served.trail_id,
        "matched_query": served.matched_query,
    }
    return [
        NodeWithScore(
            node=TextNode(
                id_=s.id,
                text=s.text or "",
                metadata={
                    **{k: v for k, v in kept.get(s.id, {}).items() if k not in RAGTRAIL_KEYS},
                    "section_id": s.id,
                    "hash": s.hash,
                    "truncated": bool(s.truncated),
                    "ragtrail": about,
                },
                excluded_llm_metadata_keys=list(RAGTRAIL_KEYS),
                excluded_embed_metadata_keys=list(RAGTRAIL_KEYS),
            ),
            score=served.similarity,
        )
        for s in served.sections
    ]
