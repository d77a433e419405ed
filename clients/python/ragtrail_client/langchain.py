"""`RagtrailRetriever` for LangChain: ragtrail first, your retriever on a miss.

    from ragtrail_client.langchain import RagtrailRetriever
    retriever = RagtrailRetriever(client=client, retriever=your_retriever, partition=user_id)
    docs = retriever.invoke(question)      # a prefetch: the sections; else your retriever's documents
    retriever.accept(question)             # the application accepted the answer: the path is recorded

A prefetch bypasses the wrapped retriever and its filters: `partition=` (one per user or
access group) is what keeps one caller's sections from another; `shared=True` says every
caller may read every section. One of the two is required.

With an `AsyncRagtrailClient`, `await retriever.ainvoke(question)` and `await
retriever.aaccept(question)` call ragtrail and the wrapped retriever asynchronously (its
`ainvoke`); with a `RagtrailClient`, `ainvoke` runs the recall in LangChain's executor and
awaits the wrapped retriever's `ainvoke`.

After a miss whose answer says a second chance is possible, the ids of the documents the
wrapped retriever returned are handed back to ragtrail for one: where the path of a near
miss cites only documents among its first results, those documents come back marked
`metadata["ragtrail"]["second_chance"]` (True), in the wrapped retriever's order, with
nothing added or removed. After any other miss nothing more is asked.

A document's section id is `metadata["section_id"]`, else `Document.id` (documents with
neither are not cited); its hash is the SHA-256 of its `page_content`, the text read.
Needs `langchain-core` (`pip install 'ragtrail-client[langchain]'`).
"""

from __future__ import annotations

from typing import Any, Callable

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables.config import run_in_executor
except ImportError as missing:  # the extra not installed: say which
    raise ImportError(f"{missing}: pip install 'ragtrail-client[langchain]'") from missing
from pydantic import PrivateAttr

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


def document_section_id(document: Document) -> str | None:
    """The section a document is: `metadata["section_id"]`, else its `id`."""
    return document.metadata.get("section_id") or document.id


class RagtrailRetriever(AnswerSignals, BaseRetriever):
    """Wraps any LangChain retriever: ragtrail's prefetch where the path is known and every
    section it cites unchanged, the wrapped retriever otherwise (a hint, a miss, ragtrail
    unreachable); `accept(question)` records the path once the application accepts the answer.

    Isolation is by `partition` (one per user or access group), since a prefetch bypasses
    the wrapped retriever's filters; `shared=True` where every caller may read every section.

    Prefetched documents carry the metadata the wrapped retriever gave each section when the
    path was accepted (what JSON can carry), and `metadata["section_id"]`, `metadata["hash"]`,
    `metadata["truncated"]` (cut to the scope's token budget) and `metadata["ragtrail"]`
    (outcome, recall_id, trail_id, matched_query). After a miss, the wrapped retriever's
    documents that a second chance's path cites carry `metadata["ragtrail"]` too, with
    `matcher` "second-chance" and `second_chance` True."""

    client: RagtrailClient | AsyncRagtrailClient
    retriever: BaseRetriever
    partition: str | None = None
    shared: bool = False
    tool: str | None = None  # the step's name in a recorded path; the wrapped retriever's class by default
    section_id: Callable[[Document], str | None] = document_section_id
    _memory: RecallFirst = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        tool = self.tool or type(self.retriever).__name__
        self._memory = RecallFirst(self.client, tool, self.partition, shared=self.shared)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        served = self._memory.recall(query)
        if served is not None:
            return _documents(served, self._memory.metadata(served))
        documents = self.retriever.invoke(query, config={"callbacks": run_manager.get_child()})
        found = self._searched(query, documents)
        return self._marked(documents, self._memory.second_chance(query, found))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self._memory.is_async:
            served = await self._memory.arecall(query)
        else:  # the synchronous client's recall, off the event loop
            served = await run_in_executor(None, self._memory.recall, query)
        if served is not None:
            return _documents(served, self._memory.metadata(served))
        documents = await self.retriever.ainvoke(query, config={"callbacks": run_manager.get_child()})
        found = self._searched(query, documents)
        if self._memory.is_async:
            chance = await self._memory.asecond_chance(query, found)
        else:
            chance = await run_in_executor(None, self._memory.second_chance, query, found)
        return self._marked(documents, chance)

    def _searched(self, query: str, documents: list[Document]) -> list[Found]:
        found = [Found(i, d.page_content, d.metadata) for d in documents if (i := self.section_id(d))]
        self._memory.searched(query, found, len(documents))
        return found

    def _marked(self, documents: list[Document], chance: Recall | None) -> list[Document]:
        """The wrapped retriever's documents, those a second chance's path cites marked as such."""
        served = second_chance_sections(chance)
        if not served:
            return documents
        about = second_chance_about(chance)  # type: ignore[arg-type]
        return [
            Document(
                page_content=d.page_content,
                id=d.id,
                metadata={**d.metadata, "section_id": section_id, "ragtrail": about},
            )
            if (section_id := self.section_id(d)) in served
            else d
            for d in documents
        ]


def _documents(served: Recall, kept: dict[str, dict[str, Any]]) -> list[Document]:
    """A prefetch's sections as documents, with the metadata the wrapped retriever gave them."""
    about = {
        "outcome": served.outcome,
        "recall_id": served.recall_id,
        "trail_id": served.trail_id,
        "matched_query": served.matched_query,
    }
    return [
        Document(
            page_content=s.text or "",
            id=s.id,
            metadata={
                **{k: v for k, v in kept.get(s.id, {}).items() if k not in RAGTRAIL_KEYS},
                "section_id": s.id,
                "hash": s.hash,
                "truncated": bool(s.truncated),
                "ragtrail": about,
            },
        )
        for s in served.sections
    ]
