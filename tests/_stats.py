"""Statistical assertions shared by the test suite.

Every helper states its false-failure rate: with fixed keys a test is deterministic, but the key
was not chosen to pass, so the rate is the chance that a correct sampler fails for a random key.
"""

from __future__ import annotations

import arviz as az
import numpy as np
import scipy.stats

from isingattn import exact

#: Default per-assertion false-failure rate. A test that makes m such assertions fails a correct
#: sampler with probability at most m * ALPHA (Bonferroni).
ALPHA = 1e-4
#: Two-sided normal quantile for ALPHA (|z| > Z_ALPHA with probability ALPHA).
Z_ALPHA = float(scipy.stats.norm.isf(ALPHA / 2))


def chi2_pvalue(counts, probs, *, min_expected=5.0, effective_fraction=1.0):
    """Pearson chi^2 p-value of observed ``counts`` against ``probs``.

    Bins with expected count below ``min_expected`` are pooled into one bin (the classic rule
    for the chi^2 approximation); fewer than 2 bins after pooling is an error: too thin to judge.
    ``effective_fraction`` (ESS / N, <= 1) deflates the statistic for correlated draws.
    """
    counts = np.asarray(counts, float)
    probs = np.asarray(probs, float)
    N = counts.sum()
    expected = N * probs
    big = expected >= min_expected
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] < min_expected:  # pooled bin still thin: merge it into the smallest kept bin
        if big.sum() == 0:
            raise ValueError("no bin reaches the minimum expected count; draw more samples")
        j = np.argmin(exp[:-1])
        obs[j] += obs[-1]
        exp[j] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    if len(exp) < 2:
        raise ValueError("fewer than 2 bins with enough expected counts; the test cannot judge")
    stat = float(np.sum((obs - exp) ** 2 / exp)) * effective_fraction
    return float(scipy.stats.chi2.sf(stat, len(exp) - 1))


def assert_chi2_matches(states, model, *, alpha=ALPHA, effective_fraction=1.0):
    """Sampled ``states`` (..., n) of one model pass a chi^2 test against the exact
    probabilities at level ``alpha`` (false-failure rate ``alpha``)."""
    n = model.n
    idx = np.asarray(exact.state_to_index(np.asarray(states).reshape(-1, n), model.vartype))
    probs = np.asarray(exact.probabilities(model), float)
    counts = np.bincount(idx, minlength=probs.size)
    p = chi2_pvalue(counts, probs, effective_fraction=effective_fraction)
    assert p > alpha, f"chi^2 goodness of fit rejected at level {alpha}: p = {p:.3g}"


def ess(x):
    """Effective sample size of ``x`` shaped (chain, draw) via arviz (rank-normalized bulk ESS
    is not used: plain ``method="mean"`` matches the MCSE of a mean)."""
    return float(az.ess(np.asarray(x, float), method="mean"))


def assert_mean_within_mcse(x, truth, *, z=Z_ALPHA, what="estimate"):
    """The mean of ``x`` (chain, draw) is within ``z`` Monte Carlo standard errors of ``truth``;
    the MCSE is ``sd / sqrt(ESS)`` with arviz's ESS. False-failure rate ``2 * norm.sf(z)``."""
    x = np.asarray(x, float)
    sd = x.std()
    if sd == 0:
        assert np.allclose(x.mean(), truth, atol=1e-6), f"{what}: constant {x.mean()} != {truth}"
        return
    e = ess(x)
    err = abs(x.mean() - truth) / (sd / np.sqrt(e))
    assert err < z, f"{what}: |{x.mean():.5g} - {truth:.5g}| = {err:.2f} MCSE (ESS {e:.0f}) > {z:.2f}"
