"""Exact inference for banded couplings by transfer matrices (forward-backward over windows).

A model has bandwidth ``r`` when ``J_ij = 0`` for ``|i - j| > r``. Written in bit form
(``b in {0, 1}^n``, bit 1 = the high value), the Boltzmann weight factorises along the chain,

    log w(b) = c + sum_j b_j (a_j + sum_{k=1..r} W_{j-k, j} b_{j-k}),

so the window ``w_j = (b_{j-r+1}, ..., b_j)`` of the last ``r`` bits is a Markov chain with
``2^r`` states. The forward messages ``alpha_j(w_j)`` (sum over everything left of the window)
and backward messages ``beta_j(w_j)`` (sum over everything right of it) are computed in the log
domain, shifted by their maximum at every step (the shifts add up to ``log Z``), so nothing
overflows at large ``beta`` and float32 keeps its relative precision along chains of any length.
Cost ``O(n * r * 2^r)`` time and ``O(n * 2^r)`` memory per model; no ``n x n`` or ``2^n`` array is
ever built (except the full ``n x n`` correlation matrix, when asked for).

Window index convention: bit ``t`` of the window index is ``b_{j-r+1+t}`` (oldest bit = bit 0,
newest bit ``b_j`` = bit ``r - 1``). Before the first variable the window holds ``r`` dummy bits
fixed at 0, so the recursions need no special start.

Couplings that are not banded (periodic chains, lattices with wrap-around bonds) are handled by
conditioning: if every coupling with ``|i - j| > r`` touches one of the first ``K`` variables,
those ``K`` variables are clamped to each of their ``2^K`` states, each clamped problem is open
and banded (the long couplings become fields), and the results are combined with a logsumexp
over the clamped states (a mixture for marginals, correlations and samples). Cost
``O(n * r * 2^(r + K))``; a periodic chain has ``r = 1, K = 1``.

Masked variables get a bit-1 log-weight of ``-BIG`` (they stay at bit 0, the low value); clamps
do the same for the value they exclude.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import _vma
from .._constants import BIG as _BIG
from .._kernels import ffi as _ffi
from .._validation import check_positive_int, is_concrete
from ..models import ModelBase, Vartype

#: Largest ``r + K`` (log2 of the states per position) accepted by the transfer-matrix method:
#: bandwidth ``r`` plus the number ``K`` of variables conditioned on for wrap-around couplings.
MAX_TRANSFER_LOG2_STATES = 20
#: Largest ``n`` for which :func:`transfer_correlations` returns the full ``n x n`` matrix (pass
#: ``max_distance`` beyond it).
MAX_TRANSFER_FULL_CORRELATIONS_N = 4096


# ---------------------------------------------------------------------------------------------
# The plan: bandwidth r and conditioning set K, from the (concrete) coupling structure


def _check_model(model):
    if not isinstance(model, ModelBase):
        raise TypeError(
            f"model must be an IsingModel or SparseIsingModel; got {type(model).__name__}"
        )


def _is_sparse(model) -> bool:
    return hasattr(model, "graph")


def _coupling_pairs(model):
    """``(lo, hi)`` index arrays (``lo < hi``) of the coupled pairs, or None when they cannot be
    read (dense ``J`` traced inside jit/grad/vmap). A pair counts when its coupling is non-zero
    in any model of the batch; for a sparse model with traced ``J`` every edge counts."""
    n = model.n
    if _is_sparse(model):
        e = model.edges
        lo, hi = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
        if is_concrete(model.J) and model.num_edges:
            nz = np.any(np.asarray(model.J).reshape(-1, model.num_edges) != 0, axis=0)
            lo, hi = lo[nz], hi[nz]
        return lo.astype(np.int64), hi.astype(np.int64)
    if not is_concrete(model.J):
        return None
    if n < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    nz = np.any(np.asarray(model.J).reshape(-1, n, n) != 0, axis=0)
    lo, hi = np.nonzero(np.triu(nz, 1))
    return lo.astype(np.int64), hi.astype(np.int64)


def bandwidth(model: ModelBase) -> int:
    """The smallest ``r`` with ``J_ij = 0`` for ``|i - j| > r`` in every model of the batch
    (0 for no couplings); dense or sparse, from concrete values.

    A periodic chain has bandwidth ``n - 1`` (its wrap-around bond ``(0, n-1)``); the transfer
    functions still treat it at cost ``O(n)`` by conditioning (see :func:`transfer_log_partition`).

    Example:
      >>> from isingattn.models import chain
      >>> bandwidth(chain(10)), bandwidth(chain(10, periodic=True))
      (1, 9)
    """
    _check_model(model)
    pairs = _coupling_pairs(model)
    if pairs is None:
        raise ValueError(
            "bandwidth(model) reads the band from the values of J, but J is traced (inside "
            "jit/grad/vmap); compute it outside, or pass bandwidth=r to the transfer functions"
        )
    lo, hi = pairs
    return int((hi - lo).max()) if lo.size else 0


def _conditioning_size(lo, hi, r):
    """K: every coupling with distance > r touches one of the first K variables."""
    far = (hi - lo) > r
    return int(lo[far].max()) + 1 if np.any(far) else 0


class _Plan(NamedTuple):
    r: int  # window size (>= 1)
    K: int  # variables conditioned on


def _too_many_states(r, K):
    what = f"bandwidth r = {r}"
    if K:
        what += f" plus K = {K} variables conditioned on for couplings beyond the band"
    return ValueError(
        f"the transfer-matrix method needs 2^(r + K) = 2^{r + K} states per position for this "
        f"model ({what}); the limit is 2^{MAX_TRANSFER_LOG2_STATES} "
        "(isingattn.exact.MAX_TRANSFER_LOG2_STATES). Use enumeration (isingattn.exact.moments, "
        "n <= 30) or a sampler from isingattn.samplers."
    )


def _plan(model, bandwidth_arg) -> _Plan:
    _check_model(model)
    n = model.n
    pairs = _coupling_pairs(model)
    if bandwidth_arg is None:
        if pairs is None:
            raise ValueError(
                "bandwidth=None reads the band from the values of J, but J is traced (inside "
                "jit/grad/vmap); pass bandwidth=r (the coupling range) explicitly"
            )
        lo, hi = pairs
        d = hi - lo
        r_open = int(d.max()) if d.size else 0
        # maxlo[r] = largest lo among pairs at distance > r -> K(r) = maxlo[r] + 1
        by_d = np.full(r_open + 2, -1, np.int64)
        if d.size:
            np.maximum.at(by_d, d, lo)
        suffix = np.maximum.accumulate(by_d[::-1])[::-1]
        rs = np.arange(r_open + 1)
        Ks = suffix[rs + 1] + 1
        # cheapest 2^(r+K); ties go to fewer conditioned variables
        best = np.lexsort((Ks, rs + Ks))[0]
        r, K = int(rs[best]), int(Ks[best])
    else:
        if isinstance(bandwidth_arg, bool) or not isinstance(bandwidth_arg, (int, np.integer)):
            raise TypeError(f"bandwidth must be None or an integer >= 0; got {bandwidth_arg!r}")
        r = int(bandwidth_arg)
        if r < 0 or (n > 0 and r > n - 1):
            raise ValueError(
                f"bandwidth must be an integer in 0..n-1 = 0..{max(n - 1, 0)} (the coupling "
                f"range); got {r}"
            )
        K = 0 if pairs is None else _conditioning_size(*pairs, r)
    r = max(r, 1)  # one window bit keeps the code uniform; couplings at distance 1 are then free
    if pairs is not None:
        K = _conditioning_size(*pairs, r)
    if r + K > MAX_TRANSFER_LOG2_STATES:
        raise _too_many_states(r, K)
    return _Plan(r, K)


# ---------------------------------------------------------------------------------------------
# Bit form in band layout


class _Band(NamedTuple):
    """Bit form of a flat batch of ``B`` models, each with ``P = 2^K`` clamped versions.

    ``log w(b) = c + sum_j [ (1 - b_j) z_j + b_j (a_j + sum_t win[j, t] b_{j-r+t}) ]``.
    """

    a: jax.Array  # (B, P, n) log-weight of b_j = 1 (without couplings to the window)
    z: jax.Array  # (B, P, n) log-weight of b_j = 0 (0, or -BIG where clamped to 1)
    win: jax.Array  # (B, n, r) couplings of b_j to the window before it (bit t <-> b_{j-r+t})
    c: jax.Array  # (B,) constant


def _shift_down(x, k, axis_len):
    """``y[..., i] = x[..., i - k]`` (0 for i < k) along the last axis."""
    pad = [(0, 0)] * (x.ndim - 1) + [(k, 0)]
    return jnp.pad(x, pad)[..., :axis_len]


def _band_couplings(model, r, K):
    """Physics-sign couplings in band layout: ``Jb[..., i, k-1] = J[i, i+k]`` (``k = 1..r``;
    zero past the end) and the long couplings ``L[..., i, j] = J[i, j]`` for ``i < K`` and
    ``j > i + r`` (each pair once)."""
    n = model.n
    dt = model.dtype
    if _is_sparse(model):
        J = model.J
        jb = J.shape[:-1]
        e = model.edges
        lo, hi = np.minimum(e[:, 0], e[:, 1]), np.maximum(e[:, 0], e[:, 1])
        d = hi - lo
        inb = np.nonzero(d <= r)[0]
        lng = np.nonzero((d > r) & (lo < K))[0]
        Jb = jnp.zeros(jb + (n, r), dt)
        if inb.size:
            Jb = Jb.at[..., lo[inb], d[inb] - 1].add(J[..., inb])
        L = jnp.zeros(jb + (K, n), dt)
        if lng.size:
            L = L.at[..., lo[lng], hi[lng]].add(J[..., lng])
        return Jb, L
    # both triangles, averaged: the gradient w.r.t. J comes out symmetric,
    # d log Z / d J_ij = d log Z / d J_ji = beta <x_i x_j> / 2
    J = model.J
    cols = []
    for k in range(1, r + 1):
        dg = 0.5 * (
            jnp.diagonal(J, offset=k, axis1=-2, axis2=-1)
            + jnp.diagonal(J, offset=-k, axis1=-2, axis2=-1)
        )
        cols.append(jnp.pad(dg, [(0, 0)] * (dg.ndim - 1) + [(0, n - dg.shape[-1])]))
    Jb = jnp.stack(cols, axis=-1)
    i, j = np.arange(K)[:, None], np.arange(n)[None, :]
    sym = 0.5 * (J[..., :K, :] + jnp.swapaxes(J[..., :, :K], -1, -2))
    L = jnp.where(jnp.asarray(j > i + r), sym, 0)
    return Jb, L


def _band_form(model, r, K) -> _Band:
    n = model.n
    dt = model.dtype
    batch = model.batch_shape
    B = math.prod(batch)
    Jb, L = _band_couplings(model, r, K)
    mask = model.mask
    # partner mask: mshift[..., i, k-1] = mask[i + k] (False past the end)
    mpad = jnp.concatenate([mask, jnp.zeros(mask.shape[:-1] + (r,), bool)], axis=-1)
    mshift = jnp.stack([mpad[..., k : k + n] for k in range(1, r + 1)], axis=-1)
    Jb = jnp.where(mask[..., :, None] & mshift, Jb, 0)
    L = jnp.where(mask[..., :K, None] & mask[..., None, :], L, 0)
    h = jnp.where(mask, model.h, 0)
    offset = model.offset
    if model.vartype is Vartype.SPIN:  # x = 2 b - 1
        rows = jnp.sum(Jb, -1) + sum(_shift_down(Jb[..., k - 1], k, n) for k in range(1, r + 1))
        rows = rows + jnp.sum(L, axis=-2)
        if K:
            rows = rows + jnp.pad(jnp.sum(L, -1), [(0, 0)] * (L.ndim - 2) + [(0, n - K)])
        a0 = 2 * h - 2 * rows
        c0 = offset - jnp.sum(h, -1) + jnp.sum(Jb, (-2, -1)) + jnp.sum(L, (-2, -1))
        Jb, L = 4 * Jb, 4 * L
    else:
        a0, c0 = h, offset + jnp.zeros(Jb.shape[:-2], dt)
    beta = model.beta
    a = jnp.broadcast_to(beta[..., None] * a0, batch + (n,)).reshape(B, n)
    Wb = jnp.broadcast_to(beta[..., None, None] * Jb, batch + (n, r)).reshape(B, n, r)
    L = jnp.broadcast_to(beta[..., None, None] * L, batch + (K, n)).reshape(B, K, n)
    c = jnp.broadcast_to(beta * c0, batch).reshape(B)
    m = jnp.broadcast_to(mask, batch + (n,)).reshape(B, n)
    # couplings into b_j from the window before it: win[j, r - k] = W[j - k, j] = Wb[j - k, k - 1]
    win = jnp.stack(
        [_shift_down(Wb[..., r - t - 1], r - t, n) for t in range(r)], axis=-1
    )
    # conditioning on the first K variables: P = 2^K clamped problems
    sig = np.asarray(((np.arange(1 << K)[:, None] >> np.arange(K)) & 1), bool)  # (P, K)
    aP = a[:, None, :] + jnp.einsum("pk,bkn->bpn", jnp.asarray(sig, dt), L)
    zP = jnp.zeros_like(aP)
    if K:
        clamp = jnp.asarray(np.pad(sig, [(0, 0), (0, n - K)]))  # (P, n): clamped to 1
        free = jnp.asarray(np.arange(n) >= K)
        aP = jnp.where(free | clamp, aP, -_BIG)
        zP = jnp.where(free | ~clamp, zP, -_BIG)
    aP = jnp.where(m[:, None, :], aP, -_BIG)
    return _Band(aP, zP, win, c)


# ---------------------------------------------------------------------------------------------
# Recursions (one flat batch; leading axes B, P)


@functools.cache
def _bits_np(r):
    s = np.arange(1 << r)
    return ((s[:, None] >> np.arange(r)) & 1).astype(np.float64)  # (2^r, r)


def _window_couplings(win_j, r):
    """``U[s] = sum_t bit_t(s) win_j[t]``: coupling energy of a new bit 1 with window ``s``."""
    return win_j @ jnp.asarray(_bits_np(r).T, win_j.dtype)  # (B, 2^r)


def _forward(band: _Band, r, *, keep):
    """Forward messages. Returns ``(log_Z_clamped (B, P), alphas (n+1, B, P, 2^r) or None)``;
    ``alphas[j]`` is the (shifted) message of the window before variable ``j``."""
    B, P, _ = band.a.shape
    S, H = 1 << r, 1 << (r - 1)
    dt = band.a.dtype
    init = jnp.full((B, P, S), -_BIG, dt).at[..., 0].set(0)

    def step(alpha, xs):
        a_j, z_j, w_j = xs
        U = _window_couplings(w_j, r).reshape(B, 1, H, 2)
        A = alpha.reshape(B, P, H, 2)  # [rest, oldest]
        new0 = jnp.logaddexp(A[..., 0], A[..., 1]) + z_j[..., None]
        new1 = jnp.logaddexp(A[..., 0] + U[..., 0], A[..., 1] + U[..., 1]) + a_j[..., None]
        new = jnp.concatenate([new0, new1], axis=-1)  # index c * 2^(r-1) + rest
        # one shift for all clamped problems of a model: their log Z differences (the mixture
        # weights) then come from O(1) numbers, not from differences of two sums ~ n
        shift = jax.lax.stop_gradient(jnp.max(new, axis=(-2, -1), keepdims=True))
        return new - shift, (shift[:, 0, 0], alpha if keep else None)

    xs = (jnp.moveaxis(band.a, -1, 0), jnp.moveaxis(band.z, -1, 0), jnp.moveaxis(band.win, 1, 0))
    alpha, (shifts, alphas) = _vma.scan(step, init, xs, unroll=_unroll(r))
    # a running float32 total would lose ~n * eps * log Z; a pairwise sum loses ~log2(n) * eps
    logz = _pairwise_sum(shifts)[:, None] + jax.nn.logsumexp(alpha, axis=-1)
    if keep:
        alphas = jnp.concatenate([alphas, alpha[None]], axis=0)
    return logz, alphas


def _pairwise_sum(x):
    """Sum over the leading axis by halving (rounding error grows as log2 of its length)."""
    while x.shape[0] > 1:
        if x.shape[0] % 2:
            x = jnp.concatenate([x, jnp.zeros_like(x[:1])], axis=0)
        x = x[0::2] + x[1::2]
    return x[0] if x.shape[0] else jnp.zeros(x.shape[1:], x.dtype)


def _unroll(r):
    # unrolling the scan multiplied compile time (2 s -> 8 s) and did not speed up the runs
    return 1


def _backward(band: _Band, alphas, r, D, want_energy):
    """Backward messages and posterior window marginals. Returns ``(m (n, B, P), elog (B, P) or None,
    band_corr (n, B, P, D) or None)`` with ``m_j = P(b_j = 1)``, ``elog = <log w> - c`` and
    ``band_corr[j, k] = P(b_j = 1, b_{j+k} = 1)`` (0 where ``j + k >= n``), each within its
    clamped problem.

    Only the backward messages (and, for correlations, the pair propagation) are sequential;
    everything else is computed for all positions at once from the stored messages, which
    keeps the per-step work of the scans small."""
    B, P, n = band.a.shape
    S, H = 1 << r, 1 << (r - 1)
    dt = band.a.dtype
    newest = jnp.asarray(_bits_np(r)[:, r - 1], dt)  # (S,)
    a_t, z_t = jnp.moveaxis(band.a, -1, 0), jnp.moveaxis(band.z, -1, 0)  # (n, B, P)
    win_t = jnp.moveaxis(band.win, 1, 0)  # (n, B, r)

    def t_terms(logb, a_j, z_j, U):
        """log of (window before j, b_j) weights without alpha: t0 for b_j = 0, t1 for 1."""
        Bj = logb.reshape(logb.shape[:-1] + (2, H))
        t0 = (z_j[..., None] + Bj[..., 0, :])[..., None]
        t1 = a_j[..., None, None] + U + Bj[..., 1, :, None]
        return t0, t1

    def step(logb, xs):
        a_j, z_j, w_j, alpha_prev = xs
        U = _window_couplings(w_j, r).reshape(B, 1, H, 2)
        t0, t1 = t_terms(logb, a_j, z_j, U)
        prev = jnp.logaddexp(t0, t1)
        elog = None
        if want_energy:
            # <phi_j> under the joint posterior of (window before j, b_j): this step's share
            # of <log w> = -beta <E>, summed pairwise over j afterwards
            Ap = alpha_prev.reshape(B, P, H, 2)
            lse = jax.nn.logsumexp(Ap + prev, axis=(-2, -1), keepdims=True)
            p0, p1 = jnp.exp(Ap + t0 - lse), jnp.exp(Ap + t1 - lse)
            zs = jnp.where(z_j > -_BIG / 2, z_j, 0)[..., None, None]  # excluded values: p = 0
            as_ = jnp.where(a_j > -_BIG / 2, a_j, 0)[..., None, None]
            elog = jnp.sum(p0 * zs + p1 * (as_ + U), axis=(-2, -1))
        prev = prev.reshape(B, P, S)
        prev = prev - jax.lax.stop_gradient(jnp.max(prev, axis=-1, keepdims=True))
        return prev, (logb, elog)

    xs = (a_t, z_t, win_t, alphas[:-1] if want_energy else None)
    _, (betas, elog) = _vma.scan(
        step, jnp.zeros((B, P, S), dt), xs, reverse=True, unroll=_unroll(r)
    )  # betas[j]: message of the window ending at j
    if want_energy:
        elog = _pairwise_sum(elog)
    p = jax.nn.softmax(alphas[1:] + betas, axis=-1)  # posterior of the window ending at j
    m = p @ newest
    if D == 0:
        return m, elog, None
    # P(oldest bit of the window before j | window at j), from the forward messages
    U = _window_couplings(win_t, r).reshape(n, B, 1, H, 2)
    Ap = alphas[:-1].reshape(n, B, P, H, 2)
    q0 = jax.nn.softmax(Ap, axis=-1)
    q1 = jax.nn.softmax(Ap + U, axis=-1)

    def pair_step(V, xs):
        p_j, q0_j, q1_j = xs
        Vj = jnp.concatenate([(p_j * newest)[:, :, None, :], V[:, :, : D - 1, :]], axis=2)
        row = Vj @ newest  # (B, P, D)
        Vr = Vj.reshape(B, P, D, 2, H)
        Vprev = Vr[:, :, :, 0, :, None] * q0_j[:, :, None] + Vr[:, :, :, 1, :, None] * q1_j[:, :, None]
        return Vprev.reshape(B, P, D, S), row

    _, rows = _vma.scan(
        pair_step, jnp.zeros((B, P, D, S), dt), (p, q0, q1), reverse=True, unroll=_unroll(r)
    )
    return m, elog, rows


def _jax_moments(a, z, win, r, marginals, energy):
    """The log-domain recursions for :func:`_moments`."""
    band = _Band(a, z, win, None)
    logz_c, alphas = _forward(band, r, keep=marginals)
    if not marginals:
        return logz_c, None, None
    m, elog, _ = _backward(band, alphas, r, 0, energy)
    return logz_c, jnp.moveaxis(m, 0, -1), elog


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5))
def _kernel_moments(a, z, win, r, marginals, energy):
    """:func:`_jax_moments` by the compiled kernel where its float64 range is enough (else the
    log-domain recursions); derivatives always by the recursions."""
    from .._kernels import chain as _chain  # compiled on first use, not at import

    return jax.lax.cond(
        _chain.chain_safe(win),
        lambda a, z, w: _chain.chain_moments(a, z, w, marginals=marginals, energy=energy),
        lambda a, z, w: _jax_moments(a, z, w, r, marginals, energy),
        a, z, win)


@_kernel_moments.defjvp
def _kernel_moments_jvp(r, marginals, energy, primals, tangents):
    return jax.jvp(lambda a, z, w: _jax_moments(a, z, w, r, marginals, energy), primals,
                   tangents)


def _moments(band: _Band, r, marginals, energy, kernel):
    """``(log Z (B, P), marginals P(b_j = 1) (B, P, n) or None, <log w> - c (B, P) or None)``
    of the clamped problems, by the compiled kernel (``kernel``) or the JAX recursions."""
    if kernel:
        return _kernel_moments(band.a, band.z, band.win, r, marginals, energy)
    return _jax_moments(band.a, band.z, band.win, r, marginals, energy)


def _mix(logz_c, x, axis_p):
    """Combine clamped problems: weights softmax(log Z_sigma) over the P axis."""
    w = jax.nn.softmax(logz_c, axis=-1)  # (B, P)
    w = jnp.expand_dims(w, tuple(range(w.ndim, x.ndim)))
    return jnp.sum(w * x, axis=axis_p)


@functools.partial(
    jax.jit, static_argnames=("r", "K", "D", "full", "want_marginals", "want_energy", "kernel")
)
def _run(model, r, K, D, full, want_marginals, want_energy=False, kernel=False):
    """Everything in one compiled program, returned in the model's vartype. ``kernel``: log Z,
    marginals and energy by the compiled kernel (pair correlations always by JAX)."""
    band = _band_form(model, r, K)
    batch = model.batch_shape
    n = model.n
    out = {}
    if D:
        logz_c, alphas = _forward(band, r, keep=True)
        m, elog, rows = _backward(band, alphas, r, D, want_energy)
        m = jnp.moveaxis(m, 0, -1)
    else:
        logz_c, m, elog = _moments(band, r, want_marginals, want_energy, kernel)
    out["log_partition"] = (jax.nn.logsumexp(logz_c, axis=-1) + band.c).reshape(batch)
    if want_marginals:
        mb = _mix(logz_c, m, 1).reshape(batch + (n,))
        out["marginals"] = 2 * mb - 1 if model.vartype is Vartype.SPIN else mb
        if want_energy:  # <E> = -<log w> / beta: the bit form is exactly -beta E(x)
            beta = jnp.broadcast_to(model.beta, batch).reshape(-1)
            out["mean_energy"] = (-(_mix(logz_c, elog, 1) + band.c) / beta).reshape(batch)
        if D:
            cb = _mix(logz_c, jnp.moveaxis(rows, 0, 2), 1).reshape(batch + (n, D))
            corr = _vartype_band(model, mb, cb)
            out["correlations"] = _band_to_full(corr) if full else corr
    return out


def _vartype_band(model, mean_b, band_b):
    """Bit moments to the model's vartype: ``<x_i x_{i+k}>`` (0 where ``i + k >= n``)."""
    n = model.n
    D = band_b.shape[-1]
    valid = (np.arange(n)[:, None] + np.arange(D)[None, :]) < n
    if model.vartype is Vartype.BINARY:
        return jnp.where(valid, band_b, 0)
    idx = np.minimum(np.arange(n)[:, None] + np.arange(D)[None, :], n - 1)
    partner = mean_b[..., idx]
    x = 4 * band_b - 2 * mean_b[..., :, None] - 2 * partner + 1
    return jnp.where(valid, x, 0)


