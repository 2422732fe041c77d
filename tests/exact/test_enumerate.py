"""Exact enumeration against an independent float64 brute force and against dimod.ExactSolver."""

from __future__ import annotations

import dimod
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import logsumexp

from isingattn import exact
from isingattn.models import IsingModel, chain, random_dense, square_lattice

from .._stats import assert_chi2_matches


def brute(model):
    """log Z, <x>, <x x^T>, <E>, p of ONE model by listing states in numpy float64 (no shared
    code with isingattn.exact beyond the model's energy formula, re-derived here)."""
    n = model.n
    lo, hi = model.vartype.values
    idx = np.arange(2**n)
    X = np.where((idx[:, None] >> np.arange(n)) & 1, hi, lo).astype(float)
    dense = model.to_dense()
    h = np.asarray(dense.h, float)
    J = np.asarray(dense.J, float)
    mask = np.asarray(dense.mask)
    Xm = X * mask
    Jm = J * np.outer(mask, mask)
    E = -(Xm @ (h * mask)) - 0.5 * np.einsum("si,ij,sj->s", Xm, Jm, Xm) - float(dense.offset)
    lw = -float(dense.beta) * E
    lw[np.any(~mask & (X == hi), axis=1)] = -np.inf  # masked variables held at the low value
    logZ = logsumexp(lw)
    p = np.exp(lw - logZ)
    return logZ, p @ X, np.einsum("s,si,sj->ij", p, X, X), p @ np.where(np.isfinite(lw), E, 0), p


def exact_solver_moments(model):
    """The same quantities from dimod.ExactSolver's energies (dimod sign converted by to_bqm)."""
    ss = dimod.ExactSolver().sample(model.to_bqm())
    X = ss.record.sample.astype(float)
    cols = [list(ss.variables).index(i) for i in range(model.n)]
    X = X[:, cols]
    lw = -float(model.beta) * ss.record.energy
    logZ = logsumexp(lw)
    p = np.exp(lw - logZ)
    return logZ, p @ X, np.einsum("s,si,sj->ij", p, X, X)


@pytest.mark.parametrize("n", [1, 2, 5, 9, 12])
@pytest.mark.parametrize("vartype", ["SPIN", "BINARY"])
def test_moments_equal_brute_force_and_exact_solver(n, vartype):
    model = random_dense(jax.random.key(n), n, beta=0.8, vartype=vartype).replace(offset=0.4)
    mo = exact.moments(model)
    logZ, mean, corr, energy, p = brute(model)
    assert float(mo.log_partition) == pytest.approx(logZ, rel=1e-5, abs=1e-5)
    np.testing.assert_allclose(mo.marginals, mean, atol=2e-5)
    np.testing.assert_allclose(mo.correlations, corr, atol=2e-5)
    assert float(mo.mean_energy) == pytest.approx(energy, rel=1e-4, abs=1e-4)
    np.testing.assert_allclose(exact.probabilities(model), p, atol=1e-6)
    dl, dm, dc = exact_solver_moments(model)
    assert float(mo.log_partition) == pytest.approx(dl, rel=1e-5, abs=1e-5)
    np.testing.assert_allclose(mo.marginals, dm, atol=2e-5)
    np.testing.assert_allclose(mo.correlations, dc, atol=2e-5)


def test_chunked_path_batched_masked_sparse():
    # n = 16 > 13 low bits exercises the high-bit chunks; batch of 3 with different masks
    model = random_dense(jax.random.key(11), 16, J_scale=0.3, batch_shape=(3,), beta=0.9)
    mask = np.ones((3, 16), bool)
    mask[1, [0, 7, 15]] = False
    model = model.replace(mask=jnp.asarray(mask))
    mo = exact.moments(model)
    for b in range(3):
        logZ, mean, corr, energy, _ = brute(model[b])
        assert float(mo.log_partition[b]) == pytest.approx(logZ, rel=1e-5)
        np.testing.assert_allclose(mo.marginals[b], mean, atol=3e-5)
        np.testing.assert_allclose(mo.correlations[b], corr, atol=3e-5)
        assert float(mo.mean_energy[b]) == pytest.approx(energy, rel=1e-4, abs=1e-4)
    np.testing.assert_allclose(np.asarray(mo.marginals)[1, [0, 7, 15]], -1.0)
    lat = square_lattice((3, 4), J=0.7, h=0.2, beta=0.5)
    np.testing.assert_allclose(exact.log_partition(lat), brute(lat)[0], rtol=1e-6)
    np.testing.assert_allclose(exact.marginals(lat), brute(lat)[1], atol=2e-5)


