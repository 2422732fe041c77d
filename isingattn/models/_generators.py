"""Model generators: chains, square lattices, Sherrington-Kirkpatrick, random dense, attention."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_positive_int, normalize_key, shape_str
from ._dense import IsingModel
from ._sparse import SparseIsingModel


def _per_item(name, value, count, what):
    """Broadcast a scalar to ``(..., count)`` or check a given array's last dimension."""
    arr = jnp.asarray(value)
    if arr.ndim == 0:
        return jnp.full((count,), arr, dtype=jnp.result_type(arr, float))
    if arr.shape[-1] != count:
        raise ValueError(
            f"{name} must be a scalar or have shape (..., {count}) (one per {what}); "
            f"got {shape_str(arr.shape)}"
        )
    return arr


def _finish(h, edges, J, n, beta, vartype, dense, offset=0.0):
    model = SparseIsingModel(h=h, edges=edges, J=J, beta=beta, vartype=vartype, offset=offset)
    return model.to_dense() if dense else model


def chain(n, J=1.0, h=0.0, *, periodic=False, beta=1.0, vartype="SPIN", dense=False):
    """1D chain of ``n`` variables with nearest-neighbour couplings.

    Edges are ``(i, i+1)`` for ``i = 0..n-2``, plus ``(n-1, 0)`` last when ``periodic``.
    ``J``: scalar or ``(..., E)`` per edge in that order; ``h``: scalar or ``(..., n)``.
    Returns a :class:`SparseIsingModel` (``dense=True``: an :class:`IsingModel`).
    """
    n = check_positive_int("n", n, 2)
    if periodic and n < 3:
        raise ValueError(f"a periodic chain needs n >= 3 (n = {n} would double an edge)")
    edges = [(i, i + 1) for i in range(n - 1)] + ([(n - 1, 0)] if periodic else [])
    edges = np.array(edges, np.int32)
    return _finish(
        _per_item("h", h, n, "variable"), edges, _per_item("J", J, len(edges), "edge"), n,
        beta, vartype, dense,
    )


def lattice_edges(Lx: int, Ly: int, periodic: bool) -> np.ndarray:
    """Edges of an ``Lx x Ly`` square lattice, site ``(r, c)`` at index ``r * Ly + c``:
    all horizontal bonds ``(r, c)-(r, c+1)`` first (row-major), then all vertical ones."""
    idx = np.arange(Lx * Ly).reshape(Lx, Ly)
    if periodic:
        horiz = np.stack([idx.ravel(), np.roll(idx, -1, axis=1).ravel()], 1)
        vert = np.stack([idx.ravel(), np.roll(idx, -1, axis=0).ravel()], 1)
    else:
        horiz = np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1)
        vert = np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()], 1)
    return np.concatenate([horiz, vert]).astype(np.int32)


def square_lattice(L, J=1.0, h=0.0, *, periodic=True, beta=1.0, vartype="SPIN", dense=False):
    """Square lattice, ``L`` an int (L x L) or a pair ``(Lx, Ly)``; site ``(r, c)`` is variable
    ``r * Ly + c``. Edge order: see :func:`lattice_edges`. ``J``: scalar or ``(..., E)``;
    ``h``: scalar or ``(..., n)``. Returns a :class:`SparseIsingModel` unless ``dense``.
    """
    Lx, Ly = (L, L) if np.ndim(L) == 0 else tuple(L)
    Lx, Ly = check_positive_int("L", Lx, 2), check_positive_int("L", Ly, 2)
    if periodic and min(Lx, Ly) < 3:
        raise ValueError(
            f"a periodic lattice needs L >= 3 in both directions (got {Lx} x {Ly}); "
            "use periodic=False for smaller lattices"
        )
    edges = lattice_edges(Lx, Ly, periodic)
    n = Lx * Ly
    return _finish(
        _per_item("h", h, n, "site"), edges, _per_item("J", J, len(edges), "edge"), n,
        beta, vartype, dense,
    )


def _symmetric_gaussian(key, shape, n, scale, mean=0.0):
    A = jax.random.normal(key, shape + (n, n))
    upper = jnp.triu(A, 1) * scale + jnp.triu(jnp.ones((n, n)), 1) * mean
    return upper + jnp.swapaxes(upper, -1, -2)


def sherrington_kirkpatrick(key, n, *, J0=0.0, sigma=1.0, h_sigma=0.0, batch_shape=(),
                            beta=1.0, vartype="SPIN"):
    """Sherrington-Kirkpatrick spin glass: ``J_ij ~ N(J0 / n, sigma^2 / n)`` for all pairs,
    fields ``h_i ~ N(0, h_sigma^2)``. Dense; ``batch_shape`` draws independent instances."""
    n = check_positive_int("n", n, 1)
    kJ, kh = jax.random.split(normalize_key(key))
    batch_shape = tuple(batch_shape)
    J = _symmetric_gaussian(kJ, batch_shape, n, sigma / math.sqrt(n), J0 / n)
    h = h_sigma * jax.random.normal(kh, batch_shape + (n,))
    return IsingModel(h=h, J=J, beta=beta, vartype=vartype)


def random_dense(key, n, *, J_scale=1.0, h_scale=1.0, batch_shape=(), beta=1.0, vartype="SPIN"):
    """Dense model with independent Gaussian couplings ``J_ij ~ N(0, J_scale^2)`` (i < j) and
    fields ``h_i ~ N(0, h_scale^2)``; ``batch_shape`` draws independent instances."""
    n = check_positive_int("n", n, 1)
    kJ, kh = jax.random.split(normalize_key(key))
    batch_shape = tuple(batch_shape)
    J = _symmetric_gaussian(kJ, batch_shape, n, J_scale)
    h = h_scale * jax.random.normal(kh, batch_shape + (n,))
    return IsingModel(h=h, J=J, beta=beta, vartype=vartype)


def from_attention(query, keys, J, *, bias=0.0, scale=None, beta=1.0, mask=None):
    """The Boltzmann-attention model of one query (or a batch of queries): BINARY variables
    ``s_j`` ("attend to key j") with fields ``h_j = scale * (q . k_j) + bias`` and couplings ``J``.

    Args:
      query: ``(..., d)``.
      keys: ``(..., n, d)``, broadcasting against ``query``'s leading dims.
      J: ``(..., n, n)`` symmetric, zero diagonal (e.g. one per head, shared by all queries).
      bias: per-head bias / chemical potential ``b`` (scalar or batch-shaped).
      scale: defaults to ``1 / sqrt(d)``.
      mask: boolean ``(..., n)`` of allowed keys (causal / padding masks).
    """
    query, keys = jnp.asarray(query), jnp.asarray(keys)
    if keys.ndim < 2 or query.ndim < 1 or keys.shape[-1] != query.shape[-1]:
        raise ValueError(
            "query must have shape (..., d) and keys (..., n, d) with the same d; got "
            f"query {shape_str(query.shape)} and keys {shape_str(keys.shape)}"
        )
    d = query.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    h = scale * jnp.einsum("...d,...nd->...n", query, keys) + jnp.asarray(bias)[..., None]
    return IsingModel(h=h, J=J, beta=beta, vartype="BINARY", mask=mask)
