"""Mixing diagnostics against closed forms: AR(1) series and an exactly solvable two-state
Markov chain (tau_int, ESS), R-hat on chains stuck in the two modes of a bimodal model.

False-failure rates: each closed-form comparison is a z-test at Z_ALPHA (rate ALPHA = 1e-4) with
Sokal's asymptotic variance of tau_int, var(tau) ~ 2 (2M + 1) tau^2 / N. The short-chain tests
(mean="pooled" vs "chain") do not rely on that asymptotic formula: they split the chains into
independent groups and t-test the group mean (two-sided rate ALPHA = 1e-4 per assertion)."""

import math
import warnings

import jax
import numpy as np
import pytest
import scipy.signal
import scipy.stats

from isingattn import diagnostics as dg
from isingattn.models import IsingModel
from isingattn.samplers import ExactSampler
from tests._stats import ALPHA, Z_ALPHA


def ar1(phi, num_chains, num_draws, seed):
    rng = np.random.default_rng(seed)
    eps = rng.standard_normal((num_chains, num_draws)) * math.sqrt(1 - phi**2)
    x = scipy.signal.lfilter([1.0], [1.0, -phi], eps, axis=-1)
    # stationary start: x_0 ~ N(0, 1) carried forward
    x0 = rng.standard_normal((num_chains, 1))
    return x + x0 * phi ** np.arange(1, num_draws + 1)


def two_state_chain(u, v, num_chains, num_draws, seed):
    """Markov chain on {-1, +1}: P(-1 -> +1) = u, P(+1 -> -1) = v, started in equilibrium.
    Autocorrelation exactly lambda^t with lambda = 1 - u - v."""
    rng = np.random.default_rng(seed)
    x = np.empty((num_chains, num_draws))
    x[:, 0] = np.where(rng.random(num_chains) < u / (u + v), 1.0, -1.0)
    r = rng.random((num_chains, num_draws))
    for t in range(1, num_draws):
        up = x[:, t - 1] < 0
        flip = np.where(up, r[:, t] < u, r[:, t] < v)
        x[:, t] = np.where(flip, -x[:, t - 1], x[:, t - 1])
    return x


def sokal_sd(tau, M, N):
    return math.sqrt(2 * (2 * M + 1) / N) * abs(tau)


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9])
def test_tau_and_ess_match_ar1_closed_form(phi):
    x = ar1(phi, 4, 20000, seed=int(phi * 10))
    N = x.size
    truth = (1 + phi) / (1 - phi)
    tau, M = dg.integrated_autocorr_time(x, return_window=True)
    sd = sokal_sd(truth, int(M), N)
    assert abs(tau - truth) < Z_ALPHA * sd, (tau, truth, sd)
    ess = dg.effective_sample_size(x, method="mean")
    assert abs(ess / (N / truth) - 1) < Z_ALPHA * sd / truth, (ess, N / truth)
    # the FFT autocorrelation itself: rho(1) = phi within its standard error ~ 1/sqrt(N)
    rho1 = np.mean(dg.autocorrelation(x)[:, 1])
    assert abs(rho1 - phi) < Z_ALPHA * math.sqrt((1 + phi**2) / N) * 2


@pytest.mark.parametrize("u,v", [(0.2, 0.12), (0.9, 0.8)])
def test_tau_matches_two_state_markov_chain(u, v):
    """lambda = 1 - u - v: 0.68 (positively correlated, tau = 5.25) and -0.7 (anticorrelated,
    tau = 0.176 < 1; the |rho| window waits for the oscillation to die out)."""
    lam = 1 - u - v
    truth = (1 + lam) / (1 - lam)
    x = two_state_chain(u, v, 4, 20000, seed=3)
    tau, M = dg.integrated_autocorr_time(x, return_window=True)
    sd = sokal_sd((1 + abs(lam)) / (1 - abs(lam)), int(M), x.size)
    assert abs(tau - truth) < Z_ALPHA * sd, (tau, truth, sd)
    if lam > 0:
        ess = dg.effective_sample_size(x, method="mean")
        assert abs(ess * truth / x.size - 1) < Z_ALPHA * sd / truth


def test_tau_of_short_chain_is_nan_with_warning():
    x = ar1(0.99, 2, 200, seed=1)  # tau ~ 200: a window M >= 5 tau does not fit
    with pytest.warns(RuntimeWarning, match="too short"):
        tau = dg.integrated_autocorr_time(x)
    assert math.isnan(tau)


def test_tau_estimate_at_or_below_zero_is_nan_with_warning():
    """Differenced white noise, x_t = e_t - e_{t-1}: rho(1) = -1/2 and tau_int = 0 exactly, so
    the noisy estimate from short chains falls on both sides of 0. A stationary series has
    tau_int >= 0: the estimates <= 0 come back NaN with a warning, the others stay small."""
    taus, warned = [], 0
    for seed in range(20):
        x = np.diff(np.random.default_rng(seed).standard_normal((4, 201)), axis=-1)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            taus.append(dg.integrated_autocorr_time(x))
        warned += any("estimated <= 0" in str(m.message) for m in w)
    taus = np.array(taus)
    assert warned == np.isnan(taus).sum() > 0
    assert np.all(taus[~np.isnan(taus)] > 0) and np.all(taus[~np.isnan(taus)] < 0.5)


@pytest.mark.parametrize("phi", [0.0, 0.9])
def test_pooled_tau_matches_ar1_closed_form_on_long_chains(phi):
    x = ar1(phi, 4, 20000, seed=7 + int(phi * 10))
    truth = (1 + phi) / (1 - phi)
    tau, M = dg.integrated_autocorr_time(x, mean="pooled", return_window=True)
    assert abs(tau - truth) < Z_ALPHA * sokal_sd(truth, int(M), x.size), (tau, truth)


