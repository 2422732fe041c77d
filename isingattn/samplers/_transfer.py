"""TransferMatrixSampler: exact i.i.d. draws for banded couplings by forward filtering, backward
sampling (any length; see :func:`isingattn.exact.transfer_sample`)."""

from __future__ import annotations

from typing import Any, ClassVar

from .. import exact
from ._base import Sampler


class TransferMatrixSampler(Sampler):
    """Exact i.i.d. Boltzmann samples by transfer matrices, for couplings of range ``r``
    (``J_ij = 0`` for ``|i - j| > r``) at any length ``n``: cost ``O(n * r * 2^r)`` per draw
    batch, memory ``O(n * 2^r)`` per model. Wrap-around couplings (periodic chains, lattices)
    are handled by conditioning on the first ``K`` variables (cost ``x 2^K``). The bandwidth is
    read from the couplings (the cheapest ``2^(r + K)``) unless the ``bandwidth`` option gives
    it. Chains are independent by construction; ``info`` carries the exact ``log_partition``
    of every model, the window size ``bandwidth`` used and the number ``conditioned`` of variables
    conditioned on.

    Example:
      >>> import jax
      >>> from isingattn.models import chain
      >>> from isingattn.samplers import TransferMatrixSampler
      >>> s = TransferMatrixSampler().sample(chain(1000, beta=0.5), jax.random.key(0), 10)
      >>> s.spins.shape
      (1, 10, 1000)
    """

    parameters: ClassVar[dict[str, list]] = {"bandwidth": []}
    properties: ClassVar[dict[str, Any]] = {"exact": True, "max_log2_states": exact.MAX_TRANSFER_LOG2_STATES}

    def _sample(self, model, key, num_samples, num_chains, bandwidth=None):
        out = exact.transfer_sample_with_info(model, key, num_chains * num_samples, bandwidth)
        spins = out.samples.reshape(model.batch_shape + (num_chains, num_samples, model.n))
        return spins, {"log_partition": out.log_partition, "bandwidth": out.bandwidth,
                       "conditioned": out.conditioned}
