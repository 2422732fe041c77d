"""Exact inference by enumeration of all ``2^n`` states, chunked and batched.

State index ``k`` <-> variable ``i`` takes bit ``i`` of ``k`` (SPIN: bit 1 is +1, BINARY: bit 1
is 1). Internally every model is written in bit form, ``log w(b) = -beta E = c + a.b + b^T W b / 2``
(masked variables get a field of ``-BIG``: they stay at bit 0, the low value). The variables are
split into ``k`` low bits, whose ``2^k`` states form one table, and ``n - k`` high bits walked in
chunks: per chunk the log-weights are one matrix product, so memory stays at one
``chunk x 2^k`` tile whatever ``n`` is, and the work is dense BLAS plus one ``exp`` per state.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._constants import BIG as _BIG
from ..models import ModelBase, Vartype

#: Largest n accepted by full enumeration (log Z, marginals, correlations, ground state).
MAX_ENUMERATION_N = 30
#: Largest n for which a full probability table is returned.
MAX_PROBABILITIES_N = 24
_LOW_BITS = 13
_TILE = 1 << 20  # elements of one chunk tile (and of one batch group)


def _too_large(n, limit, what):
    return ValueError(
        f"{what} by exact enumeration supports n <= {limit} variables (2^{limit} states); this "
        f"model has n = {n}. For chains and banded couplings use the transfer-matrix method "
        "(isingattn.exact.transfer_*), which is exact at any length; otherwise use a sampler "
        "from isingattn.samplers."
    )


def _check_size(model, limit, what):
    if not isinstance(model, ModelBase):
        raise TypeError(f"model must be an IsingModel or SparseIsingModel; got {type(model)}")
    if model.n > limit:
        raise _too_large(model.n, limit, what)


def bit_form(model: ModelBase):
    """``(a, W, c)`` with ``log w(b) = c + a.b + b^T W b / 2`` over bits ``b`` for every model of
    the batch, broadcast to ``batch + (n,)``, ``batch + (n, n)`` and ``batch``."""
    dense = model.to_dense().to_vartype(Vartype.BINARY)
    batch = model.batch_shape
    beta = dense.beta
    a = beta[..., None] * dense.active_h
    a = jnp.where(dense.mask, a, -_BIG)
    J = dense.active_J
    # symmetrize: same values for a valid model, but gradients w.r.t. J come out symmetric
    W = beta[..., None, None] * 0.5 * (J + jnp.swapaxes(J, -1, -2))
    c = beta * dense.offset
    n = model.n
    return (
        jnp.broadcast_to(a, batch + (n,)),
        jnp.broadcast_to(W, batch + (n, n)),
        jnp.broadcast_to(c, batch),
    )


def _layout(n):
    k = min(n, _LOW_BITS)
    nh = n - k
    chunk = max(1, min(1 << nh, _TILE >> k))
    return k, nh, chunk, (1 << nh) // chunk


def _bits(idx, nbits, dtype):
    return ((idx[..., None] >> jnp.arange(nbits, dtype=idx.dtype)) & 1).astype(dtype)


def _quad(B, W):
    return 0.5 * jnp.sum((B @ W) * B, axis=-1)


def _subset_sums(F, k):
    """``T[..., l] = sum_i F[..., i] * bit_i(l)`` for all ``2^k`` low states, by doubling:
    two additions per state instead of a length-k dot product (a small-K matmul is slow)."""
    T = jnp.zeros(F.shape[:-1] + (1,), F.dtype)
    for i in range(k):
        T = jnp.concatenate([T, T + F[..., i : i + 1]], axis=-1)
    return T


def _chunk_logw(a, W, c, k, chunk, j, BL, gL):
    """Log-weights of high-chunk ``j``: shape (chunk, 2^k), and the chunk's high bits."""
    nh = a.shape[-1] - k
    idx = j * chunk + jnp.arange(chunk, dtype=jnp.int32)
    BH = _bits(idx, nh, a.dtype)
    gH = BH @ a[k:] + _quad(BH, W[k:, k:]) + c
    F = BH @ W[k:, :k]
    return gH[:, None] + gL[None, :] + _subset_sums(F, k), BH


