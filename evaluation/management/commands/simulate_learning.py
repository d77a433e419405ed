"""Threshold learning over time: honest agents on easier and on Quora-like traffic, and a flooding key."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from django.core.management.base import BaseCommand

from evaluation import learning, matching
from evaluation.matching import DEFAULT_PAIRS
from trails.embedders import PrecomputedEmbedder, get_embedder, serving


class Command(BaseCommand):
    help = (
        "Streams labelled pairs through recall, record and feedback: (a) honest agents on traffic easier than "
        "Quora's, (b) on Quora's own validation split, each beside the same stream with learning off, and (c) "
        "(b) with one key flooding 'not helpful'."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--pairs", default=str(DEFAULT_PAIRS))
        parser.add_argument(
            "--easy-pairs", type=int, default=5000, help="distinct-topic pairs the easier stream (a) is drawn from"
        )
        parser.add_argument("--limit", type=int, default=0, help="use only the first N pairs of the file")
        parser.add_argument("--only", choices=["a", "b", "c"], action="append", help="run only these streams")

    def handle(self, *args, pairs: str, easy_pairs: int, limit: int, only: list[str] | None, **options) -> None:
        data = matching.load_pairs(Path(pairs), limit)
        held_out = [p for i, p in enumerate(data) if matching.split_of(i) == "validation"]
        texts = sorted({q for p in data for q in (p["a"], p["b"])})
        started = time.perf_counter()
        with serving(PrecomputedEmbedder(get_embedder(), texts)) as embedder:
            self.stdout.write(f"{len(texts):,} questions embedded in {time.perf_counter() - started:.0f} s")
            vectors = {p["a"]: embedder.embed(p["a"]) for p in data}
            # Easier traffic: one stored question per topic (an FAQ), paraphrases asked of it, and
            # for the non-duplicates questions from outside the stream (their look-alikes never stored).
            topics = learning.distinct_topics(data, vectors, easy_pairs)
            stored = np.stack([vectors[p["a"]] for p in topics])
            easy = learning.easier(topics, lambda q: float(np.max(stored @ embedder.embed(q))) < learning.APART)
            self.stdout.write(
                f"(a) keeps {len(easy):,} of {len(topics):,} distinct-topic pairs "
                f"({sum(p['duplicate'] for p in easy):,} paraphrases)"
            )
            self.run_streams(easy, held_out, only)

    def run_streams(self, easy: list[dict], held_out: list[dict], only: list[str] | None) -> None:
        streams = [
            ("a", "(a) honest agents, traffic easier than Quora's", easy, 0, False),
            ("a", "(a, baseline) the same stream with learning off", easy, 0, True),
            ("b", "(b) honest agents, Quora validation split", held_out, 0, False),
            ("b", "(b, baseline) the same stream with learning off", held_out, 0, True),
            ("c", "(c) as (b), with one key flooding 'not helpful'", held_out, 5, False),
        ]
        for key, name, stream, flood, pinned in streams:
            if only and key not in only:
                continue
            started = time.perf_counter()
            outcome = learning.simulate(name, stream, flood_every=flood, pinned=pinned, progress=self.stdout.write)
            self.stdout.write(
                "\n".join(outcome.lines()) + f"\n  ({len(stream):,} pairs in {time.perf_counter() - started:.0f} s)"
            )
