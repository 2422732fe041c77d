"""The compiled Swendsen–Wang steps of grid models (``isingattn._kernels.swendsen_wang``, the
default of ``SwendsenWangSampler`` on the CPU) against the JAX step: the same words of the same
xoshiro128** lanes, hence the same chains — exactly with h = 0, and with fields up to a flip
decision whose uniform falls within a rounding of its probability (``exp`` is not XLA's).
Exactness against enumeration runs through the kernel in ``test_swendsen_wang.py``.
Deterministic (fixed keys), except where a false-failure rate is stated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.models import random_dense, square_lattice
from isingattn.samplers import SwendsenWangSampler

from .._stats import ALPHA, assert_chi2_matches, ess

BETA_C = float(np.log(1 + np.sqrt(2)) / 2)


def _both(model, key, num_samples, num_chains, num_burnin=7, thinning=3):
    kern = SwendsenWangSampler()
    assert kern.runs_sweeps(model)
    a = kern.sample(model, jax.random.key(key), num_samples, num_chains=num_chains,
                    num_burnin=num_burnin, thinning=thinning)
    b = SwendsenWangSampler(components="jax").sample(
        model, jax.random.key(key), num_samples, num_chains=num_chains, num_burnin=num_burnin,
        thinning=thinning)
    return a, b


@pytest.mark.parametrize("case", ["torus", "open-rectangle", "mixed-signs-masked", "binary"])
def test_kernel_steps_equal_the_jax_steps_without_fields(case):
    if case == "torus":
        m = square_lattice(12, J=1.0, beta=BETA_C)
    elif case == "open-rectangle":  # missing slots (open boundaries), Lx != Ly
        m = square_lattice((5, 8), J=0.8, periodic=False, beta=0.6)
    elif case == "mixed-signs-masked":
        m = square_lattice((6, 4), beta=0.9,
                           J=jax.random.uniform(jax.random.key(1), (48,), minval=-1.2,
                                                maxval=1.2))
        m = m.replace(mask=jnp.arange(24) % 7 != 3)
    else:
        m = square_lattice((4, 6), J=0.7, beta=0.8, vartype="BINARY")
    a, b = _both(m, 2, 25, 5)
    np.testing.assert_array_equal(np.asarray(a.spins), np.asarray(b.spins))
    for k in ("num_clusters", "mean_cluster_size", "largest_cluster"):
        np.testing.assert_allclose(np.asarray(a.info[k]), np.asarray(b.info[k]), rtol=1e-6,
                                   err_msg=k)
    assert len(np.unique(np.asarray(a.spins).reshape(-1, m.n), axis=0)) > 10  # it moves


def test_float64_chains_equal_the_jax_steps():
    with jax.enable_x64(True):
        m = square_lattice((6, 6), J=jnp.ones(72, jnp.float64), beta=0.5)
        assert m.dtype == jnp.float64
        a, b = _both(m, 3, 10, 3)
        assert a.spins.dtype == jnp.float64
        np.testing.assert_array_equal(np.asarray(a.spins), np.asarray(b.spins))


def test_with_fields_the_chains_agree_but_for_rounding_and_sample_exactly():
    # Fields: the flip probability 1 / (1 + e^{2 beta H_C}) in the kernel's exp against XLA's
    # logistic. Decisions can differ only where a uniform (23 bits) lands within a few ulps
    # of the probability, so nearly every draw of the first chains agrees.
    m = square_lattice((8, 8), J=0.6, h=jnp.linspace(-0.4, 0.4, 64), beta=0.7)
    a, b = _both(m, 4, 20, 4, num_burnin=0, thinning=1)
    same = np.all(np.asarray(a.spins) == np.asarray(b.spins), axis=-1)
    assert same[:, 0].all() and same.mean() > 0.9, same.mean()
    # and it samples the Boltzmann distribution (chi^2 at ALPHA, ESS-corrected)
    small = square_lattice((3, 3), beta=0.8, J=0.9, h=jnp.linspace(-0.5, 0.3, 9))
    s = SwendsenWangSampler().sample(small, jax.random.key(5), 2000, num_chains=4,
                                     num_burnin=20)
    e = np.asarray(s.energy)
    assert_chi2_matches(np.asarray(s.spins, float), small.to_dense(), alpha=ALPHA,
                        effective_fraction=min(1.0, ess(e) / e.size))


def test_which_models_run_on_the_kernel():
    grid = square_lattice(4)
    assert SwendsenWangSampler().runs_sweeps(grid)
    assert SwendsenWangSampler(components="numba").runs_sweeps(grid)
    assert not SwendsenWangSampler(components="jax").runs_sweeps(grid)
    assert not SwendsenWangSampler(components="scipy").runs_sweeps(grid)
    assert not SwendsenWangSampler().runs_sweeps(random_dense(jax.random.key(0), 6))
    # a schedule runs step by step (the kernel serves fixed-beta runs): same chain as JAX's
    m = square_lattice((4, 4), J=1.0, beta=0.5)
    sched = jnp.linspace(0.2, 0.6, 12)
    a = SwendsenWangSampler().sample(m, jax.random.key(6), 4, num_chains=2, num_burnin=8,
                                     beta_schedule=sched)
    b = SwendsenWangSampler(components="jax").sample(m, jax.random.key(6), 4, num_chains=2,
                                                     num_burnin=8, beta_schedule=sched)
    np.testing.assert_array_equal(np.asarray(a.spins), np.asarray(b.spins))
