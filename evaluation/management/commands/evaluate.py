"""The evaluation harness: matching, staleness, calls saved and cost, written as a report."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from evaluation import matching, report, staleness, workload
from evaluation.agents import CostModel, agent_named
from evaluation.matching import DEFAULT_PAIRS
from scopes.demo import FAQ_DIR, faq_sections
from trails.embedders import get_embedder

EXPERIMENTS = ("matching", "staleness", "calls")


class Command(BaseCommand):
    help = (
        "Runs the evaluation with ragtrail's own record and recall code: 1 matching on labelled pairs, "
        "2 staleness against a text cache (real FAQ revision and random edits), 3 calls saved by a scripted "
        "agent over workloads with 0/25/50/75 %% repeats, and 4 their cost. Writes report.json and a "
        "self-contained report.html to --out (default: a new folder in RAGTRAIL_REPORTS_DIR)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--out", help="folder for report.json and report.html")
        parser.add_argument(
            "--experiments", default=",".join(EXPERIMENTS), help="comma-separated: " + ", ".join(EXPERIMENTS)
        )
        parser.add_argument("--pairs", default=str(DEFAULT_PAIRS), help="labelled pairs (JSON lines: a, b, duplicate)")
        parser.add_argument("--pairs-limit", type=int, default=0, help="use only the first N pairs")
        parser.add_argument("--questions-limit", type=int, default=0, help="use only the first N FAQ questions")
        parser.add_argument(
            "--matcher",
            default="embedding",
            choices=["lexical", "embedding", "both"],
            help="the scope matcher of the staleness and calls experiments",
        )
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument(
            "--agent",
            default="scripted",
            choices=["scripted", "chat"],
            help="chat: an OpenAI-compatible endpoint from RAGTRAIL_EVAL_AGENT_URL",
        )
        parser.add_argument("--price-input", type=float, default=3.0, help="USD per million input tokens")
        parser.add_argument("--price-output", type=float, default=15.0, help="USD per million output tokens")
        parser.add_argument("--prompt-tokens", type=int, default=CostModel.prompt_tokens)
        parser.add_argument("--call-tokens", type=int, default=CostModel.call_tokens)
        parser.add_argument("--answer-tokens", type=int, default=CostModel.answer_tokens)
        parser.add_argument("--quick", action="store_true", help="a short run: 1,000 pairs and 40 questions")

    def handle(self, *args, **options) -> None:
        chosen = [e.strip() for e in options["experiments"].split(",") if e.strip()]
        unknown = sorted(set(chosen) - set(EXPERIMENTS))
        if unknown or not chosen:
            raise CommandError(
                f"--experiments: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(EXPERIMENTS)}"
            )
        pairs = Path(options["pairs"])
        if "matching" in chosen and not pairs.is_file():
            others = ",".join(e for e in EXPERIMENTS if e != "matching")
            raise CommandError(
                f"--pairs: no such file {pairs}. The matching experiment needs labelled question pairs (JSON lines "
                '{"a": ..., "b": ..., "duplicate": true|false}, e.g. the dev split of Quora Question Pairs, which this '
                f"repository does not ship): pass --pairs PATH, or --experiments {others} to run the others"
            )
        if options["quick"]:
            options["pairs_limit"] = options["pairs_limit"] or 1000
            options["questions_limit"] = options["questions_limit"] or 40
        created = datetime.now(timezone.utc)
        out = (
            Path(options["out"])
            if options["out"]
            else settings.RAGTRAIL_REPORTS_DIR / created.strftime("%Y-%m-%dT%H%M%SZ")
        )
        started = time.perf_counter()

        def progress(message: str) -> None:
            self.stdout.write(f"[{time.perf_counter() - started:6.0f} s] {message}")
            self.stdout.flush()

        prices = workload.Prices(options["price_input"], options["price_output"])
        costs = CostModel(options["prompt_tokens"], options["call_tokens"], options["answer_tokens"])
        try:
            agent = agent_named(options["agent"], costs)
        except ValueError as problem:
            raise CommandError(f"--agent: {problem}") from None
        data_files = {f"scopes/fixtures/python-faq/{p.name}": p for p in sorted(FAQ_DIR.glob("*.jsonl"))}
        if "matching" in chosen:
            data_files[pairs.name] = pairs
        results: dict = {}
        if "matching" in chosen:
            progress(f"1 matching on {pairs.name}")
            results["matching"] = matching.run(pairs, options["pairs_limit"], progress)
        if "staleness" in chosen:
            progress("2 staleness on the Python FAQ")
            results["staleness"] = staleness.run(
                options["matcher"], options["seed"], options["questions_limit"], progress=progress
            )
        if "calls" in chosen:
            progress(f"3 calls saved and 4 cost, {agent.name} agent")
            questions = staleness.faq_questions_once()[: options["questions_limit"] or None]
            results["calls"] = workload.run(
                agent, faq_sections("old"), questions, options["matcher"], prices, options["seed"], progress=progress
            )

        document = {
            "created_at": created.isoformat(timespec="seconds"),
            **report.git_state(Path(settings.BASE_DIR)),
            "experiments": results,
            "data": {name: report.sha256_of(path) for name, path in data_files.items()},
            "settings": {
                "experiments": chosen,
                "matcher": options["matcher"],
                "seed": options["seed"],
                "agent": agent.name,
                "pairs_limit": options["pairs_limit"],
                "questions_limit": options["questions_limit"],
                "prices": {"input": prices.input, "output": prices.output},
                "cost_model": {
                    "prompt_tokens": costs.prompt_tokens,
                    "call_tokens": costs.call_tokens,
                    "answer_tokens": costs.answer_tokens,
                },
                "embedding_model": get_embedder().name,
                "minhash_permutations": settings.RAGTRAIL_MINHASH_PERMUTATIONS,
                "simhash_bits": settings.RAGTRAIL_SIMHASH_BITS,
                "environment": report.environment(),
            },
            "duration_s": round(time.perf_counter() - started, 1),
        }
        document["headline"] = report.headline(document)
        json_path, html_path = report.write(out, document)
        for measure, value in document["headline"]:
            self.stdout.write(f"  {measure}: {value}")
        progress(f"report: {json_path} and {html_path}")