def _band_to_full(band):
    """``C[i, j] = band[min(i,j), |i - j|]`` from a full band ``(..., n, n)``."""
    n = band.shape[-1]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    lo, d = np.minimum(i, j), np.abs(i - j)
    return band[..., lo, d]


def _kernel_for(backend):
    """Whether ``backend`` (``"auto"``, ``"numba"`` or ``"jax"``) runs the compiled kernel."""
    return _ffi.resolve_backend(backend) == "numba"


def transfer_log_partition(model: ModelBase, bandwidth=None, *, backend="auto") -> jax.Array:
    """``log Z(beta) = log sum_x exp(-beta E(x))`` by transfer matrices, shape ``batch``.

    Exact for couplings of range ``r`` (``J_ij = 0`` for ``|i - j| > r``) at any length ``n``, in
    ``O(n * r * 2^r)`` time and ``O(2^r)`` memory per model (``O(n * 2^r)`` when differentiated).
    Dense or sparse models, SPIN or BINARY, any batch shape (``J`` may be shared by the batch),
    masks (masked variables sit at the low value and contribute nothing) and beta.

    Couplings beyond the band (periodic chains, lattices with wrap-around bonds) are handled by
    conditioning: when every coupling with ``|i - j| > r`` touches one of the first ``K``
    variables, each of their ``2^K`` states gives an open banded problem, and
    ``log Z = logsumexp_sigma log Z_sigma``. This reproduces the closed form of the periodic
    chain, ``Z = lambda_+^n + lambda_-^n``, at cost ``O(n)`` (``r = K = 1``).

    Args:
      model: an :class:`~isingattn.IsingModel` or :class:`~isingattn.SparseIsingModel`.
      bandwidth: the coupling range ``r``. None (default): chosen from the concrete couplings
        so that ``2^(r + K)`` is smallest. Under ``jit``/``grad`` with a traced dense ``J``,
        pass it explicitly. With concrete couplings nothing is ever dropped (couplings beyond
        ``r`` are conditioned on); with a traced dense ``J`` entries beyond the band are assumed
        zero: they are left out and get zero gradient.
      backend: where the recursions run: ``"auto"`` (default: the compiled CPU kernel of
        :mod:`isingattn._kernels.chain` where JAX runs on the CPU, else JAX), ``"numba"`` or
        ``"jax"``. The kernel works with probabilities in float64 (whatever the model's dtype)
        and is used where that range is exact enough (total ``beta |J|`` across any cut of the
        chain up to :data:`isingattn._kernels.chain.CUT_LIMIT`); elsewhere, and for every
        derivative, the log-domain JAX recursions run.

    Differentiable (``jax.grad``, ``jax.jvp``) with respect to ``h``, ``J`` and ``beta``;
    numerically stable at large ``beta`` (log-domain recursions), in float32 and float64.

    Raises ``ValueError`` when ``2^(r + K)`` exceeds ``2^MAX_TRANSFER_LOG2_STATES``, or for a
    ``backend`` not in ``("auto", "numba", "jax")`` (or ``"numba"`` off the CPU).

    Example:
      >>> import numpy as np
      >>> from isingattn.models import chain
      >>> lz = transfer_log_partition(chain(1000, J=0.5))
      >>> bool(np.isclose(lz, np.log(2) + 999 * np.log(2 * np.cosh(0.5)), rtol=1e-5))
      True
    """
    kernel = _kernel_for(backend)
    plan = _plan(model, bandwidth)
    return _run(model, plan.r, plan.K, 0, False, False, kernel=kernel)["log_partition"]


