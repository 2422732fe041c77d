"""Sampler backends behind one protocol: ``sampler.sample(model, key, num_samples, *,
num_chains=1, ...) -> Samples``. Every backend is also a dimod sampler through
:func:`as_dimod_sampler`, and any dimod sampler is one of ours through :class:`DimodSampler`."""

from ._base import TIMING_KEYS, Sampler, Samples, check_key, key_from_seed, seed_from_key
from ._diabatic import DiabaticAnnealingSampler
from ._dimod import DimodSampler, as_dimod_sampler
from ._exact import ExactSampler
from ._transfer import TransferMatrixSampler
from ._annealing import SimulatedAnnealingSampler, anneal, annealing_schedule, default_beta_range
from ._neal import NealSampler, host_sample_callback
from ._qpu import OfflineQPUSampler, QPUConfigurationError, QPUSampler

#: Backends by name (CLI and comparisons). Adding a backend: its file, this table, ``__all__``.
BACKENDS: dict[str, type[Sampler]] = {
    "exact": ExactSampler,
    "diabatic": DiabaticAnnealingSampler,
    "transfer": TransferMatrixSampler,
    "simulated_annealing": SimulatedAnnealingSampler,
    "neal": NealSampler,
    "qpu": QPUSampler,
    "qpu_offline": OfflineQPUSampler,
}


def get_sampler(name: str, **kwargs) -> Sampler:
    """A backend by its name in :data:`BACKENDS`, constructed with ``kwargs``."""
    if name not in BACKENDS:
        raise ValueError(f"unknown sampler {name!r}; valid: {', '.join(BACKENDS)}")
    return BACKENDS[name](**kwargs)


__all__ = [
    "BACKENDS", "get_sampler",
    "Sampler", "Samples", "TIMING_KEYS", "check_key", "seed_from_key", "key_from_seed",
    "ExactSampler", "DimodSampler", "as_dimod_sampler",
    "DiabaticAnnealingSampler",
    "TransferMatrixSampler",
    "SimulatedAnnealingSampler", "anneal", "annealing_schedule", "default_beta_range",
    "NealSampler", "host_sample_callback",
    "QPUSampler", "OfflineQPUSampler", "QPUConfigurationError",
]
