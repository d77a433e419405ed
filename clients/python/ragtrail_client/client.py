"""Typed calls to ragtrail's JSON API, on the standard library alone.

Calls that are safe to repeat (reads, recall, record with its idempotency key, PUTs,
tool-result lookups and stores) are retried with exponential backoff on connection
errors and on 502/503/504 (honouring Retry-After); votes and feedback are sent once.
Every call has one overall deadline, retries and waits included (recall's is short: an
agent that waits on its memory longer than a search would take is better off searching),
and recall is never retried after a timeout. Every error the API answers is raised as
`RagtrailError` carrying its JSON body; no answer within the deadline is status 0, code
"deadline".
"""
from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

RETRYABLE_STATUSES = frozenset({502, 503, 504})


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
        super().__init__(f"{status} {self.code}: {self.message}" + (f" (field: {self.field})" if self.field else ""))


@dataclass(frozen=True)
class SectionResult:
    id: str
    status: str  # "valid", "changed" or "deleted"
    text: str | None = None  # a valid section's current text (on a hint where it fits the budget); None where the scope keeps hashes only
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
class Recall:
    """What recall answered: "prefetch" (sections' current text), "hint" or "miss"."""

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

    @property
    def hit(self) -> bool:
        return self.outcome != "miss"

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Recall":
        return cls(
            outcome=body["outcome"], recall_id=body.get("recall_id"), trail_id=body.get("trail_id"),
            matcher=body.get("matcher"), similarity=body.get("similarity"), matched_query=body.get("matched_query"),
            # Fields a newer server adds are left out, so an older client keeps working.
            sections=tuple(SectionResult(**{k: v for k, v in s.items() if k in SECTION_FIELDS}) for s in body.get("sections", [])),
            steps=tuple(Step(s["tool"], s.get("args", {}), tuple(s.get("section_ids", []))) for s in body.get("steps", [])),
            hint=body.get("hint"), tokens=body.get("tokens", 0), truncated=body.get("truncated", False),
            explanation=body.get("explanation"),
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


class RagtrailClient:
    """A client for one ragtrail server and API key; `scope` is the default scope of calls.

    Args:
        base_url: the server, e.g. "http://127.0.0.1:8000".
        api_key: an `rt_...` key granted the scopes used.
        scope: the scope calls use unless they name another.
        timeout: the overall deadline of a call, in seconds: attempts, retries and the waits
            between them all end by then.
        recall_timeout: the overall deadline of a recall (and explain), shorter: past it the
            agent searches as it would have without ragtrail.
        retries: further attempts of a safe call after a connection error or 502/503/504,
            within the call's deadline.
        backoff: seconds before the first retry, doubled each time (with jitter).
    """

    def __init__(self, base_url: str, api_key: str, scope: str | None = None, *, timeout: float = 10.0,
                 recall_timeout: float = 1.0, retries: int = 3, backoff: float = 0.2) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.scope = scope
        self.timeout = timeout
        self.recall_timeout = recall_timeout
        self.retries = retries
        self.backoff = backoff

    # --- the key ----------------------------------------------------------------------
    def scopes(self) -> list[dict[str, str]]:
        """The scopes this key is granted: [{"slug", "name"}]."""
        return self._call("GET", "/api/v1/scopes", safe=True)["scopes"]

    # --- sections -------------------------------------------------------------------
    def put_sections(self, sections: Mapping[str, str], *, scope: str | None = None) -> dict[str, Any]:
        """Creates or updates sections; returns counts, changed ids and each section's hash."""
        body = {"sections": [{"id": k, "text": v} for k, v in sections.items()]}
        return self._call("PUT", self._scoped(scope, "sections"), body, safe=True)

    def list_sections(self, *, after: str = "", limit: int = 200, scope: str | None = None) -> dict[str, Any]:
        """A page of the scope's sections by id: {"sections": [{"id", "hash", "updated_at"}], "next"};
        pass `next` as `after` for the following page (None on the last)."""
        query = urllib.parse.urlencode({"after": after, "limit": limit})
        return self._call("GET", self._scoped(scope, "sections") + "?" + query, safe=True)

    def get_section(self, section_id: str, *, scope: str | None = None) -> dict[str, Any]:
        """{"id", "text", "hash", "updated_at"} of one section."""
        return self._call("GET", self._scoped(scope, "sections", section_id), safe=True)

    def delete_section(self, section_id: str, *, scope: str | None = None) -> None:
        self._call("DELETE", self._scoped(scope, "sections", section_id), safe=True)

    # --- recall, record, feedback ----------------------------------------------------
    def recall(self, query: str, *, partition: str = "", token_budget: int | None = None, dry_run: bool = False,
               session: str | None = None, scope: str | None = None) -> Recall:
        """The path recorded for the most similar question, checked against the sections now.

        `session` (the agent run's id, also given to `record`) lets ragtrail learn from a
        re-search: a path recorded for the same question in the same session that cites
        none of the served sections labels this recall a false hit.
        """
        body: dict[str, Any] = {"query": query, "partition": partition, "dry_run": dry_run}
        if token_budget is not None:
            body["token_budget"] = token_budget
        if session is not None:
            body["session"] = session
        # A repeated recall may count one more hit; it never changes what is served.
        return Recall.from_json(self._call("POST", self._scoped(scope, "recall"), body, safe=True, recall=True))

    def explain(self, query: str, *, partition: str = "", token_budget: int | None = None,
                scope: str | None = None) -> Recall:
        """What recall would answer, without counting it, and why (`Recall.explanation`):
        every candidate read, its similarity against the threshold and the verdict. The
        first thing to look at when a question you expected to hit misses."""
        body: dict[str, Any] = {"query": query, "partition": partition, "dry_run": True, "explain": True}
        if token_budget is not None:
            body["token_budget"] = token_budget
        return Recall.from_json(self._call("POST", self._scoped(scope, "recall"), body, safe=True))

    def record(self, query: str, cited: Sequence[str], *, signal: str, steps: Iterable[Step | Mapping[str, Any]] = (),
               hashes: Mapping[str, str] | None = None, partition: str = "",
               idempotency_key: str | None = None, session: str | None = None, scope: str | None = None) -> Recorded:
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
            "query": query, "partition": partition, "cited": list(cited),
            "steps": [s.as_json() if isinstance(s, Step) else dict(s) for s in steps],
            "hashes": dict(hashes or {}), "idempotency_key": idempotency_key or uuid.uuid4().hex,
        }
        if signal != "pending":
            body["signal"] = signal
        if session is not None:
            body["session"] = session
        status, answer = self._request("POST", self._scoped(scope, "trails"), body, safe=True)
        return Recorded(answer["trail_id"], answer["status"], answer.get("reason"), created=status == 201,
                        refreshed=answer.get("refreshed"))

    def feedback(self, recall_id: str, helpful: bool, reason: str = "", *, scope: str | None = None) -> RecallFeedback:
        """The agent's verdict on what a recall served; "not helpful" reports a false hit."""
        body = {"helpful": helpful, "reason": reason}
        return RecallFeedback(**self._call("POST", self._scoped(scope, "recalls", recall_id, "feedback"), body, safe=False))

    def vote(self, trail_id: str, vote: str, *, scope: str | None = None) -> dict[str, Any]:
        """"up" approves a pending trail, "down" rejects it."""
        return self._call("POST", self._scoped(scope, "trails", trail_id, "feedback"), {"vote": vote}, safe=False)

    def get_trail(self, trail_id: str, *, scope: str | None = None) -> dict[str, Any]:
        return self._call("GET", self._scoped(scope, "trails", trail_id), safe=True)

    # --- tool results ----------------------------------------------------------------
    def get_tool_policies(self, *, scope: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", self._scoped(scope, "tool-policies"), safe=True)["policies"]

    def put_tool_policies(self, policies: Sequence[Mapping[str, Any]], *, scope: str | None = None) -> list[dict[str, Any]]:
        """Replaces the scope's tool policies (which tools' results may be cached, how long)."""
        body = {"policies": [dict(p) for p in policies]}
        return self._call("PUT", self._scoped(scope, "tool-policies"), body, safe=True)["policies"]

    def lookup_tool_result(self, tool: str, args: Mapping[str, Any], *, context: Mapping[str, Any] | None = None,
                           caller: str | None = None, scope: str | None = None) -> ToolLookup:
        body = self._tool_body(tool, args, context, caller)
        return ToolLookup(**self._call("POST", self._scoped(scope, "tool-results", "lookup"), body, safe=True))

    def store_tool_result(self, tool: str, args: Mapping[str, Any], result: Any, *,
                          context: Mapping[str, Any] | None = None, caller: str | None = None,
                          sections: Mapping[str, str] | None = None, scope: str | None = None) -> ToolStored:
        """Stores a tool's result; `sections` maps the ids of sections it read to their hashes,
        so the result is never served after one of them changes."""
        body = self._tool_body(tool, args, context, caller)
        body.update(result=result, section_ids=list(sections or {}), hashes=dict(sections or {}))
        return ToolStored(**self._call("PUT", self._scoped(scope, "tool-results"), body, safe=True))

    def tool_result_stats(self, *, scope: str | None = None) -> dict[str, dict[str, int]]:
        """Lookups per tool in the last hour: {"tool": {"hit": n, "miss": n, "stale": n, "refused": n}}."""
        return self._call("GET", self._scoped(scope, "tool-results", "stats"), safe=True)

    # --- plumbing --------------------------------------------------------------------
    @staticmethod
    def _tool_body(tool: str, args: Mapping[str, Any], context: Mapping[str, Any] | None, caller: str | None) -> dict:
        body: dict[str, Any] = {"tool": tool, "args": dict(args), "context": dict(context or {})}
        if caller is not None:
            body["caller"] = caller
        return body

    def _scoped(self, scope: str | None, *parts: str) -> str:
        scope = scope or self.scope
        if not scope:
            granted = [s["slug"] for s in self.scopes()]
            if len(granted) != 1:
                raise ValueError("no scope: pass scope= to the call or to RagtrailClient "
                                 f"(this key is granted {len(granted)} scopes: {', '.join(granted) or 'none'})")
            scope = self.scope = granted[0]  # the key's only scope is unambiguous
        return "/api/v1/scopes/" + "/".join(urllib.parse.quote(p, safe="") for p in (scope, *parts))

    def _call(self, method: str, path: str, body: Any = None, *, safe: bool, recall: bool = False) -> Any:
        return self._request(method, path, body, safe=safe, recall=recall)[1]

    def _request(self, method: str, path: str, body: Any = None, *, safe: bool, recall: bool = False) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.api_key}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        budget = self.recall_timeout if recall else self.timeout
        deadline = time.monotonic() + budget
        attempts = 1 + (self.retries if safe else 0)
        for attempt in range(attempts):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            last = attempt == attempts - 1
            request = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(request, timeout=left) as response:
                    raw = response.read()
                    return response.status, (json.loads(raw) if raw else None)
            except urllib.error.HTTPError as answered:
                error = RagtrailError(answered.code, _json_or_none(answered.read()))
                if answered.code not in RETRYABLE_STATUSES or last or not self._sleep(attempt, answered.headers.get("Retry-After"), deadline):
                    raise error from None
            except (urllib.error.URLError, OSError) as unreachable:
                timed_out = isinstance(unreachable, TimeoutError) or isinstance(getattr(unreachable, "reason", None), TimeoutError)
                if timed_out and recall:
                    break  # a hung server: the agent searches now rather than wait for a second try
                if last or not self._sleep(attempt, None, deadline):
                    if timed_out:
                        break
                    raise RagtrailError(0, None, f"could not reach {self.base_url}: {unreachable}") from unreachable
        raise RagtrailError(0, {"error": {"code": "deadline", "message": f"{self.base_url} did not answer within {budget:g} s"}})

    def _sleep(self, attempt: int, retry_after: str | None, deadline: float) -> bool:
        """Waits before the next attempt; False (and no wait) where that would pass the deadline."""
        delay = self.backoff * (2 ** attempt) * (0.5 + random.random() / 2)
        if retry_after and retry_after.isdigit():
            delay = max(delay, min(float(retry_after), 30.0))
        if time.monotonic() + delay >= deadline:
            return False
        time.sleep(delay)
        return True


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return {"error": {"code": "error", "message": raw[:200].decode("utf-8", "replace")}}