def _low_table(a, W, k):
    BL = _bits(jnp.arange(1 << k, dtype=jnp.int32), k, a.dtype)
    return BL, BL @ a[:k] + _quad(BL, W[:k, :k])


class _Stats(NamedTuple):
    log_partition: jax.Array
    mean_bits: jax.Array
    corr_bits: jax.Array | None
    best_logw: jax.Array
    best_index: jax.Array


def _stats_one(a, W, c, *, want_corr: bool, want_best: bool):
    n = a.shape[-1]
    k, nh, chunk, nchunks = _layout(n)
    BL, gL = _low_table(a, W, k)
    dt = a.dtype
    init = {
        "m": jnp.array(-jnp.inf, dt), "s": jnp.zeros((), dt), "col": jnp.zeros(1 << k, dt),
        "muH": jnp.zeros(nh, dt), "best": jnp.array(-jnp.inf, dt), "arg": jnp.zeros((), jnp.int32),
    }
    if want_corr:
        init.update(MHL=jnp.zeros((nh, 1 << k), dt), CHH=jnp.zeros((nh, nh), dt))

    def body(carry, j):
        logw, BH = _chunk_logw(a, W, c, k, chunk, j, BL, gL)
        mc = jnp.max(logw)
        m_new = jnp.maximum(carry["m"], mc)
        scale = jnp.exp(carry["m"] - m_new)
        w = jnp.exp(logw - m_new)
        row = jnp.sum(w, axis=1)
        out = {
            "m": m_new, "s": carry["s"] * scale + jnp.sum(row),
            "col": carry["col"] * scale + jnp.sum(w, axis=0),
            "muH": carry["muH"] * scale + row @ BH,
        }
        if want_best:
            flat = jnp.argmax(logw).astype(jnp.int32)
            better = mc > carry["best"]
            out["best"] = jnp.where(better, mc, carry["best"])
            out["arg"] = jnp.where(better, j * (chunk << k) + flat, carry["arg"])
        else:
            out["best"], out["arg"] = carry["best"], carry["arg"]
        if want_corr:
            out["MHL"] = carry["MHL"] * scale + BH.T @ w
            out["CHH"] = carry["CHH"] * scale + BH.T @ (row[:, None] * BH)
        return out, None

    carry, _ = jax.lax.scan(body, init, jnp.arange(nchunks, dtype=jnp.int32))
    s = carry["s"]
    logZ = carry["m"] + jnp.log(s)
    mean = jnp.concatenate([carry["col"] @ BL, carry["muH"]]) / s
    corr = None
    if want_corr:
        LL = BL.T @ (carry["col"][:, None] * BL)
        HL = carry["MHL"] @ BL
        corr = jnp.block([[LL, HL.T], [HL, carry["CHH"]]]) / s
    return _Stats(logZ, mean, corr, carry["best"], carry["arg"])


