"""The evaluation harness on tiny slices: its invariants, and that a report is reproducible."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core.management import call_command

from evaluation import workload
from evaluation.agents import ChatAgent, ScriptedAgent, Tools
from evaluation.bm25 import BM25
from evaluation.report import stable
from evaluation.staleness import faq_questions_once
from scopes.demo import faq_sections

pytestmark = pytest.mark.slow


def test_bm25_ranks_the_section_that_shares_the_rare_words_first():
    index = BM25(
        {
            "a": "tuples and lists are sequences",
            "b": "convert a tuple to a list with list()",
            "c": "dictionaries map keys",
        }
    )
    assert [i for i, _ in index.search("how do I convert a tuple to a list")][:1] == ["b"]
    assert index.search("quantum chromodynamics") == []


def test_streams_hold_the_asked_share_of_repeats_of_earlier_questions_and_are_reproducible():
    questions = [(f"question {i}", f"s{i}") for i in range(40)]
    stream = workload.build_stream(questions, 0.25, 40, seed=3)
    assert stream == workload.build_stream(questions, 0.25, 40, seed=3)
    assert sum(a.repeat for a in stream) == 10 and not stream[0].repeat
    seen = set()
    for asked in stream:
        if asked.repeat:
            assert asked.reference in seen
        seen.add(asked.reference)
    with pytest.raises(ValueError):
        workload.build_stream(questions, 0.0, 41, seed=3)


def test_the_scripted_agent_without_a_cache_makes_at_least_one_call_per_question():
    sections = faq_sections("old")
    tools = Tools(sections, BM25(sections))
    for question, _ in faq_questions_once()[:15]:
        run = ScriptedAgent().answer(question, tools, None)
        assert run.calls and run.calls[0].tool == "search"
        assert len(run.context.turn_inputs) == len(run.calls) + 1


def test_with_ragtrail_repeats_cost_fewer_calls_and_reach_the_same_sections(db):
    sections = faq_sections("old")
    questions = faq_questions_once()[:16]
    result = workload.run(ScriptedAgent(), sections, questions, "lexical", workload.Prices(), seed=2, shares=(0.0, 0.5))
    none, half = result["rows"]
    assert none["with_ragtrail"]["tool_calls"] == none["without_cache"]["tool_calls"]
    assert none["without_cache"]["tool_calls_per_question"] >= 1
    assert half["with_ragtrail"]["outcomes"]["prefetch"] > 0
    assert half["with_ragtrail"]["tool_calls"] < half["without_cache"]["tool_calls"]
    assert half["with_ragtrail"]["cost_per_1000_questions_usd"] < half["without_cache"]["cost_per_1000_questions_usd"]
    assert half["with_ragtrail"]["reached_right_section"] >= half["without_cache"]["reached_right_section"]


class FakeChatEndpoint(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that searches, reads the first hit, then cites it."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        messages = body["messages"]
        tool_messages = [m for m in messages if m["role"] == "tool"]
        if not tool_messages:
            message = {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "1",
                        "type": "function",
                        "function": {"name": "search", "arguments": json.dumps({"query": messages[1]["content"]})},
                    }
                ],
            }
        elif len(tool_messages) == 1:
            first = tool_messages[0]["content"].split(":", 1)[0]
            message = {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "2",
                        "type": "function",
                        "function": {"name": "read", "arguments": json.dumps({"id": first})},
                    }
                ],
            }
        else:
            first = tool_messages[0]["content"].split(":", 1)[0]
            message = {"role": "assistant", "content": f"It is explained there.\nCITED: {first}, not-a-section"}
        payload = json.dumps(
            {
                "choices": [{"message": message}],
                "usage": {"prompt_tokens": 100 * len(messages), "completion_tokens": 20},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


def test_the_chat_agent_uses_the_tools_through_an_openai_compatible_endpoint():
    server = HTTPServer(("127.0.0.1", 0), FakeChatEndpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sections = faq_sections("old")
        agent = ChatAgent(url=f"http://127.0.0.1:{server.server_port}/v1", model="fake")
        run = agent.answer("How do I convert between tuples and lists?", Tools(sections, BM25(sections)), None)
    finally:
        server.shutdown()
    assert [c.tool for c in run.calls] == ["search", "read"]
    assert run.cited == [run.calls[1].args["id"]] and run.confident
    assert run.context.turn_inputs == [200, 400, 600] and run.context.output_tokens == 60


def test_the_chat_agent_says_what_it_needs_when_no_endpoint_is_set(monkeypatch):
    monkeypatch.delenv("RAGTRAIL_EVAL_AGENT_URL", raising=False)
    with pytest.raises(ValueError, match="RAGTRAIL_EVAL_AGENT_URL"):
        ChatAgent()


def test_a_report_is_reproducible_run_to_run_and_opens_without_network(db, tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "\n".join(
            json.dumps(p)
            for p in [
                {
                    "a": "How do I learn Python quickly?",
                    "b": "What is the fastest way to learn Python?",
                    "duplicate": True,
                },
                {"a": "How do I cook rice?", "b": "How do I cook rice?", "duplicate": True},
                {"a": "What is the capital of India?", "b": "What is the capital of Pakistan?", "duplicate": False},
                {"a": "Is 3.11 faster than 3.10?", "b": "Is 3.12 faster than 3.10?", "duplicate": False},
            ]
        )
    )
    reports = []
    for run in ("one", "two"):
        call_command(
            "evaluate",
            out=str(tmp_path / run),
            pairs=str(pairs),
            questions_limit=12,
            matcher="lexical",
            stdout=open(tmp_path / f"{run}.log", "w"),
        )
        reports.append(json.loads((tmp_path / run / "report.json").read_text()))
    assert stable(reports[0]) == stable(reports[1])
    report = reports[0]
    assert set(report["experiments"]) == {"matching", "staleness", "calls"}
    assert report["git_commit"] and set(report["data"]) >= {
        "pairs.jsonl",
        "scopes/fixtures/python-faq/sections-old.jsonl",
    }
    assert all(arm["ragtrail"]["stale_served"] == 0 for arm in report["experiments"]["staleness"]["results"])
    arms = report["experiments"]["staleness"]["results"]
    # One cited section per trail: the text cache serves every changed one it holds.
    assert all(a["text_cache"]["stale_served"] == a["changed_sections"] for a in arms if a["cited_per_trail"] == 1)
    # Two: every answer with a changed section is stale in the text cache; ragtrail hints or misses instead.
    assert all(
        a["text_cache"]["stale_served"] == a["ragtrail"]["hint"] + a["ragtrail"]["miss"]
        for a in arms
        if a["cited_per_trail"] == 2
    )
    assert sum(a["ragtrail"]["hint"] for a in arms) > 0
    assert report["experiments"]["matching"]["defaults"]["lexical"]["all"]["correct"] >= 1
    html = (tmp_path / "one" / "report.html").read_text()
    # Self-contained: the bundle is inline, nothing is fetched.
    assert "Plotly.newPlot" in html and "<script src=" not in html and "<link" not in html
    log = (tmp_path / "one.log").read_text()
    assert "1 matching" in log and "2 staleness" in log and "3 calls saved" in log


def test_eval_refuses_unknown_experiments_and_missing_pair_files(tmp_path):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--experiments: unknown nonsense"):
        call_command("evaluate", out=str(tmp_path), experiments="nonsense")
    with pytest.raises(CommandError, match="--pairs: no such file"):
        call_command("evaluate", out=str(tmp_path), experiments="matching", pairs=str(tmp_path / "missing.jsonl"))


def test_the_learning_simulation_runs_every_stream_through_the_product(db, tmp_path):
    import json
    from io import StringIO

    from django.core.management import call_command

    pairs = [
        {"a": "How do I copy an object in Python?", "b": "How can I copy an object in Python?", "duplicate": True},
        {"a": "What are the ICU visiting hours?", "b": "What are the general ward visiting hours?", "duplicate": False},
        {"a": "How do I sort a list in Python?", "b": "How to sort a list in Python?", "duplicate": True},
        {"a": "Where can visitors park their cars?", "b": "What is the capital of Peru?", "duplicate": False},
        {
            "a": "How do I install Python on Windows?",
            "b": "How do I install Python on a Windows PC?",
            "duplicate": True,
        },
        {"a": "Who won the first Congo war?", "b": "Who won the second Congo war?", "duplicate": False},
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in pairs))
    out = StringIO()
    call_command("simulate_learning", "--pairs", str(path), "--easy-pairs", "6", stdout=out)
    text = out.getvalue()
    for stream in ("(a) honest agents", "(a, baseline)", "(b) honest agents", "(b, baseline)", "(c) as (b)"):
        assert stream in text, text
    from trails.learning.shipped import thresholds_for

    configured = thresholds_for(0.02)["embedding_threshold"]
    assert "reuse" in text and "false hits" in text and f"threshold: configured {configured}" in text
    from scopes.models import Scope

    assert not Scope.objects.filter(slug__startswith="eval-learn-").exists()  # every stream's scope is dropped
