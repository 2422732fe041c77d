"""Sampler backends behind one protocol: ``sampler.sample(model, key, num_samples, *,
num_chains=1, ...) -> Samples``. Every backend is also a dimod sampler through
:func:`as_dimod_sampler`, and any dimod sampler is one of ours through :class:`DimodSampler`."""

from .._validation import check_key
from ._annealing import SimulatedAnnealingSampler, anneal, annealing_schedule, default_beta_range
from ._base import TIMING_KEYS, Sampler, Samples, key_from_seed, seed_from_key
from ._colouring import colour_classes
from ._diabatic import DiabaticAnnealingSampler
from ._dimod import DimodSampler, as_dimod_sampler
from ._driver import OBSERVABLES, ChainRun, Chains, init_chains, observables, run_chains
from ._exact import ExactSampler
from ._gibbs import GibbsSampler
from ._mcmc import MCMCSampler, SingleSiteSampler
from ._metropolis import MetropolisSampler
from ._neal import NealSampler, host_sample_callback
from ._qpu import OfflineQPUSampler, QPUConfigurationError, QPUConnectionError, QPUSampler
from ._qpu_tiled import TiledQPUSampler, find_tiles
from ._swendsen_wang import SwendsenWangSampler
from ._tempering import ParallelTemperingSampler
from ._transfer import TransferMatrixSampler
from ._wolff import WolffSampler

#: Backends by name (CLI and comparisons). Adding a backend: its file, this table, ``__all__``.
BACKENDS: dict[str, type[Sampler]] = {
    "exact": ExactSampler,
    "diabatic": DiabaticAnnealingSampler,
    "gibbs": GibbsSampler,
    "metropolis": MetropolisSampler,
    "parallel_tempering": ParallelTemperingSampler,
    "swendsen_wang": SwendsenWangSampler,
    "transfer": TransferMatrixSampler,
    "wolff": WolffSampler,
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
    "BACKENDS",
    "OBSERVABLES",
    "TIMING_KEYS",
    "ChainRun",
    "Chains",
    "DiabaticAnnealingSampler",
    "DimodSampler",
    "ExactSampler",
    "GibbsSampler",
    "MCMCSampler",
    "MetropolisSampler",
    "NealSampler",
    "OfflineQPUSampler",
    "ParallelTemperingSampler",
    "QPUConfigurationError",
    "QPUConnectionError",
    "QPUSampler",
    "Sampler",
    "Samples",
    "SimulatedAnnealingSampler",
    "SingleSiteSampler",
    "SwendsenWangSampler",
    "TiledQPUSampler",
    "TransferMatrixSampler",
    "WolffSampler",
    "anneal",
    "annealing_schedule",
    "as_dimod_sampler",
    "check_key",
    "colour_classes",
    "default_beta_range",
    "find_tiles",
    "get_sampler",
    "host_sample_callback",
    "init_chains",
    "key_from_seed",
    "observables",
    "run_chains",
    "seed_from_key",
]
