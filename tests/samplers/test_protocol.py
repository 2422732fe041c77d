"""The sampler protocol, Samples, and the dimod bridges (both directions)."""

from __future__ import annotations

import unittest

import dimod
import dimod.testing
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dwave.samplers import SimulatedAnnealingSampler

from isingattn import exact
from isingattn.models import random_dense
from isingattn.samplers import (
    TIMING_KEYS,
    DimodSampler,
    ExactSampler,
    GibbsSampler,
    as_dimod_sampler,
    seed_from_key,
)

from .._stats import assert_chi2_matches

MODEL = random_dense(jax.random.key(0), 5, batch_shape=(2,), beta=0.5)


def test_samples_shapes_energies_and_timing():
    s = ExactSampler().sample(MODEL, jax.random.key(1), 30, num_chains=3)
    assert s.spins.shape == (2, 3, 30, 5) and s.energy.shape == (2, 3, 30)
    assert s.batch_shape == (2,) and s.num_chains == 3 and s.num_draws == 30 and s.n == 5
    np.testing.assert_allclose(s.energy, MODEL.energy(s.spins), rtol=1e-6)
    assert set(TIMING_KEYS) <= set(s.info["timing"])
    assert s.flat().shape == (2, 90, 5)
    np.testing.assert_allclose(s.info["log_partition"], exact.log_partition(MODEL), rtol=1e-6)


def test_energies_are_computed_on_first_access_and_kept():
    from isingattn.samplers import Samples

    s = GibbsSampler().sample(MODEL, jax.random.key(2), 4, num_chains=2)
    assert s._energy is None  # nothing computed per draw until asked
    e = s.energy
    np.testing.assert_allclose(e, MODEL.energy(s.spins), rtol=1e-6)
    assert s.energy is e
    # a pytree round trip keeps the samples (and computes nothing)
    leaves, tree = jax.tree_util.tree_flatten(GibbsSampler().sample(MODEL, jax.random.key(2), 4,
                                                                    num_chains=2))
    back = jax.tree_util.tree_unflatten(tree, leaves)
    np.testing.assert_array_equal(back.spins, s.spins)
    np.testing.assert_allclose(back.energy, e, rtol=1e-6)
    with pytest.raises(ValueError, match="energy=None and model=None"):
        Samples(s.spins, None, MODEL.vartype)


def test_same_key_same_samples_different_keys_differ_chains_differ():
    a = ExactSampler().sample(MODEL, jax.random.key(7), 40, num_chains=2)
    b = ExactSampler().sample(MODEL, jax.random.key(7), 40, num_chains=2)
    c = ExactSampler().sample(MODEL, jax.random.key(8), 40, num_chains=2)
    np.testing.assert_array_equal(a.spins, b.spins)
    assert not np.array_equal(a.spins, c.spins)
    assert not np.array_equal(a.spins[:, 0], a.spins[:, 1])


def test_to_sampleset_keeps_energies_and_labels():
    model = MODEL[0].replace(labels=list("abcde"))
    s = ExactSampler().sample(model, jax.random.key(1), 20)
    ss = s.to_sampleset()
    assert list(ss.variables) == list("abcde")
    np.testing.assert_allclose(ss.record.energy, np.asarray(s.energy).ravel(), rtol=1e-6)
    assert ss.record.energy.dtype == np.float64
    dimod.testing.assert_sampleset_energies(ss, model.to_bqm())  # dimod's default precision
    with pytest.raises(ValueError, match="index must pick one model"):
        ExactSampler().sample(MODEL, jax.random.key(1), 2).to_sampleset()


def test_to_sampleset_agrees_with_to_bqm_on_masked_variables():
    model = MODEL.replace(mask=jnp.array([True, False, True, True, False]), labels=list("abcde"))
    s = ExactSampler().sample(model, jax.random.key(1), 10, num_chains=2)
    for i in range(2):
        bqm = model[i].to_bqm()
        ss = s.to_sampleset((i,))
        assert set(ss.variables) == set(bqm.variables) == set("acd")
        assert len(ss) == 20
        dimod.testing.assert_sampleset_energies(ss, bqm)
    # samples built by hand (no model): every variable, stored energies as float64
    from isingattn.samplers import Samples

    bare = Samples(s.spins[0], s.energy[0], s.vartype, labels=model.labels)
    assert len(bare.to_sampleset().variables) == 5
    assert bare.to_sampleset().record.energy.dtype == np.float64
    assert set(bare.to_sampleset(model=model[0]).variables) == set("acd")


