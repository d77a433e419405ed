"""Recall first, the application's own retriever on a miss: what the LangChain and
LlamaIndex retrievers (`ragtrail_client.langchain`, `ragtrail_client.llama_index`) share.

A prefetch (every cited section unchanged, its text served) answers without the wrapped
retriever. A hint or a miss runs the wrapped retriever, and what it found is kept, by
question, until the application says the answer was good (`accept`), which records the
path; an answer never accepted is never recorded. Failure policy, as `cached_tool`'s:
ragtrail unreachable, late or failing (status 0 or 5xx) never fails the application (the
wrapped retriever runs; `accept` and `reject` record nothing and return None), but it is
said: a WARNING names the status, code and message (once per reason and retriever), and
`failure(question)` gives the error; a refusal (4xx) is raised, since it is the caller's bug.

After a miss whose answer says a second chance is possible (`second_chance_possible`), the
section ids the wrapped retriever returned are handed back for one (`second_chance`): where
a near miss's path cites only sections among its first results, ragtrail serves it, and the
retrievers mark those results as the path's. Any other miss (a scope without second chances,
no near miss, a server that never says) asks nothing. A second chance never fails the
search: any error, a refusal included, is logged and the wrapped retriever's results are
returned as they are.

Isolation is by partition, never by the wrapped retriever's filters: a prefetch answers
without the wrapped retriever, so a path accepted for one user is served to every caller of
its partition. The retrievers therefore take either `partition=` (one per access group or
user) or `shared=True` (every caller may read every section), never a silent default.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ragtrail_client.aio import AsyncRagtrailClient
from ragtrail_client.client import (
    SECOND_CHANCE_IDS,
    RagtrailClient,
    RagtrailError,
    Recall,
    RecallFeedback,
    Recorded,
    SectionResult,
    Step,
)

logger = logging.getLogger(__name__)

# Questions whose retrieval awaits the application's verdict, at most (the oldest are let go).
REMEMBERED = 256
# The step argument a recorded path keeps each section's metadata in (as the wrapped retriever gave it).
METADATA_ARG = "metadata"
# Metadata the retrievers set on what they serve, never kept as the wrapped retriever's.
RAGTRAIL_KEYS = ("section_id", "hash", "truncated", "ragtrail")
# A section id the API takes (scopes' SectionId): one it would refuse is left out of a second chance.
SECTION_ID = re.compile(r"^[^\x00-\x1f\x7f-\x9f]{1,512}$")


@dataclass(frozen=True)
class Found:
    """A section the wrapped retriever returned: its id in the scope, the text it read and
    the metadata it gave (kept with the recorded path, restored when ragtrail serves it)."""

    section_id: str
    text: str
    metadata: Mapping[str, Any] | None = None

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


class RecallFirst:
    """One retriever's memory of its questions: what was served, what was searched.

    With a `RagtrailClient` the synchronous methods are used; with an `AsyncRagtrailClient`,
    the awaitable ones (`arecall`, `aaccept`, `areject`).

    Args:
        client: the ragtrail client (its scope, key and deadlines).
        tool: the step's name in a recorded path (the wrapped retriever's).
        partition: the scope's partition recalls and records use (the isolation boundary).
        shared: True where no partition is meant (every caller may read every section).
    """

    def __init__(
        self,
        client: RagtrailClient | AsyncRagtrailClient,
        tool: str,
        partition: str | None = None,
        *,
        shared: bool = False,
    ) -> None:
        self.client, self.tool, self.partition = client, tool, isolation(partition, shared)
        self.is_async = isinstance(client, AsyncRagtrailClient)
        self._lock = threading.Lock()
        self._searched: OrderedDict[str, tuple[tuple[Found, ...], int]] = OrderedDict()
        self._served: OrderedDict[str, str] = OrderedDict()
        self._missed: OrderedDict[str, str] = OrderedDict()
        self._failed: OrderedDict[str, RagtrailError] = OrderedDict()
        self._warned: OrderedDict[tuple[int, str, str], None] = OrderedDict()

    def recall(self, query: str) -> Recall | None:
        """The prefetch for this question with every section's text, else None (search)."""
        client = self._sync()
        self._forget_failure(query)
        try:
            answer = client.recall(query, partition=self.partition)
        except RagtrailError as error:
            answer = self._unless_down(query, "recall", error)
        return self._prefetch(query, answer)

    async def arecall(self, query: str) -> Recall | None:
        """`recall`, awaited on the asynchronous client."""
        client = self._async()
        self._forget_failure(query)
        try:
            answer = await client.recall(query, partition=self.partition)
        except RagtrailError as error:
            answer = self._unless_down(query, "recall", error)
        return self._prefetch(query, answer)

    def failure(self, query: str) -> RagtrailError | None:
        """Why ragtrail failed this question's latest call (its recall, `accept` or `reject`):
        the error, with the status, code and message ragtrail answered (status 0: no answer);
        None where that call did not fail."""
        with self._lock:
            return self._failed.get(query)

    def searched(self, query: str, found: Sequence[Found], returned: int | None = None) -> None:
        """What the wrapped retriever returned for this question (`returned` results, `found`
        the sections among them), kept until `accept`."""
        with self._lock:
            self._served.pop(query, None)
            _keep(self._searched, query, (tuple(found), len(found) if returned is None else returned))

    def second_chance(self, query: str, found: Sequence[Found]) -> Recall | None:
        """After this question's recall missed, saying a second chance is possible, and the
        wrapped retriever ran: the near miss's path ragtrail serves because the retriever
        returned every section it cites (`found`, best first), else None (nothing is asked
        after any other miss). Never raises a `RagtrailError` (the search stands as it is)."""
        ask = self._second_chance_ask(query, found)
        if ask is None:
            return None
        try:
            answer = self._sync().second_chance(*ask)
        except RagtrailError as error:
            return self._second_chance_failed(error)
        return self._given(query, answer)

    async def asecond_chance(self, query: str, found: Sequence[Found]) -> Recall | None:
        """`second_chance`, awaited on the asynchronous client."""
        ask = self._second_chance_ask(query, found)
        if ask is None:
            return None
        try:
            answer = await self._async().second_chance(*ask)
        except RagtrailError as error:
            return self._second_chance_failed(error)
        return self._given(query, answer)

    @staticmethod
    def metadata(served: Recall) -> dict[str, dict[str, Any]]:
        """Each served section's metadata as the wrapped retriever gave it when the path was accepted."""
        kept: dict[str, dict[str, Any]] = {}
        for step in served.steps:
            given = step.args.get(METADATA_ARG) if isinstance(step.args, dict) else None
            if isinstance(given, dict):
                kept.update({k: v for k, v in given.items() if isinstance(v, dict)})
        return kept

    def accept(self, query: str, *, cited: Sequence[str] | None = None, signal: str = "accepted") -> Recorded | None:
        """Records the path to this question's accepted answer: the wrapped retriever's call
        and the sections it returned (or those of them in `cited`), with the hashes of the
        text read. None where nothing is to be recorded (the answer was served by ragtrail,
        the question was never retrieved here) or ragtrail failed (`failure` says why)."""
        client = self._sync()
        self._forget_failure(query)
        path = self._path(query, cited, signal)
        try:
            return client.record(**path) if path else None
        except RagtrailError as error:
            return self._unless_down(query, "record", error)

    async def aaccept(
        self, query: str, *, cited: Sequence[str] | None = None, signal: str = "accepted"
    ) -> Recorded | None:
        """`accept`, awaited on the asynchronous client."""
        client = self._async()
        self._forget_failure(query)
        path = self._path(query, cited, signal)
        try:
            return await client.record(**path) if path else None
        except RagtrailError as error:
            return self._unless_down(query, "record", error)

    def reject(self, query: str, reason: str = "") -> RecallFeedback | None:
        """Reports that what ragtrail served for this question did not help (a false hit);
        None where this question was not served by ragtrail or ragtrail failed (as `accept`:
        `failure` says why, and a refusal is raised)."""
        client = self._sync()
        self._forget_failure(query)
        recall_id = self._served_id(query)
        try:
            return client.feedback(recall_id, helpful=False, reason=reason) if recall_id else None
        except RagtrailError as error:
            return self._unless_down(query, "feedback", error)

    async def areject(self, query: str, reason: str = "") -> RecallFeedback | None:
        """`reject`, awaited on the asynchronous client."""
        client = self._async()
        self._forget_failure(query)
        recall_id = self._served_id(query)
        try:
            return await client.feedback(recall_id, helpful=False, reason=reason) if recall_id else None
        except RagtrailError as error:
            return self._unless_down(query, "feedback", error)

    def _prefetch(self, query: str, answer: Recall | None) -> Recall | None:
        with self._lock:
            if answer is not None and answer.outcome == "miss" and answer.recall_id and answer.second_chance_possible:
                _keep(self._missed, query, answer.recall_id)  # its search may earn a second chance
            else:
                self._missed.pop(query, None)
        if answer is None or answer.outcome != "prefetch" or any(s.text is None for s in answer.sections):
            return None  # a hint, a miss, or a scope that keeps hashes only: the application's retriever reads
        with self._lock:
            self._searched.pop(query, None)
            _keep(self._served, query, answer.recall_id or "")
        return answer

    def _path(self, query: str, cited: Sequence[str] | None, signal: str) -> dict[str, Any] | None:
        """What `record` takes for the path this question's retrieval took; None where there was none."""
        with self._lock:
            found, results = self._searched.pop(query, ((), 0))
        if not found and results:
            raise ValueError(
                f"none of the {results} results the wrapped retriever returned for {query!r} has a section id "
                '(metadata["section_id"], else its id): nothing can be recorded; give them the ids ragtrail holds '
                "them by, or pass section_id= a function that finds it"
            )
        if not found:
            return None
        returned = list(dict.fromkeys(f.section_id for f in found))
        cited = returned if cited is None else list(cited)
        if not set(cited) <= set(returned):
            raise ValueError(f"cited sections the retriever did not return: {sorted(set(cited) - set(returned))}")
        args: dict[str, Any] = {"query": query}
        metadata = {f.section_id: m for f in found if f.section_id in cited and (m := _json_metadata(f.metadata))}
        if metadata:
            args[METADATA_ARG] = metadata
        return {
            "query": query,
            "cited": cited,
            "signal": signal,
            "steps": [Step(self.tool, args, tuple(returned))],
            "hashes": {f.section_id: f.hash for f in found if f.section_id in cited},
            "partition": self.partition,
        }

    def _second_chance_ask(self, query: str, found: Sequence[Found]) -> tuple[str, list[str]] | None:
        """The missed recall's id and the section ids to hand back; None where there is nothing to ask."""
        with self._lock:
            recall_id = self._missed.pop(query, None)
        returned = [f.section_id for f in found if isinstance(f.section_id, str) and SECTION_ID.match(f.section_id)]
        if not recall_id or not returned:
            return None
        return recall_id, list(dict.fromkeys(returned))[:SECOND_CHANCE_IDS]

    def _given(self, query: str, answer: Recall) -> Recall | None:
        if answer.second_chance is None or not answer.second_chance.given or not answer.hit:
            return None
        with self._lock:
            # A served path: `reject` reports it; the search stays kept, so `accept` records this question's own path.
            _keep(self._served, query, answer.recall_id or "")
        return answer

    def _second_chance_failed(self, error: RagtrailError) -> None:
        """None: a second chance that failed leaves the search's results as they are, whatever the error."""
        if error.status == 0 or error.status >= 500:
            logger.info("ragtrail's second chance was not answered: %s", error)
            return None
        logger.warning("ragtrail refused a second chance: %s", error)
        return None

    def _unless_down(self, query: str, call: str, error: RagtrailError) -> None:
        """None where ragtrail is down, late or failing (the application goes on without it),
        kept as this question's failure and logged once per reason; a refusal is raised."""
        if 0 < error.status < 500:
            raise error
        reason = (error.status, error.code, error.message)
        with self._lock:
            _keep(self._failed, query, error)
            said = reason in self._warned
            _keep(self._warned, reason, None)
        if not said:
            logger.warning(
                "ragtrail's %s failed, so this retriever goes on without ragtrail (said once per reason): "
                "status %s, code %s: %s",
                call,
                *reason,
            )
        return None

    def _forget_failure(self, query: str) -> None:
        with self._lock:
            self._failed.pop(query, None)

    def _served_id(self, query: str) -> str | None:
        with self._lock:
            return self._served.pop(query, None) or None

    def _sync(self) -> RagtrailClient:
        if self.is_async:
            raise TypeError("this retriever's client is an AsyncRagtrailClient: use its asynchronous calls")
        return self.client  # type: ignore[return-value]

    def _async(self) -> AsyncRagtrailClient:
        if not self.is_async:
            raise TypeError("this retriever's client is a RagtrailClient: use its synchronous calls")
        return self.client  # type: ignore[return-value]


