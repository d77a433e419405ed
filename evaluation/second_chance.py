"""The second chance measured on question streams whose searches are real (docs/second-chance.md).

Questions arrive in order on a fresh scratch scope with the default thresholds. Each goes
through recall(); on a miss the simulated agent searches (BM25 over the corpus' sections,
first 10 results) and, where the arm gives second chances, calls second_chance() with those
ids; if nothing is served it records its path (the search, then the read of the question's
truth sections) with a positive signal. A serve is right when the served trail cites exactly
the question's truth sections.

The rule (margin, top) is fitted on the fit split without serving: one stream that records
after every miss, on a scope that keeps near candidates down to the widest cut of the grid,
and at each miss every rule of the grid is applied to the kept candidates and the search's
results (trails.core.second_chance.choose, the function second_chance() calls). The chosen
rule is then run through the real path on the held-out split, beside the same stream
without second chances.
"""

from __future__ import annotations

import json
import math
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from evaluation.bm25 import BM25
from evaluation.bulk import drop_scope
from evaluation.matching import split_of
from scopes.models import Scope, Section
from trails.core.hint import RecordedStep
from trails.core.normalise import normalise_query
from trails.core.second_chance import NearCandidate, SecondChanceRule, choose
from trails.models import RecallEvent
from trails.serving.matching import matching_settings
from trails.serving.recall import recall
from trails.serving.record import RecordInput, record
from trails.serving.second_chance import second_chance

# The agent's search: its first page of results, the ids it hands back.
SEARCH_RESULTS = 10
# The results a recorded search step keeps (what the agent read of the page).
STEP_RESULTS = 5
CALLER = "key:eval-agent"
# How many wrong second-chance serves the results keep for a reader to judge.
WRONG_EXAMPLES = 30
# The grid the fit considers; the fit scope keeps near candidates down to the widest margin.
MARGINS = (0.02, 0.04, 0.05, 0.06, 0.08, 0.10, 0.12, 0.15)
TOPS = (1, 2, 3, 5)
# Two-sided 95 %.
Z = 1.959964


def wilson(events: int, trials: int, z: float = Z) -> tuple[float, float]:
    """The Wilson score interval of events/trials; (0, 1) with no trials."""
    if trials == 0:
        return (0.0, 1.0)
    p = events / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class Question:
    text: str
    truth: tuple[str, ...]
    # (section id, text): taken out of that section while this question is searched, so the
    # search never finds the very question asked in the section that answers it.
    left_out: tuple[str, str] | None = None


@dataclass
class Corpus:
    name: str
    sections: dict[str, str]
    streams: dict[str, list[Question]]  # "fit" / "validation"
    notes: dict = field(default_factory=dict)


def quora_corpus(pairs: list[dict]) -> Corpus:
    """Topics are the connected components of the duplicate pairs (questions the same after
    normalising are one question); one section per topic holding its questions, one a line.

    A question is searched with its own words taken out of its topic's section when the topic
    has other questions (a paraphrase finds its section by the others' words, never its own);
    a question alone on its topic keeps its words there, the only text on its topic, so that
    a look-alike's search can point at its own section rather than at the look-alike's.
    The stream of a split is its pairs in file order, a then b, each question the first time
    it comes; the corpus holds every topic of the file, both splits.
    """
    parent: dict[str, str] = {}
    first_text: dict[str, str] = {}

    def find(key: str) -> str:
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for pair in pairs:
        for text in (pair["a"], pair["b"]):
            key = normalise_query(text)
            parent.setdefault(key, key)
            first_text.setdefault(key, text)
        if pair["duplicate"]:
            a, b = find(normalise_query(pair["a"])), find(normalise_query(pair["b"]))
            if a != b:
                parent[max(a, b)] = min(a, b)
    members: dict[str, list[str]] = {}
    for key in first_text:  # first-seen order
        members.setdefault(find(key), []).append(key)
    section_of: dict[str, str] = {}
    sections: dict[str, str] = {}
    for number, (root, keys) in enumerate(members.items()):
        section_id = f"topic-{number}"
        sections[section_id] = "\n".join(first_text[k] for k in keys)
        for key in keys:
            section_of[key] = section_id
    streams: dict[str, list[Question]] = {"fit": [], "validation": []}
    asked: dict[str, set[str]] = {"fit": set(), "validation": set()}
    for index, pair in enumerate(pairs):
        split = split_of(index)
        for text in (pair["a"], pair["b"]):
            key = normalise_query(text)
            if key in asked[split]:
                continue
            asked[split].add(key)
            root = find(key)
            section_id = section_of[key]
            alone = len(members[root]) == 1
            streams[split].append(
                Question(first_text[key], (section_id,), None if alone else (section_id, first_text[key]))
            )
    sizes = Counter(len(keys) for keys in members.values())
    return Corpus(
        "quora",
        sections,
        streams,
        {
            "pairs": len(pairs),
            "topics": len(members),
            "topics_alone": sizes.get(1, 0),
            "topics_of_two_or_more": len(members) - sizes.get(1, 0),
        },
    )


