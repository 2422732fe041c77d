"""DiabaticAnnealingSampler: draws against its own exact output distribution (it is not a
Boltzmann sampler, so it is not a row of tests/samplers/test_shared_suite.py), the protocol,
masks, determinism and the dimod interface.

False-failure rate: ALPHA (tests/_stats.py) per chi^2 assertion, 3 * ALPHA in this file."""

import dimod
import dimod.testing
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import exact
from isingattn.models import IsingModel, random_dense
from isingattn.quantum import effective_beta, output_distribution
from isingattn.samplers import BACKENDS, DiabaticAnnealingSampler, get_sampler

from .._stats import ALPHA, chi2_pvalue

T_A = 0.3


def _batch():
    base = random_dense(jax.random.key(4), 5, batch_shape=(2,))
    masks = jnp.array([[1, 1, 1, 1, 1], [1, 0, 1, 1, 0]], bool)
    return base.replace(mask=masks)


def test_samples_follow_output_distribution():
    model = _batch()
    sampler = DiabaticAnnealingSampler("dwave_like", T_A)
    out = sampler.sample(model, jax.random.key(0), 2000, num_chains=2)
    assert out.spins.shape == (2, 2, 2000, 5)
    probs = np.asarray(output_distribution(model, "dwave_like", T_A), float)
    for b in range(2):
        idx = np.asarray(exact.state_to_index(out.spins[b].reshape(-1, 5), "SPIN"))
        counts = np.bincount(idx, minlength=32)
        p = chi2_pvalue(counts, probs[b] / probs[b].sum())
        assert p > ALPHA, f"model {b}: chi^2 p = {p:.3g}"
    # masked variables read out at the low value
    assert np.all(np.asarray(out.spins[1][..., [1, 4]]) == -1)
    # energies are the model's (physics sign)
    np.testing.assert_allclose(out.energy, model.energy(out.spins), rtol=1e-6)
    # the output is not uniform at this t_a: the sampler does something
    assert 0.5 * np.abs(probs[0] - 1 / 32).sum() > 0.1


def test_binary_model():
    spin = random_dense(jax.random.key(6), 4, beta=0.5)
    binary = spin.to_vartype("BINARY")
    out = DiabaticAnnealingSampler("linear", 1.0).sample(binary, jax.random.key(1), 3000)
    assert set(np.unique(np.asarray(out.spins))) <= {0.0, 1.0}
    probs = np.asarray(output_distribution(binary, "linear", 1.0), float)
    idx = np.asarray(exact.state_to_index(out.spins.reshape(-1, 4), "BINARY"))
    assert chi2_pvalue(np.bincount(idx, minlength=16), probs / probs.sum()) > ALPHA


def test_same_key_same_samples_different_key_different():
    m = random_dense(jax.random.key(2), 4)
    s = DiabaticAnnealingSampler(annealing_time=T_A)
    a = s.sample(m, jax.random.key(5), 200).spins
    b = s.sample(m, jax.random.key(5), 200).spins
    c = s.sample(m, jax.random.key(6), 200).spins
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_options_and_info():
    m = random_dense(jax.random.key(3), 4)
    s = DiabaticAnnealingSampler()
    out = s.sample(m, jax.random.key(0), 10, annealing_time=0.2, schedule="linear",
                   num_steps=50, order=2)
    info = out.info
    assert info["schedule"] == "linear" and info["annealing_time"] == 0.2
    assert info["num_steps"] == 50 and info["order"] == 2 and info["num_qubits"] == 4
    assert info["norm_error"] < 1e-5
    b = effective_beta("linear", 0.2)
    assert info["effective_beta"] == {"fields": b.fields, "couplings": b.couplings}
    assert set(info["timing"]) >= {"setup_s", "sampling_s", "total_s"}
    with pytest.raises(TypeError, match="unknown option"):
        s.sample(m, jax.random.key(0), 10, beta_range=(0.1, 1))
    # the JAX path is an option of the sampler (same integrator as the compiled kernel)
    jx = s.sample(m, jax.random.key(0), 10, annealing_time=0.2, schedule="linear",
                  num_steps=50, order=2, backend="jax")
    assert jx.spins.shape == out.spins.shape and jx.info["norm_error"] < 1e-5
    with pytest.raises(ValueError, match="backend must be one of"):
        DiabaticAnnealingSampler(backend="gpu")
    with pytest.raises(ValueError, match="annealing_time must be finite and >= 0"):
        s.sample(m, jax.random.key(0), 10, annealing_time=-1.0)
    with pytest.raises(ValueError, match="strictly increasing"):
        from isingattn.quantum import schedule_from_table
        schedule_from_table([0, 0.7, 0.5, 1], [1, 1, 1, 0], [0, 1, 1, 1])


def test_too_large_names_limit_and_alternatives():
    n = 23
    m = IsingModel(h=np.zeros(n), J=np.zeros((n, n)))
    with pytest.raises(ValueError, match=r"at most 22 active.*classical sampler"):
        DiabaticAnnealingSampler().sample(m, jax.random.key(0), 1)


def test_registered_and_dimod():
    assert BACKENDS["diabatic"] is DiabaticAnnealingSampler
    s = get_sampler("diabatic", annealing_time=0.5, schedule="linear")
    ds = s.as_dimod()
    dimod.testing.assert_sampler_api(ds)
    ss = ds.sample_ising({"a": 0.5, "b": -0.2}, {("a", "b"): 1.0}, num_reads=20, seed=1)
    bqm = dimod.BinaryQuadraticModel({"a": 0.5, "b": -0.2}, {("a", "b"): 1.0}, 0.0, "SPIN")
    for sample, energy in ss.data(["sample", "energy"]):
        assert energy == pytest.approx(bqm.energy(sample))
