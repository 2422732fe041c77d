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
from ._onsager import (
    BETA_C,
    kaufman_log_partition,
    kaufman_mean_energy,
    kaufman_specific_heat,
    onsager_energy_per_site,
    onsager_magnetization,
    onsager_specific_heat,
)
from ._transfer import (
    MAX_TRANSFER_FULL_CORRELATIONS_N,
    MAX_TRANSFER_LOG2_STATES,
    TransferMoments,
    bandwidth,
    transfer_correlations,
    transfer_log_partition,
    transfer_marginals,
    transfer_moments,
    transfer_sample,
)

__all__ = [
    "MAX_ENUMERATION_N", "MAX_PROBABILITIES_N", "Moments", "moments", "log_partition",
    "marginals", "correlations", "mean_energy", "probabilities", "ground_state", "sample",
    "enumerate_states", "index_to_state", "state_to_index",
    "MAX_TRANSFER_LOG2_STATES", "MAX_TRANSFER_FULL_CORRELATIONS_N", "TransferMoments",
    "bandwidth", "transfer_log_partition", "transfer_marginals", "transfer_correlations",
    "transfer_moments", "transfer_sample",
    "BETA_C", "onsager_energy_per_site", "onsager_magnetization", "onsager_specific_heat",
    "kaufman_log_partition", "kaufman_mean_energy", "kaufman_specific_heat",
]