def _group_size(n):
    k, _, chunk, _ = _layout(n)
    return max(1, _TILE // (chunk << k))


def _stats_batch(a, W, c, want_corr, want_best=False):
    n = a.shape[-1]
    fn = functools.partial(_stats_one, want_corr=want_corr, want_best=want_best)
    return jax.lax.map(lambda t: fn(*t), (a, W, c), batch_size=_group_size(n))


def _flat(model):
    a, W, c = bit_form(model)
    n = model.n
    return a.reshape(-1, n), W.reshape(-1, n, n), c.reshape(-1), model.batch_shape


@functools.partial(jax.jit, static_argnames=("want_corr", "want_best"))
def _stats(model, want_corr, want_best=False):
    # the whole pipeline, model conversion included, is one compiled program
    a, W, c, batch = _flat(model)
    st = _stats_batch(a, W, c, want_corr, want_best)
    return jax.tree_util.tree_map(lambda x: x.reshape(batch + x.shape[1:]), st)


def _to_vartype_moments(model, mean_b, corr_b=None):
    if model.vartype is Vartype.BINARY:
        return mean_b, corr_b
    mean = 2 * mean_b - 1
    if corr_b is None:
        return mean, None
    d = jnp.diagonal(corr_b, axis1=-2, axis2=-1)
    corr = 4 * corr_b - 2 * d[..., :, None] - 2 * d[..., None, :] + 1
    return mean, corr


class Moments(NamedTuple):
    """Exact expectations of a (batch of) model(s), in the model's vartype.

    ``log_partition``: ``log Z(beta)``, shape ``batch``. ``marginals``: ``<x_i>``, ``batch + (n,)``.
    ``correlations``: ``<x_i x_j>`` (diagonal ``<x_i^2>``), ``batch + (n, n)``, or None.
    ``mean_energy``: ``<E>``, shape ``batch``.
    """

    log_partition: jax.Array
    marginals: jax.Array
    correlations: jax.Array | None
    mean_energy: jax.Array | None


def moments(model: ModelBase, *, correlations: bool = True) -> Moments:
    """log Z, marginals, correlations and mean energy in one enumeration pass.

    Masked variables sit at the low value: their marginal is -1 (SPIN) or 0 (BINARY).
    """
    _check_size(model, MAX_ENUMERATION_N, "exact moments")
    return _moments(model, correlations)


@functools.partial(jax.jit, static_argnames=("correlations",))
def _moments(model, correlations):
    st = _stats(model, correlations)
    mean, corr = _to_vartype_moments(model, st.mean_bits, st.corr_bits)
    energy = None
    if corr is not None:
        energy = _mean_energy(model, mean, corr)
    return Moments(st.log_partition, mean, corr, energy)


def _mean_energy(model, mean, corr):
    dense = model.to_dense()
    h, J = dense.active_h, dense.active_J
    lin = jnp.sum(h * mean, axis=-1)
    quad = 0.5 * jnp.sum(J * corr, axis=(-2, -1))
    return -(lin + quad) - jnp.broadcast_to(dense.offset, model.batch_shape)


def log_partition(model: ModelBase) -> jax.Array:
    """``log Z(beta) = log sum_x exp(-beta E(x))``, shape ``batch``."""
    _check_size(model, MAX_ENUMERATION_N, "log_partition")
    return _stats(model, False).log_partition


def marginals(model: ModelBase) -> jax.Array:
    """``<x_i>`` under the Boltzmann distribution, shape ``batch + (n,)``, model's vartype."""
    _check_size(model, MAX_ENUMERATION_N, "marginals")
    return _to_vartype_moments(model, _stats(model, False).mean_bits)[0]


def correlations(model: ModelBase) -> jax.Array:
    """``<x_i x_j>`` (not connected), shape ``batch + (n, n)``, model's vartype."""
    return moments(model, correlations=True).correlations


def mean_energy(model: ModelBase) -> jax.Array:
    """``<E>`` under the Boltzmann distribution, shape ``batch``."""
    return moments(model, correlations=True).mean_energy


def index_to_state(index, n: int, vartype) -> jax.Array:
    """States for integer indices (bit ``i`` of the index is variable ``i``), ``index.shape + (n,)``."""
    index = jnp.asarray(index)
    bits = (index[..., None] >> jnp.arange(n, dtype=index.dtype)) & 1
    return 2 * bits - 1 if Vartype(vartype) is Vartype.SPIN else bits


def state_to_index(states, vartype) -> jax.Array:
    """Inverse of :func:`index_to_state` (int64 under x64, else int32: n <= 31)."""
    states = jnp.asarray(states)
    n = states.shape[-1]
    bits = (states > 0) if Vartype(vartype) is Vartype.SPIN else (states > 0.5)
    dt = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
    return jnp.sum(bits.astype(dt) << jnp.arange(n, dtype=dt), axis=-1)


def enumerate_states(n: int, vartype="SPIN") -> jax.Array:
    """All ``2^n`` states, shape ``(2^n, n)``, row ``k`` is state index ``k``."""
    return index_to_state(jnp.arange(1 << n, dtype=jnp.int32), n, vartype)


def ground_state(model: ModelBase):
    """A minimum-energy state and its energy: ``(states batch + (n,), energies batch)``.
    Ties go to the lowest state index. Masked variables are at the low value."""
    _check_size(model, MAX_ENUMERATION_N, "ground_state")
    st = _stats(model, False, True)
    states = index_to_state(st.best_index, model.n, model.vartype).astype(model.dtype)
    return states, model.energy(states)


@jax.jit
def _probabilities(model):
    a, W, c, batch = _flat(model)
    logw = _log_weights_batch(a, W, c)
    return jax.nn.softmax(logw, axis=-1).reshape(batch + (1 << model.n,))


def _log_weights_batch(a, W, c):
    n = a.shape[-1]
    k, _, chunk, nchunks = _layout(n)

    def one(t):
        a1, W1, c1 = t
        BL, gL = _low_table(a1, W1, k)
        f = lambda j: _chunk_logw(a1, W1, c1, k, chunk, j, BL, gL)[0]
        return jax.lax.map(f, jnp.arange(nchunks, dtype=jnp.int32)).reshape(-1)

    return jax.lax.map(one, (a, W, c), batch_size=_group_size(n))


def probabilities(model: ModelBase) -> jax.Array:
    """Boltzmann probability of every state, shape ``batch + (2^n,)``, index ``k`` <-> variable
    ``i`` takes bit ``i`` of ``k``. States with a masked variable off its low value have
    probability 0."""
    _check_size(model, MAX_PROBABILITIES_N, "probabilities")
    return _probabilities(model)


@functools.partial(jax.jit, static_argnames=("num_samples",))
def _sample_indices(model, key, num_samples):
    a, W, c, batch = _flat(model)
    keys = jax.random.split(key, a.shape[0])
    return _sample_batch(keys, a, W, c, num_samples).reshape(batch + (num_samples,))


def _sample_batch(keys, a, W, c, num_samples):
    """Two-level exact sampling: high bits from their marginal (row sums), then low bits from
    the conditional row; memory ``O(2^(n-k) + num_samples * 2^k)`` per model."""
    n = a.shape[-1]
    k, _, chunk, nchunks = _layout(n)

    def one(t):
        key, a1, W1, c1 = t
        BL, gL = _low_table(a1, W1, k)
        rows = jax.lax.map(
            lambda j: jax.nn.logsumexp(_chunk_logw(a1, W1, c1, k, chunk, j, BL, gL)[0], axis=1),
            jnp.arange(nchunks, dtype=jnp.int32),
        ).reshape(-1)
        k_high, k_low = jax.random.split(key)
        high = jax.random.categorical(k_high, rows, shape=(num_samples,)).astype(jnp.int32)

        def low_of(hk):
            hi, kk = hk
            logw, _ = _chunk_logw(a1, W1, c1, k, 1, hi, BL, gL)
            return jax.random.categorical(kk, logw[0]).astype(jnp.int32)

        lows = jax.lax.map(
            low_of, (high, jax.random.split(k_low, num_samples)),
            batch_size=max(1, _TILE >> k),
        )
        return lows + (high << k)

    return jax.lax.map(one, (keys, a, W, c), batch_size=max(1, _group_size(n) // 4))


def sample(model: ModelBase, key, num_samples: int) -> jax.Array:
    """Exact i.i.d. samples from the Boltzmann distribution, shape
    ``batch + (num_samples, n)`` in the model's vartype and dtype."""
    from .._validation import check_positive_int, normalize_key

    key = normalize_key(key)
    num_samples = check_positive_int("num_samples", num_samples)
    _check_size(model, MAX_ENUMERATION_N, "exact sampling")
    idx = _sample_indices(model, key, num_samples)
    return index_to_state(idx, model.n, model.vartype).astype(model.dtype)