def transfer_marginals(model: ModelBase, bandwidth=None, *, backend="auto") -> jax.Array:
    """``<x_i>`` under the Boltzmann distribution by forward-backward transfer matrices, shape
    ``batch + (n,)`` in the model's vartype (masked variables: the low value). Same models,
    ``bandwidth``, ``backend``, cost and differentiability as :func:`transfer_log_partition`
    (memory ``O(n * 2^r)`` per model on the JAX path, ``O(sqrt(n) 2^r)`` in the kernel).

    Example:
      >>> import numpy as np
      >>> from isingattn.models import chain
      >>> m = transfer_marginals(chain(5, J=0.0, h=0.3))
      >>> bool(np.allclose(m, np.tanh(0.3), atol=1e-6))
      True
    """
    kernel = _kernel_for(backend)
    plan = _plan(model, bandwidth)
    return _run(model, plan.r, plan.K, 0, False, True, kernel=kernel)["marginals"]


def _check_distance(model, max_distance):
    n = model.n
    if max_distance is None:
        if n > MAX_TRANSFER_FULL_CORRELATIONS_N:
            raise ValueError(
                f"the full n x n correlation matrix is limited to n <= "
                f"{MAX_TRANSFER_FULL_CORRELATIONS_N} (isingattn.exact."
                f"MAX_TRANSFER_FULL_CORRELATIONS_N); this model has n = {n}. Pass "
                "max_distance=d to get the band <x_i x_{i+k}>, k = 0..d."
            )
        return max(n, 1)
    if isinstance(max_distance, bool) or not isinstance(max_distance, (int, np.integer)):
        raise TypeError(f"max_distance must be None or an integer >= 0; got {max_distance!r}")
    if max_distance < 0:
        raise ValueError(f"max_distance must be None or an integer >= 0; got {max_distance}")
    return int(max_distance) + 1


