"""The ``exact`` method: enumeration of every attention pattern of a query."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from .._constants import BIG as _BIG
from ._inference import Inference, independent

#: Largest number of keys ``S`` the ``exact`` method enumerates (``2^S`` patterns per query).
MAX_EXACT_KEYS = 16
_EXACT_TILE = 1 << 24  # elements of the (rows, 2^S) pattern table processed at once


def _pattern_table(S, dtype):
    idx = jnp.arange(1 << S, dtype=jnp.int32)
    return ((idx[:, None] >> jnp.arange(S, dtype=jnp.int32)) & 1).astype(dtype)


def _exact_rows(a, W, X, Q):
    """a (b, N, T, S) bit-form fields (masked: -BIG), W (N, S, S); returns m-proportional u,
    the shift-free marginals and log Z."""
    L = jnp.einsum("bnts,ps->bntp", a, X) + Q[None, :, None, :]
    logZ = jax.nn.logsumexp(L, axis=-1)
    # Shift by the best non-empty pattern: the empty pattern carries no weight in sum_s p(s) s,
    # so u stays O(1) even when every m_j underflows (the b -> -inf softmax limit).
    shift = jax.lax.stop_gradient(jnp.max(L[..., 1:], axis=-1, keepdims=True))
    e = jnp.exp(L[..., 1:] - shift)
    u = jnp.einsum("bntp,ps->bnts", e, X[1:])
    m = u * jnp.exp(shift - logZ[..., None])
    return u, m, logZ


@dataclasses.dataclass(frozen=True)
class Exact:
    """Exact marginals by enumerating all ``2^S`` attention patterns of every query.

    One ``(2^S, S)`` pattern table and one quadratic term per head serve every query: the
    pattern log-weights are a batched matrix product, ``log Z`` a log-sum-exp, marginals a second
    product; gradients are JAX autodiff of these. Memory ``O(rows * 2^S)``, processed in tiles of
    ``2^24`` elements. Supports ``S <= MAX_EXACT_KEYS`` (16).
    """

    name = "exact"
    stochastic = False

    def __call__(self, h, mask, couplings, beta, *, key=None, feature="marginal", causal=False,
                 log_partition=False, coupling_grad=True):
        B, N, T, S = h.shape
        if couplings is None or couplings.is_zero:
            return independent(h, mask, beta)
        if S > MAX_EXACT_KEYS:
            raise ValueError(
                f"method='exact' enumerates 2^S attention patterns per query and supports "
                f"S <= {MAX_EXACT_KEYS} keys; got S = {S}. Use method='transfer' (banded "
                "couplings, exact at any length) or method=sampled(backend, num_samples)"
            )
        dt = h.dtype
        X = _pattern_table(S, dt)
        W = beta * couplings.matrix(S, dt)
        W = jnp.broadcast_to(W, (N, S, S))
        Q = 0.5 * jnp.sum((X @ W) * X, axis=-1)  # (N, 2^S)
        a = jnp.where(mask, beta * h, -_BIG)
        a = jnp.broadcast_to(a, (B, N, T, S))
        rows = max(1, _EXACT_TILE // (N * T * (1 << S)))
        if rows >= B:
            u, m, logZ = _exact_rows(a, W, X, Q)
        else:
            u, m, logZ = jax.lax.map(
                lambda ab: _exact_rows(ab[None], W, X, Q), a, batch_size=rows
            )
            u, m, logZ = u[:, 0], m[:, 0], logZ[:, 0]
        u = jnp.where(mask, u, 0.0)
        m = jnp.where(mask, m, 0.0)
        return Inference(m, u, m, logZ)
