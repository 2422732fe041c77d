"""Distances: zero for identical distributions, hand-computed values for hand-made pairs, the
empirical TV of exact samples shrinks like 1/sqrt(N) (it matches the exact expectation for a
perfect sampler), chi^2 goodness of fit, moment errors, energy histograms, hashing for large n.

False-failure rates: the TV-shrinkage test is a t-test over R = 16 independent repetitions at
level ALPHA per sample size (3 sizes); the chi^2 acceptance test rejects a correct sampler with
probability ALPHA."""

import math

import jax
import numpy as np
import pytest
import scipy.stats

from isingattn import diagnostics as dg
from isingattn import exact
from isingattn.models import IsingModel, random_dense
from isingattn.samplers import ExactSampler
from tests._stats import ALPHA

P = np.array([0.5, 0.5, 0.0, 0.0])
Q = np.array([0.25, 0.25, 0.25, 0.25])


def test_hand_made_pairs():
    assert dg.total_variation(P, Q) == pytest.approx(0.5)
    assert dg.kl_divergence(P, Q) == pytest.approx(math.log(2))
    assert dg.kl_divergence(Q, P) == math.inf
    assert dg.js_divergence(P, Q) == pytest.approx(0.75 * math.log(4 / 3))
    assert dg.hellinger(P, Q) == pytest.approx(math.sqrt(1 - 1 / math.sqrt(2)))
    disjoint = np.array([0.0, 0.0, 0.5, 0.5])
    assert dg.total_variation(P, disjoint) == pytest.approx(1.0)
    assert dg.js_divergence(P, disjoint) == pytest.approx(math.log(2))
    assert dg.hellinger(P, disjoint) == pytest.approx(1.0)
    # the same pairs through an empirical distribution (states in index order: bit i = var i)
    states = np.array([[-1, -1], [1, -1]] * 2)
    e = dg.EmpiricalDistribution.from_states(states, "SPIN")
    np.testing.assert_allclose(e.dense(), P)
    assert dg.total_variation(e, Q) == pytest.approx(0.5)
    assert dg.kl_divergence(e, Q) == pytest.approx(math.log(2))
    assert dg.kl_divergence(Q, e) == math.inf
    assert dg.js_divergence(Q, e) == pytest.approx(0.75 * math.log(4 / 3))
    assert dg.hellinger(e, Q) == pytest.approx(math.sqrt(1 - 1 / math.sqrt(2)))
    # additive smoothing: counts (2, 2, 0, 0) + 1 over 4 states = (3, 3, 1, 1) / 8
    Ps = np.array([3, 3, 1, 1]) / 8
    assert dg.kl_divergence(Q, e, pseudocount=1.0) == pytest.approx(
        float(np.sum(Q * np.log(Q / Ps))))


def test_zero_for_identical_distributions():
    model = random_dense(jax.random.key(0), 6, J_scale=0.5, h_scale=0.5, beta=0.8)
    p = np.asarray(exact.probabilities(model), float)
    for f in (dg.total_variation, dg.kl_divergence, dg.js_divergence, dg.hellinger):
        assert f(model, p) == pytest.approx(0.0, abs=1e-6)
    s = ExactSampler().sample(model, jax.random.key(1), 500, num_chains=2)
    e = dg.empirical_distribution(s, model)
    for f in (dg.total_variation, dg.kl_divergence, dg.js_divergence, dg.hellinger):
        assert f(e, e) == pytest.approx(0.0, abs=1e-12)
        # the sparse path (model probabilities of the sampled states only) equals the dense one
        assert f(e, model) == pytest.approx(f(e.dense(), p), abs=1e-6)
        assert f(model, e) == pytest.approx(f(p, e.dense()), abs=1e-6)


def test_expected_tv_formula_against_direct_sum():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    for N in (1, 7, 50):
        direct = 0.0
        for px in p:
            k = np.arange(N + 1)
            direct += np.sum(scipy.stats.binom.pmf(k, N, px) * np.abs(k - N * px)) / (2 * N)
        assert dg.expected_tv_iid(p, N) == pytest.approx(direct, rel=1e-10)