class AnswerSignals:
    """What the application says of an answer, for a retriever wrapper holding a `RecallFirst`
    as `_memory` (the LangChain and LlamaIndex retrievers share it)."""

    _memory: RecallFirst

    def accept(self, query: str, *, cited: Sequence[str] | None = None, signal: str = "accepted") -> Recorded | None:
        """Records the path to this question's answer, which the application accepted (`signal`
        as `RagtrailClient.record`); `cited` narrows it to the sections the answer used. None
        where there is nothing to record (ragtrail served it, or the question was never
        retrieved here) or ragtrail failed (`failure(question)` says why); a ValueError where
        the wrapped retriever's results had no section ids."""
        return self._memory.accept(query, cited=cited, signal=signal)

    async def aaccept(
        self, query: str, *, cited: Sequence[str] | None = None, signal: str = "accepted"
    ) -> Recorded | None:
        """`accept`, with an `AsyncRagtrailClient`."""
        return await self._memory.aaccept(query, cited=cited, signal=signal)

    def reject(self, query: str, reason: str = "") -> RecallFeedback | None:
        """Reports that ragtrail's answer to this question did not help; None if ragtrail did not
        serve it or failed (as `accept`)."""
        return self._memory.reject(query, reason)

    def failure(self, query: str) -> RagtrailError | None:
        """Why ragtrail failed this question's latest call (its recall, `accept` or `reject`),
        with the status, code and message it answered; None where that call did not fail."""
        return self._memory.failure(query)

    async def areject(self, query: str, reason: str = "") -> RecallFeedback | None:
        """`reject`, with an `AsyncRagtrailClient`."""
        return await self._memory.areject(query, reason)