class TransferMoments(NamedTuple):
    """Exact expectations by transfer matrices, in the model's vartype.

    ``log_partition``: ``batch``. ``marginals``: ``<x_i>``, ``batch + (n,)``. ``correlations``:
    ``<x_i x_j>`` as a full ``batch + (n, n)`` matrix, or the band ``batch + (n, d + 1)`` with
    entry ``[i, k] = <x_i x_{i+k}>`` (0 where ``i + k >= n``) when ``max_distance = d``; None
    when not asked for. ``mean_energy``: ``<E>``, ``batch``.
    """

    log_partition: jax.Array
    marginals: jax.Array
    correlations: jax.Array | None
    mean_energy: jax.Array


def transfer_moments(
    model: ModelBase, bandwidth=None, *, correlations: bool = True, max_distance=None,
    backend="auto",
) -> TransferMoments:
    """``log Z``, marginals, correlations (see :func:`transfer_correlations`) and the mean
    energy ``<E>`` in one forward-backward pass. Same models, ``bandwidth``, cost and
    differentiability as :func:`transfer_log_partition`; ``backend`` as there, for
    ``correlations=False`` (the pair propagation of correlations runs in JAX)."""
    kernel = _kernel_for(backend)
    plan = _plan(model, bandwidth)
    D = _check_distance(model, max_distance) if correlations else 0
    out = _run(model, plan.r, plan.K, D, max_distance is None, True, True, kernel=kernel)
    return TransferMoments(
        out["log_partition"], out["marginals"], out.get("correlations"), out["mean_energy"]
    )