def test_empirical_tv_of_exact_samples_shrinks_like_inverse_sqrt_n():
    model = random_dense(jax.random.key(2), 6, J_scale=0.4, h_scale=0.4, beta=1.0)
    p = np.asarray(exact.probabilities(model), float)
    R, Nmax = 16, 16000
    x = np.asarray(ExactSampler().sample(model, jax.random.key(3), Nmax, num_chains=R).spins)
    t = scipy.stats.t.isf(ALPHA / 2, R - 1)
    scaled = []
    for N in (250, 2000, 16000):
        tv = np.array([dg.total_variation(dg.EmpiricalDistribution.from_states(x[r, :N]), p)
                       for r in range(R)])
        expected = float(dg.expected_tv_iid(p, N))
        assert abs(tv.mean() - expected) < t * tv.std(ddof=1) / math.sqrt(R), (N, tv.mean(),
                                                                               expected)
        scaled.append(expected * math.sqrt(N))
    # the exact expectation itself is ~ c / sqrt(N) once every state is well populated
    assert scaled[2] == pytest.approx(scaled[1], rel=0.05)
    assert scaled[1] / scaled[0] == pytest.approx(1.0, rel=0.25)


def test_hashing_for_large_n():
    rng = np.random.default_rng(0)
    base = rng.choice([-1, 1], size=(50, 100))
    states = base[rng.integers(0, 50, size=1000)]
    e = dg.EmpiricalDistribution.from_states(states, "SPIN")
    assert e.num_samples == 1000 and e.num_states == len(np.unique(states, axis=0))
    decoded = e.states()
    for row, c in zip(decoded, e.counts):
        assert np.sum(np.all(states == row, axis=1)) == c
    e2 = dg.EmpiricalDistribution.from_states(base, "SPIN")  # uniform over the 50 rows
    direct = 0.5 * sum(abs(c / 1000 - 1 / 50) for c in e.counts) + 0.5 * (50 - e.num_states) / 50
    assert dg.total_variation(e, e2) == pytest.approx(direct)
    with pytest.raises(ValueError, match="n <= 24"):
        e.dense()


def test_chi2_moment_errors_and_histograms():
    model = random_dense(jax.random.key(4), 6, J_scale=0.5, h_scale=0.5, beta=0.7)
    s = ExactSampler().sample(model, jax.random.key(5), 2000, num_chains=2)
    assert dg.chi2_test(s, model).pvalue > ALPHA
    hot = ExactSampler().sample(model.with_beta(0.35), jax.random.key(5), 2000, num_chains=2)
    assert dg.chi2_test(hot.spins, model).pvalue < 1e-8
    with pytest.raises(ValueError, match="draw more samples"):
        dg.chi2_test(np.asarray(s.spins)[:, :3], model)
    err = dg.moment_errors(s, model)
    bad = dg.moment_errors(hot.spins, model)
    assert err["marginal_max"] < 0.1 and bad["correlation_max"] > err["correlation_max"]
    assert abs(bad["energy_error"]) > 5 * abs(err["energy_error"])
    h = dg.energy_histogram(s, model, bins=20)
    w = np.diff(h.edges)
    assert np.sum(h.density * w) == pytest.approx(1.0)
    assert np.sum(h.exact_density * w) == pytest.approx(1.0, abs=1e-5)
    E, p = dg.exact_energy_distribution(model)
    assert np.sum(p * E) == pytest.approx(float(exact.mean_energy(model)), abs=1e-4)


def test_masked_model_states():
    model = IsingModel(np.array([0.3, 0.0, -0.2]), np.zeros((3, 3)),
                       mask=np.array([True, False, True]))
    e = dg.EmpiricalDistribution.from_states(np.array([[[1, 1, 1]]]), "SPIN")  # masked at +1
    assert dg.kl_divergence(e, model) == math.inf  # probability 0 under the model
    assert dg.total_variation(e, model) == pytest.approx(1.0)


def test_bad_input():
    with pytest.raises(ValueError, match="same number of variables"):
        dg.total_variation(P, np.ones(8) / 8)
    with pytest.raises(ValueError, match="sum to 1"):
        dg.total_variation(P, np.ones(4))
    with pytest.raises(ValueError, match=r"\(2\^n,\)"):
        dg.total_variation(P, np.ones(3) / 3)
    with pytest.raises(TypeError, match="EmpiricalDistribution"):
        dg.hellinger(P, "uniform")
    with pytest.raises(ValueError, match="pseudocount"):
        dg.kl_divergence(P, Q, pseudocount=-1)
