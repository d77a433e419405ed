"""Experiment 1: matching quality on labelled question pairs, through record's rows and recall.

Four pairs in five (line numbers not divisible by 5) are the fit split: thresholds
are chosen there (`fit_thresholds`, shipped in trails/learning/calibration.json). Every fifth
pair (line numbers 0, 5, 10, ...) is the validation split, never used for fitting;
every rate is given per split with its 95 % Clopper-Pearson interval.

Protocol: every distinct `a` is stored as an accepted trail, every `b` is recalled.
For a duplicate pair a hit on its own `a` (or on a stored question whose normalised
text equals the query's) is correct, a hit on any other stored question wrong. For
a non-duplicate pair a hit on its own `a` is a false hit; hits on other stored
questions are counted apart as "other" (some are paraphrases the labels miss).
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.utils import timezone

from evaluation.bulk import drop_scope
from scopes.models import Scope, Section
from trails.core import calibration
from trails.core.normalise import normalise_query
from trails.embedders import PrecomputedEmbedder, get_embedder, serving
from trails.learning.shipped import thresholds_for
from trails.models import Trail
from trails.serving.candidates import candidates as read_candidates
from trails.serving.matching import score_candidates, sign
from trails.serving.recall import recall
from trails.serving.record import RecordInput, TrailRows

# The shared labelled pairs (Quora), beside the repository.
DEFAULT_PAIRS = Path(settings.BASE_DIR).parent / "shared" / "data" / "qqp-pairs-dev.jsonl"

# Each arm: the scope's matcher, whether the guard runs, and the threshold field swept.
ARMS = {
    "lexical": ("lexical", True),
    "embedding (no guard)": ("embedding", False),
    "embedding + guard": ("embedding", True),
}
SWEEP = {
    "lexical": [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
    # The fit grid and a few lower points: the validation split's own operating points.
    "embedding": sorted({0.85, 0.88, *(round(0.90 + 0.0025 * i, 4) for i in range(37))}),
}


@dataclass
class Tally:
    correct: int = 0
    wrong: int = 0
    false: int = 0
    other: int = 0
    duplicates: int = 0
    distinct: int = 0

    def add(self, pair: dict, hit: str | None) -> None:
        asked, own = normalise_query(pair["b"]), normalise_query(pair["a"])
        if pair["duplicate"]:
            self.duplicates += 1
            if hit is not None and hit in (own, asked):
                self.correct += 1
            elif hit is not None:
                self.wrong += 1
        else:
            self.distinct += 1
            if hit == own:
                self.false += 1
            elif hit is not None and hit != asked:
                self.other += 1

    def rates(self) -> dict:
        d, n = max(1, self.duplicates), max(1, self.distinct)
        return {
            **asdict(self),
            "correct_rate": round(self.correct / d, 5),
            "wrong_rate": round(self.wrong / d, 5),
            "false_rate": round(self.false / n, 5),
            "other_rate": round(self.other / n, 5),
            "correct_ci": [round(x, 5) for x in calibration.interval(self.correct, self.duplicates)],
            "false_ci": [round(x, 5) for x in calibration.interval(self.false, self.distinct)],
        }


def load_pairs(path: Path, limit: int = 0) -> list[dict]:
    with open(path, encoding="utf-8") as rows:
        data = [json.loads(line) for line in rows]
    return [p for p in data[: limit or None] if normalise_query(p["a"]) and normalise_query(p["b"])]


def _scope(**fields) -> Scope:
    scope = Scope.objects.create(scratch=True, slug=f"eval-match-{uuid.uuid4().hex[:8]}", **fields)
    Section.upsert(scope, {"s": "a section"})
    return scope


def store(scope: Scope, data: list[dict]) -> dict[int, str]:
    """Stores every distinct `a` (by normalised text) through the record pipeline's rows;
    returns {trail id: normalised query}."""
    current = {s.section_id: s for s in Section.objects.filter(scope=scope)}
    seen, batch, now = set(), [], timezone.now()
    for pair in data:
        key = normalise_query(pair["a"])
        if key in seen:
            continue
        seen.add(key)
        batch.append(
            TrailRows.build(scope, RecordInput(query=pair["a"], cited=["s"], signal="accepted"), current, "", now)
        )
    for start in range(0, len(batch), 2000):
        TrailRows.save_all(batch[start : start + 2000])
    return {t.id: t.normalised_query for t in Trail.objects.filter(scope=scope).only("id", "normalised_query")}


# Every FOLDS-th pair is held out for validation; the rest is fitted on.
FOLDS = 5
SPLITS = ("all", "fit", "validation")


def split_of(index: int) -> str:
    return "validation" if index % FOLDS == 0 else "fit"


def halves(index: int) -> tuple[str, str]:
    return ("all", split_of(index))


def score_as(scope: Scope, matcher: str, question, found, guard: bool = True) -> list:
    """Scores one read of candidates as a scope of `matcher` would, and leaves the scope as it
    was: the fit and the sweep sign and read as "both", then score each matcher in turn."""
    kept, scope.matcher = scope.matcher, matcher
    try:
        return score_candidates(scope, question, found, guard=guard)
    finally:
        scope.matcher = kept


def fit_split(data: list[dict]) -> list[dict]:
    """The pairs thresholds are fitted on: four in five. The others are for validation only."""
    return [pair for index, pair in enumerate(data) if split_of(index) == "fit"]


# Thresholds the fit considers, per matcher. The lexical grid starts at 0.5: below it
# the band layout widens (more candidates per lookup) for about 3 points of correct
# hits on the fit split (0.30: 14.2 %, 0.50: 10.5 %), and embedding is the default.
FIT_GRID = {
    "lexical": [round(0.50 + 0.05 * i, 2) for i in range(10)],
    "embedding": [round(0.90 + 0.0025 * i, 4) for i in range(37)],
}


def fit_thresholds(
    data: list[dict], bound: float = 0.02, confidence: float = 0.95, progress: Callable[[str], None] = lambda _: None
) -> dict:
    """Chooses each matcher's threshold on the fit split so that the one-sided upper
    confidence bound of its false-hit rate is within `bound`.

    Only the fit split's questions are stored and recalled. Candidates come from the
    band layout of the grid's lowest threshold (a superset of any stricter layout's),
    and the guard runs as in recall; for each non-duplicate the best match counts as a
    false hit at every threshold up to its similarity.
    """
    fit = fit_split(data)
    scope = _scope(
        matcher="both", lexical_threshold=min(FIT_GRID["lexical"]), embedding_threshold=min(FIT_GRID["embedding"])
    )
    try:
        names = store(scope, fit)
        now = timezone.now()
        false_hits: dict[str, list[float]] = {m: [] for m in FIT_GRID}
        correct_hits: dict[str, list[float]] = {m: [] for m in FIT_GRID}
        for index, pair in enumerate(fit):
            question = sign(scope, pair["b"], "")
            found = read_candidates(scope, "", question.lookup(scope), now, with_paths=False)
            for matcher in FIT_GRID:
                matches = score_as(scope, matcher, question, found)
                if not matches:
                    continue
                best, own = matches[0], normalise_query(pair["a"])
                hit = names[best.trail.id]
                if not pair["duplicate"] and hit == own:
                    false_hits[matcher].append(best.similarity)
                elif pair["duplicate"] and hit in (own, normalise_query(pair["b"])):
                    correct_hits[matcher].append(best.similarity)
            if (index + 1) % 1000 == 0:
                progress(f"fitting thresholds: {index + 1:,}/{len(fit):,} pairs")
        distinct = sum(1 for p in fit if not p["duplicate"])
        duplicates = len(fit) - distinct
        fitted = {}
        for matcher, grid in FIT_GRID.items():
            chosen = calibration.choose_threshold(false_hits[matcher], distinct, grid, bound, confidence)
            fitted[matcher] = {
                "threshold": chosen.threshold,
                "holds": chosen.holds,
                "false_hits": chosen.false_hits,
                "false_upper": round(chosen.upper, 5),
                "curve": [
                    {
                        "threshold": t,
                        "false_hits": sum(1 for s in false_hits[matcher] if s >= t),
                        "correct_hits": sum(1 for s in correct_hits[matcher] if s >= t),
                    }
                    for t in grid
                ],
            }
        return {
            "split": "four pairs in five of the pairs file (line numbers not divisible by 5: fit)",
            "pairs": len(fit),
            "duplicates": duplicates,
            "distinct": distinct,
            "bound": bound,
            "confidence": confidence,
            "matchers": fitted,
        }
    finally:
        drop_scope(scope)


def sweep(data: list[dict], progress: Callable[[str], None] = lambda _: None) -> dict:
    """Correct and false hit rates per arm and threshold.

    One store signed with the band layouts of the lowest thresholds; each threshold is
    then applied to the same candidates, so a stricter threshold's own (tighter) band
    layout could only find fewer candidates: the curves are an upper bound there, and
    `defaults` gives the exact operating point of each default.
    """
    scope = _scope(matcher="both", lexical_threshold=min(SWEEP["lexical"]), embedding_threshold=min(SWEEP["embedding"]))
    try:
        names = store(scope, data)
        now = timezone.now()
        tallies = {(arm, t, h): Tally() for arm, (m, _) in ARMS.items() for t in SWEEP[m] for h in SPLITS}
        for index, pair in enumerate(data):
            question = sign(scope, pair["b"], "")
            found = read_candidates(scope, "", question.lookup(scope), now, with_paths=False)
            for arm, (matcher, guard) in ARMS.items():
                matches = score_as(scope, matcher, question, found, guard=guard)
                for threshold in SWEEP[matcher]:
                    best = next((m for m in matches if m.similarity >= threshold), None)
                    for half in halves(index):
                        tallies[(arm, threshold, half)].add(pair, names[best.trail.id] if best else None)
            if (index + 1) % 1000 == 0:
                progress(f"matching sweep: {index + 1:,}/{len(data):,} pairs")
        return {
            arm: [{"threshold": t, **{h: tallies[(arm, t, h)].rates() for h in SPLITS}} for t in SWEEP[m]]
            for arm, (m, _) in ARMS.items()
        }
    finally:
        drop_scope(scope)


def defaults(data: list[dict], matcher: str, progress: Callable[[str], None] = lambda _: None, **scope_fields) -> dict:
    """The operating point a new scope with this matcher gets: stored, then recalled (dry run)."""
    scope = _scope(matcher=matcher, **scope_fields)
    try:
        names = store(scope, data)
        tallies = {h: Tally() for h in SPLITS}
        latencies, candidates = [], []
        for index, pair in enumerate(data):
            started = time.perf_counter()
            result = recall(scope, pair["b"], dry_run=True)
            latencies.append((time.perf_counter() - started) * 1000)
            candidates.append(result.candidates)
            hit = names[result.trail.id] if result.trail and result.outcome.value != "miss" else None
            for half in halves(index):
                tallies[half].add(pair, hit)
            if (index + 1) % 2000 == 0:
                progress(f"matching default {matcher}: {index + 1:,}/{len(data):,} pairs")
        return {
            "matcher": matcher,
            "lexical_threshold": scope.lexical_threshold if scope.uses_lexical else None,
            "embedding_threshold": scope.embedding_threshold if scope.uses_embedding else None,
            **{h: tallies[h].rates() for h in SPLITS},
            "candidates_per_lookup": round(statistics.mean(candidates), 3) if candidates else 0,
            "timing": {"recall_p50_ms": round(statistics.median(latencies), 3) if latencies else None},
        }
    finally:
        drop_scope(scope)


def calibration_tax(curve: list[dict], calibrated: float, bound: float, split: str = "validation") -> dict:
    """What the calibration margin costs on a split it never saw: correct hits at the
    calibrated threshold against those at the split's own threshold for the bound (the
    lowest whose observed false-hit rate there is within it, which no deployment can
    know in advance). Both read from the same sweep, so they differ only by threshold."""
    by_threshold = {point["threshold"]: point[split] for point in curve}
    own = min((t for t, rates in by_threshold.items() if rates["false_rate"] <= bound), default=None)
    at_calibrated = by_threshold.get(calibrated)
    at_own = by_threshold.get(own) if own is not None else None
    return {
        "split": split,
        "bound": bound,
        "calibrated_threshold": calibrated,
        "own_threshold": own,
        "at_calibrated": at_calibrated,
        "at_own": at_own,
        "tax_points": round(100 * (at_own["correct_rate"] - at_calibrated["correct_rate"]), 2)
        if at_own and at_calibrated
        else None,
    }


def run(pairs: Path, limit: int = 0, progress: Callable[[str], None] = lambda _: None) -> dict:
    """Experiment 1 in full: the sweep per arm and each matcher's default operating point."""
    data = load_pairs(pairs, limit)
    texts = sorted({p["a"] for p in data} | {p["b"] for p in data})
    started = time.perf_counter()
    with serving(PrecomputedEmbedder(get_embedder(), texts)) as embedder:
        progress(
            f"matching: {len(data):,} pairs, {len(texts):,} questions embedded in {time.perf_counter() - started:.0f} s ({embedder.name})"
        )
        curves = sweep(data, progress)
        # Each matcher at the thresholds a scope with it gets for the default 2 % bound.
        points = {m: defaults(data, m, progress, **thresholds_for(0.02, m)) for m in ("lexical", "embedding", "both")}
    return {
        "pairs": len(data),
        "duplicates": sum(1 for p in data if p["duplicate"]),
        "embedding_model": embedder.name,
        "curves": curves,
        "defaults": points,
        "tax": calibration_tax(curves["embedding + guard"], points["embedding"]["embedding_threshold"], 0.02),
        "note": "Sweep thresholds share the candidates of the lowest threshold's band layout; defaults are exact recall() runs.",
    }