def group_taus(x, groups, mean):
    return np.array([dg.integrated_autocorr_time(g, mean=mean) for g in np.split(x, groups)])


@pytest.mark.parametrize("phi,num_draws", [(0.8, 200), (0.9, 400)])
def test_pooled_mean_removes_the_short_chain_bias(phi, num_draws):
    """Many short AR(1) chains (about 22 tau_int each): removing each chain's own mean biases
    tau_int low by about 2 M tau_int / N (~45 % here); one pooled mean leaves a bias of
    2 M tau_int / (chains N) (~0.2 %), below the test's resolution. 20 independent groups of
    40 chains: a two-sided t-test of the group mean against (1 + phi) / (1 - phi)."""
    truth = (1 + phi) / (1 - phi)
    x = ar1(phi, 800, num_draws, seed=11)
    t_crit = scipy.stats.t.isf(ALPHA / 2, df=19)
    pooled = group_taus(x, 20, "pooled")
    se = pooled.std(ddof=1) / math.sqrt(20)
    assert abs(pooled.mean() - truth) < t_crit * se, (pooled.mean(), truth, se)
    chain = group_taus(x, 20, "chain")
    se_c = chain.std(ddof=1) / math.sqrt(20)
    assert truth - chain.mean() > t_crit * se_c, (chain.mean(), truth, se_c)


def metropolis(J, beta, x0, num_sweeps, seed):
    """Single-site Metropolis on a dense SPIN model with h = 0; x0 (chain, n)."""
    rng = np.random.default_rng(seed)
    x = np.array(x0, float)
    out = np.empty((x.shape[0], num_sweeps, x.shape[1]))
    for t in range(num_sweeps):
        for i in range(x.shape[1]):
            dE = 2 * x[:, i] * (x @ J[i])
            acc = rng.random(x.shape[0]) < np.exp(-beta * np.maximum(dE, 0))
            x[:, i] = np.where(acc, -x[:, i], x[:, i])
        out[:, t] = x
    return out


def test_rhat_flags_chains_stuck_in_two_modes_and_passes_mixed_ones():
    n = 10
    J = 3.0 / n * (np.ones((n, n)) - np.eye(n))  # Curie-Weiss, deep in the ordered phase
    x0 = np.array([[1.0] * n, [1.0] * n, [-1.0] * n, [-1.0] * n])
    stuck = metropolis(J, 1.0, x0, 200, seed=0)
    m_stuck = dg.magnetization(stuck)
    assert dg.rhat(m_stuck) > 1.5
    # Same dynamics in the disordered phase from the same far-apart starts: mixes.
    mixed = metropolis(J, 0.2, x0, 200, seed=1)
    assert dg.rhat(dg.magnetization(mixed)) < 1.01
    # Exact i.i.d. samples of the bimodal model itself: R-hat ~ 1.
    model = IsingModel(np.zeros(n), J, beta=1.0)
    s = ExactSampler().sample(model, jax.random.key(0), 1000, num_chains=4)
    assert dg.rhat(s.energy) < 1.01
    assert dg.rhat(dg.magnetization(s)) < 1.01


def test_arviz_conversion_and_summary():
    model = IsingModel(np.array([0.2, -0.1, 0.0]), np.array(
        [[0, 0.5, 0], [0.5, 0, -0.3], [0, -0.3, 0]]), beta=0.7, labels=["a", "b", "c"])
    s = ExactSampler().sample(model, jax.random.key(1), 200, num_chains=4)
    idata = dg.to_arviz(s, model)
    post = idata.posterior
    assert dict(post["x"].sizes) == {"chain": 4, "draw": 200, "variable": 3}
    assert list(post["x"].coords["variable"].values) == ["a", "b", "c"]
    np.testing.assert_allclose(post["energy"].values, np.asarray(s.energy), rtol=1e-6)
    table = dg.summary(s, model)
    assert {"energy", "magnetization", "x[a]", "x[c]"} <= set(table.index)
    assert {"ess_bulk", "r_hat", "tau_int"} <= set(table.columns)
    assert np.all(np.abs(table["tau_int"] - 1) < 0.5)  # i.i.d. draws
    # batch of models: batch dims after (chain, draw)
    mb = IsingModel(np.zeros((2, 3)), np.zeros((3, 3)))
    sb = ExactSampler().sample(mb, jax.random.key(2), 200, num_chains=4)
    ib = dg.to_arviz(sb, mb)
    assert ib.posterior["x"].dims == ("chain", "draw", "batch_0", "variable")
    assert dg.effective_sample_size(sb.energy).shape == (2,)


def test_bad_input():
    with pytest.raises(ValueError, match="chain axis"):
        dg.integrated_autocorr_time(np.zeros(100))
    with pytest.raises(ValueError, match="at least 4 draws"):
        dg.effective_sample_size(np.zeros((4, 1)))
    with pytest.raises(ValueError, match="at least 2 chains"):
        dg.rhat(np.random.default_rng(0).standard_normal((1, 100)))
    with pytest.raises(ValueError, match="finite"):
        dg.effective_sample_size(np.full((2, 10), np.nan))
    with pytest.raises(TypeError, match="samples.energy"):
        model = IsingModel(np.zeros(2), np.zeros((2, 2)))
        dg.rhat(ExactSampler().sample(model, jax.random.key(0), 10, num_chains=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(dg.integrated_autocorr_time(np.ones((2, 50))))  # constant: no tau
        assert math.isnan(dg.integrated_autocorr_time(np.ones((2, 50)), mean="pooled"))
    with pytest.raises(ValueError, match=r"mean must be one of 'chain', 'pooled'.*got 'global'"):
        dg.integrated_autocorr_time(np.zeros((2, 50)), mean="global")
