"""Diagnostics: observables, mixing (autocorrelation, tau_int, ESS, R-hat), distances between
distributions, effective temperature, and sampler comparisons.

Inputs are :class:`~isingattn.samplers.Samples` or arrays shaped ``batch + (chain, draw, n)``
(observables) or ``batch + (chain, draw)`` (scalar series); masked variables contribute nothing.
"""

from .._estimates import TemperatureEstimate  # shared with isingattn.probabilistic
from ._compare import ComparisonTable, compare_samplers
from ._distances import (
    Chi2Result,
    EmpiricalDistribution,
    EnergyHistogram,
    chi2_test,
    empirical_distribution,
    energy_histogram,
    exact_energy_distribution,
    expected_tv_iid,
    hellinger,
    js_divergence,
    kl_divergence,
    moment_errors,
    total_variation,
)
from ._mixing import (
    autocorrelation,
    effective_sample_size,
    integrated_autocorr_time,
    rhat,
    summary,
    to_arviz,
)
from ._observables import (
    abs_magnetization,
    binder_cumulant,
    chain_distances,
    connected_correlation,
    correlation_function,
    correlation_length,
    correlation_length_from_correlations,
    correlations,
    energy,
    lattice_distances,
    magnetization,
    site_magnetization,
    specific_heat,
    susceptibility,
)
from ._plots import plot_comparison
from ._temperature import (
    effective_beta_ml,
    effective_beta_mple,
    effective_temperature,
    flip_energies,
)

__all__ = [  # noqa: RUF022 (grouped by topic, as in the API reference)
    # observables
    "magnetization", "abs_magnetization", "site_magnetization", "energy", "susceptibility",
    "specific_heat", "binder_cumulant", "correlations", "connected_correlation",
    "correlation_function", "correlation_length", "correlation_length_from_correlations",
    "chain_distances", "lattice_distances",
    # mixing
    "autocorrelation", "integrated_autocorr_time", "effective_sample_size", "rhat", "to_arviz",
    "summary",
    # distances
    "EmpiricalDistribution", "empirical_distribution", "total_variation", "kl_divergence",
    "js_divergence", "hellinger", "expected_tv_iid", "Chi2Result", "chi2_test", "moment_errors",
    "EnergyHistogram", "energy_histogram", "exact_energy_distribution",
    # effective temperature
    "TemperatureEstimate", "effective_beta_ml", "effective_beta_mple", "effective_temperature",
    "flip_energies",
    # comparison
    "ComparisonTable", "compare_samplers", "plot_comparison",
]
