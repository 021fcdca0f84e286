"""arithrepro/stats.py: each test against a plain enumeration or a textbook value, and each
outcome reached on numbers built to reach it."""

import itertools
import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arithrepro import stats


def brute_one_sided(a, b):
    """The exact permutation p of mean(a) − mean(b), by enumerating every split."""
    pool, na = a + b, len(a)
    observed = statistics.fmean(a) - statistics.fmean(b)
    hits = total = 0
    for idx in itertools.combinations(range(len(pool)), na):
        x = [pool[i] for i in idx]
        y = [pool[i] for i in range(len(pool)) if i not in idx]
        total += 1
        hits += statistics.fmean(x) - statistics.fmean(y) >= observed - 1e-12
    return hits / total


values = st.lists(st.integers(0, 20).map(lambda v: v / 20), min_size=2, max_size=5)


@settings(max_examples=40, deadline=None)
@given(values, values)
def test_the_permutation_p_is_the_enumerated_one(a, b):
    c = stats.compare(a, b)
    if c.p < 1.0:
        assert c.p == pytest.approx(brute_one_sided(a, b), abs=1e-9)
    assert c.min_p == pytest.approx(1 / math.comb(len(a) + len(b), len(a)))


def test_five_against_five_separated_is_the_smallest_p():
    c = stats.compare([0.6, 0.61, 0.62, 0.63, 0.64], [0.5, 0.51, 0.52, 0.53, 0.54])
    assert c.p == pytest.approx(1 / 252) and c.outcome == stats.YES
    assert c.ci[0] > 0 and c.g > 1


def test_reversed_and_overlapping():
    hi, lo = [0.6, 0.61, 0.62, 0.63, 0.64], [0.5, 0.51, 0.52, 0.53, 0.54]
    assert stats.compare(lo, hi).outcome == stats.NO
    assert stats.compare([0.41, 0.45, 0.38, 0.40, 0.42],
                         [0.40, 0.41, 0.39, 0.42, 0.38]).outcome == stats.CLOSE


def test_two_against_two_can_never_decide():
    c = stats.compare([0.9, 0.91], [0.1, 0.11])
    assert c.outcome == stats.SMALL and c.min_p == pytest.approx(1 / 6)
    assert "cannot go below 0.167" in c.words()
    assert c.needed.startswith("3 seeds a side can reach p ≤ 0.05")   # 1 / C(6, 3) = 1/20


def test_one_seed_a_side_reads_without_an_interval_or_an_effect_size():
    c = stats.compare([0.8], [0.55])
    assert c.words(100, " points") == ("Δ +25.0 points, permutation p 0.500 (1 vs 1; at these n "
                                       "p cannot go below 0.500)")


def test_hedges_g_matches_its_formula():
    a, b = [1.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0]
    pooled = math.sqrt((2 * 1.0 + 3 * statistics.variance(b)) / 5)
    assert stats.compare(a, b).g == pytest.approx((2 - 3.5) / pooled * (1 - 3 / (4 * 7 - 9)))


def test_paired_sign_flip_smallest_p_over_five_runs():
    p = stats.paired([0.9, 0.8, 0.85, 0.9, 0.7], [0.5, 0.4, 0.45, 0.6, 0.3])
    assert p.p == pytest.approx(1 / 32) and p.outcome == stats.YES
    assert stats.paired([1, 1], [0, 0]).outcome == stats.SMALL   # 1/4 at best
    assert stats.paired([1, 1], [0, 0]).needed.startswith("5 runs can reach")


def test_against_the_source():
    # seeds spread around the value: an interval inside the band
    a = stats.against([0.997, 0.998, 0.999, 0.998, 0.997], 0.9979, 0.01)
    assert a.method == "t over seeds" and a.outcome == stats.YES
    # far below it: disjoint
    assert stats.against([0.5, 0.55, 0.6], 0.9979, 0.01).outcome == stats.NO
    # a wide spread holds both
    assert stats.against([0.9, 1.0, 0.95], 0.9979, 0.01).outcome == stats.CLOSE
    # one seed gives no interval
    assert stats.against([1.0], 1.0, 0.01).outcome == stats.SMALL


def test_all_seeds_at_one_hundred_percent_take_an_exact_binomial_bound():
    a = stats.against([1.0] * 5, 1.0, 0.01, trials=961)
    assert a.method.startswith("exact binomial")
    # Clopper-Pearson lower bound of 4805 of 4805: 0.025 ** (1 / 4805)
    assert a.interval[0] == pytest.approx(0.025 ** (1 / 4805), rel=1e-9)
    assert a.outcome == stats.YES
    # the same on 20 problems a seed cannot tell 1.0 from 0.97
    assert stats.against([1.0] * 5, 1.0, 0.01, trials=20).outcome == stats.CLOSE


