"""Result statistics against scipy's reference computations."""

import math

import numpy as np
from scipy import stats

from isingattn.experiments._stats import mean_interval, paired_difference, slope_interval


def test_mean_interval_is_scipys_t_interval():
    x = [0.81, 0.84, 0.79, 0.88, 0.83]
    got = mean_interval(x)
    low, high = stats.t.interval(0.95, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert math.isclose(got.mean, np.mean(x)) and got.n == 5
    assert math.isclose(got.low, low) and math.isclose(got.high, high)
    one = mean_interval([0.5, float("nan")])
    assert one.mean == 0.5 and one.n == 1 and math.isnan(one.low)
    assert math.isnan(mean_interval([]).mean)


def test_paired_difference_uses_common_seeds_only():
    a = {0: 0.9, 1: 0.8, 2: 0.85, 7: 0.1}
    b = {0: 0.85, 1: 0.8, 2: 0.75}
    got = paired_difference(a, b)
    d = [0.05, 0.0, 0.10]
    ref = stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert got.n == 3 and math.isclose(got.mean, np.mean(d))
    assert math.isclose(got.low, ref.low) and math.isclose(got.high, ref.high)


def test_slope_interval_is_linregress_with_t_quantile():
    rng = np.random.default_rng(0)
    x = np.repeat(np.log2([16, 32, 64, 128]), 3)
    y = 0.01 * x + 0.02 * rng.standard_normal(x.size)
    got = slope_interval(x, y)
    ref = stats.linregress(x, y)
    h = stats.t.ppf(0.975, x.size - 2) * ref.stderr
    assert math.isclose(got.mean, ref.slope)
    assert math.isclose(got.low, ref.slope - h) and math.isclose(got.high, ref.slope + h)
    assert math.isnan(slope_interval([1, 1, 1], [1, 2, 3]).mean)