def transfer_correlations(model: ModelBase, bandwidth=None, max_distance=None) -> jax.Array:
    """Pair correlations ``<x_i x_j>`` (not connected) by transfer matrices, model's vartype.

    ``max_distance=None``: the full matrix, ``batch + (n, n)`` (diagonal ``<x_i^2>``), for
    ``n <= MAX_TRANSFER_FULL_CORRELATIONS_N``; cost ``O(n^2 * 2^r)``.
    ``max_distance=d``: the band ``batch + (n, d + 1)`` with ``[i, k] = <x_i x_{i+k}>`` (0 where
    ``i + k >= n``), cost ``O(n * d * 2^r)``, affordable for long chains.

    Pairs are propagated by the posterior window chain: ``P(b_i = 1, w_i)`` is carried back
    towards ``i = 0`` with the conditional ``P(w_{i-1} | w_i)`` of the forward messages.

    Example:
      >>> import numpy as np
      >>> from isingattn.models import chain
      >>> c = transfer_correlations(chain(200, J=0.4), max_distance=3)
      >>> bool(np.allclose(c[100], np.tanh(0.4) ** np.arange(4), atol=1e-5))
      True
    """
    return transfer_moments(model, bandwidth, max_distance=max_distance).correlations


# ---------------------------------------------------------------------------------------------
# Exact sampling: forward filtering, backward sampling


