"""Observables of sampled states: magnetization, susceptibility, energy, specific heat, Binder
cumulant, correlations, correlation function against distance, second-moment correlation length.

Every function takes ``samples``: a :class:`~isingattn.samplers.Samples` or an array shaped
``batch + (chain, draw, n)``, and optionally the ``model`` (needed for its mask, beta, energy or
geometry). Masked variables (``model.mask == False``) contribute nothing: sums run over the
``N_a`` active variables only and per-variable averages divide by ``N_a``. Expectations
``<.>`` average over chains and draws; results have the batch shape.
"""

from __future__ import annotations

import numpy as np

from ._input import as_draws


def _beta(d, beta):
    if beta is not None:
        b = np.asarray(beta, np.float64)
    elif d.model is not None:
        b = np.asarray(d.model.beta, np.float64)
    else:
        raise ValueError(
            "beta is needed: pass the model (its beta is used) or beta=... explicitly"
        )
    return np.broadcast_to(b, d.batch_shape)


def _safe_active(d):
    na = d.num_active.astype(np.float64)
    if np.any(na == 0):
        raise ValueError("the model has no active variable (mask is all False) in some batch entry")
    return na


def _need_two(d, what):
    N = d.x.shape[-3] * d.x.shape[-2]
    if N < 2:
        raise ValueError(
            f"{what} is a variance: it needs at least 2 draws (chains x draws); got {N}"
        )


def magnetization(samples, model=None) -> np.ndarray:
    """Magnetization per draw, ``m = (1/N_a) sum_{i active} x_i``, shape ``batch + (chain, draw)``.

    A series: feed it to :func:`integrated_autocorr_time`, :func:`effective_sample_size` or
    :func:`rhat`; its mean over chains and draws is ``<m>``.
    """
    d = as_draws(samples, model)
    return d.active().sum(-1) / _safe_active(d)[..., None, None]


def abs_magnetization(samples, model=None) -> np.ndarray:
    """``|m|`` per draw (see :func:`magnetization`), shape ``batch + (chain, draw)``."""
    return np.abs(magnetization(samples, model))


def site_magnetization(samples, model=None) -> np.ndarray:
    """``<x_i>`` for every variable, shape ``batch + (n,)``. A masked variable reports the value
    it is held at (-1 / 0), the same convention as :func:`isingattn.exact.marginals`."""
    d = as_draws(samples, model)
    return d.x.mean(axis=(-3, -2))


def energy(samples, model=None) -> np.ndarray:
    """Energy per draw ``E(x)`` (physics sign, no beta), shape ``batch + (chain, draw)``: taken
    from ``Samples.energy`` or computed with ``model.energy``."""
    return as_draws(samples, model, need_energy=True).energy


def susceptibility(samples, model=None, *, beta=None, absolute=False) -> np.ndarray:
    """Magnetic susceptibility per variable, ``chi = beta N_a (<m^2> - <m>^2)``.

    ``absolute=True`` uses ``<|m|>`` in place of ``<m>`` (the usual finite-size estimator in
    the ordered phase of a symmetric model, where ``<m> = 0`` by symmetry). ``beta`` defaults
    to the model's. Shape ``batch``.
    """
    d = as_draws(samples, model)
    _need_two(d, "the susceptibility")
    m = d.active().sum(-1) / _safe_active(d)[..., None, None]
    mean = np.abs(m).mean((-2, -1)) if absolute else m.mean((-2, -1))
    return _beta(d, beta) * d.num_active * ((m**2).mean((-2, -1)) - mean**2)


def specific_heat(samples, model=None, *, beta=None) -> np.ndarray:
    """Specific heat per variable, ``C = beta^2 (<E^2> - <E>^2) / N_a``, shape ``batch``."""
    d = as_draws(samples, model, need_energy=True)
    _need_two(d, "the specific heat")
    e = d.energy
    var = (e**2).mean((-2, -1)) - e.mean((-2, -1)) ** 2
    return _beta(d, beta) ** 2 * var / _safe_active(d)


