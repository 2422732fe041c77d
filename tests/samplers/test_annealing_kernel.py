"""The compiled simulated-annealing kernel (``isingattn._kernels.simulated``, ``backend="numba"``
of ``anneal`` / ``SimulatedAnnealingSampler``) against exact answers and the JAX sweep.

The kernel draws its own random numbers, so it is checked for what it must share with the JAX
path in distribution (Boltzmann sampling at a constant schedule, the exact acceptance rate at
stationarity, for both rules and both precisions) and for what it promises itself (a read's
result depends on its seed, index and initial state only: not on the other reads, the grouping
or the threads). False-failure rates: ALPHA (1e-4) per chi^2 test; the acceptance-rate checks
use 5 standard errors (6e-7 each, two-sided); the ground-state check
states its own. Keys are fixed.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import exact
from isingattn._kernels import simulated
from isingattn.models import IsingModel, random_dense
from isingattn.samplers import NealSampler, SimulatedAnnealingSampler, anneal

from .._stats import assert_chi2_matches

KEY = jax.random.key(5)


def _stationary_acceptance(model, b, gibbs):
    """Expected accepted fraction of one sequential sweep at schedule value ``b`` started from
    the Boltzmann distribution at ``b``: every single-site update keeps that distribution, so
    the update of site ``i`` meets it, and the rate is the mean over sites of
    ``E[min(1, e^{-b dE_i})]`` (Metropolis) or ``E[1 / (1 + e^{b dE_i})]`` (Gibbs)."""
    n = model.n
    states = np.array(list(itertools.product([-1.0, 1.0], repeat=n)), np.float32)
    p = np.asarray(exact.probabilities(model), float)[
        np.asarray(exact.state_to_index(states, model.vartype))]
    E = np.asarray(model.energy(jnp.asarray(states)), float)
    rate = 0.0
    for i in range(n):
        flipped = states.copy()
        flipped[:, i] *= -1
        dE = np.asarray(model.energy(jnp.asarray(flipped)), float) - E
        acc = 1.0 / (1.0 + np.exp(b * dE)) if gibbs else np.minimum(1.0, np.exp(-b * dE))
        rate += np.sum(p * acc) / n
    return rate


def _exact_draws(model, key, num):
    """``num`` independent draws of ``model``'s Boltzmann distribution (inverse CDF)."""
    n = model.n
    states = np.array(list(itertools.product([-1.0, 1.0], repeat=n)), np.float32)
    p = np.asarray(exact.probabilities(model), float)[
        np.asarray(exact.state_to_index(states, model.vartype))]
    idx = np.random.default_rng(int(jax.random.randint(key, (), 0, 2**30))).choice(
        len(p), size=num, p=p / p.sum())
    return states[idx]


@pytest.mark.parametrize("criteria", ["Metropolis", "Gibbs"])
@pytest.mark.parametrize("backend", ["numba", "jax"])
def test_acceptance_rate_at_stationarity_is_exact(criteria, backend):
    # Started from exact Boltzmann draws at the schedule's constant value, every sweep is
    # stationary: the acceptance rate's expectation is known exactly. Reads are independent,
    # so the standard error comes from the per-read rates.
    model = random_dense(jax.random.key(40), 7, beta=0.7)
    b = float(model.beta)
    R, S = 4000, 6
    x0 = _exact_draws(model, jax.random.key(41), R)
    rates, finals = [], []
    for r0 in range(0, R, 500):  # independent groups of reads, one rate each
        x, info = anneal(model, jax.random.key(r0), 500, beta_schedule_type="custom",
                         beta_schedule=[b] * S, initial_states=x0[r0:r0 + 500],
                         proposal_acceptance_criteria=criteria, backend=backend)
        rates.append(float(info["acceptance_rate"]))
        finals.append(np.asarray(x))
    truth = _stationary_acceptance(model, b, criteria == "Gibbs")
    rates = np.array(rates)
    se = rates.std(ddof=1) / np.sqrt(rates.size)
    assert abs(rates.mean() - truth) < 5 * se, (rates.mean(), truth, se)
    # and the sweeps keep the distribution
    assert_chi2_matches(np.concatenate(finals), model)


@pytest.mark.parametrize("criteria", ["Metropolis", "Gibbs"])
def test_float64_kernel_samples_boltzmann(criteria):
    with jax.enable_x64(True):
        m32 = random_dense(jax.random.key(42), 6)
        model = IsingModel(jnp.asarray(m32.h, jnp.float64), jnp.asarray(m32.J, jnp.float64),
                           beta=0.6)
        assert model.dtype == jnp.float64
        x, _ = anneal(model, jax.random.key(43), 6000, beta_schedule_type="custom",
                         beta_schedule=[0.6] * 48, proposal_acceptance_criteria=criteria,
                         backend="numba")
        assert x.dtype == jnp.float64
        assert_chi2_matches(np.asarray(x), model)