def test_a_proportions_interval_stays_inside_zero_to_one():
    seeds = [1.0, 1.0, 0.999, 1.0, 1.0]
    free = stats.against(seeds, 0.975, 0.025)   # the plain scale leaves the range
    assert free.interval[1] > 1.0
    held = stats.against(seeds, 0.975, 0.025, trials=1000, scale="proportion")
    assert 0.95 < held.interval[0] < held.interval[1] < 1.0 and held.outcome == stats.YES
    assert "logit" in held.method
    low = stats.against([0.0, 0.002, 0.0], 0.0, 0.05, trials=500, scale="proportion")
    assert 0.0 < low.interval[0] < low.interval[1] < 0.05 and low.outcome == stats.YES


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=2, max_size=6), st.sampled_from(["proportion", "positive"]))
def test_no_interval_leaves_its_metrics_range(xs, scale):
    a = stats.against(xs if scale == "proportion" else [x + 1e-3 for x in xs], 0.5, 0.1,
                      trials=100, scale=scale)
    if not math.isnan(a.interval[0]):
        assert a.interval[0] >= 0.0 and (scale == "positive" or a.interval[1] <= 1.0)


def test_a_loss_interval_is_taken_on_the_log_scale():
    a = stats.against([0.001, 0.03, 0.002, 0.05], 0.01, 0.005, scale="positive")
    assert a.interval[0] > 0 and "log scale" in a.method
    plain = stats.against([0.001, 0.03, 0.002, 0.05], 0.01, 0.005)
    assert plain.interval[0] < 0


def test_a_stated_band_replaces_the_tolerance():
    # a step on the source's 100-step grid: 300 means 201-300; every seed later reads "no"
    late = stats.against([350, 370, 398, 380, 372], 300, 0, scale="positive", band=(201, 300))
    assert late.band == (201, 300) and late.outcome == stats.NO


def test_the_outside_p_agrees_with_the_interval():
    for xs in ([0.5, 0.55, 0.6], [0.9, 1.0, 0.95], [0.97, 0.975, 0.98, 0.978]):
        a = stats.against(xs, 0.9979, 0.01)
        assert (a.p_out <= stats.ALPHA) == (a.outcome == stats.NO)


def test_holm_against_its_definition():
    ps = [0.01, 0.04, 0.03, 0.2]
    # sorted 0.01, 0.03, 0.04, 0.2 times 4, 3, 2, 1, running maximum
    assert stats.holm(ps) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    assert stats.holm([0.6, 0.6]) == [1.0, 1.0]


def test_a_claim_of_parts():
    yes = stats.compare([0.6, 0.61, 0.62, 0.63, 0.64], [0.5, 0.51, 0.52, 0.53, 0.54])
    # one reversal at p 1/252 survives Holm over three parts; at p 0.03 it would not
    rev = stats.compare([0.5, 0.51, 0.52, 0.53, 0.54], [0.6, 0.61, 0.62, 0.63, 0.64])
    assert stats.combine([yes, yes, rev]) == stats.NO
    weak = stats.paired([0.9, 0.8, 0.85, 0.9, 0.7], [0.95, 0.9, 0.9, 0.95, 0.8])   # p_rev 1/32
    assert weak.outcome == stats.NO and stats.combine([yes, weak]) == stats.CLOSE
    assert stats.combine([yes, yes]) == stats.YES
    small = stats.compare([0.9], [0.1])
    assert stats.combine([yes, small]) == stats.SMALL


def test_power_counts_the_seeds_a_close_effect_needs():
    c = stats.compare([0.41, 0.45, 0.38, 0.40, 0.42], [0.40, 0.41, 0.39, 0.42, 0.38])
    assert c.outcome == stats.CLOSE
    n = int(c.needed.split("about ")[1].split(" ")[0])
    assert n > 5
    # the power of Student's t at that n reaches 80 %, one fewer does not
    assert stats._power_n(c.g, 2) == n
    reverse = stats.compare([0.40, 0.41, 0.39, 0.42, 0.38], [0.41, 0.45, 0.38, 0.40, 0.42])
    assert "not in the claimed direction" in reverse.needed


def test_counts_read_as_whole_numbers():
    words = stats.against([202368.0] * 5, 202368, 0).words()
    assert "202,368 over 5 seeds" in words and "202368.000" not in words
    assert "Δ +830 steps" in stats.paired([1000, 2000, 1500, 1800, 1850],
                                          [500, 800, 700, 900, 1100]).words(unit=" steps")
    assert "0.994 against 0.900" in stats.above([0.99, 0.995, 0.997], 0.9).words()
    assert "99.9 %" in stats.against([0.999] * 3, 1.0, 0.01).words(100, " %")


def test_above_a_bar():
    assert stats.above([0.137, 0.12, 0.15, 0.14, 0.13], 0.10).outcome == stats.YES
    assert stats.above([0.09, 0.08, 0.085, 0.07], 0.10).outcome == stats.NO
    assert stats.above([0.05], 0.10).outcome == stats.SMALL   # one seed cannot say
    assert stats.above([1.0, 1.0, 1.0], 0.5).method == "exact sign"
    assert stats.above([1.0] * 5, 0.5).p == pytest.approx(1 / 32)
