import math

import pytest

from trails.core.calibration import Label, choose_threshold, interval, learned_threshold, lower_bound, upper_bound


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


def test_few_labels_do_not_move_a_calibrated_threshold():
    grid = [0.94, 0.95, 0.96, 0.97]
    assert learned_threshold([Label(0.95, True)] * 3, 0.94, grid, bound=0.02) is None
    assert learned_threshold([Label(0.95, False)] * 10, 0.94, grid, bound=0.02) is None


def test_labels_that_show_a_broken_bound_raise_the_threshold_to_where_it_holds():
    grid = [0.94, 0.95, 0.96, 0.97]
    labels = [Label(0.945, True)] * 8 + [Label(0.945, False)] * 20 + [Label(0.965, False)] * 30
    assert learned_threshold(labels, 0.94, grid, bound=0.02) == 0.95
    # They never lower it.
    assert learned_threshold([Label(0.99, False)] * 500, 0.96, grid, bound=0.02) is None
