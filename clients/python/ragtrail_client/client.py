"""Typed calls to ragtrail's JSON API over httpx, with pooled connections.

Calls that are safe to repeat (reads, recall, record with its idempotency key, PUTs,
tool-result lookups and stores) are retried with exponential backoff on connection
errors and on 502/503/504 (honouring Retry-After); votes, feedback and second chances are
sent once. Every call has one overall deadline, retries, waits and a scope lookup included
(recall's and a second chance's is 1 s: an agent that waits on its memory longer than a
search would take is better off searching; the others' 1.5 s), and recall is never retried
after a timeout. Every error
the API answers is raised as `RagtrailError` carrying its JSON body; no answer within the
deadline is status 0, code "deadline"; a TLS failure is code "tls"; a redirect is never
followed (it would carry the key elsewhere, and a POST would lose its body): code "redirect";
an answer that is not ragtrail's JSON, at any status (an HTML page, an empty body, another
service's JSON), is code "not_ragtrail".

The calls are written once (`Calls`): each builds a `Call`, which the synchronous client
here and the asynchronous one (`aio.py`) send the same way, deciding retries alike.
"""

from __future__ import annotations

import json
import random
import ssl
import time
import urllib.parse
import uuid
import weakref
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterable, Iterator, Mapping, Sequence, TypeVar

import httpx

RETRYABLE_STATUSES = frozenset({502, 503, 504})
# Deadlines an agent gets unless it says otherwise (seconds): a hung server costs no more.
RECALL_DEADLINE = 1.0
CALL_DEADLINE = 1.5
# The most section ids a second chance takes (the server refuses more).
SECOND_CHANCE_IDS = 50
T = TypeVar("T")


class RagtrailError(Exception):
    """An error answer from ragtrail (status >= 400), or no answer at all (status 0).

    Attributes:
        status: the HTTP status, 0 where the server could not be reached.
        code: the API's error code ("invalid", "not_found", "conflict", ...).
        field: the request field at fault, where the API names one.
        body: the whole JSON error body.
    """

    def __init__(self, status: int, body: Mapping[str, Any] | None, message: str | None = None) -> None:
        self.status = status
        self.body = dict(body or {})
        error = self.body.get("error") if isinstance(self.body.get("error"), dict) else {}
        self.code: str = error.get("code", "unreachable" if status == 0 else "error")
        self.field: str | None = error.get("field")
        self.message: str = message or error.get("message") or f"HTTP {status}"
        # No answer reads as what happened ("deadline exceeded after 1.0 s: ..."); an answer leads with its status.
        said = self.message if status == 0 else f"{status} {self.code}: {self.message}"
        super().__init__(said + (f" (field: {self.field})" if self.field else ""))


@dataclass(frozen=True)
class SectionResult:
    id: str
    status: str  # "valid", "changed" or "deleted"
    text: str | None = (
        None  # a valid section's current text (on a hint where it fits the budget); None where the scope keeps hashes only
    )
    tokens: int | None = None
    truncated: bool | None = None
    hash: str | None = None  # a valid section's SHA-256 of its UTF-8 text, now and when recorded


SECTION_FIELDS = frozenset(SectionResult.__dataclass_fields__)


@dataclass(frozen=True)
class Step:
    tool: str
    args: dict[str, Any] = field(default_factory=dict)
    section_ids: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "args": self.args, "section_ids": list(self.section_ids)}


@dataclass(frozen=True)
class SecondChance:
    """What a second chance came to: whether a near miss's path was served, and why in one sentence."""

    given: bool
    reason: str