def test_state_ordering_is_bit_i_of_index():
    states = np.asarray(exact.enumerate_states(3, "SPIN"))
    np.testing.assert_array_equal(states[0], [-1, -1, -1])
    np.testing.assert_array_equal(states[1], [1, -1, -1])
    np.testing.assert_array_equal(states[6], [-1, 1, 1])
    assert list(np.asarray(exact.state_to_index(states, "SPIN"))) == list(range(8))
    b = np.asarray(exact.enumerate_states(3, "BINARY"))
    assert list(np.asarray(exact.state_to_index(b, "BINARY"))) == list(range(8))
    # a single strong positive field on variable 1 puts the mass on indices with bit 1 set
    m = IsingModel(h=[0.0, 10.0, 0.0], J=np.zeros((3, 3)))
    p = np.asarray(exact.probabilities(m))
    assert p[[2, 3, 6, 7]].sum() > 0.999


@pytest.mark.parametrize("vartype", ["SPIN", "BINARY"])
def test_ground_state_equals_exact_solver(vartype):
    model = random_dense(jax.random.key(21), 11, vartype=vartype)
    state, energy = exact.ground_state(model)
    ss = dimod.ExactSolver().sample(model.to_bqm())
    assert float(energy) == pytest.approx(ss.first.energy, rel=1e-5)
    assert float(model.energy(state)) == pytest.approx(ss.first.energy, rel=1e-5)


def test_exact_samples_fit_probabilities():
    model = random_dense(jax.random.key(4), 8, beta=0.6).replace(
        mask=jnp.array([True] * 6 + [False, True]))
    draws = exact.sample(model, jax.random.key(0), 20000)
    assert draws.shape == (20000, 8)
    assert np.all(np.asarray(draws)[:, 6] == -1)
    assert_chi2_matches(draws, model)  # false-failure rate ALPHA = 1e-4
    big = random_dense(jax.random.key(5), 15, J_scale=0.3, beta=0.5)  # two-level path
    d2 = exact.sample(big, jax.random.key(1), 3000)
    marg = np.asarray(exact.marginals(big))
    # each marginal within 4.5 binomial standard errors (false-failure rate < 15 * 7e-6)
    se = np.sqrt((1 - marg**2) / 3000)
    assert np.all(np.abs(np.asarray(d2).mean(0) - marg) < 4.5 * se)


def test_exact_sampling_is_deterministic_per_key():
    model = random_dense(jax.random.key(4), 6, batch_shape=(2,))
    a = exact.sample(model, jax.random.key(0), 50)
    b = exact.sample(model, jax.random.key(0), 50)
    c = exact.sample(model, jax.random.key(1), 50)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_float64_when_enabled():
    with jax.enable_x64(True):
        model = random_dense(jax.random.key(3), 10, beta=1.3)
        model = IsingModel(np.asarray(model.h, np.float64), np.asarray(model.J, np.float64),
                           beta=1.3)
        logZ = exact.log_partition(model)
        assert logZ.dtype == jnp.float64
        assert float(logZ) == pytest.approx(brute(model)[0], rel=1e-12)
        np.testing.assert_allclose(exact.marginals(model), brute(model)[1], atol=1e-12)


def test_too_large_names_limit_and_alternatives():
    long_chain = chain(exact.MAX_ENUMERATION_N + 1)
    with pytest.raises(ValueError, match=r"n <= 30.*n = 31.*transfer-matrix.*sampler"):
        exact.log_partition(long_chain)
    with pytest.raises(ValueError, match=r"probabilities.*n <= 24"):
        exact.probabilities(chain(25))
    with pytest.raises(ValueError, match="num_samples must be an integer >= 1"):
        exact.sample(chain(4), jax.random.key(0), 0)
    with pytest.raises(TypeError, match="IsingModel or SparseIsingModel"):
        exact.marginals(np.zeros((3, 3)))


def test_gradient_of_log_partition_is_symmetric_and_equals_correlations():
    # d log Z / d J_ij over the symmetric pair (i, j), (j, i) is beta <x_i x_j>: each entry half
    model = random_dense(jax.random.key(8), 6, beta=0.7)
    g = jax.grad(lambda J: exact.log_partition(IsingModel(model.h, J, beta=0.7)))(model.J)
    np.testing.assert_allclose(g, g.T, atol=1e-6)
    corr = np.asarray(exact.correlations(model))
    off = ~np.eye(6, dtype=bool)
    np.testing.assert_allclose(np.asarray(g)[off], 0.5 * 0.7 * corr[off], atol=2e-5)
