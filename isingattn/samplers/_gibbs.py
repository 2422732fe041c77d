"""GibbsSampler: heat-bath single-site updates (sequential, random or chromatic order)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from ._mcmc import SingleSiteSampler


@dataclasses.dataclass(frozen=True)
class GibbsSampler(SingleSiteSampler):
    """Heat-bath (Gibbs) sampler: each update draws a variable from its conditional,

    ``P(x_i = high | rest) = sigmoid(beta * f_i * (high - low))``, ``f_i = h_i + sum_j J_ij x_j``

    (``sigmoid(2 beta f_i)`` for SPIN, ``sigmoid(beta f_i)`` for BINARY), which leaves
    ``p(x) ∝ exp(-beta E(x))`` invariant. Batched over chains and models.

    Args:
      order: ``"auto"`` (sequential for dense, chromatic for sparse), ``"sequential"``,
        ``"random"`` or ``"chromatic"``; see :class:`~isingattn.samplers.SingleSiteSampler`.
      colouring: networkx greedy strategy for non-bipartite sparse graphs (chromatic order).
      backend: ``"auto"`` (default), ``"numba"`` or ``"jax"``: where chromatic sweeps run (the
        compiled CPU kernel or XLA; same draws); see
        :class:`~isingattn.samplers.SingleSiteSampler`.

    ``sample`` options: ``num_burnin`` (default 100), ``thinning``, ``initial_states``,
    ``beta_schedule``. ``info["acceptance_rate"]`` (``batch + (chain,)``): fraction of updates
    that changed the variable. Low-level kernel: :meth:`init`, :meth:`step`.

    Example:
      >>> import jax
      >>> from isingattn.models import square_lattice
      >>> from isingattn.samplers import GibbsSampler
      >>> m = square_lattice(8, beta=0.3)
      >>> s = GibbsSampler().sample(m, jax.random.key(0), 50, num_chains=4)
      >>> s.spins.shape
      (4, 50, 64)
    """

    _rule = 0  # isingattn._kernels.chromatic.GIBBS

    def _update(self, x, f, u, beta, low, high):
        # u < sigmoid(z) written as u (1 + exp(-z)) < 1: one exp, no division (the hot loop);
        # exp overflow gives inf, i.e. probability 0 of the high value, as it should
        z = beta * f * (high - low)
        return jnp.where(u * (1 + jnp.exp(-z)) < 1, high, low).astype(x.dtype)


__all__ = ["GibbsSampler"]