def _kernel_inputs(n, R, S, M=1, key=44):
    ks = jax.random.split(jax.random.key(key), 4)
    A = jax.random.normal(ks[0], (M, n, n), jnp.float32)
    J = jnp.triu(A, 1) + jnp.swapaxes(jnp.triu(A, 1), -1, -2)
    h = jax.random.normal(ks[1], (M, n), jnp.float32)
    mask = jnp.ones((M, n), bool)
    betas = jnp.broadcast_to(jnp.geomspace(0.05, 3.0, S, dtype=jnp.float32), (M, S))
    x0 = jnp.where(jax.random.bernoulli(ks[2], 0.5, (M, n, R)), 1.0, -1.0).astype(jnp.float32)
    seeds = jax.random.bits(ks[3], (M, 2), jnp.uint32)
    return J, h, mask, betas, x0, seeds


def test_a_read_depends_on_its_seed_index_and_start_only():
    # 16 x 200 x 100 is past the threaded size (several groups of CHUNK reads on two or more
    # threads); its first 70 reads alone run on one thread in two groups.
    n, R, S = 16, 200, 100
    assert R * n * S >= simulated.THREADED_WORK > 70 * n * S
    J, h, mask, betas, x0, seeds = _kernel_inputs(n, R, S)
    x, acc = simulated.anneal_dense(J, h, mask, betas, x0, seeds, gibbs=False)
    x70, acc70 = simulated.anneal_dense(J, h, mask, betas, x0[..., :70], seeds, gibbs=False)
    np.testing.assert_array_equal(np.asarray(x)[..., :70], np.asarray(x70))
    np.testing.assert_array_equal(np.asarray(acc)[:, :70], np.asarray(acc70))
    # a flip count is the number of spins changed, modulo 2 per spin
    changed = np.sum(np.asarray(x) != np.asarray(x0), axis=1)
    assert np.all((np.asarray(acc) - changed) % 2 == 0)
    assert np.all(np.asarray(acc) >= changed)
    # another seed, other reads
    x2, _ = simulated.anneal_dense(J, h, mask, betas, x0, seeds + 1, gibbs=False)
    assert not np.array_equal(np.asarray(x), np.asarray(x2))


def test_shared_and_per_model_couplings_and_masks():
    n, R, S, M = 10, 40, 30, 3
    J, h, mask, betas, x0, seeds = _kernel_inputs(n, R, S, M)
    mask = mask.at[1, 3].set(False).at[2, 0].set(False)
    x0 = jnp.where(mask[..., None], x0, -1.0)
    x, acc = simulated.anneal_dense(J, h, mask, betas, x0, seeds, gibbs=True)
    for m in range(M):  # each model of a batch is annealed on its own
        xm, am = simulated.anneal_dense(J[m:m + 1], h[m:m + 1], mask[m:m + 1], betas[m:m + 1],
                                        x0[m:m + 1], seeds[m:m + 1], gibbs=True)
        np.testing.assert_array_equal(np.asarray(x)[m], np.asarray(xm)[0])
        np.testing.assert_array_equal(np.asarray(acc)[m], np.asarray(am)[0])
    # one J for the batch is the same as that J repeated
    xs, _ = simulated.anneal_dense(J[:1], h, mask, betas, x0, seeds, gibbs=True)
    xr, _ = simulated.anneal_dense(jnp.repeat(J[:1], M, 0), h, mask, betas, x0, seeds,
                                   gibbs=True)
    np.testing.assert_array_equal(np.asarray(xs), np.asarray(xr))
    # masked variables never flip
    assert np.all(np.asarray(x)[1, 3] == -1) and np.all(np.asarray(x)[2, 0] == -1)


def test_sampler_backends_reach_the_ground_state():
    # A frustrated +-1 model (integer energies, gap >= 2 in units of the coupling), ground
    # state by enumeration: both backends find it in at least 55 of 64 reads of a slow linear
    # anneal. A sampler reaching it with probability 0.97 per read fails with probability 2e-5
    # (binomial); both pass at this key.
    kJ, kh = jax.random.split(jax.random.key(45))
    A = jnp.triu(jnp.where(jax.random.bernoulli(kJ, 0.5, (14, 14)), 1.0, -1.0), 1)
    m = IsingModel(jax.random.randint(kh, (14,), -1, 2).astype(jnp.float32), A + A.T)
    e0 = float(exact.ground_state(m)[1])
    for backend in ("numba", "jax"):
        s = SimulatedAnnealingSampler(backend=backend).sample(
            m, KEY, 64, beta_schedule_type="linear", beta_range=(0.1, 3.0), num_sweeps=1000)
        e = np.asarray(m.energy(s.spins)).ravel()
        assert np.sum(np.isclose(e, e0, atol=1e-4)) >= 55, (backend, np.sort(e)[:8], e0)


def test_backend_is_checked_and_jit_agrees():
    m = random_dense(jax.random.key(46), 5, batch_shape=(2,))
    with pytest.raises(ValueError, match="backend must be one of"):
        anneal(m, KEY, 3, backend="gpu")
    with pytest.raises(ValueError, match="backend"):
        SimulatedAnnealingSampler(backend="cuda")
    # neal takes our options but this one (it is not dwave-samplers')
    assert set(NealSampler.parameters) == set(SimulatedAnnealingSampler.parameters) - {"backend"}
    with pytest.raises(TypeError, match="backend"):
        NealSampler(backend="jax")
    f = jax.jit(lambda m, k: anneal(m, k, 3, num_sweeps=50, backend="numba")[0])
    np.testing.assert_array_equal(
        np.asarray(f(m, KEY)), np.asarray(anneal(m, KEY, 3, num_sweeps=50, backend="numba")[0]))

