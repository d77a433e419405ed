"""Okapi BM25 over a corpus of sections: the scripted agent's search tool."""

from __future__ import annotations

import math
from collections import Counter

from trails.core.normalise import words

# Words too common in questions to say what one is about.
STOP_WORDS = frozenset(
    "a an and are as at be by can do does for from how i if in is it its my of on or so that the this to "
    "what when where which who why will with you your there their they me we our".split()
)


def terms(text: str) -> list[str]:
    return [w for w in words(text) if w not in STOP_WORDS]


class BM25:
    """A BM25 index over {section id: text}; deterministic, ties broken by id."""

    def __init__(self, sections: dict[str, str], k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.ids = sorted(sections)
        self.counts = {i: Counter(terms(sections[i])) for i in self.ids}
        self.lengths = {i: sum(self.counts[i].values()) for i in self.ids}
        self.average = sum(self.lengths.values()) / max(1, len(self.ids))
        frequency: Counter[str] = Counter()
        for counts in self.counts.values():
            frequency.update(counts.keys())
        n = len(self.ids)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in frequency.items()}
        # Term -> the sections holding it: a query reads only those, not the whole corpus.
        self.postings: dict[str, list[str]] = {}
        for section_id in self.ids:
            for term in self.counts[section_id]:
                self.postings.setdefault(term, []).append(section_id)

    def search(self, query: str, k: int = 5, left_out: tuple[str, str] | None = None) -> list[tuple[str, float]]:
        """Returns the k best (section id, score) pairs with a positive score, best first.

        `left_out` is (section id, text): that section is scored as if it did not hold the text
        (the words' document frequencies stay as indexed).
        """
        wanted = set(terms(query))
        removed_id, removed = left_out if left_out else ("", Counter())
        if left_out:
            removed = Counter(terms(left_out[1]))
        touched = {section_id for term in wanted for section_id in self.postings.get(term, ())}
        scored = []
        for section_id in touched:
            counts, length = self.counts[section_id], self.lengths[section_id]
            if section_id == removed_id:
                counts = counts - removed
                length = sum(counts.values())
            score = 0.0
            for term in wanted:
                f = counts.get(term, 0)
                if f:
                    score += (
                        self.idf[term]
                        * f
                        * (self.k1 + 1)
                        / (f + self.k1 * (1 - self.b + self.b * length / self.average))
                    )
            if score > 0:
                scored.append((section_id, score))
        scored.sort(key=lambda pair: (-pair[1], pair[0]))
        return scored[:k]


def coverage(question: str, text: str) -> float:
    """The share of the question's content terms that the text contains."""
    wanted = set(terms(question))
    if not wanted:
        return 0.0
    return len(wanted & set(words(text))) / len(wanted)
