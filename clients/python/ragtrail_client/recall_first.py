"""Recall first, the application's own retriever on a miss: what the LangChain and
LlamaIndex retrievers (`ragtrail_client.langchain`, `ragtrail_client.llama_index`) share.

A prefetch (every cited section unchanged, its text served) answers without the wrapped
retriever. A hint or a miss runs the wrapped retriever, and what it found is kept, by
question, until the application says the answer was good (`accept`), which records the
path; an answer never accepted is never recorded. Failure policy, as `cached_tool`'s:
ragtrail unreachable, late or failing (status 0 or 5xx) never fails the application (the
wrapped retriever runs; `accept` records nothing and returns None); a refusal (4xx) is
raised, since it is the caller's bug.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

from ragtrail_client.client import RagtrailClient, RagtrailError, Recall, RecallFeedback, Recorded, Step

# Questions whose retrieval awaits the application's verdict, at most (the oldest are let go).
REMEMBERED = 256


@dataclass(frozen=True)
class Found:
    """A section the wrapped retriever returned: its id in the scope and the text it read."""

    section_id: str
    text: str

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


class RecallFirst:
    """One retriever's memory of its questions: what was served, what was searched.

    Args:
        client: the ragtrail client (its scope, key and deadlines).
        tool: the step's name in a recorded path (the wrapped retriever's).
        partition: the scope's partition recalls and records use.
    """

    def __init__(self, client: RagtrailClient, tool: str, partition: str = "") -> None:
        self.client, self.tool, self.partition = client, tool, partition
        self._lock = threading.Lock()
        self._searched: OrderedDict[str, tuple[Found, ...]] = OrderedDict()
        self._served: OrderedDict[str, str] = OrderedDict()

    def recall(self, query: str) -> Recall | None:
        """The prefetch for this question with every section's text, else None (search)."""
        try:
            answer = self.client.recall(query, partition=self.partition)
        except RagtrailError as error:
            if error.status == 0 or error.status >= 500:
                return None
            raise
        if answer.outcome != "prefetch" or any(s.text is None for s in answer.sections):
            return None  # a hint, a miss, or a scope that keeps hashes only: the application's retriever reads
        with self._lock:
            self._searched.pop(query, None)
            _keep(self._served, query, answer.recall_id or "")
        return answer

    def searched(self, query: str, found: Sequence[Found]) -> None:
        """What the wrapped retriever returned for this question, kept until `accept`."""
        with self._lock:
            self._served.pop(query, None)
            _keep(self._searched, query, tuple(found))

    def accept(self, query: str, *, cited: Sequence[str] | None = None, signal: str = "accepted") -> Recorded | None:
        """Records the path to this question's accepted answer: the wrapped retriever's call
        and the sections it returned (or those of them in `cited`), with the hashes of the
        text read. None where nothing is to be recorded (the answer was served by ragtrail,
        the question was never retrieved here) or ragtrail could not be reached."""
        with self._lock:
            found = self._searched.pop(query, None)
        if not found:
            return None
        returned = list(dict.fromkeys(f.section_id for f in found))
        cited = returned if cited is None else list(cited)
        if not set(cited) <= set(returned):
            raise ValueError(f"cited sections the retriever did not return: {sorted(set(cited) - set(returned))}")
        hashes = {f.section_id: f.hash for f in found if f.section_id in cited}
        try:
            return self.client.record(
                query,
                cited,
                signal=signal,
                steps=[Step(self.tool, {"query": query}, tuple(returned))],
                hashes=hashes,
                partition=self.partition,
            )
        except RagtrailError as error:
            if error.status == 0 or error.status >= 500:
                return None
            raise

    def reject(self, query: str, reason: str = "") -> RecallFeedback | None:
        """Reports that what ragtrail served for this question did not help (a false hit);
        None where this question was not served by ragtrail."""
        with self._lock:
            recall_id = self._served.pop(query, None)
        if not recall_id:
            return None
        return self.client.feedback(recall_id, helpful=False, reason=reason)


def _keep(memory: OrderedDict, key: str, value: object) -> None:
    memory.pop(key, None)
    memory[key] = value
    while len(memory) > REMEMBERED:
        memory.popitem(last=False)
