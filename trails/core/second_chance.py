"""The second chance: after a miss, a near candidate whose cited sections the agent's own
first search returned is served as a hit (docs/second-chance.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

# The most section ids a caller may hand back (a search's page, not a corpus).
MAX_SEARCH_RESULTS = 50
# The matcher a second chance's recall is counted under, apart from the first-chance hits.
SECOND_CHANCE_MATCHER = "second-chance"
# How many of a miss's near candidates the recall keeps for a second chance.
NEAR_CANDIDATES_KEPT = 3


@dataclass(frozen=True)
class SecondChanceRule:
    """When a near candidate is served: its similarity at least `threshold - margin`, and every
    section it cites among the search's first `top` results (the first result among them
    where `first_cited`)."""

    margin: float
    top: int
    first_cited: bool = False

    def lower_cut(self, threshold: float) -> float:
        return round(threshold - self.margin, 4)


@dataclass(frozen=True)
class NearCandidate:
    """A candidate of a missed recall above the lower cut that the look-alike guard allowed."""

    trail_id: int
    similarity: float
    cited: tuple[str, ...]


@dataclass(frozen=True)
class SecondChanceDecision:
    """Which near candidate (if any) a second chance serves, and why in one sentence."""

    trail_id: int | None
    similarity: float | None
    reason: str

    @property
    def given(self) -> bool:
        return self.trail_id is not None


def choose(
    near: Sequence[NearCandidate], search_results: Sequence[str], rule: SecondChanceRule, threshold: float
) -> SecondChanceDecision:
    """The nearest candidate the rule allows, or none and why.

    Args:
        near: the recall's guard-allowed candidates, any order.
        search_results: the section ids the agent's own search returned, best first.
        rule: the scope's cut and rank rule.
        threshold: the scope's embedding threshold in use (the cut is relative to it).
    """
    cut = rule.lower_cut(threshold)
    if not search_results:
        return SecondChanceDecision(None, None, "the search returned no sections")
    top = list(dict.fromkeys(search_results))[: rule.top]
    ranked = sorted(near, key=lambda c: (-c.similarity, -c.trail_id))
    above = [c for c in ranked if c.similarity >= cut]
    if not above:
        nearest = f"the nearest scored {ranked[0].similarity:.4f}" if ranked else "the recall kept no near candidate"
        return SecondChanceDecision(None, None, f"no candidate reached the lower cut {cut:.4f}: {nearest}")
    reasons = []
    for candidate in above:
        missing = [s for s in candidate.cited if s not in top]
        if not candidate.cited:
            reasons.append("cites no section")
        elif missing:
            reasons.append(f"cites {len(missing)} section(s) not among the search's first {rule.top}")
        elif rule.first_cited and top[0] not in candidate.cited:
            reasons.append("does not cite the search's first result")
        else:
            return SecondChanceDecision(
                candidate.trail_id,
                candidate.similarity,
                f"similarity {candidate.similarity:.4f} (lower cut {cut:.4f}) and every cited section "
                f"among the search's first {rule.top}",
            )
    return SecondChanceDecision(
        None, None, f"{len(above)} candidate(s) above the lower cut {cut:.4f}, none allowed: the nearest {reasons[0]}"
    )