@functools.partial(jax.jit, static_argnames=("r", "K", "num_samples"))
def _sample_run(model, keys, r, K, num_samples):
    band = _band_form(model, r, K)
    B, P, n = band.a.shape
    Sw, H = 1 << r, 1 << (r - 1)
    band = jax.tree_util.tree_map(jax.lax.stop_gradient, band)
    logz_c, alphas = _forward(band, r, keep=True)
    # alphas[n] + (total shift) is the log-weight of (sigma, final window)
    total = logz_c - jax.nn.logsumexp(alphas[n], axis=-1)
    joint = (alphas[n] + total[..., None]).reshape(B, P * Sw)
    k_first, k_steps = jax.vmap(lambda k: jax.random.split(k, 2), out_axes=1)(keys)
    first = jax.vmap(lambda k, l: jax.random.categorical(k, l, shape=(num_samples,)))(
        k_first, joint
    ).astype(jnp.int32)  # (B, S)
    sigma, w = first // Sw, first % Sw
    # all uniforms at once (one vectorised draw, as large as the output) rather than per step
    uniforms = jax.vmap(lambda k: jax.random.uniform(k, (n, num_samples), band.a.dtype))(k_steps)

    def step(w, xs):
        alpha_prev, w_j, u = xs  # (B, P, Sw), (B, r), (B, S)
        c = w >> (r - 1)
        rest = w & (H - 1)
        U = _window_couplings(w_j, r)  # (B, Sw)
        Aflat = alpha_prev.reshape(B, P * Sw)
        cand = 2 * rest
        l0 = jnp.take_along_axis(Aflat, sigma * Sw + cand, 1) + c * jnp.take_along_axis(U, cand, 1)
        l1 = jnp.take_along_axis(Aflat, sigma * Sw + cand + 1, 1) + c * jnp.take_along_axis(
            U, cand + 1, 1
        )
        o = (jnp.log1p(-u) < jax.nn.log_sigmoid(l1 - l0)).astype(jnp.int32)
        return cand + o, c.astype(jnp.int8)

    xs = (alphas[:-1], jnp.moveaxis(band.win, 1, 0), jnp.moveaxis(uniforms, 1, 0))
    _, bits = _vma.scan(step, w, xs, reverse=True)
    logz = jax.nn.logsumexp(logz_c, axis=-1) + band.c
    return jnp.moveaxis(bits, 0, -1), logz  # (B, S, n), (B,)


