"""Agents for experiment 3: a deterministic scripted one, and one that asks a real model.

An agent answers a question with two tools over the corpus, `search` (BM25, top 5) and
`read` (one section), possibly starting from what ragtrail handed back, and says which
sections it cites. Every model turn is logged with the context it was given, so the
cost experiment can price input and output tokens.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Protocol

from evaluation.bm25 import BM25, coverage
from trails.core.budget import count_tokens

SEARCH_RESULTS = 5
SNIPPET_WORDS = 30


@dataclass
class ToolCall:
    tool: str
    args: dict[str, Any]
    section_ids: list[str]
    tokens: int


@dataclass
class Given:
    """What ragtrail handed back before the agent started (prefetch or hint)."""

    outcome: str
    text: str
    cited: list[str]
    changed: list[str]

    @classmethod
    def from_recall(cls, answer: dict) -> "Given | None":
        if answer["outcome"] == "prefetch":
            text = "\n\n".join(f"[{s['id']}]\n{s['text']}" for s in answer["sections"])
            return cls("prefetch", text, [s["id"] for s in answer["sections"]], [])
        if answer["outcome"] == "hint":
            sections = answer["sections"]
            return cls(
                "hint",
                answer["hint"] or "",
                [s["id"] for s in sections if s["status"] != "deleted"],
                [s["id"] for s in sections if s["status"] == "changed"],
            )
        return None


@dataclass
class Context:
    """The agent's context window: what it holds now, and the input size of every model turn."""

    prompt_tokens: int
    tokens: int = 0
    turn_inputs: list[int] = field(default_factory=list)
    output_tokens: int = 0

    def add(self, tokens: int) -> None:
        self.tokens += tokens

    def turn(self, output_tokens: int) -> None:
        self.turn_inputs.append(self.prompt_tokens + self.tokens)
        self.output_tokens += output_tokens


@dataclass
class AgentRun:
    cited: list[str]
    calls: list[ToolCall]
    confident: bool
    context: Context


class Tools:
    """search and read over one corpus, counting each call and the tokens it returned."""

    def __init__(self, sections: dict[str, str], index: BM25) -> None:
        self.sections, self.index = sections, index

    def search(self, query: str, calls: list[ToolCall]) -> tuple[list[str], str]:
        hits = [section_id for section_id, _ in self.index.search(query, SEARCH_RESULTS)]
        text = "\n".join(f"{i}: {' '.join(self.sections[i].split()[:SNIPPET_WORDS])}" for i in hits)
        calls.append(ToolCall("search", {"query": query}, hits, count_tokens(text)))
        return hits, text

    def read(self, section_id: str, calls: list[ToolCall]) -> str:
        text = self.sections.get(section_id, f"no section {section_id}")
        calls.append(
            ToolCall(
                "read", {"id": section_id}, [section_id] if section_id in self.sections else [], count_tokens(text)
            )
        )
        return text


class Agent(Protocol):
    name: str

    def answer(self, question: str, tools: Tools, given: Given | None) -> AgentRun: ...


@dataclass
class CostModel:
    """Token sizes of the parts of a turn the tools do not produce."""

    prompt_tokens: int = 400
    call_tokens: int = 30
    answer_tokens: int = 200


def title_of(section_id: str) -> str:
    """The heading a section id spells, as in `Doc/faq/design.rst#why-are-strings-immutable`."""
    return section_id.rsplit("#", 1)[-1].replace("-", " ")


class ScriptedAgent:
    """Searches, reads results in rank order until one covers the question, cites the best.

    How well a section covers the question is the share of the question's content
    terms in its heading (which its id spells), the body breaking ties. With a
    prefetch it answers from it at once; with a hint it rereads only the changed
    sections. It is confident (and so records its trail) when the best section it
    read covers at least `confident_at` of the question.
    """

    name = "scripted"

    def __init__(
        self, costs: CostModel | None = None, max_reads: int = 3, enough: float = 0.75, confident_at: float = 0.34
    ) -> None:
        self.costs = costs or CostModel()
        self.max_reads, self.enough, self.confident_at = max_reads, enough, confident_at

    def answer(self, question: str, tools: Tools, given: Given | None) -> AgentRun:
        context = Context(self.costs.prompt_tokens + count_tokens(question))
        calls: list[ToolCall] = []
        if given is not None:
            context.add(count_tokens(given.text))
            for section_id in given.changed:
                context.turn(self.costs.call_tokens)
                tools.read(section_id, calls)
                context.add(calls[-1].tokens)
            context.turn(self.costs.answer_tokens)
            return AgentRun(list(given.cited), calls, True, context)

        context.turn(self.costs.call_tokens)
        hits, _ = tools.search(question, calls)
        context.add(calls[-1].tokens)
        best_id, best = None, -1.0
        for section_id in hits[: self.max_reads]:
            context.turn(self.costs.call_tokens)
            text = tools.read(section_id, calls)
            context.add(calls[-1].tokens)
            # The id names the section's heading; the body breaks ties.
            score = coverage(question, title_of(section_id)) + coverage(question, text) / 100
            if score > best:
                best_id, best = section_id, score
            if score >= self.enough:
                break
        context.turn(self.costs.answer_tokens)
        return AgentRun([best_id] if best_id else [], calls, best >= self.confident_at, context)


