"""ExactSampler: i.i.d. draws from the exact Boltzmann distribution by enumeration."""

from __future__ import annotations

from typing import Any, ClassVar

from .. import exact
from ._base import Sampler


class ExactSampler(Sampler):
    """Exact i.i.d. Boltzmann samples by enumeration (``n <= 30``; see
    :func:`isingattn.exact.sample`). Chains are independent by construction; ``info`` carries the
    exact ``log_partition`` of every model.

    Example:
      >>> import jax
      >>> from isingattn.models import chain
      >>> from isingattn.samplers import ExactSampler
      >>> s = ExactSampler().sample(chain(6, beta=0.5), jax.random.key(0), 100, num_chains=2)
      >>> s.spins.shape
      (2, 100, 6)
    """

    parameters: ClassVar[dict[str, list]] = {}
    properties: ClassVar[dict[str, Any]] = {"exact": True, "max_n": exact.MAX_ENUMERATION_N,
                                            "exponential_cost": True}

    def _sample(self, model, key, num_samples, num_chains):
        draws = exact.sample(model, key, num_chains * num_samples)
        spins = draws.reshape(model.batch_shape + (num_chains, num_samples, model.n))
        return spins, {"log_partition": exact.log_partition(model)}