def _heading_words(title: str) -> set[str]:
    return set(normalise_query(title).split())


def faq_corpus(folder: Path, reworded_overlap: float = 0.6) -> Corpus:
    """The Python FAQ at its newer revision: a section per entry (its answer, the heading not in
    it), each entry's heading asked once in file order with its own section as the truth. The
    older revision's reworded headings (an entry removed whose heading shares at least
    `reworded_overlap` of its words with an added entry's in the same file) are the only
    paraphrases: each is asked after its split's other questions, its truth the newer entry."""
    rows = [json.loads(line) for line in (folder / "sections-new.jsonl").read_text(encoding="utf-8").splitlines()]
    sections = {row["id"]: row["text"] for row in rows}
    questions = [json.loads(line) for line in (folder / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    current = [q for q in questions if "new" in q["present_in"] and q["section_id"] in sections]
    added = [q for q in current if q["present_in"] == ["new"]]
    streams: dict[str, list[Question]] = {"fit": [], "validation": []}
    split_of_section = {}
    for index, q in enumerate(current):
        split_of_section[q["section_id"]] = split_of(index)
        streams[split_of(index)].append(Question(q["question"], (q["section_id"],)))
    reworded = []
    for old in (q for q in questions if q["present_in"] == ["old"]):
        words = _heading_words(old["question"])
        for new in added:
            if new["section_id"].split("#")[0] != old["section_id"].split("#")[0]:
                continue
            other = _heading_words(new["question"])
            if len(words & other) / max(1, len(words | other)) >= reworded_overlap:
                reworded.append({"asked": old["question"], "truth": new["section_id"]})
                streams[split_of_section[new["section_id"]]].append(Question(old["question"], (new["section_id"],)))
                break
    return Corpus("python-faq", sections, streams, {"entries": len(sections), "reworded": reworded})


@dataclass
class Tally:
    """One arm's stream: what was served, right or wrong, and what it saved."""

    questions: int = 0
    duplicates: int = 0  # questions whose truth an earlier question of the stream had
    first_right: int = 0
    first_wrong: int = 0
    misses: int = 0
    second_asked: int = 0
    second_right: int = 0
    second_wrong: int = 0
    second_right_duplicates: int = 0
    second_wrong_duplicates: int = 0  # wrong serves where a trail citing the truth was recorded already
    # The first wrong second-chance serves: what was asked, what was served, and its similarity.
    wrong_examples: list = field(default_factory=list)
    duplicates_right: int = 0  # duplicates served right, first or second chance
    calls_saved: int = 0
    tokens_saved: int = 0
    near_misses: int = 0  # misses whose nearest recorded question (exact cosine) reached the lower cut
    near_misses_not_read: int = 0  # ... and whose trail the recall did not read
    recorded: int = 0

    def figures(self) -> dict:
        serves = self.second_right + self.second_wrong
        per_100 = 100 / max(1, self.questions)
        return {
            **asdict(self),
            "second_serves": serves,
            "second_wrong_rate": round(self.second_wrong / serves, 5) if serves else None,
            "second_wrong_wilson": [round(x, 5) for x in wilson(self.second_wrong, serves)],
            "duplicates_right_rate": round(self.duplicates_right / max(1, self.duplicates), 5),
            "duplicates_right_wilson": [round(x, 5) for x in wilson(self.duplicates_right, self.duplicates)],
            "served_wrong": self.first_wrong + self.second_wrong,
            "served_wrong_per_question": round((self.first_wrong + self.second_wrong) / max(1, self.questions), 5),
            "served_wrong_per_question_wilson": [
                round(x, 5) for x in wilson(self.first_wrong + self.second_wrong, self.questions)
            ],
            "non_duplicates": self.questions - self.duplicates,
            # The scope's bound is a rate per question no earlier question answered (docs/matching.md).
            "served_wrong_per_non_duplicate": round(
                (self.first_wrong + self.second_wrong) / max(1, self.questions - self.duplicates), 5
            ),
            "served_wrong_per_non_duplicate_wilson": [
                round(x, 5) for x in wilson(self.first_wrong + self.second_wrong, self.questions - self.duplicates)
            ],
            "calls_saved_per_100": round(self.calls_saved * per_100, 2),
            "tokens_saved_per_100": round(self.tokens_saved * per_100, 1),
        }


def _rule_key(rule: SecondChanceRule) -> str:
    return f"margin {rule.margin:.2f}, top {rule.top}" + (", first cited" if rule.first_cited else "")


GRID = [SecondChanceRule(m, t, first) for m in MARGINS for t in TOPS for first in (False, True)]


class Stream:
    """One corpus' sections in a fresh scratch scope and the agent that asks its questions."""

    def __init__(self, corpus: Corpus, index: BM25, vectors: Callable[[str], np.ndarray], **scope_fields) -> None:
        self.corpus, self.index, self.vectors = corpus, index, vectors
        self.scope = Scope.objects.create(
            scratch=True,
            slug=f"eval-second-{uuid.uuid4().hex[:8]}",
            matcher="embedding",
            threshold_pinned=True,
            **scope_fields,
        )
        Section.upsert(self.scope, corpus.sections)
        self.cited: dict[int, tuple[str, ...]] = {}  # trail id -> its cited sections
        self.public: dict[str, int] = {}  # trail public id -> trail id
        self.stored_ids: list[int] = []
        self.stored: list[np.ndarray] = []
        self.seen: set[tuple[str, ...]] = set()

    def close(self) -> None:
        drop_scope(self.scope)

    def threshold(self) -> float:
        return matching_settings(self.scope).embedding_threshold

    def search(self, question: Question) -> list[str]:
        return [s for s, _ in self.index.search(question.text, SEARCH_RESULTS, left_out=question.left_out)]

    def record(self, question: Question, results: list[str]) -> None:
        steps = [
            RecordedStep("search", {"query": question.text}, tuple(results[:STEP_RESULTS])),
            RecordedStep("read", {"sections": list(question.truth)}, question.truth),
        ]
        recorded = record(
            self.scope,
            RecordInput(
                query=question.text, cited=list(question.truth), steps=steps, signal="accepted", reporter=CALLER
            ),
        )
        trail = recorded.trail
        if trail.id not in self.cited:
            self.cited[trail.id] = question.truth
            self.public[str(trail.public_id)] = trail.id
            self.stored_ids.append(trail.id)
            self.stored.append(self.vectors(question.text))

    def nearest(self, question: Question) -> tuple[int | None, float]:
        """The recorded question nearest this one by exact cosine, read from no band key."""
        if not self.stored:
            return None, -1.0
        scores = np.stack(self.stored) @ self.vectors(question.text)
        best = int(np.argmax(scores))
        return self.stored_ids[best], float(scores[best])

    def ask(self, question: Question, tally: Tally, give_second_chance: bool, cut: float | None) -> dict | None:
        """One question of the stream; returns, on a miss, what the fit needs (the recall's near
        candidates and the search's results)."""
        tally.questions += 1
        duplicate = question.truth in self.seen
        self.seen.add(question.truth)
        tally.duplicates += duplicate
        answer = recall(self.scope, question.text, caller=CALLER, explain=cut is not None)
        if answer.outcome.value != "miss":
            right = self.cited.get(answer.trail.id) == question.truth
            tally.first_right += right
            tally.first_wrong += not right
            tally.duplicates_right += right and duplicate
            tally.calls_saved += answer.calls_saved
            tally.tokens_saved += answer.tokens_saved
            return None
        tally.misses += 1
        if cut is not None:
            nearest, similarity = self.nearest(question)
            if nearest is not None and similarity >= cut:
                tally.near_misses += 1
                read = {self.public.get(row["trail_id"]) for row in answer.explanation["candidates"]}
                # Read candidates are listed nearest first, so the nearest, if read, is among them.
                tally.near_misses_not_read += nearest not in read
        results = self.search(question)
        if give_second_chance:
            tally.second_asked += 1
            served = second_chance(self.scope, answer.recall_id, results, caller=CALLER)
            if served.outcome.value != "miss":
                right = self.cited.get(served.trail.id) == question.truth
                tally.second_right += right
                tally.second_wrong += not right
                tally.second_right_duplicates += right and duplicate
                tally.second_wrong_duplicates += not right and duplicate
                if not right and len(tally.wrong_examples) < WRONG_EXAMPLES:
                    tally.wrong_examples.append([question.text, served.matched_query, served.similarity])
                tally.duplicates_right += right and duplicate
                tally.calls_saved += served.calls_saved
                tally.tokens_saved += served.tokens_saved
                return None
        near = RecallEvent.objects.filter(public_id=answer.recall_id).values_list("near_candidates", flat=True).first()
        self.record(question, results)
        tally.recorded += 1
        return {"near": near or [], "results": results, "duplicate": duplicate}


def fit(corpus: Corpus, index: BM25, vectors, progress: Callable[[str], None]) -> dict:
    """Every rule of the grid on the fit split, from one stream that never serves a second chance."""
    stream = Stream(
        corpus, index, vectors, second_chance=True, second_chance_margin=max(MARGINS), second_chance_top=max(TOPS)
    )
    tally = Tally()
    per_rule = {_rule_key(rule): Counter() for rule in GRID}
    try:
        threshold = stream.threshold()
        questions = corpus.streams["fit"]
        for number, question in enumerate(questions):
            missed = stream.ask(question, tally, give_second_chance=False, cut=round(threshold - max(MARGINS), 4))
            if missed is None:
                continue
            near = [
                NearCandidate(int(t), float(s), stream.cited[int(t)])
                for t, s in missed["near"]
                if int(t) in stream.cited
            ]
            for rule in GRID:
                decision = choose(near, missed["results"], rule, threshold)
                if decision.given:
                    right = stream.cited[decision.trail_id] == question.truth
                    counts = per_rule[_rule_key(rule)]
                    counts["serves"] += 1
                    counts["right" if right else "wrong"] += 1
                    counts["right_duplicates"] += right and missed["duplicate"]
                    counts["wrong_duplicates"] += not right and missed["duplicate"]
            if (number + 1) % 1000 == 0:
                progress(f"{corpus.name} fit: {number + 1:,}/{len(questions):,} questions")
    finally:
        stream.close()
    return {"threshold": threshold, "stream": tally.figures(), "rules": {k: dict(v) for k, v in per_rule.items()}}


def choose_rule(fits: dict[str, dict], bound: float) -> dict:
    """The rule a scope runs (the search's first result always cited) with the most second-chance
    serves right over the corpora's fit splits together, among those whose 95 % Wilson upper bound
    of served wrong per non-duplicate question (the scope's false-hit rate: the first chance's
    wrong serves and the rule's together) is within `bound`; where none is, the one with the
    lowest upper bound."""
    first_wrong = sum(f["stream"]["first_wrong"] for f in fits.values())
    non_duplicates = sum(f["stream"]["questions"] - f["stream"]["duplicates"] for f in fits.values())
    rows = []
    for rule in GRID:
        key = _rule_key(rule)
        right = sum(f["rules"][key].get("right", 0) for f in fits.values())
        wrong = sum(f["rules"][key].get("wrong", 0) for f in fits.values())
        upper = wilson(first_wrong + wrong, non_duplicates)[1]
        rows.append(
            {
                "rule": key,
                "margin": rule.margin,
                "top": rule.top,
                "first_cited": rule.first_cited,
                "serves": right + wrong,
                "right": right,
                "wrong": wrong,
                "wrong_per_serve_upper": round(wilson(wrong, right + wrong)[1], 5),
                "wrong_upper": round(upper, 5),
                "holds": right + wrong > 0 and upper <= bound,
            }
        )
    settable = [r for r in rows if r["first_cited"]]
    holding = [r for r in settable if r["holds"]]
    if holding:
        chosen = max(holding, key=lambda r: (r["right"], -r["wrong_upper"], -r["margin"]))
    else:
        chosen = min(settable, key=lambda r: (r["wrong_upper"], -r["right"]))
    baseline = round(wilson(first_wrong, non_duplicates)[1], 5)
    return {
        "chosen": chosen,
        "holds": chosen["holds"],
        "first_chance_wrong": first_wrong,
        "non_duplicates": non_duplicates,
        "first_chance_wrong_upper": baseline,
        "rows": rows,
    }


def held_out(corpus: Corpus, index: BM25, vectors, rule: dict, progress: Callable[[str], None]) -> dict:
    """The validation split through the real path, without and with the chosen rule's second chance."""
    arms = {}
    for name, fields in (
        ("without", {"second_chance": False}),
        ("with", {"second_chance": True, "second_chance_margin": rule["margin"], "second_chance_top": rule["top"]}),
    ):
        stream = Stream(corpus, index, vectors, **fields)
        tally = Tally()
        try:
            threshold = stream.threshold()
            cut = round(threshold - rule["margin"], 4) if fields["second_chance"] else None
            questions = corpus.streams["validation"]
            for number, question in enumerate(questions):
                stream.ask(question, tally, give_second_chance=fields["second_chance"], cut=cut)
                if (number + 1) % 1000 == 0:
                    progress(f"{corpus.name} held out, {name}: {number + 1:,}/{len(questions):,} questions")
        finally:
            stream.close()
        arms[name] = {"threshold": threshold, **tally.figures()}
    return arms


def verdict(results: dict, bound: float) -> dict:
    """On by default only where, held out and pooled over the corpora, the arm with the second
    chance keeps the Wilson upper bound of served wrong per non-duplicate question (first and
    second chance together: the scope's false-hit rate) within the scope's bound, and the fit's
    choice held."""
    arms = [c["held_out"]["with"] for c in results["corpora"].values()]
    wrong = sum(a["first_wrong"] + a["second_wrong"] for a in arms)
    non_duplicates = sum(a["questions"] - a["duplicates"] for a in arms)
    second = sum(a["second_wrong"] for a in arms)
    upper = wilson(wrong, non_duplicates)[1]
    holds = results["choice"]["holds"] and non_duplicates > 0 and upper <= bound
    why = (
        f"held out, all corpora together, {wrong} wrong serves ({second} of them second chances) "
        f"over {non_duplicates} non-duplicate questions, 95 % Wilson upper bound {100 * upper:.2f} % "
        f"against the bound {100 * bound:.0f} %"
    )
    return {"yes": holds, "wrong": wrong, "non_duplicates": non_duplicates, "wrong_upper": round(upper, 5), "why": why}