class ChatAgent:
    """Asks a model behind an OpenAI-compatible chat endpoint, offering it the two tools.

    Configured by RAGTRAIL_EVAL_AGENT_URL (the base URL, e.g. http://127.0.0.1:8080/v1),
    RAGTRAIL_EVAL_AGENT_MODEL and, if the endpoint needs one, RAGTRAIL_EVAL_AGENT_KEY.
    The model ends by writing `CITED: id, id`. Token counts are the endpoint's own
    (`usage`) where it reports them, estimates otherwise.
    """

    name = "chat"
    TOOLS = [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "BM25 search over the documentation; returns the top 5 section ids with a snippet.",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
            },
        },
        {
            "type": "function",
            "function": {
                "name": "read",
                "description": "Returns the full text of one section.",
                "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
            },
        },
    ]
    SYSTEM = (
        "Answer the user's question from the documentation. Use the tools to find the section that answers it. "
        "End your final answer with a line `CITED: <section id>, ...` naming the sections you used."
    )

    def __init__(
        self,
        url: str | None = None,
        model: str | None = None,
        key: str | None = None,
        max_turns: int = 8,
        timeout: float = 120,
    ) -> None:
        self.url = (url or os.environ.get("RAGTRAIL_EVAL_AGENT_URL", "")).rstrip("/")
        if not self.url:
            raise ValueError("the chat agent needs RAGTRAIL_EVAL_AGENT_URL (an OpenAI-compatible base URL)")
        self.model = model or os.environ.get("RAGTRAIL_EVAL_AGENT_MODEL", "default")
        self.key = key if key is not None else os.environ.get("RAGTRAIL_EVAL_AGENT_KEY", "")
        self.max_turns, self.timeout = max_turns, timeout

    def _complete(self, messages: list[dict]) -> dict:
        request = urllib.request.Request(
            f"{self.url}/chat/completions",
            data=json.dumps(
                {"model": self.model, "messages": messages, "tools": self.TOOLS, "temperature": 0}
            ).encode(),
            headers={
                "Content-Type": "application/json",
                **({"Authorization": f"Bearer {self.key}"} if self.key else {}),
            },
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return json.loads(response.read())

    def answer(self, question: str, tools: Tools, given: Given | None) -> AgentRun:
        user = (
            question
            if given is None
            else (f"{question}\n\nA memory of an earlier, similar question ({given.outcome}):\n{given.text}")
        )
        messages = [{"role": "system", "content": self.SYSTEM}, {"role": "user", "content": user}]
        context = Context(count_tokens(self.SYSTEM))
        context.add(count_tokens(user))
        calls: list[ToolCall] = []
        final = ""
        for _ in range(self.max_turns):
            reply = self._complete(messages)
            message = reply["choices"][0]["message"]
            usage = reply.get("usage") or {}
            context.turn_inputs.append(usage.get("prompt_tokens") or context.prompt_tokens + context.tokens)
            context.output_tokens += usage.get("completion_tokens") or count_tokens(json.dumps(message))
            messages.append(message)
            if not message.get("tool_calls"):
                final = message.get("content") or ""
                break
            for call in message["tool_calls"]:
                name, args = call["function"]["name"], json.loads(call["function"].get("arguments") or "{}")
                if name == "search":
                    _, text = tools.search(str(args.get("query", "")), calls)
                else:
                    text = tools.read(str(args.get("id", "")), calls)
                context.add(calls[-1].tokens)
                messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": text})
        cited = []
        found = re.search(r"CITED:\s*(.+)", final)
        if found:
            cited = [
                part.strip().strip("`")
                for part in found.group(1).split(",")
                if part.strip().strip("`") in tools.sections
            ]
        return AgentRun(cited, calls, bool(cited), context)


def agent_named(name: str, costs: CostModel | None = None) -> Agent:
    if name == "scripted":
        return ScriptedAgent(costs)
    if name == "chat":
        return ChatAgent()
    raise ValueError(f"unknown agent {name!r}: scripted or chat")
