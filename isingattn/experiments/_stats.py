"""Statistics of experiment results: means with intervals over seeds, paired differences, the
slope of a difference against log length.

Intervals are Student-t intervals (small numbers of seeds); a difference is paired when both
variants ran on the same seeds, which share initialization seeds and training data.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


class Interval(NamedTuple):
    """A mean (or slope) with its two-sided ``level`` interval ``[low, high]`` over ``n``
    values (NaN bounds when ``n < 2``)."""

    mean: float
    low: float
    high: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def _t(level, dof):
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, dof))


def mean_interval(values, level: float = 0.95) -> Interval:
    """Mean of ``values`` (NaN dropped) with its Student-t interval."""
    x = np.asarray(values, float)
    x = x[np.isfinite(x)]
    n = x.size
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    m = float(x.mean())
    if n < 2:
        return Interval(m, math.nan, math.nan, n)
    h = _t(level, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    return Interval(m, m - h, m + h, n)


def paired_difference(a: dict, b: dict, level: float = 0.95) -> Interval:
    """Mean of ``a[s] - b[s]`` over the seeds ``s`` both have (dicts seed -> value), with the
    paired t interval."""
    seeds = sorted(set(a) & set(b))
    return mean_interval([a[s] - b[s] for s in seeds], level)


def slope_interval(x, y, level: float = 0.95) -> Interval:
    """Least-squares slope of ``y`` on ``x`` with its t interval (``n - 2`` degrees of freedom):
    e.g. a paired difference against ``log2(length)``, one point per (length, seed)."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = x.size
    if n < 2 or np.ptp(x) == 0:
        return Interval(math.nan, math.nan, math.nan, n)
    xc = x - x.mean()
    slope = float(np.sum(xc * (y - y.mean())) / np.sum(xc * xc))
    if n < 3:
        return Interval(slope, math.nan, math.nan, n)
    resid = y - y.mean() - slope * xc
    se = math.sqrt(float(np.sum(resid**2)) / (n - 2) / float(np.sum(xc * xc)))
    h = _t(level, n - 2) * se
    return Interval(slope, slope - h, slope + h, n)
