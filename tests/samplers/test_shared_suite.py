"""Every backend through the public conformance suite (isingattn.testing), one parametrized
table: the exact oracle's chi^2 test and MCSE bounds on the cases of ``isingattn.testing.CASES``.

False-failure rate per (backend, case) pair: at most (2 + n + n(n-1)/2) * ALPHA = 5.7e-3 for
n = 10 (Bonferroni, ALPHA = 1e-4); keys are fixed, so a pass is reproducible. The suite's own
power is tested too: a sampler at the wrong temperature fails it.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import numpy as np
import pytest

from isingattn import testing
from isingattn.samplers import (
    DimodSampler,
    ExactSampler,
    GibbsSampler,
    MetropolisSampler,
    ParallelTemperingSampler,
    Sampler,
    SimulatedAnnealingSampler,
    SwendsenWangSampler,
    TransferMatrixSampler,
    WolffSampler,
)

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
        for case in testing.CASES.values():
            marks = [] if not (case.tags & unsupported) else [pytest.mark.skip("not supported")]
            yield pytest.param(factory, opts, ns, nc, case, id=f"{bid}-{case.name}", marks=marks)


@pytest.mark.parametrize("factory,opts,num_samples,num_chains,case", list(_pairs()))
def test_backend_matches_exact(factory, opts, num_samples, num_chains, case):
    report = testing.check_sampler(factory(), case.make(), num_samples=num_samples,
                                   num_chains=num_chains, **opts)
    assert report.num_draws == num_samples * num_chains
    assert report.chi2_pvalue > testing.ALPHA
    assert report.max_mcse_deviation < testing.Z_ALPHA


def test_an_ocean_sampler_passes_through_dimod():
    """A third-party sampler: dwave-samplers' simulated annealing with a constant beta schedule
    (every read an independent Metropolis chain at the model's temperature), as the module
    docstring shows. False-failure rate <= 7 * 5.7e-3."""
    from dwave.samplers import SimulatedAnnealingSampler as OceanSA

    ocean = DimodSampler(OceanSA(), beta_schedule_type="custom", beta_schedule=[1.0] * 256)
    reports = testing.check_sampler_suite(ocean, num_samples=2000, num_chains=1)
    assert sorted(reports) == sorted(testing.CASES)


class _WrongTemperature(Sampler):
    """Exact draws at 1.25 times the model's beta: a plausible bug the suite must catch."""

    parameters: ClassVar[dict] = {}
    properties: ClassVar[dict] = {}

    def _sample(self, model, key, num_samples, num_chains, **options):
        hot = model.replace(beta=model.beta * 1.25)
        return ExactSampler()._sample(hot, key, num_samples, num_chains)


def test_the_suite_rejects_a_sampler_at_the_wrong_temperature():
    with pytest.raises(AssertionError, match="case 'dense-fields': .*(MCSE|chi\\^2)"):
        testing.check_sampler_suite(_WrongTemperature(), num_samples=4000, num_chains=1)


def test_errors_name_the_parameter():
    with pytest.raises(ValueError, match="unsupported must hold tags of the cases .*got \\['feilds'\\]"):
        testing.conformance_cases({"feilds"})
    assert [c.name for c in testing.conformance_cases({"fields"})] == ["frustrated",
                                                                        "sparse-lattice"]
    batch = testing.CASES["binary"].make()
    from isingattn.models import random_dense

    with pytest.raises(ValueError, match="model must be one model; got a batch of shape \\(2,\\)"):
        testing.check_sampler(ExactSampler(), random_dense(jax.random.key(0), 4, batch_shape=(2,)))
    with pytest.raises(ValueError, match="alpha must be in \\(0, 1\\); got 1.5"):
        testing.check_sampler(ExactSampler(), batch, alpha=1.5)
    assert np.isfinite(testing.Z_ALPHA)
