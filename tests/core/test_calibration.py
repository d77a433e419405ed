import pytest

from trails.core.calibration import (
    Label,
    LearningLimits,
    choose_threshold,
    interval,
    learned_threshold,
    lower_bound,
    upper_bound,
)


def test_bounds_agree_with_their_closed_forms():
    # With no events the upper bound solves (1 - p)^n = alpha; with all events the lower solves p^n = alpha.
    for n in (1, 10, 300):
        assert upper_bound(0, n, 0.95) == pytest.approx(1 - 0.05 ** (1 / n), abs=1e-9)
        assert lower_bound(n, n, 0.95) == pytest.approx(0.05 ** (1 / n), abs=1e-9)


def test_bounds_match_published_clopper_pearson_figures():
    # 95 % two-sided interval for 5 of 100: [1.64 %, 11.28 %] (the textbook figure).
    low, high = interval(5, 100)
    assert low == pytest.approx(0.01643, abs=5e-5)
    assert high == pytest.approx(0.11284, abs=5e-5)


def test_bounds_enclose_the_observed_rate_and_narrow_with_trials():
    assert lower_bound(20, 1000) < 0.02 < upper_bound(20, 1000)
    assert upper_bound(200, 10000) - 0.02 < upper_bound(20, 1000) - 0.02


@pytest.mark.parametrize("events, trials, confidence", [(-1, 10, 0.95), (11, 10, 0.95), (1, 10, 1.0), (1, 10, 0.2)])
def test_bounds_refuse_impossible_counts(events, trials, confidence):
    with pytest.raises(ValueError):
        upper_bound(events, trials, confidence)


def test_threshold_is_chosen_on_the_upper_bound_not_the_observed_rate():
    # 1,000 non-duplicates; 30 false hits at 0.90, 15 more at 0.93, 5 at 0.96.
    sims = [0.90] * 30 + [0.93] * 15 + [0.96] * 5
    grid = [0.90, 0.93, 0.96, 0.99]
    chosen = choose_threshold(sims, 1000, grid, bound=0.03)
    # At 0.93 the observed rate is 2.0 % (<= 3 %) but its upper bound is 2.9 %: fine at 3 %.
    assert chosen.threshold == 0.93 and chosen.holds
    stricter = choose_threshold(sims, 1000, grid, bound=0.02)
    # 2.0 % observed at 0.93 is not enough for a 2 % bound: its upper bound exceeds it.
    assert stricter.threshold == 0.96 and stricter.upper <= 0.02


def test_no_passing_threshold_says_so():
    chosen = choose_threshold([0.99] * 50, 100, [0.9, 0.99], bound=0.02)
    assert chosen.threshold == 0.99 and not chosen.holds


GRID = [round(0.90 + 0.0025 * i, 4) for i in range(37)]
LIMITS = LearningLimits(floor=0.92, ceiling=0.975, reporter_shift=0.01)
ASKED = 3000  # questions asked in the labels' window


def labels(similarity: float, count: int, false_hit: bool = False, reporters: int = 5) -> list[Label]:
    """`count` labels at one similarity, spread over `reporters` keys."""
    return [Label(similarity, false_hit, f"key:{i % reporters}") for i in range(count)]


def test_few_labels_do_not_move_a_calibrated_threshold():
    assert learned_threshold(labels(0.95, 3, True), 100, 0.95, GRID, 0.02, LIMITS).threshold is None
    assert learned_threshold(labels(0.93, 15), 100, 0.95, GRID, 0.02, LIMITS).threshold is None


def test_labels_that_show_a_broken_bound_raise_the_threshold_to_where_it_holds():
    # 8 false hits among 100 questions asked: the bound is broken even if no other hit was false.
    found = labels(0.955, 8, True) + labels(0.955, 20) + labels(0.965, 30)
    decided = learned_threshold(found, 100, 0.95, GRID, 0.02, LIMITS)
    assert decided.threshold == 0.9575 and decided.flags == ()
    assert decided.at_threshold == (0, 30)


def test_labels_that_show_the_bound_holds_lower_lower_it_with_evidence_in_the_new_band():
    # 400 right hits above the threshold, and near misses all right down to 0.925.
    easy = labels(0.97, 400) + [Label(0.925 + 0.0025 * (i % 10), False, f"key:{i % 7}") for i in range(200)]
    decided = learned_threshold(easy, ASKED, 0.95, GRID, 0.02, LIMITS)
    assert decided.threshold == 0.925
    # Hits alone say nothing about similarities never served: no lowering without labels there.
    assert learned_threshold(labels(0.97, 2000), ASKED, 0.95, GRID, 0.02, LIMITS).threshold is None
    # False near misses stop the descent where the bound would break (99 % upper bound).
    mixed = easy + labels(0.93, 12, True)
    assert learned_threshold(mixed, ASKED, 0.95, GRID, 0.02, LIMITS).threshold > 0.93
    # Never under the floor, however easy.
    far = labels(0.97, 400) + [Label(0.90 + 0.0025 * (i % 20), False, f"key:{i % 7}") for i in range(800)]
    assert learned_threshold(far, ASKED, 0.95, GRID, 0.02, LIMITS).threshold == LIMITS.floor


