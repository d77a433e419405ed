"""Experiments 3 and 4: tool calls, context tokens and cost saved over a mixed workload.

The same stream of questions (new ones and repeats) is answered by an agent without
a cache, then with ragtrail in front: recall before the agent starts, and a trail
recorded (through record()) whenever the agent is confident in a fresh answer.
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from evaluation.agents import Agent, Given, Tools
from evaluation.bm25 import BM25
from evaluation.bulk import drop_scope
from evaluation.timing import percentile
from scopes.models import Scope, Section
from trails.core.budget import count_tokens
from trails.core.hint import RecordedStep
from trails.schemas import recall_json
from trails.serving.recall import recall
from trails.serving.record import RecordInput, record

REPEAT_SHARES = (0.0, 0.25, 0.5, 0.75)
# Repeats are asked as agents ask: sometimes word for word, sometimes reworded a little.
REWORDINGS = ("{}", "{}", "Quick question: {}", "{} Thanks!", "Can you tell me: {}")


@dataclass(frozen=True)
class Asked:
    question: str
    reference: str
    repeat: bool


@dataclass(frozen=True)
class Prices:
    """US dollars per million tokens."""

    input: float = 3.0
    output: float = 15.0


def build_stream(questions: list[tuple[str, str]], repeat_share: float, length: int, seed: int) -> list[Asked]:
    """A stream of `length` questions of which `repeat_share` repeat an earlier one.

    New questions come in a seeded random order; each repeat picks uniformly among the
    questions asked before it and may be reworded.
    """
    rng = random.Random(seed)
    order = list(questions)
    rng.shuffle(order)
    repeats = round(length * repeat_share)
    new = length - repeats
    if new > len(order):
        raise ValueError(f"{new} new questions wanted, {len(order)} available")
    if repeats and new == 0:
        raise ValueError("a stream with repeats needs at least one new question")
    # The first question is always new; repeat positions are chosen among the rest.
    positions = set(rng.sample(range(1, length), repeats)) if repeats else set()
    stream: list[Asked] = []
    asked: list[tuple[str, str]] = []
    fresh = iter(order[:new])
    for position in range(length):
        if position in positions:
            question, reference = rng.choice(asked)
            stream.append(Asked(rng.choice(REWORDINGS).format(question), reference, True))
        else:
            question, reference = next(fresh)
            asked.append((question, reference))
            stream.append(Asked(question, reference, False))
    return stream


def run_arm(
    agent: Agent,
    sections: dict[str, str],
    stream: list[Asked],
    use_cache: bool,
    matcher: str,
    prices: Prices,
    progress: Callable[[str], None] = lambda _: None,
    label: str = "",
) -> dict:
    """Answers the stream once; with the cache, through a fresh scope holding `sections`."""
    tools = Tools(sections, BM25(sections))
    scope = None
    if use_cache:
        scope = Scope.objects.create(scratch=True, slug=f"eval-calls-{uuid.uuid4().hex[:8]}", matcher=matcher)
        Section.upsert(scope, sections)
    try:
        calls = tokens = reached = recorded = input_tokens = output_tokens = 0
        outcomes = {"prefetch": 0, "hint": 0, "miss": 0}
        latencies: list[float] = []
        for index, asked in enumerate(stream):
            given = None
            if scope is not None:
                started = time.perf_counter()
                answer = recall_json(recall(scope, asked.question))
                latencies.append((time.perf_counter() - started) * 1000)
                outcomes[answer["outcome"]] += 1
                given = Given.from_recall(answer)
            run = agent.answer(asked.question, tools, given)
            calls += len(run.calls)
            tokens += count_given(given) + sum(c.tokens for c in run.calls)
            reached += asked.reference in run.cited
            input_tokens += sum(run.context.turn_inputs)
            output_tokens += run.context.output_tokens
            if scope is not None and run.calls and run.confident and run.cited:
                record(
                    scope,
                    RecordInput(
                        query=asked.question,
                        cited=run.cited,
                        signal="accepted",
                        steps=[RecordedStep(c.tool, c.args, c.section_ids) for c in run.calls],
                    ),
                )
                recorded += 1
            if (index + 1) % 50 == 0:
                progress(f"{label}: {index + 1}/{len(stream)} questions")
        n = max(1, len(stream))
        cost = (input_tokens * prices.input + output_tokens * prices.output) / 1e6
        return {
            "questions": len(stream),
            "tool_calls": calls,
            "tool_calls_per_question": round(calls / n, 4),
            "context_tokens_per_question": round(tokens / n, 2),
            "reached_right_section": round(reached / n, 4),
            "outcomes": outcomes if scope is not None else None,
            "trails_recorded": recorded if scope is not None else None,
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cost_per_1000_questions_usd": round(cost * 1000 / n, 4),
            "timing": {
                "recall_ms_median": round(statistics.median(latencies), 3) if latencies else None,
                "recall_ms_p90": round(percentile(latencies, 0.9), 3) if latencies else None,
                "recall_ms_added_per_question": round(sum(latencies) / n, 3) if latencies else None,
            },
        }
    finally:
        if scope is not None:
            drop_scope(scope)


def count_given(given: Given | None) -> int:
    return count_tokens(given.text) if given else 0


def run(
    agent: Agent,
    sections: dict[str, str],
    questions: list[tuple[str, str]],
    matcher: str,
    prices: Prices,
    seed: int = 1,
    length: int | None = None,
    shares: tuple[float, ...] = REPEAT_SHARES,
    progress: Callable[[str], None] = lambda _: None,
) -> dict:
    """Experiment 3 (and the cost of experiment 4) for every repeat share."""
    length = length or len(questions)
    rows = []
    for share in shares:
        stream = build_stream(questions, share, length, seed)
        without = run_arm(
            agent, sections, stream, False, matcher, prices, progress, f"calls {share:.0%} repeats, no cache"
        )
        with_cache = run_arm(
            agent, sections, stream, True, matcher, prices, progress, f"calls {share:.0%} repeats, ragtrail"
        )
        saved = without["cost_per_1000_questions_usd"] - with_cache["cost_per_1000_questions_usd"]
        rows.append(
            {
                "repeat_share": share,
                "repeats": sum(1 for a in stream if a.repeat),
                "without_cache": without,
                "with_ragtrail": with_cache,
                "cost_saved_per_1000_questions_usd": round(saved, 4),
            }
        )
        progress(
            f"calls {share:.0%} repeats: {without['tool_calls_per_question']} -> {with_cache['tool_calls_per_question']} calls per question"
        )
    return {"agent": agent.name, "questions": length, "matcher": matcher, "seed": seed, "rows": rows}
