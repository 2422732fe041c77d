"""MetropolisSampler: single-site flip proposals (sequential, random or chromatic order)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from ._mcmc import SingleSiteSampler


@dataclasses.dataclass(frozen=True)
class MetropolisSampler(SingleSiteSampler):
    """Metropolis sampler: each update proposes flipping one variable (``x -> low + high - x``)
    and accepts with probability ``min(1, exp(-beta dE))``, where
    ``dE = -f_i (x_new - x_old)`` and ``f_i = h_i + sum_j J_ij x_j`` (``2 x_i f_i`` for SPIN).

    The same fixed-temperature sweep as dwave-samplers' ``SimulatedAnnealingSampler`` with a
    constant ``beta_schedule``. Options, ``info`` and kernel as for
    :class:`~isingattn.samplers.GibbsSampler`; ``info["acceptance_rate"]`` is the fraction of
    accepted flips.

    Example:
      >>> import jax
      >>> from isingattn.models import random_dense
      >>> from isingattn.samplers import MetropolisSampler
      >>> m = random_dense(jax.random.key(0), 16, batch_shape=(3,), beta=0.5)
      >>> s = MetropolisSampler().sample(m, jax.random.key(1), 20, num_chains=2)
      >>> s.spins.shape
      (3, 2, 20, 16)
    """

    _rule = 1  # isingattn._kernels.chromatic.METROPOLIS

    def _update(self, x, f, u, beta, low, high):
        flipped = (low + high) - x
        dE = -f * (flipped - x)
        return jnp.where(u < jnp.exp(-beta * dE), flipped, x)


__all__ = ["MetropolisSampler"]