def transfer_sample(model: ModelBase, key, num_samples: int, bandwidth=None) -> jax.Array:
    """Exact i.i.d. samples from the Boltzmann distribution by forward filtering, backward
    sampling, shape ``batch + (num_samples, n)`` in the model's vartype and dtype.

    The forward messages are stored (``O(n * 2^r)`` per model); then, from the last window
    backwards, the dropped bit of each window is drawn from ``P(w_{j-1} | w_j)``. With
    conditioning (wrap-around couplings) the clamped state is drawn first from
    ``softmax(log Z_sigma)``. Same key, same samples. Masked variables are at the low value.

    Example:
      >>> import jax
      >>> from isingattn.models import chain
      >>> transfer_sample(chain(50, J=1.0), jax.random.key(0), 8).shape
      (8, 50)
    """
    return transfer_sample_with_info(model, key, num_samples, bandwidth).samples


class TransferSamples(NamedTuple):
    """Exact samples by transfer matrices (:func:`transfer_sample_with_info`), with what the
    run computed and chose.

    ``samples``: ``batch + (num_samples, n)`` in the model's vartype and dtype.
    ``log_partition``: the exact ``log Z`` of every model, ``batch``, as
    :func:`transfer_log_partition` gives it. ``bandwidth``: the window size ``r`` used (an int,
    at least 1). ``conditioned``: the number ``K`` of leading variables conditioned on for
    couplings beyond the band (an int, 0 for a banded model); the states per position are
    ``2^(r + K)``.
    """

    samples: jax.Array
    log_partition: jax.Array
    bandwidth: int
    conditioned: int


