"""Synthetic questions for benchmarks: question openings plus the FAQ's vocabulary."""

from __future__ import annotations

import random
import re

from scopes.demo import faq_sections


class QuestionMaker:
    """Deterministic synthetic questions (the same seed gives the same questions)."""

    OPENINGS = [
        "how do i",
        "how can i",
        "what is the",
        "why does",
        "where can i find",
        "is it possible to",
        "what are the",
        "when should i",
    ]

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        words = set(re.findall(r"[a-z]{3,}", " ".join(faq_sections("old").values()).lower()))
        self.vocabulary = sorted(words)

    def question(self) -> str:
        body = " ".join(self.random.choice(self.vocabulary) for _ in range(self.random.randint(4, 9)))
        return f"{self.random.choice(self.OPENINGS)} {body}?"