@pytest.mark.parametrize("num_reads, num_chains", [(10, 4), (12, 4), (1, 3), (7, 1)])
def test_dimod_face_returns_num_reads_rows_whatever_the_chains(num_reads, num_chains):
    ds = as_dimod_sampler(GibbsSampler())
    assert "num_chains" in ds.parameters
    bqm = MODEL[0].to_bqm()
    ss = ds.sample(bqm, num_reads=num_reads, num_chains=num_chains, seed=1)
    assert len(ss) == num_reads
    dimod.testing.assert_sampleset_energies(ss, bqm)


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: ExactSampler().sample(MODEL, jax.random.key(0), 5, sweeps=3), TypeError,
         "unknown option.*sweeps"),
        (lambda: ExactSampler().sample(MODEL, jax.random.key(0), 0), ValueError,
         "num_samples must be an integer >= 1; got 0"),
        (lambda: ExactSampler().sample(MODEL, jax.random.key(0), 5, num_chains=-1), ValueError,
         "num_chains must be an integer >= 1; got -1"),
        (lambda: ExactSampler().sample(MODEL, 3, 5), TypeError, "key must be a single JAX PRNG"),
        (lambda: ExactSampler().sample(np.zeros(3), jax.random.key(0), 5), TypeError,
         "model must be an IsingModel"),
        (lambda: ExactSampler().sample(MODEL, jax.random.key(0), 2.5), TypeError,
         "num_samples must be an integer"),
    ],
)
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_seed_from_key_is_deterministic():
    assert seed_from_key(jax.random.key(3)) == seed_from_key(jax.random.key(3))
    assert seed_from_key(jax.random.key(3)) != seed_from_key(jax.random.key(4))
    assert 0 <= seed_from_key(jax.random.PRNGKey(5)) < 2**31


def test_as_dimod_sampler_passes_dimod_api_checks():
    dimod.testing.assert_sampler_api(as_dimod_sampler(ExactSampler()))


@dimod.testing.load_sampler_bqm_tests(as_dimod_sampler(ExactSampler()))
class TestDimodBQMCases(unittest.TestCase):
    """dimod's own generated cases (empty, one variable, paths, ...) on our ExactSampler."""


def test_as_dimod_sampler_samples_boltzmann_and_is_seeded():
    ds = as_dimod_sampler(ExactSampler())
    h = {"a": 0.5, "b": -0.3, "c": 0.0}
    J = {("a", "b"): -1.0, ("b", "c"): 0.7}
    ss = ds.sample_ising(h, J, num_reads=5000, seed=11, beta=0.8)
    assert len(ss) == 5000
    dimod.testing.assert_sampleset_energies(ss, dimod.BQM.from_ising(h, J), precision=5)
    from isingattn.models import from_bqm

    model = from_bqm(dimod.BQM.from_ising(h, J), beta=0.8, variable_order=list(ss.variables))
    assert_chi2_matches(ss.record.sample, model)  # false-failure rate 1e-4
    again = ds.sample_ising(h, J, num_reads=5000, seed=11, beta=0.8)
    np.testing.assert_array_equal(ss.record.sample, again.record.sample)
    q = ds.sample_qubo({("x", "y"): -2.0, ("x", "x"): 1.0}, num_reads=4, seed=0)
    assert q.vartype is dimod.BINARY and len(q) == 4


def test_dimod_sampler_wraps_neal():
    neal = DimodSampler(SimulatedAnnealingSampler(), num_sweeps=200)
    model = MODEL.replace(mask=jnp.array([True, True, False, True, True]))
    s = neal.sample(model, jax.random.key(2), 8, num_chains=2)
    assert s.spins.shape == (2, 2, 8, 5)
    assert np.all(np.asarray(s.spins)[..., 2] == -1)  # masked variable held at the low value
    np.testing.assert_allclose(s.energy, model.energy(s.spins), rtol=1e-6)
    # an annealer with 200 sweeps reaches the ground state of these tiny models
    _, ground = exact.ground_state(model)
    np.testing.assert_allclose(np.asarray(s.energy).min(axis=(1, 2)), ground, rtol=1e-5)
    s2 = neal.sample(model, jax.random.key(2), 8, num_chains=2)
    np.testing.assert_array_equal(s.spins, s2.spins)  # seed derived from the key
    assert set(TIMING_KEYS) <= set(s.info["timing"])


def test_dimod_sampler_errors():
    with pytest.raises(TypeError, match="child must be a dimod.Sampler"):
        DimodSampler(object())
    with pytest.raises(TypeError, match="has no parameter.*bogus"):
        DimodSampler(SimulatedAnnealingSampler(), bogus=1)
    with pytest.raises(RuntimeError, match="returned 32 reads; expected"):
        DimodSampler(dimod.ExactSolver()).sample(MODEL[0], jax.random.key(0), 3)