@dataclass(frozen=True)
class Recall:
    """What recall answered: "prefetch" (sections' current text), "hint" or "miss"; `matcher`
    "second-chance" where `second_chance` served it."""

    outcome: str
    recall_id: str | None
    trail_id: str | None
    matcher: str | None
    similarity: float | None
    matched_query: str | None
    sections: tuple[SectionResult, ...]
    steps: tuple[Step, ...]
    hint: str | None
    tokens: int
    truncated: bool
    # Why it answered as it did (explain() only): each candidate read, its similarity and verdict.
    explanation: Mapping[str, Any] | None = None
    # On a second chance's answer only (`second_chance`): whether one was given and why.
    second_chance: SecondChance | None = None
    # On a miss: whether a second chance may serve a near miss's path (ask only then; False from older servers).
    second_chance_possible: bool = False

    @property
    def hit(self) -> bool:
        return self.outcome != "miss"

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Recall":
        if body.get("outcome") not in ("prefetch", "hint", "miss"):
            raise KeyError("outcome")
        return cls(
            outcome=body["outcome"],
            recall_id=body.get("recall_id"),
            trail_id=body.get("trail_id"),
            matcher=body.get("matcher"),
            similarity=body.get("similarity"),
            matched_query=body.get("matched_query"),
            # Fields a newer server adds are left out, so an older client keeps working.
            sections=tuple(
                SectionResult(**{k: v for k, v in s.items() if k in SECTION_FIELDS}) for s in body.get("sections", [])
            ),
            steps=tuple(
                Step(s["tool"], s.get("args", {}), tuple(s.get("section_ids", []))) for s in body.get("steps", [])
            ),
            hint=body.get("hint"),
            tokens=body.get("tokens", 0),
            truncated=body.get("truncated", False),
            explanation=body.get("explanation"),
            second_chance=SecondChance(chance["given"], chance.get("reason", ""))
            if isinstance(chance := body.get("second_chance"), dict)
            else None,
            second_chance_possible=body.get("second_chance_possible") is True,
        )


@dataclass(frozen=True)
class Recorded:
    trail_id: str
    status: str  # "active", or "pending" without a positive signal
    reason: str | None
    created: bool  # False where the idempotency key was seen before, or the same path was recorded before
    # Where the scope held this question with these sections already: what recording it again did.
    refreshed: str | None = None


@dataclass(frozen=True)
class RecallFeedback:
    recall_id: str
    helpful: bool
    trail_id: str | None
    trail_status: str | None
    false_hit_reports: int | None
    # Different keys that reported it since its last approval (the scope's number, at least two, sends it back).
    false_hit_reporters: int | None = None


@dataclass(frozen=True)
class ToolLookup:
    hit: bool
    result: Any = None
    age_s: float | None = None
    reason: str | None = None


@dataclass(frozen=True)
class ToolStored:
    stored: bool
    ttl_s: int | None = None
    reason: str | None = None


# What `record` may be told about an answer: who approved it, or that nobody has yet.
SIGNALS = ("accepted", "user", "verifier", "pending")


class Call(Generic[T]):
    """One API call as the clients send it: where, what, whether it may be repeated, and how
    its answer (status, JSON body) becomes the typed result."""

    def __init__(
        self,
        method: str,
        parts: Sequence[str],
        body: Any = None,
        *,
        scope: str | None = None,
        scoped: bool = True,
        safe: bool,
        recall: bool = False,
        query: Mapping[str, Any] | None = None,
        parse: Callable[[int, Any], T] = lambda status, body: body,
    ) -> None:
        self.method, self.parts, self.body, self.scope, self.scoped = method, tuple(parts), body, scope, scoped
        self.safe, self.recall, self.query, self.parse = safe, recall, query, parse

    def path(self, scope: str | None) -> str:
        quoted = "/".join(urllib.parse.quote(p, safe="") for p in ((scope,) if self.scoped else ()) + self.parts)
        path = ("/api/v1/scopes/" if self.scoped else "/api/v1/") + quoted
        return path + ("?" + urllib.parse.urlencode(self.query) if self.query else "")


class Attempt:
    """What one attempt came to: a result, an error to raise, or a wait before the next."""

    def __init__(
        self, result: Any = None, error: RagtrailError | None = None, retry_after: float | None = None
    ) -> None:
        self.result, self.error, self.retry_after = result, error, retry_after