def test_one_reporter_moves_the_threshold_one_bounded_step_and_past_the_ceiling_never():
    honest = labels(0.96, 100) + labels(0.99, 100)
    flood = [Label(s, True, "key:flood") for s in (0.955, 0.97, 0.99, 1.0) for _ in range(100)]
    decided = learned_threshold(honest + flood, ASKED, 0.95, GRID, 0.02, LIMITS)
    assert decided.demanded == 1.0
    assert decided.threshold == pytest.approx(0.95 + LIMITS.reporter_shift)
    assert set(decided.flags) == {"reporter:key:flood", "ceiling"}
    # The move names every key behind it, the flood first: who an operator should look at.
    assert decided.by_reporter[0] == ("key:flood", 400, 400) and len(decided.by_reporter) == 6
    assert decided.evidence()["by_reporter"][0] == ["key:flood", 400, 400]
    # Its flood alone, with no other reporter: the same bounded step.
    assert learned_threshold(flood, ASKED, 0.95, GRID, 0.02, LIMITS).threshold == pytest.approx(0.96)
    # Two reporters that agree move it as far as the evidence says, up to the ceiling and no further.
    agreeing = [Label(s, True, f"key:{i % 2}") for i, s in enumerate([0.955, 0.97, 0.99, 1.0] * 100)]
    decided = learned_threshold(agreeing, ASKED, 0.95, GRID, 0.02, LIMITS)
    assert decided.threshold == LIMITS.ceiling and "ceiling" in decided.flags


def test_false_labels_among_many_questions_asked_raise_nothing():
    # 8 false hits among 3,000 questions asked is 0.27 %, well within a 2 % bound.
    found = labels(0.955, 8, True) + labels(0.955, 20) + labels(0.965, 30)
    assert learned_threshold(found, ASKED, 0.95, GRID, 0.02, LIMITS).threshold is None


def test_operators_labels_are_trusted_whole():
    rejected = [Label(0.955, True, "operator:ann") for _ in range(30)] + labels(0.955, 10)
    assert learned_threshold(rejected, 300, 0.95, GRID, 0.02, LIMITS).threshold == 0.9575


def test_a_lowered_threshold_is_kept_while_the_bound_holds_and_entered_only_with_room_under_it():
    # 4 false hits at 0.93 among 600 labelled questions: 99 % upper bound 1.92 %, within 2 % but not 1.6 %.
    found = labels(0.97, 100) + labels(0.935, 20) + labels(0.93, 20) + labels(0.93, 4, True) + labels(0.0, 456)
    assert learned_threshold(found, ASKED, 0.95, GRID, 0.02, LIMITS).threshold == 0.935  # 0.93 not entered
    assert learned_threshold(found, ASKED, 0.95, GRID, 0.02, LIMITS, current=0.93).threshold == 0.93  # but kept


def test_the_shipped_calibration_says_nothing_of_thresholds_outside_its_grid():
    from trails.learning.shipped import at_threshold, grid_for

    grid = grid_for("embedding")
    assert at_threshold("embedding", min(grid)) is not None and at_threshold("embedding", max(grid)) is not None
    for outside in (min(grid) - 0.05, 0.3, 0.0, -1.0, max(grid) + 0.01):
        assert at_threshold("embedding", outside) is None, outside


def test_a_fit_on_pairs_takes_the_lowest_threshold_within_the_bound_and_measures_it_on_the_held_out_pairs():
    from trails.core.embedder_fit import ScoredPair, fit_pairs

    # 200 non-duplicates fitted on, 2 of them at 0.9 and above, one at 0.8; duplicates at 0.95.
    fitted = [ScoredPair(0.1, False, False)] * 197 + [ScoredPair(0.8, False, False), ScoredPair(0.9, False, False)]
    fitted += [ScoredPair(0.92, False, False)] + [ScoredPair(0.95, True, False)] * 50
    held = [
        ScoredPair(0.91, False, True),
        ScoredPair(0.2, False, True),
        ScoredPair(0.95, True, True),
        ScoredPair(0.85, True, True),
    ]
    fit = fit_pairs(fitted + held, bound=0.05, grid=[0.7, 0.8, 0.85, 0.9, 0.95])
    embedding = fit["matchers"]["embedding"]
    # 3 false hits of 200 at 0.8 has an upper bound of 3.9 %: within 5 %; 0.7 gives the same 3.
    assert (embedding["threshold"], embedding["false_hits"], embedding["holds"]) == (0.7, 3, True)
    assert [p["correct_hits"] for p in embedding["curve"]] == [50, 50, 50, 50, 50]
    held_out = fit["held_out"]
    assert (held_out["false_hits"], held_out["distinct"], held_out["reused"], held_out["duplicates"]) == (1, 2, 2, 2)
    strict = fit_pairs(fitted + held, bound=0.01, grid=[0.7, 0.8, 0.85, 0.9, 0.95])["matchers"]["embedding"]
    assert (strict["threshold"], strict["false_hits"], strict["holds"]) == (0.95, 0, False)
