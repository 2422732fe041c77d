"""Parallel tempering: the ladder, exchange acceptance against its exact expectation, sampling
a bimodal low-temperature model, and the low-level kernel.

Statistical assertions use tests/_stats.py (false-failure rate ALPHA each; counts stated).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import exact
from isingattn.models import IsingModel, random_dense
from isingattn.samplers import GibbsSampler, MetropolisSampler, ParallelTemperingSampler

from .._stats import Z_ALPHA, assert_chi2_matches, assert_mean_within_mcse, ess


def test_geometric_and_explicit_ladders():
    pt = ParallelTemperingSampler(num_replicas=5, beta_min=0.2)
    lad = np.asarray(pt.ladder(jnp.float32(2.0)))
    np.testing.assert_allclose(lad, 0.2 * 10.0 ** (np.arange(5) / 4), rtol=1e-5)
    lad = np.asarray(ParallelTemperingSampler(num_replicas=3).ladder(jnp.float32(1.0)))
    np.testing.assert_allclose(lad, [0.1, 0.1**0.5, 1.0], rtol=1e-5)
    pt = ParallelTemperingSampler(betas=[0.25, 0.5, 1.0])
    assert pt.num_replicas == 3 and pt.betas == (0.25, 0.5, 1.0)
    np.testing.assert_allclose(np.asarray(pt.ladder(jnp.float32(1.0))), [0.25, 0.5, 1.0])
    np.testing.assert_allclose(np.asarray(pt.ladder(jnp.float32(2.0))), [0.5, 1.0, 2.0])
    hash(pt)  # a static jit argument


def _exact_swap_acceptance(model, b0, b1):
    """E[min(1, exp((b1 - b0)(E(y) - E(x))))] for x ~ p_b0, y ~ p_b1 (independent)."""
    n = model.n
    states = np.array(list(itertools.product([-1.0, 1.0], repeat=n)))
    E = np.asarray(model.energy(states), float)
    w0 = np.exp(-b0 * (E - E.min()))
    w1 = np.exp(-b1 * (E - E.min()))
    p0, p1 = w0 / w0.sum(), w1 / w1.sum()
    acc = np.minimum(1.0, np.exp((b1 - b0) * (E[None, :] - E[:, None])))
    return float(p0 @ acc @ p1)


def test_swap_acceptance_matches_exact_expectation():
    # In stationarity the replicas are independent draws at their rungs, so the reported mean
    # exchange probability of the pair has a closed form. 48 independent chains; their average
    # is within Z_ALPHA standard errors (false-failure rate ALPHA).
    m = random_dense(jax.random.key(21), 4, beta=1.0)
    pt = ParallelTemperingSampler(GibbsSampler(), betas=(0.3, 1.0))
    s = pt.sample(m, jax.random.key(22), 300, num_chains=48, num_burnin=30)
    acc = np.asarray(s.info["swap_acceptance"], float)[:, 0]
    truth = _exact_swap_acceptance(m, 0.3, 1.0)
    se = acc.std(ddof=1) / np.sqrt(acc.size)
    assert abs(acc.mean() - truth) < Z_ALPHA * se, (acc.mean(), truth, se)
    np.testing.assert_allclose(np.asarray(s.info["betas"])[0], [0.3, 1.0], rtol=1e-5)


@pytest.mark.slow
def test_bimodal_ferromagnet_both_modes_sampled():
    # 8 spins, all J = 0.6, beta = 1: two modes separated by a barrier of ~ 9.6 / T. Plain
    # Metropolis chains stay in one mode; with tempering the draws pass chi^2 and the mean
    # magnetization is 0 within MCSE: 2 assertions, false-failure rate <= 2 * ALPHA.
    n = 8
    J = 0.6 * (np.ones((n, n)) - np.eye(n))
    m = IsingModel(h=np.zeros(n), J=J, beta=1.0)
    pt = ParallelTemperingSampler(MetropolisSampler(), num_replicas=5, beta_min=0.1)
    s = pt.sample(m, jax.random.key(23), 1500, num_chains=4, num_burnin=50,
                  initial_states=jnp.ones(n))
    x = np.asarray(s.spins, float)
    mag = x.mean(-1)
    assert_mean_within_mcse(mag, 0.0, what="magnetization")
    e = np.asarray(s.energy)
    assert_chi2_matches(x, m, effective_fraction=min(1.0, ess(e) / e.size))
    # every chain visits both modes (a single-rung chain from all-up would not)
    assert np.all((mag > 0.5).any(axis=1) & (mag < -0.5).any(axis=1))
    acc = np.asarray(s.info["swap_acceptance"])
    assert acc.shape == (4, 4) and np.all((acc > 0) & (acc <= 1))


def test_nearly_equal_rungs_always_swap():
    # (beta_1 - beta_0) |dE| <= 1e-6 * 20: the exchange probability is > 0.9999 every sweep
    m = random_dense(jax.random.key(24), 4, beta=1.0)
    pt = ParallelTemperingSampler(GibbsSampler(), betas=(1.0 - 1e-6, 1.0))
    s = pt.sample(m, jax.random.key(25), 20, num_chains=2, num_burnin=0)
    assert np.all(np.asarray(s.info["swap_acceptance"]) > 0.9999)


def test_low_level_kernel_in_a_user_loop():
    m = random_dense(jax.random.key(26), 5, beta=0.8)
    pt = ParallelTemperingSampler(MetropolisSampler(), num_replicas=3)
    state = pt.init(m, jax.random.key(0), -jnp.ones(5))
    assert state.local.x.shape == (3, 5)
    np.testing.assert_array_equal(np.asarray(state.x), -np.ones(5))
    step = jax.jit(pt.step)
    for t in range(3):
        state, info = step(m, state, jax.random.key(t), jnp.float32(0.8))
    assert int(state.count) == 3
    np.testing.assert_array_equal(np.asarray(state.x), np.asarray(state.local.x[-1]))
    assert info["swap_acceptance"].shape == (2,) and info["acceptance_rate"].shape == ()
    assert set(np.unique(np.asarray(state.local.x))) <= {-1.0, 1.0}


@pytest.mark.slow
def test_swendsen_wang_as_the_local_move():
    # any MCMC backend is a local move: Swendsen-Wang replicas on a 3x3 open lattice with a
    # field. chi^2 and mean energy within MCSE: 2 assertions, false-failure rate <= 2 * ALPHA.
    from isingattn.models import square_lattice
    from isingattn.samplers import SwendsenWangSampler

    m = square_lattice((3, 3), J=0.7, h=0.2, periodic=False, beta=0.9)
    pt = ParallelTemperingSampler(SwendsenWangSampler(), num_replicas=3)
    s = pt.sample(m, jax.random.key(27), 1000, num_chains=4, num_burnin=20)
    dense = m.to_dense()
    e = np.asarray(s.energy)
    assert_mean_within_mcse(e, float(exact.moments(dense).mean_energy), what="mean energy")
    assert_chi2_matches(np.asarray(s.spins), dense, effective_fraction=min(1.0, ess(e) / e.size))