def binder_cumulant(samples, model=None) -> np.ndarray:
    """Binder cumulant ``U = 1 - <m^4> / (3 <m^2>^2)``, shape ``batch``: 2/3 in a symmetric
    ordered phase, 0 for Gaussian fluctuations (NaN when ``<m^2> = 0``)."""
    import warnings

    m = magnetization(samples, model)
    m2 = (m**2).mean((-2, -1))
    m4 = (m**4).mean((-2, -1))
    if np.any(m2 == 0):
        warnings.warn("Binder cumulant undefined where <m^2> = 0 (every draw has m = 0); "
                      "returning NaN there", RuntimeWarning, stacklevel=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(m2 == 0, np.nan, 1.0 - m4 / (3.0 * np.where(m2 == 0, 1.0, m2) ** 2))


def correlations(samples, model=None) -> np.ndarray:
    """``<x_i x_j>`` (not connected; diagonal ``<x_i^2>``), shape ``batch + (n, n)``. Comparable
    to :func:`isingattn.exact.correlations`."""
    d = as_draws(samples, model)
    x = d.x.reshape(d.batch_shape + (-1, d.n))
    return np.einsum("...ki,...kj->...ij", x, x) / x.shape[-2]


def connected_correlation(samples, model=None) -> np.ndarray:
    """Connected correlation matrix ``G_ij = <x_i x_j> - <x_i><x_j>``, shape ``batch + (n, n)``.
    Rows and columns of masked variables are zero."""
    d = as_draws(samples, model)
    x = d.active().reshape(d.batch_shape + (-1, d.n))
    mu = x.mean(-2)
    return np.einsum("...ki,...kj->...ij", x, x) / x.shape[-2] - mu[..., :, None] * mu[..., None, :]


def _distance_matrix(model, n, distances):
    if distances is not None:
        D = np.asarray(distances, np.float64)
        if D.shape != (n, n):
            raise ValueError(f"distances must have shape (n, n) = ({n}, {n}); got {D.shape}")
        return D
    if model is None:
        raise ValueError(
            "correlation_function needs distances: pass the model (graph distances on its "
            "coupling graph are used) or distances=(n, n) array, e.g. chain_distances(n) or "
            "lattice_distances(L)"
        )
    import networkx as nx

    g = model.to_sparse().graph if hasattr(model, "to_sparse") else None
    G = nx.Graph()
    G.add_nodes_from(range(n))
    G.add_edges_from(map(tuple, np.asarray(g.edges)))
    D = np.full((n, n), np.inf)
    for i, lengths in nx.all_pairs_shortest_path_length(G):
        for j, dist in lengths.items():
            D[i, j] = dist
    return D


def chain_distances(n: int, *, periodic: bool = False) -> np.ndarray:
    """Distances ``|i - j|`` on a chain (``min(|i-j|, n-|i-j|)`` when periodic), shape (n, n)."""
    i = np.arange(n)
    D = np.abs(i[:, None] - i[None, :]).astype(np.float64)
    return np.minimum(D, n - D) if periodic else D


def lattice_distances(L, *, periodic: bool = True) -> np.ndarray:
    """Euclidean distances between sites of an ``Lx x Ly`` lattice (site ``(r, c)`` is variable
    ``r * Ly + c``, as in :func:`isingattn.models.square_lattice`), minimum image when
    ``periodic``. Shape ``(n, n)``."""
    Lx, Ly = (L, L) if np.ndim(L) == 0 else tuple(L)
    r, c = np.divmod(np.arange(Lx * Ly), Ly)
    dr = np.abs(r[:, None] - r[None, :]).astype(np.float64)
    dc = np.abs(c[:, None] - c[None, :]).astype(np.float64)
    if periodic:
        dr, dc = np.minimum(dr, Lx - dr), np.minimum(dc, Ly - dc)
    return np.sqrt(dr**2 + dc**2)


def correlation_function(samples, model=None, *, distances=None, connected=True):
    """Correlation function against distance: ``C(r)`` is the average of ``G_ij`` (connected,
    default) or ``<x_i x_j>`` over active pairs ``i != j`` at distance ``r``.

    Distances: ``distances`` (an ``(n, n)`` array such as :func:`chain_distances` or
    :func:`lattice_distances`), else shortest-path distances on the model's coupling graph (on a
    chain that is ``|i - j|``, on a square lattice the Manhattan distance).

    Returns ``(r, C)``: ``r`` the sorted distinct finite distances ``(R,)``, ``C`` shaped
    ``batch + (R,)``.
    """
    d = as_draws(samples, model)
    G = connected_correlation(samples, model) if connected else correlations(samples, model)
    D = _distance_matrix(model, d.n, distances)
    off = ~np.eye(d.n, dtype=bool) & np.isfinite(D)
    r = np.unique(D[off])
    pair_active = d.mask[..., :, None] & d.mask[..., None, :]
    C = np.empty(d.batch_shape + (r.size,))
    for k, rk in enumerate(r):
        sel = off & (D == rk) & pair_active
        cnt = sel.sum((-2, -1))
        with np.errstate(invalid="ignore", divide="ignore"):
            C[..., k] = np.where(cnt > 0, (G * sel).sum((-2, -1)) / np.maximum(cnt, 1), np.nan)
    return r, C


def correlation_length_from_correlations(G, shape, *, mask=None) -> np.ndarray:
    """Second-moment correlation length from a correlation matrix ``G`` (``batch + (n, n)``) of
    sites on a periodic chain (``shape = n``) or lattice (``shape = (Lx, Ly)``):

    ``xi = sqrt(chi(0) / chi(k_min) - 1) / (2 sin(k_min / 2))``, with the structure factor
    ``chi(k) = (1/N) sum_ij G_ij cos(k . (r_i - r_j))`` and ``k_min = 2 pi / L`` along each axis
    (averaged over the lattice's two axes). NaN, with a warning, where ``chi(0) <= chi(k_min)``.
    """
    import warnings

    G = np.asarray(G, np.float64)
    dims = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    n = int(np.prod(dims))
    if G.shape[-2:] != (n, n):
        raise ValueError(f"G must have shape (..., {n}, {n}) for sites of shape {dims}; got {G.shape}")
    if mask is not None:
        m = np.asarray(mask, bool)
        G = np.where(m[..., :, None] & m[..., None, :], G, 0.0)
    coords = np.stack(np.unravel_index(np.arange(n), dims), axis=-1)  # (n, ndim)
    chi0 = G.sum((-2, -1)) / n
    ratios, kmins = [], []
    for ax, L in enumerate(dims):
        if L < 2:
            continue
        k = 2 * np.pi / L
        ph = np.cos(k * (coords[:, None, ax] - coords[None, :, ax]))
        chik = (G * ph).sum((-2, -1)) / n
        with np.errstate(invalid="ignore", divide="ignore"):
            ratios.append(chi0 / chik - 1.0)
        kmins.append(k)
    k = kmins[0]
    ratio = np.mean(ratios, axis=0)
    bad = ~(ratio > 0)
    if np.any(bad):
        warnings.warn(
            "second-moment correlation length undefined where chi(0) <= chi(k_min) "
            "(e.g. too few samples or anticorrelated order); returning NaN there",
            RuntimeWarning, stacklevel=2,
        )
    with np.errstate(invalid="ignore"):
        return np.where(bad, np.nan, np.sqrt(np.where(bad, 1.0, ratio)) / (2 * np.sin(k / 2)))


def correlation_length(samples, model=None, *, shape=None) -> np.ndarray:
    """Second-moment correlation length of a periodic chain or square lattice, from the sampled
    connected correlations (see :func:`correlation_length_from_correlations`). ``shape``: ``n``
    for a chain, ``(Lx, Ly)`` for a lattice (site ``(r, c)`` is variable ``r * Ly + c``).
    Shape ``batch``."""
    d = as_draws(samples, model)
    if shape is None:
        raise ValueError("shape is needed: n for a periodic chain or (Lx, Ly) for a lattice")
    return correlation_length_from_correlations(
        connected_correlation(samples, model), shape, mask=d.mask
    )