def transfer_sample_with_info(model: ModelBase, key, num_samples: int,
                              bandwidth=None) -> TransferSamples:
    """:func:`transfer_sample`, also returning the exact ``log Z`` and the window size and
    conditioning the run used, as a :class:`TransferSamples`.

    Same arguments, same samples for the same key, same errors and cost as
    :func:`transfer_sample`; the log-partition comes from the same forward pass at no extra
    cost. This is what :class:`isingattn.samplers.TransferMatrixSampler` reports in ``info``.

    Example:
      >>> import jax
      >>> from isingattn.models import chain
      >>> out = transfer_sample_with_info(chain(50, J=1.0), jax.random.key(0), 8)
      >>> out.samples.shape, out.bandwidth, out.conditioned
      ((8, 50), 1, 0)
    """
    from .._validation import check_key

    key = check_key(key)
    num_samples = check_positive_int("num_samples", num_samples)
    plan = _plan(model, bandwidth)
    B = math.prod(model.batch_shape)
    keys = jax.random.split(key, B)
    bits, logz = _sample_run(model, keys, plan.r, plan.K, num_samples)
    bits = bits.astype(model.dtype)
    x = 2 * bits - 1 if model.vartype is Vartype.SPIN else bits
    batch = model.batch_shape
    return TransferSamples(x.reshape(batch + (num_samples, model.n)), logz.reshape(batch),
                           plan.r, plan.K)


__all__ = [
    "MAX_TRANSFER_FULL_CORRELATIONS_N",
    "MAX_TRANSFER_LOG2_STATES",
    "TransferMoments",
    "TransferSamples",
    "bandwidth",
    "transfer_correlations",
    "transfer_log_partition",
    "transfer_marginals",
    "transfer_moments",
    "transfer_sample",
    "transfer_sample_with_info",
]
