"""A conformance suite for samplers: does a sampler draw from the Boltzmann distribution?

``dimod.testing`` checks that a sampler has the right *shape* (it returns a sample set of the
requested size with the right variables). This module checks that a sampler is *correct*: on
small models (n <= 10) whose distribution is enumerated exactly, its draws must pass

* a chi^2 goodness-of-fit test of the sampled states against the exact probabilities (the
  statistic deflated by the draws' effective sample size, so correlated MCMC draws are judged
  fairly), and
* the mean energy, every marginal and every pairwise correlation within a stated number of Monte
  Carlo standard errors (ESS from ArviZ),

besides the API checks: the shape of the draws, energies equal to the model's energy of the
returned states, masked variables held at the low value.

Every statistical check states its false-failure rate (the chance that a *correct* sampler fails
for a random key): :data:`ALPHA` per assertion, so a model of ``n`` variables makes
``2 + n + n(n-1)/2`` assertions and a correct sampler fails it with probability at most that many
times ``ALPHA`` (Bonferroni: 5.7e-3 for n = 10). Keys are fixed, so a pass is reproducible.

Any sampler with our protocol can be checked — ours, an Ocean sampler wrapped in
:class:`~isingattn.samplers.DimodSampler`, a user's own :class:`~isingattn.samplers.Sampler`::

    from dwave.samplers import SimulatedAnnealingSampler
    from isingattn.samplers import DimodSampler
    from isingattn.testing import check_sampler_suite

    # a constant-beta schedule: every read a Metropolis chain at the model's temperature
    ocean = DimodSampler(SimulatedAnnealingSampler(), beta_schedule_type="custom",
                         beta_schedule=[1.0] * 256)
    check_sampler_suite(ocean, num_samples=2000, num_chains=1)  # AssertionError on a failure

:data:`CASES` names the models (dense with fields, frustrated, masked, BINARY, a sparse lattice,
a sparse chain, low temperature), each with tags; a sampler declares the tags it does not
support (e.g. ``{"fields"}`` for a cluster algorithm without fields).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from . import exact
from ._validation import check_key, check_positive_int
from .models import IsingModel, chain, random_dense, square_lattice

__all__ = ["ALPHA", "CASES", "MAX_VARIABLES", "Z_ALPHA", "ConformanceCase", "ConformanceReport",
           "assert_chi2_matches", "assert_mean_within_mcse", "check_sampler",
           "check_sampler_suite", "chi2_pvalue", "conformance_cases", "ess"]

#: Default per-assertion false-failure rate. A check that makes m such assertions fails a correct
#: sampler with probability at most m * ALPHA (Bonferroni).
ALPHA = 1e-4
#: Two-sided normal quantile for ALPHA (``|z| > Z_ALPHA`` with probability ALPHA).
Z_ALPHA = float(scipy.stats.norm.isf(ALPHA / 2))
#: Largest model the suite enumerates (``2^n`` states).
MAX_VARIABLES = 16


# ------------------------------------------------------------------------------------------------
# statistical assertions
# ------------------------------------------------------------------------------------------------


def chi2_pvalue(counts, probs, *, min_expected: float = 5.0,
                effective_fraction: float = 1.0) -> float:
    """Pearson chi^2 p-value of observed ``counts`` against probabilities ``probs``.

    Bins with expected count below ``min_expected`` are pooled into one bin (the classic rule
    for the chi^2 approximation); if that bin is still thin it joins the smallest kept bin.
    ``effective_fraction`` (ESS / N, in (0, 1]) deflates the statistic for correlated draws.

    Raises ``ValueError`` when fewer than 2 bins reach the minimum (too few draws to judge)."""
    counts = np.asarray(counts, float)
    probs = np.asarray(probs, float)
    if counts.shape != probs.shape:
        raise ValueError(f"counts and probs must have one shape; got {counts.shape} and "
                         f"{probs.shape}")
    if not 0 < effective_fraction <= 1:
        raise ValueError(f"effective_fraction must be in (0, 1]; got {effective_fraction}")
    expected = counts.sum() * probs
    big = expected >= min_expected
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] < min_expected:  # pooled bin still thin: merge it into the smallest kept bin
        if big.sum() == 0:
            raise ValueError("no bin reaches the minimum expected count; draw more samples")
        j = np.argmin(exp[:-1])
        obs[j] += obs[-1]
        exp[j] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    if len(exp) < 2:
        raise ValueError("fewer than 2 bins with enough expected counts; the test cannot judge")
    stat = float(np.sum((obs - exp) ** 2 / exp)) * effective_fraction
    return float(scipy.stats.chi2.sf(stat, len(exp) - 1))


def assert_chi2_matches(states, model, *, alpha: float = ALPHA,
                        effective_fraction: float = 1.0) -> float:
    """Sampled ``states`` ``(..., n)`` of one unbatched ``model`` pass a chi^2 test against its
    exact probabilities at level ``alpha`` (the false-failure rate). Raises ``AssertionError``
    with the p-value otherwise; returns the p-value."""
    n = model.n
    idx = np.asarray(exact.state_to_index(np.asarray(states).reshape(-1, n), model.vartype))
    probs = np.asarray(exact.probabilities(model), float)
    counts = np.bincount(idx, minlength=probs.size)
    p = chi2_pvalue(counts, probs, effective_fraction=effective_fraction)
    assert p > alpha, f"chi^2 goodness of fit rejected at level {alpha}: p = {p:.3g}"
    return p


def ess(x) -> float:
    """Effective sample size of ``x`` shaped ``(chain, draw)`` (ArviZ, ``method="mean"``: the
    ESS that goes with the Monte Carlo standard error of a mean)."""
    import arviz as az

    return float(az.ess(np.asarray(x, float), method="mean"))


def assert_mean_within_mcse(x, truth, *, z: float = Z_ALPHA, what: str = "estimate") -> float:
    """The mean of ``x`` ``(chain, draw)`` is within ``z`` Monte Carlo standard errors of
    ``truth`` (MCSE = sd / sqrt(ESS)); false-failure rate ``2 * norm.sf(z)`` (:data:`ALPHA` at
    the default). A constant ``x`` must equal ``truth`` to 1e-6. Raises ``AssertionError``;
    returns the deviation in MCSEs (0 for a constant ``x``)."""
    x = np.asarray(x, float)
    sd = x.std()
    if sd == 0:
        assert np.allclose(x.mean(), truth, atol=1e-6), f"{what}: constant {x.mean()} != {truth}"
        return 0.0
    e = ess(x)
    err = abs(x.mean() - truth) / (sd / np.sqrt(e))
    assert err < z, (f"{what}: |{x.mean():.5g} - {truth:.5g}| = {err:.2f} MCSE (ESS {e:.0f}) > "
                     f"{z:.2f}")
    return float(err)


# ------------------------------------------------------------------------------------------------
# the models
# ------------------------------------------------------------------------------------------------


class ConformanceCase(NamedTuple):
    """One model of the suite: ``make()`` builds it; ``tags`` say what it exercises (``dense``,
    ``sparse``, ``fields``, ``frustrated``, ``mask``, ``binary``, ``ferro``, ``lowT``)."""

    name: str
    make: Callable[[], object]
    tags: frozenset


def _frustrated():
    # antiferromagnetic triangle plus a spectator: every ground state breaks one bond
    J = -np.array([[0, 1, 1, 0], [1, 0, 1, 0], [1, 1, 0, 0.5], [0, 0, 0.5, 0]], float)
    J[3, 2] = J[2, 3] = 0.5
    return IsingModel(h=np.zeros(4), J=J, beta=1.0)


def _masked():
    m = random_dense(jax.random.key(3), 7, beta=0.6)
    return m.replace(mask=jnp.array([True, True, False, True, True, False, True]))


#: The suite's models by name.
CASES = {c.name: c for c in [
    ConformanceCase("dense-fields", lambda: random_dense(jax.random.key(1), 6, beta=0.5),
                    frozenset({"dense", "fields"})),
    ConformanceCase("frustrated", _frustrated, frozenset({"dense", "frustrated"})),
    ConformanceCase("masked", _masked, frozenset({"dense", "fields", "mask"})),
    ConformanceCase("binary", lambda: random_dense(jax.random.key(5), 5, beta=0.7,
                                                   vartype="BINARY"),
                    frozenset({"dense", "fields", "binary"})),
    ConformanceCase("sparse-lattice",
                    lambda: square_lattice((3, 3), J=1.0, periodic=False, beta=0.4),
                    frozenset({"sparse", "ferro"})),
    ConformanceCase("sparse-chain-fields", lambda: chain(8, J=0.8, h=0.3, beta=0.8),
                    frozenset({"sparse", "fields", "ferro"})),
    ConformanceCase("low-temperature",
                    lambda: random_dense(jax.random.key(7), 5, J_scale=0.5, h_scale=0.3,
                                         beta=2.0),
                    frozenset({"dense", "fields", "lowT"})),
]}


def conformance_cases(unsupported=()) -> list[ConformanceCase]:
    """The cases of :data:`CASES` that carry none of the ``unsupported`` tags. Raises
    ``ValueError`` for a tag no case carries (a typo would silently skip nothing)."""
    unsupported = frozenset(unsupported)
    known = frozenset().union(*(c.tags for c in CASES.values()))
    if unsupported - known:
        raise ValueError(f"unsupported must hold tags of the cases ({', '.join(sorted(known))});"
                         f" got {sorted(unsupported - known)}")
    return [c for c in CASES.values() if not c.tags & unsupported]


# ------------------------------------------------------------------------------------------------
# the checks
# ------------------------------------------------------------------------------------------------


class ConformanceReport(NamedTuple):
    """What :func:`check_sampler` measured: the number of draws, the smallest effective sample
    size among the energy and the marginals, the chi^2 p-value (after the ESS deflation) and
    the largest deviation of a mean, marginal or correlation in Monte Carlo standard errors."""

    num_draws: int
    min_ess: float
    chi2_pvalue: float
    max_mcse_deviation: float
    assertions: int


def check_sampler(sampler, model, *, key=None, num_samples: int = 2000, num_chains: int = 4,
                  alpha: float = ALPHA, **options) -> ConformanceReport:
    """Check that ``sampler.sample(model, key, num_samples, num_chains=num_chains, **options)``
    draws from ``model``'s Boltzmann distribution (one unbatched model of at most
    :data:`MAX_VARIABLES` variables, enumerated exactly).

    Checks, in order: the draws' shape ``(num_chains, num_samples, n)``; masked variables at the
    low value; the returned energies equal ``model.energy`` of the returned states; the mean
    energy, every marginal and every pair correlation within the MCSE bound of ``alpha``; the
    chi^2 test at ``alpha``. ``key`` defaults to ``jax.random.key(2024)``.

    Returns a :class:`ConformanceReport`; raises ``AssertionError`` naming the first failed
    check (a correct sampler fails with probability at most ``report.assertions * alpha``), and
    ``ValueError`` for a batched or too large model."""
    num_samples = check_positive_int("num_samples", num_samples)
    num_chains = check_positive_int("num_chains", num_chains)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1); got {alpha}")
    if model.batch_shape:
        raise ValueError(f"model must be one model; got a batch of shape {model.batch_shape} "
                         "(check its members one by one)")
    if model.n > MAX_VARIABLES:
        raise ValueError(f"model has {model.n} variables; the exact oracle enumerates at most "
                         f"{MAX_VARIABLES}")
    key = jax.random.key(2024) if key is None else check_key(key)
    z = float(scipy.stats.norm.isf(alpha / 2))
    samples = sampler.sample(model, key, num_samples, num_chains=num_chains, **options)
    n = model.n
    shape = tuple(samples.spins.shape)
    assert shape == (num_chains, num_samples, n), (
        f"draws have shape {shape}; expected (num_chains, num_samples, n) = "
        f"{(num_chains, num_samples, n)}")
    x = np.asarray(samples.spins, float)
    mask = np.asarray(model.mask)
    assert np.all(x[..., ~mask] == model.vartype.low), "a masked variable left its low value"
    energy = np.asarray(samples.energy, float)
    np.testing.assert_allclose(energy, np.asarray(model.energy(samples.spins)), rtol=1e-5,
                               atol=1e-5, err_msg="returned energies are not the model's")
    dense = model.to_dense()
    mo = exact.moments(dense)
    checks = [(energy, float(mo.mean_energy), "mean energy")]
    checks += [(x[..., i], float(mo.marginals[i]), f"<x_{i}>") for i in range(n) if mask[i]]
    checks += [(x[..., i] * x[..., j], float(mo.correlations[i, j]), f"<x_{i} x_{j}>")
               for i in range(n) for j in range(i + 1, n) if mask[i] and mask[j]]
    deviation = max(assert_mean_within_mcse(values, truth, z=z, what=what)
                    for values, truth, what in checks)
    # the chi^2 statistic is deflated by the smallest ESS among the energy and the marginals:
    # the slowest of them bounds how often a chain revisits states
    n_eff = min([ess(energy)] + [ess(x[..., i]) for i in range(n) if mask[i]])
    frac = min(1.0, n_eff / energy.size)
    p = assert_chi2_matches(x, dense, alpha=alpha, effective_fraction=frac)
    return ConformanceReport(energy.size, n_eff, p, deviation, len(checks) + 1)


def check_sampler_suite(sampler, *, unsupported=(), key=None, num_samples: int = 2000,
                        num_chains: int = 4, alpha: float = ALPHA,
                        **options) -> dict[str, ConformanceReport]:
    """:func:`check_sampler` on every case of :data:`CASES` without an ``unsupported`` tag.
    Returns the reports by case name; raises ``AssertionError`` naming the case and the check at
    the first failure."""
    reports = {}
    for case in conformance_cases(unsupported):
        try:
            reports[case.name] = check_sampler(sampler, case.make(), key=key,
                                               num_samples=num_samples, num_chains=num_chains,
                                               alpha=alpha, **options)
        except AssertionError as e:
            raise AssertionError(f"case {case.name!r}: {e}") from None
    return reports