class Calls(ABC):
    """Every API call, written once. `_send(call)` is the client's: it returns the call's
    result (the synchronous client) or an awaitable of it (the asynchronous one).

    Args:
        base_url: the server, e.g. "http://127.0.0.1:8000" (a trailing "/api/v1" is the same
            server, and is dropped).
        api_key: an `rt_...` key granted the scopes used.
        scope: the scope calls use unless they name another. Without one, a key granted a
            single scope uses it (looked up once, inside the first call's deadline).
        timeout: the overall deadline of a call, in seconds: attempts, retries, the waits
            between them and a scope lookup all end by then.
        recall_timeout: the overall deadline of a recall (and explain), shorter: past it the
            agent searches as it would have without ragtrail.
        retries: further attempts of a safe call after a connection error or 502/503/504,
            within the call's deadline.
        backoff: seconds before the first retry, doubled each time (with jitter).
        http: an httpx client to share (its pool), else the client makes its own.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        scope: str | None = None,
        *,
        timeout: float = CALL_DEADLINE,
        recall_timeout: float = RECALL_DEADLINE,
        retries: int = 3,
        backoff: float = 0.2,
        http: Any = None,
    ) -> None:
        self.base_url = _server_root(base_url)
        self.api_key = api_key
        self.scope = scope
        self.timeout = timeout
        self.recall_timeout = recall_timeout
        self.retries = retries
        self.backoff = backoff
        self.headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}

    @abstractmethod
    def _send(self, call: Call[T]) -> Any:
        """Sends the call within its deadline: its result (sync) or an awaitable of it (async)."""

    # --- the key ----------------------------------------------------------------------
    def scopes(self) -> list[dict[str, str]]:
        """The scopes this key is granted: [{"slug", "name"}]."""
        return self._send(Call("GET", ("scopes",), scoped=False, safe=True, parse=lambda _, body: body["scopes"]))

    # --- sections -------------------------------------------------------------------
    def put_sections(self, sections: Mapping[str, str], *, scope: str | None = None) -> dict[str, Any]:
        """Creates or updates sections; returns counts, changed ids and each section's hash."""
        body = {"sections": [{"id": k, "text": v} for k, v in sections.items()]}
        return self._send(Call("PUT", ("sections",), body, scope=scope, safe=True))

    def list_sections(self, *, after: str = "", limit: int = 200, scope: str | None = None) -> dict[str, Any]:
        """A page of the scope's sections by id: {"sections": [{"id", "hash", "updated_at"}], "next"};
        pass `next` as `after` for the following page (None on the last)."""
        return self._send(Call("GET", ("sections",), scope=scope, safe=True, query={"after": after, "limit": limit}))

    def get_section(self, section_id: str, *, scope: str | None = None) -> dict[str, Any]:
        """{"id", "text", "hash", "updated_at"} of one section."""
        return self._send(Call("GET", ("sections", section_id), scope=scope, safe=True))

    def delete_section(self, section_id: str, *, scope: str | None = None) -> None:
        return self._send(Call("DELETE", ("sections", section_id), scope=scope, safe=True, parse=lambda _, __: None))

    # --- recall, record, feedback ----------------------------------------------------
    def recall(
        self,
        query: str,
        *,
        partition: str = "",
        token_budget: int | None = None,
        dry_run: bool = False,
        session: str | None = None,
        scope: str | None = None,
    ) -> Recall:
        """The path recorded for the most similar question, checked against the sections now.

        `session` (the agent run's id, also given to `record`) lets ragtrail learn from a
        re-search: a path recorded for the same question in the same session that cites
        none of the served sections labels this recall a false hit.
        """
        body: dict[str, Any] = {"query": query, "partition": partition, "dry_run": dry_run}
        if session is not None:
            body["session"] = session
        # A repeated recall may count one more hit; it never changes what is served.
        return self._send(self._recall_call(body, token_budget, scope))

    def explain(
        self, query: str, *, partition: str = "", token_budget: int | None = None, scope: str | None = None
    ) -> Recall:
        """What recall would answer, without counting it, and why (`Recall.explanation`):
        every candidate read, its similarity against the threshold and the verdict. The
        first thing to look at when a question you expected to hit misses."""
        body: dict[str, Any] = {"query": query, "partition": partition, "dry_run": True, "explain": True}
        return self._send(self._recall_call(body, token_budget, scope))

    @staticmethod
    def _recall_call(body: dict[str, Any], token_budget: int | None, scope: str | None) -> Call[Recall]:
        if token_budget is not None:
            body["token_budget"] = token_budget
        return Call(
            "POST",
            ("recall",),
            body,
            scope=scope,
            safe=True,
            recall=True,
            parse=lambda _, answer: Recall.from_json(answer),
        )

    def second_chance(
        self,
        recall_id: str,
        section_ids: Sequence[str],
        *,
        token_budget: int | None = None,
        scope: str | None = None,
    ) -> Recall:
        """After a recall missed and the agent searched: the path of a near miss whose cited
        sections are all among the first few `section_ids` (the search's results, best first;
        the first of them cited), validated on read and served as a hit (`matcher`
        "second-chance"); else a miss. `Recall.second_chance` says whether one was given and why.
        Worth asking only after a miss whose `second_chance_possible` is True.

        Once per recall, by the key that made it, within 15 minutes of it (a 409 after, or
        on a recall that was not a miss; a 404 for another key's recall). Recall's deadline;
        sent once (a repeat would be refused as asked already). At most 50 ids are sent.
        """
        body: dict[str, Any] = {"section_ids": list(dict.fromkeys(section_ids))[:SECOND_CHANCE_IDS]}
        if token_budget is not None:
            body["token_budget"] = token_budget
        return self._send(
            Call(
                "POST",
                ("recalls", recall_id, "second-chance"),
                body,
                scope=scope,
                safe=False,
                recall=True,
                parse=lambda _, answer: Recall.from_json(answer),
            )
        )

    def record(
        self,
        query: str,
        cited: Sequence[str],
        *,
        signal: str,
        steps: Iterable[Step | Mapping[str, Any]] = (),
        hashes: Mapping[str, str] | None = None,
        partition: str = "",
        idempotency_key: str | None = None,
        session: str | None = None,
        scope: str | None = None,
    ) -> Recorded:
        """Records the path to an answer (never the answer itself).

        `signal` must be stated, since it decides whether the path is served: "accepted"
        (your application accepted the answer), "user" (a user's thumbs-up) or "verifier"
        (an automatic verifier approved it) are served to later similar questions at once;
        "pending" keeps it for an operator to approve, unserved until then.

        `hashes` are the hashes of the cited sections as the agent read them (from
        `put_sections`, `get_section` or a prefetch): SHA-256 of the section's UTF-8 text, as
        64 hex digits. An idempotency key is generated when none is given, so a retried
        record never makes two trails.
        """
        if signal not in SIGNALS:
            raise ValueError(f"signal must be one of {', '.join(SIGNALS)}, not {signal!r}")
        body: dict[str, Any] = {
            "query": query,
            "partition": partition,
            "cited": list(cited),
            "steps": [s.as_json() if isinstance(s, Step) else dict(s) for s in steps],
            "hashes": dict(hashes or {}),
            "idempotency_key": idempotency_key or uuid.uuid4().hex,
        }
        if signal != "pending":
            body["signal"] = signal
        if session is not None:
            body["session"] = session
        return self._send(
            Call(
                "POST",
                ("trails",),
                body,
                scope=scope,
                safe=True,
                parse=lambda status, answer: Recorded(
                    answer["trail_id"],
                    answer["status"],
                    answer.get("reason"),
                    created=status == 201,
                    refreshed=answer.get("refreshed"),
                ),
            )
        )

    def feedback(self, recall_id: str, helpful: bool, reason: str = "", *, scope: str | None = None) -> RecallFeedback:
        """The agent's verdict on what a recall served; "not helpful" reports a false hit."""
        body = {"helpful": helpful, "reason": reason}
        return self._send(
            Call(
                "POST",
                ("recalls", recall_id, "feedback"),
                body,
                scope=scope,
                safe=False,
                parse=lambda _, answer: RecallFeedback(**answer),
            )
        )

    def vote(self, trail_id: str, vote: str, *, scope: str | None = None) -> dict[str, Any]:
        """ "up" approves a pending trail, "down" rejects it."""
        return self._send(Call("POST", ("trails", trail_id, "feedback"), {"vote": vote}, scope=scope, safe=False))

    def get_trail(self, trail_id: str, *, scope: str | None = None) -> dict[str, Any]:
        return self._send(Call("GET", ("trails", trail_id), scope=scope, safe=True))

    # --- tool results ----------------------------------------------------------------
    def get_tool_policies(self, *, scope: str | None = None) -> list[dict[str, Any]]:
        return self._send(
            Call("GET", ("tool-policies",), scope=scope, safe=True, parse=lambda _, body: body["policies"])
        )

    def put_tool_policies(
        self, policies: Sequence[Mapping[str, Any]], *, scope: str | None = None
    ) -> list[dict[str, Any]]:
        """Replaces the scope's tool policies (which tools' results may be cached, how long)."""
        body = {"policies": [dict(p) for p in policies]}
        return self._send(
            Call("PUT", ("tool-policies",), body, scope=scope, safe=True, parse=lambda _, body: body["policies"])
        )

    def lookup_tool_result(
        self,
        tool: str,
        args: Mapping[str, Any],
        *,
        context: Mapping[str, Any] | None = None,
        caller: str | None = None,
        scope: str | None = None,
    ) -> ToolLookup:
        body = self._tool_body(tool, args, context, caller)
        return self._send(
            Call(
                "POST",
                ("tool-results", "lookup"),
                body,
                scope=scope,
                safe=True,
                parse=lambda _, answer: ToolLookup(**answer),
            )
        )

    def store_tool_result(
        self,
        tool: str,
        args: Mapping[str, Any],
        result: Any,
        *,
        context: Mapping[str, Any] | None = None,
        caller: str | None = None,
        sections: Mapping[str, str] | None = None,
        scope: str | None = None,
    ) -> ToolStored:
        """Stores a tool's result; `sections` maps the ids of sections it read to their hashes,
        so the result is never served after one of them changes."""
        body = self._tool_body(tool, args, context, caller)
        body.update(result=result, section_ids=list(sections or {}), hashes=dict(sections or {}))
        return self._send(
            Call("PUT", ("tool-results",), body, scope=scope, safe=True, parse=lambda _, answer: ToolStored(**answer))
        )

    def tool_result_stats(self, *, scope: str | None = None) -> dict[str, dict[str, int]]:
        """Lookups per tool in the last hour: {"tool": {"hit": n, "miss": n, "stale": n, "refused": n}}."""
        return self._send(Call("GET", ("tool-results", "stats"), scope=scope, safe=True))

    # --- what both clients share -------------------------------------------------------
    @staticmethod
    def _tool_body(tool: str, args: Mapping[str, Any], context: Mapping[str, Any] | None, caller: str | None) -> dict:
        body: dict[str, Any] = {"tool": tool, "args": dict(args), "context": dict(context or {})}
        if caller is not None:
            body["caller"] = caller
        return body

    def _budget(self, call: Call) -> float:
        return self.recall_timeout if call.recall else self.timeout

    def _scope_lookup(self, call: Call) -> Call | None:
        """The lookup of the key's scope this call needs first, or None (its scope is known)."""
        if not call.scoped or call.scope or self.scope:
            return None
        return Call("GET", ("scopes",), scoped=False, safe=True, recall=call.recall, parse=self._only_scope)

    def _only_scope(self, _: int, body: Any) -> str:
        granted = [s["slug"] for s in body["scopes"]]
        if len(granted) != 1:
            raise ValueError(
                "no scope: pass scope= to the call or to the client "
                f"(this key is granted {len(granted)} scopes: {', '.join(granted) or 'none'})"
            )
        self.scope = granted[0]  # the key's only scope is unambiguous; asked once
        return self.scope

    def _attempts(self, call: Call) -> int:
        return 1 + (self.retries if call.safe else 0)

    def _answered(self, call: Call, response: httpx.Response, raw: bytes, attempt: int, deadline: float) -> Attempt:
        if 300 <= response.status_code < 400:
            where = response.headers.get("location", "elsewhere")
            return Attempt(
                error=RagtrailError(
                    response.status_code,
                    {
                        "error": {
                            "code": "redirect",
                            "message": (
                                f"{self.base_url} redirects to {where} (not followed: it would send the key and lose a POST's body); "
                                "set base_url to the address that answers, with https:// where the server is behind TLS"
                            ),
                        }
                    },
                )
            )
        if response.status_code >= 400:
            error = RagtrailError(response.status_code, self._error_body(response, raw))
            if response.status_code in RETRYABLE_STATUSES and attempt < self._attempts(call) - 1:
                delay = self._delay(attempt, response.headers.get("retry-after"), deadline)
                if delay is not None:
                    return Attempt(error=error, retry_after=delay)
            return Attempt(error=error)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            return Attempt(error=RagtrailError(response.status_code, self._error_body(response, raw)))
        if call.method == "DELETE":
            return Attempt(result=call.parse(response.status_code, body))
        if not isinstance(body, dict):
            said = "an empty body" if not raw else "JSON that is not an object"
            return Attempt(error=self._not_ragtrails(response, said))
        try:
            return Attempt(result=call.parse(response.status_code, body))
        except (KeyError, TypeError, AttributeError) as missing:
            return Attempt(error=self._not_ragtrails(response, f"JSON without ragtrail's fields ({missing!r})"))

    def _not_ragtrails(self, response: httpx.Response, said: str) -> RagtrailError:
        """A success whose body is not the answer ragtrail gives: raised, never read as one."""
        message = (
            f"{self.base_url} answered {response.status_code} with {said}, not ragtrail's answer: is base_url the "
            "address ragtrail serves at (its root, e.g. http://127.0.0.1:8000, without /api/v1)?"
        )
        return RagtrailError(response.status_code, {"error": {"code": "not_ragtrail", "message": message}})

    def _error_body(self, response: httpx.Response, raw: bytes) -> dict[str, Any]:
        """The API's JSON error; an answer that is not ragtrail's (an HTML page) is code
        "not_ragtrail", naming base_url."""
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            return body
        kind = response.headers.get("content-type", "no content type").split(";")[0]
        message = (
            f"{self.base_url} answered {response.status_code} with {kind}, not ragtrail's JSON: is base_url the "
            "address ragtrail serves at (its root, e.g. http://127.0.0.1:8000, without /api/v1)?"
        )
        return {"error": {"code": "not_ragtrail", "message": message}}

    def _failed(self, call: Call, problem: Exception, attempt: int, deadline: float, budget: float) -> Attempt:
        late = self._deadline_error(budget)
        if isinstance(problem, (httpx.TimeoutException, TimeoutError)):
            if call.recall:
                return Attempt(error=late)  # a hung server: the agent searches now rather than wait for a second try
            delay = self._delay(attempt, None, deadline) if attempt < self._attempts(call) - 1 else None
            return Attempt(error=late, retry_after=delay)
        tls = _tls_failure(problem)
        if tls is not None:
            return Attempt(
                error=RagtrailError(
                    0,
                    {
                        "error": {
                            "code": "tls",
                            "message": (
                                f"the TLS handshake with {self.base_url} failed ({tls}): is the server speaking plain HTTP to an "
                                "https:// address, or is its certificate not trusted here?"
                            ),
                        }
                    },
                )
            )
        if isinstance(problem, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
            return Attempt(
                error=RagtrailError(0, {"error": {"code": "bad_url", "message": f"{self.base_url}: {problem}"}})
            )
        if _refused(problem):
            # Nothing listens there: a retry within the deadline finds nothing either, so say it at once.
            return Attempt(
                error=RagtrailError(
                    0, None, f"could not reach {self.base_url}: connection refused (is ragtrail running there?)"
                )
            )
        error = RagtrailError(0, None, f"could not reach {self.base_url}: {problem or type(problem).__name__}")
        delay = self._delay(attempt, None, deadline) if attempt < self._attempts(call) - 1 else None
        return Attempt(error=error, retry_after=delay)

    def _delay(self, attempt: int, retry_after: str | None, deadline: float) -> float | None:
        """The wait before the next attempt; None where that would pass the deadline."""
        delay = self.backoff * (2**attempt) * (0.5 + random.random() / 2)
        if retry_after and retry_after.isdigit():
            delay = max(delay, min(float(retry_after), 30.0))
        return None if time.monotonic() + delay >= deadline else delay

    def _deadline_error(self, budget: float) -> RagtrailError:
        seconds = f"{budget:.1f}" if round(budget, 1) == budget else f"{budget:g}"
        message = f"deadline exceeded after {seconds} s: {self.base_url} did not answer"
        return RagtrailError(0, {"error": {"code": "deadline", "message": message}})


class RagtrailClient(Calls):
    """A client for one ragtrail server and API key, with a pool of connections to it
    (close it, or use it in a `with` block, when done).

    Args:
        base_url: the server, e.g. "http://127.0.0.1:8000" (a trailing "/api/v1" is dropped).
        api_key: an `rt_...` key granted the scopes used.
        scope: the scope calls use unless they name another; without one, the key's only scope.
        timeout: each call's overall deadline in seconds, retries and waits included.
        recall_timeout: recall's (and explain's) overall deadline in seconds, never retried after a timeout.
        retries: further attempts of a safe call after a dropped connection or 502/503/504.
        backoff: seconds before the first retry, doubled each time (with jitter).
        http: an `httpx.Client` to share (its pool); else the client makes its own.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        scope: str | None = None,
        *,
        timeout: float = CALL_DEADLINE,
        recall_timeout: float = RECALL_DEADLINE,
        retries: int = 3,
        backoff: float = 0.2,
        http: httpx.Client | None = None,
    ) -> None:
        super().__init__(
            base_url, api_key, scope, timeout=timeout, recall_timeout=recall_timeout, retries=retries, backoff=backoff
        )
        self._owned = http is None
        self.http: httpx.Client = http or httpx.Client(follow_redirects=False)
        # A client never closed (a script's, a notebook's) still lets its connections go when
        # it is collected or the interpreter exits.
        self._closer = weakref.finalize(self, self.http.close) if self._owned else None

    def close(self) -> None:
        if self._closer is not None:
            self._closer()

    def __enter__(self) -> "RagtrailClient":
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _send(self, call: Call[T]) -> T:
        budget = self._budget(call)
        deadline = time.monotonic() + budget
        lookup = self._scope_lookup(call)
        scope = self._attempt_all(lookup, deadline, budget) if lookup else (call.scope or self.scope)
        return self._attempt_all(call, deadline, budget, scope)

    def _attempt_all(self, call: Call[T], deadline: float, budget: float, scope: str | None = None) -> T:
        data = json.dumps(call.body).encode() if call.body is not None else None
        headers = dict(self.headers, **({"Content-Type": "application/json"} if data is not None else {}))
        error: RagtrailError | None = None
        for attempt in range(self._attempts(call)):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                with self.http.stream(
                    call.method,
                    self.base_url + call.path(scope),
                    content=data,
                    headers=headers,
                    timeout=httpx.Timeout(left),
                ) as response:
                    raw = _read_by(response.iter_bytes(), deadline)
                outcome = self._answered(call, response, raw, attempt, deadline)
            except (httpx.HTTPError, TimeoutError) as problem:
                outcome = self._failed(call, problem, attempt, deadline, budget)
            if outcome.error is None:
                return outcome.result
            error = outcome.error
            if outcome.retry_after is None:
                raise error
            time.sleep(outcome.retry_after)
        raise error if error is not None and error.code != "deadline" else self._deadline_error(budget)


def _server_root(base_url: str) -> str:
    """The server's root: the API's own path ("/api/v1"), the commonest first mistake, is dropped."""
    root = base_url.rstrip("/")
    return root.removesuffix("/api/v1").rstrip("/") if root.endswith("/api/v1") else root


def _refused(problem: BaseException) -> bool:
    """Whether the connection was refused (nothing listens at the address)."""
    seen: BaseException | None = problem
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return isinstance(problem, httpx.ConnectError) and "Connection refused" in str(problem)


def _read_by(chunks: Iterator[bytes], deadline: float) -> bytes:
    """The whole body, unless the server drips it past the deadline."""
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if time.monotonic() > deadline:
            raise TimeoutError("the answer was still arriving at the deadline")
    return bytes(body)


def _tls_failure(problem: BaseException) -> BaseException | None:
    """The TLS error behind a connection failure, if that is what it was."""
    seen = problem
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return seen
        seen = seen.__cause__ or seen.__context__
    text = str(problem)
    return (
        problem
        if isinstance(problem, httpx.ConnectError) and ("SSL" in text or "TLS" in text or "certificate" in text)
        else None
    )