def isolation(partition: str | None, shared: bool) -> str:
    """The partition a retriever recalls and records in: the one named, or "" where `shared`;
    neither (or both) is refused, since a served path bypasses the wrapped retriever's filters."""
    if shared and partition:
        raise ValueError(f"shared=True and partition={partition!r}: say one (a partition isolates, shared does not)")
    if shared:
        return ""
    if not partition:
        raise ValueError(
            "pass partition= (one per user or access group: what one caller's accepted answer cites is served "
            "to every caller of its partition, without your retriever's filters) or shared=True (every caller "
            "may read every section)"
        )
    return partition


def _json_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The wrapped retriever's metadata that JSON can carry, without the keys the retrievers set."""
    kept = {}
    for key, value in (metadata or {}).items():
        if key in RAGTRAIL_KEYS or not isinstance(key, str):
            continue
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            continue  # a value JSON cannot carry (a datetime, an object) is not kept
        kept[key] = value
    return kept


def second_chance_sections(served: Recall | None) -> dict[str, SectionResult]:
    """The sections a second chance served that are valid now, by id (none where none was given)."""
    if served is None:
        return {}
    return {s.id: s for s in served.sections if s.status == "valid"}


def second_chance_about(served: Recall) -> dict[str, Any]:
    """What the retrievers put under `metadata["ragtrail"]` of a result a second chance served."""
    return {
        "outcome": served.outcome,
        "recall_id": served.recall_id,
        "trail_id": served.trail_id,
        "matched_query": served.matched_query,
        "matcher": served.matcher,
        "second_chance": True,
    }


def _keep(memory: OrderedDict, key: str, value: object) -> None:
    memory.pop(key, None)
    memory[key] = value
    while len(memory) > REMEMBERED:
        memory.popitem(last=False)
