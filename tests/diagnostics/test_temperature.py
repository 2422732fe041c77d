"""Effective temperature: maximum likelihood (exact log Z), maximum pseudo-likelihood (bootstrap)
and the numpyro NUTS posterior recover the true beta from exact samples within their reported
uncertainty; the full-size bootstrap's spread matches the spread over independent repetitions.

False-failure rates: each recovery assertion is a z-test at Z_ALPHA (rate ALPHA = 1e-4); the
bootstrap/repetition comparison uses the chi^2 interval of a sample standard deviation over
R = 40 repetitions at level ALPHA."""

import math
import warnings

import jax
import numpy as np
import pytest
import scipy.stats

from isingattn import diagnostics as dg
from isingattn.models import random_dense
from isingattn.samplers import ExactSampler
from tests._stats import ALPHA, Z_ALPHA

BETAS = (0.3, 0.8, 1.5)


@pytest.fixture(scope="module")
def model():
    return random_dense(jax.random.key(0), 8, J_scale=0.5, h_scale=0.4)


@pytest.fixture(scope="module")
def draws(model):
    """Exact samples at each beta, 4 chains x 1000 draws (one compiled shape)."""
    m = model.with_beta(np.array(BETAS))
    return m, ExactSampler().sample(m, jax.random.key(1), 1000, num_chains=4)


def test_ml_recovers_beta(draws):
    m, s = draws
    est = dg.effective_beta_ml(s, m)
    assert est.beta.shape == (3,) and est.method == "ml"
    z = np.abs(est.beta - np.array(BETAS)) / est.stderr
    assert np.all(z < Z_ALPHA), (est.beta, est.stderr)
    # stderr ~ 1 / sqrt(N Var(E)) for i.i.d. draws
    assert np.all(np.abs(est.ess / 4000 - 1) < 0.2)


def test_ml_recovers_negative_beta(model):
    """exp(-beta E) with beta < 0: samples of the negated model at |beta|."""
    neg = model.replace(h=-model.h, J=-model.J, beta=0.6)
    s = ExactSampler().sample(neg, jax.random.key(2), 1000, num_chains=4)
    est = dg.effective_beta_ml(s, model)
    assert abs(est.beta + 0.6) < Z_ALPHA * est.stderr


def test_mple_recovers_beta(draws):
    m, s = draws
    est = dg.effective_beta_mple(s, m, key=jax.random.key(3), num_bootstrap=100)
    assert est.bootstrap.shape == (3, 100)
    z = np.abs(est.beta - np.array(BETAS)) / est.stderr
    assert np.all(z < Z_ALPHA), (est.beta, est.stderr)


def test_bootstrap_spread_matches_repetitions(model):
    """R = 40 independent repetitions of N = 500 exact draws: the sd of the MPLE over
    repetitions against the bootstrap sd (full-size resamples, averaged over 4 repetitions).
    dwave-system's bootstrap (resamples of size num_bootstrap_samples = 50 < N) overstates it
    by about sqrt(N / 50)."""
    from dwave.system.temperatures import maximum_pseudolikelihood_temperature

    m = model.with_beta(0.8)
    R, N = 40, 500
    s = ExactSampler().sample(m, jax.random.key(4), N, num_chains=R)
    x = np.asarray(s.spins)
    reps = np.array([dg.effective_beta_mple(x[r][None], m, num_bootstrap=0).beta
                     for r in range(R)])
    sd_rep = reps.std(ddof=1)
    boot = np.mean([dg.effective_beta_mple(x[r][None], m, key=jax.random.key(10 + r),
                                           num_bootstrap=200).stderr for r in range(4)])
    lo, hi = np.sqrt(scipy.stats.chi2.ppf([ALPHA / 2, 1 - ALPHA / 2], R - 1) / (R - 1))
    ratio = boot / sd_rep
    assert 1 / hi < ratio < 1 / lo, (boot, sd_rep)
    # dwave-system on the same draws: same estimate, inflated spread
    bqm = m.to_bqm()
    T, Tb = maximum_pseudolikelihood_temperature(
        bqm, (x[0].astype(np.int8), list(range(m.n))), num_bootstrap_samples=50, seed=0)
    ours = dg.effective_beta_mple(x[0][None], m, num_bootstrap=0).beta
    assert 1 / T == pytest.approx(ours, rel=1e-4)
    sd_dwave = np.std(1 / np.asarray(Tb), ddof=1)
    assert sd_dwave / sd_rep > 1 / lo  # well outside what repetitions allow


def test_ground_states_and_bad_input(model):
    from isingattn import exact

    gs, _ = exact.ground_state(model)
    x = np.broadcast_to(np.asarray(gs), (2, 10, model.n))
    with pytest.warns(RuntimeWarning, match="local minima"):
        assert dg.effective_beta_mple(x, model, num_bootstrap=0).beta == math.inf
    with pytest.warns(RuntimeWarning, match="end of the energy spectrum"):
        assert dg.effective_beta_ml(x, model).beta == math.inf
    with pytest.raises(ValueError, match="at least 2 samples"):
        dg.effective_beta_ml(x[:1, :1], model)
    with pytest.raises(ValueError, match="model"):
        dg.effective_beta_ml(x, None)
    with pytest.raises(ValueError, match="key"):
        dg.effective_beta_mple(x, model, num_bootstrap=10)
    with pytest.raises(ValueError, match="method"):
        dg.effective_temperature(x, model, method="magic")


@pytest.mark.slow
def test_nuts_recovers_beta(draws):
    """One NUTS run per likelihood covers all three betas (a batch of models: one beta, or
    one (beta_h, beta_J) pair, per model)."""
    from isingattn.probabilistic import effective_beta_bayes

    m, s = draws
    truth = np.array(BETAS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        est = effective_beta_bayes(s, m, jax.random.key(5), num_warmup=200, num_samples=300)
        assert est.method == "nuts" and est.extra["likelihood"] == "exact"
        assert est.beta.shape == (3,)
        assert np.all(np.abs(est.beta - truth) < Z_ALPHA * est.stderr), (est.beta, est.stderr)
        ml = dg.effective_beta_ml(s, m)
        np.testing.assert_allclose(est.stderr, ml.stderr, rtol=0.35)  # Bernstein-von Mises
        sep = effective_beta_bayes(s, m, jax.random.key(7), separate_scales=True,
                                   num_warmup=200, num_samples=300)
        for site in ("beta_h", "beta_J"):
            mu, sd = sep.extra[site]["mean"], sep.extra[site]["sd"]
            assert np.all(np.abs(mu - truth) < Z_ALPHA * sd), (site, mu, sd)
        pl = effective_beta_bayes(s, m, jax.random.key(8), likelihood="pseudo",
                                  num_warmup=200, num_samples=300)
        assert np.all(np.abs(pl.beta - truth) < Z_ALPHA * pl.stderr), (pl.beta, pl.stderr)
