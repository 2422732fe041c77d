"""Exact inference: enumeration (any couplings, n <= 30) and transfer matrices (banded
couplings, any length). These are the oracle every sampler is tested against."""

from ._enumerate import (
    MAX_ENUMERATION_N,
    MAX_PROBABILITIES_N,
    Moments,
    correlations,
    enumerate_states,
    ground_state,
    index_to_state,
    log_partition,
    marginals,
    mean_energy,
    moments,
    probabilities,
    sample,
    state_to_index,
)

__all__ = [
    "MAX_ENUMERATION_N", "MAX_PROBABILITIES_N", "Moments", "moments", "log_partition",
    "marginals", "correlations", "mean_energy", "probabilities", "ground_state", "sample",
    "enumerate_states", "index_to_state", "state_to_index",
]
