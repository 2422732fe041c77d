"""The ``transfer`` method: a transfer-matrix recursion for banded couplings (the kernels are in
:mod:`isingattn.attention._banded`)."""

from __future__ import annotations

import dataclasses

from .._validation import check_choice
from ._exact import MAX_EXACT_KEYS
from ._inference import independent


@dataclasses.dataclass(frozen=True)
class Transfer:
    """Exact marginals for banded couplings of range ``r`` at any length, by a transfer-matrix
    recursion over the window of the last ``r`` keys (cost ``O(S 2^r)`` per query), specialised
    to couplings shared by every query of a head (see ``isingattn.attention._banded``).

    Gradients come from a hand-written vector-Jacobian product (reverse mode only); with
    ``coupling_grad=False`` (the layer passes it for frozen couplings, ``fixed`` or ``random``,
    at a concrete ``beta``) it skips the couplings' part, about half the cost. With ``causal=True`` (passed by the layer for ``is_causal``) two
    queries share one chain. A head with ``beta * sum_d |w(d)| <= 20`` (float32; 160 in
    float64) runs in probability space, exact to about 1e-6 in float32 (its gradient up to 18;
    144); any other head runs a log-domain recursion, chosen per head at run time: exact and
    finite at any coupling strength.

    ``backend``: where the forward pass runs: ``"auto"`` (default: a compiled kernel on the CPU,
    :mod:`isingattn._kernels.transfer`, where JAX runs on the CPU; else JAX), ``"numba"`` or
    ``"jax"``. The same numbers to float precision; the gradient is JAX's in every case."""

    backend: str = "auto"
    name = "transfer"
    stochastic = False

    def __post_init__(self):
        from ._banded import BACKENDS

        check_choice("backend", self.backend, BACKENDS)

    def __call__(self, h, mask, couplings, beta, *, key=None, feature="marginal", causal=False,
                 log_partition=False, coupling_grad=True):
        if couplings is None or couplings.is_zero:
            return independent(h, mask, beta)
        S = h.shape[-1]
        r = couplings.band_width(S)
        if r is None:
            raise ValueError(
                f"method='transfer' needs banded couplings (structure='banded'); got "
                f"structure={couplings.structure!r}. Use method='exact' (S <= {MAX_EXACT_KEYS}),"
                " 'mean_field' or sampled(backend, num_samples)"
            )
        if r == 0:  # a single key: nothing to couple
            return independent(h, mask, beta)
        from ._banded import transfer_inference

        return transfer_inference(h, mask, couplings, beta, r, causal=causal,
                                  log_partition=log_partition, backend=self.backend,
                                  coupling_grad=coupling_grad)
