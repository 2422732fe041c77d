"""Rotary position embeddings (RoPE, Su et al. 2021) for queries and keys."""

from __future__ import annotations

import jax.numpy as jnp


def apply_rope(x, positions, *, base: float = 10000.0):
    """Rotate feature pairs of ``x`` ``(..., L, heads, H)`` by angles ``position * base^(-2i/H)``.

    ``positions``: ``(L,)`` (or broadcastable to ``x.shape[:-2]``) integer positions. Pairs are
    the two halves of the last axis (the "rotate half" layout), so ``H`` must be even. The dot
    product of a rotated query at position ``i`` and a rotated key at ``j`` depends on ``i - j``
    only: the attention scores, hence the Boltzmann fields ``h_ij``, become relative.

    Raises ``ValueError`` when ``H`` is odd.
    """
    H = x.shape[-1]
    if H % 2:
        raise ValueError(f"rotary embeddings need an even head dimension; got {H}")
    half = H // 2
    freq = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angle = jnp.asarray(positions, jnp.float32)[..., None] * freq  # (..., L, half)
    cos = jnp.cos(angle)[..., None, :].astype(x.dtype)  # broadcast over heads
    sin = jnp.sin(angle)[..., None, :].astype(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
