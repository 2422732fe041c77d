"""One statistical suite for every backend, against the exact oracle.

Each backend is one row of ``BACKENDS``: a factory, its sampling options, and the case tags it
does not support (e.g. Wolff has no fields). Each case is a small model (n <= 10) with a tag set.
For every (backend, case) pair the draws must pass

* a chi^2 goodness-of-fit test of sampled states against exact probabilities (correlated draws
  counted by the smallest ESS among the energy and the marginals), and
* mean energy, every marginal and every correlation within Z_ALPHA Monte Carlo standard errors
  (ESS from arviz).

False-failure rate per pair: ALPHA for the chi^2 test plus ALPHA for each of the
1 + n + n(n-1)/2 mean checks, at most 56 * ALPHA = 5.6e-3 for n = 10 (Bonferroni); keys are
fixed, so a pass is reproducible.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import exact
from isingattn.models import IsingModel, chain, random_dense, square_lattice
from isingattn.samplers import (
    ExactSampler,
    GibbsSampler,
    MetropolisSampler,
    ParallelTemperingSampler,
    SimulatedAnnealingSampler,
    SwendsenWangSampler,
    TransferMatrixSampler,
    WolffSampler,
)

from .._stats import assert_chi2_matches, assert_mean_within_mcse, ess


def _frustrated():
    # antiferromagnetic triangle plus a spectator: every ground state breaks one bond
    J = -np.array([[0, 1, 1, 0], [1, 0, 1, 0], [1, 1, 0, 0.5], [0, 0, 0.5, 0]], float)
    J[3, 2] = J[2, 3] = 0.5
    return IsingModel(h=np.zeros(4), J=J, beta=1.0)


def _masked():
    m = random_dense(jax.random.key(3), 7, beta=0.6)
    return m.replace(mask=jnp.array([True, True, False, True, True, False, True]))


CASES = {
    # id: (model factory, tags)
    "dense-fields": (lambda: random_dense(jax.random.key(1), 6, beta=0.5), {"dense", "fields"}),
    "frustrated": (_frustrated, {"dense", "frustrated"}),
    "masked": (_masked, {"dense", "fields", "mask"}),
    "binary": (
        lambda: random_dense(jax.random.key(5), 5, beta=0.7, vartype="BINARY"),
        {"dense", "fields", "binary"},
    ),
    "sparse-lattice": (
        lambda: square_lattice((3, 3), J=1.0, periodic=False, beta=0.4),
        {"sparse", "ferro"},
    ),
    "sparse-chain-fields": (
        lambda: chain(8, J=0.8, h=0.3, beta=0.8),
        {"sparse", "fields", "ferro"},
    ),
    "low-temperature": (
        lambda: random_dense(jax.random.key(7), 5, J_scale=0.5, h_scale=0.3, beta=2.0),
        {"dense", "fields", "lowT"},
    ),
}

# (id, factory, sample options, num_samples, num_chains, unsupported tags)
BACKENDS = [
    ("exact", ExactSampler, {}, 2000, 4, set()),
    ("transfer", TransferMatrixSampler, {}, 2000, 4, set()),
    # gibbs/metropolis "auto": sequential on dense cases, chromatic on sparse ones
    ("gibbs", GibbsSampler, {"num_burnin": 50}, 2000, 4, set()),
    ("gibbs-random", lambda: GibbsSampler(order="random"), {"num_burnin": 50}, 2000, 4, set()),
    ("metropolis", MetropolisSampler, {"num_burnin": 50}, 2000, 4, set()),
    ("pt-metropolis-random", lambda: ParallelTemperingSampler(
        MetropolisSampler(order="random"), num_replicas=3), {"num_burnin": 50}, 1000, 4, set()),
    ("swendsen_wang", SwendsenWangSampler, {"num_burnin": 20}, 2000, 4, set()),
    ("wolff", lambda: WolffSampler(num_flips=2), {"num_burnin": 20}, 2000, 4, {"fields"}),
    # SA with a constant schedule at each model's beta ("fixed" = custom [beta] * num_sweeps):
    # every read an independent 256-sweep Metropolis / Gibbs chain from a random state
    ("sa-fixed-metropolis", SimulatedAnnealingSampler,
     {"beta_schedule_type": "fixed", "num_sweeps": 256}, 2000, 4, set()),
    ("sa-fixed-gibbs", SimulatedAnnealingSampler, {"beta_schedule_type": "fixed", "num_sweeps": 256,
     "proposal_acceptance_criteria": "Gibbs"}, 2000, 4, set()),
]


def _pairs():
    for bid, factory, opts, ns, nc, unsupported in BACKENDS:
        for cid, (model_factory, tags) in CASES.items():
            marks = [] if not (tags & unsupported) else [pytest.mark.skip("not supported")]
            yield pytest.param(factory, opts, ns, nc, model_factory, id=f"{bid}-{cid}", marks=marks)


@pytest.mark.parametrize("factory,opts,num_samples,num_chains,model_factory", list(_pairs()))
def test_backend_matches_exact(factory, opts, num_samples, num_chains, model_factory):
    model = model_factory()
    samples = factory().sample(model, jax.random.key(2024), num_samples, num_chains=num_chains,
                               **opts)
    assert samples.spins.shape == (num_chains, num_samples, model.n)
    x = np.asarray(samples.spins, float)
    # masked variables never leave the low value
    low = model.vartype.low
    assert np.all(x[..., ~np.asarray(model.mask)] == low)
    dense = model.to_dense()
    mo = exact.moments(dense)
    energy = np.asarray(samples.energy)
    np.testing.assert_allclose(energy, np.asarray(model.energy(samples.spins)), rtol=1e-5, atol=1e-5)
    assert_mean_within_mcse(energy, float(mo.mean_energy), what="mean energy")
    # the chi^2 statistic is deflated by the smallest ESS among the energy and the marginals:
    # the slowest of them bounds how often a chain revisits states (at low temperature the
    # energy alone overstated it 5x for Gibbs, and the test rejected a correct sampler)
    n_eff = min([ess(energy)] + [ess(x[..., i]) for i in range(model.n) if model.mask[i]])
    frac = min(1.0, n_eff / energy.size)
    assert_chi2_matches(x, dense, effective_fraction=frac)
    n = model.n
    for i in range(n):
        if model.mask[i]:
            assert_mean_within_mcse(x[..., i], float(mo.marginals[i]), what=f"<x_{i}>")
    for i in range(n):
        for j in range(i + 1, n):
            if model.mask[i] and model.mask[j]:
                assert_mean_within_mcse(
                    x[..., i] * x[..., j], float(mo.correlations[i, j]), what=f"<x_{i} x_{j}>"
                )
