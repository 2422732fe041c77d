"""The ``transfer`` method: exact marginals of banded BINARY chains that share their couplings.

Every (batch, head, query) of the layer is a chain over the keys with its own fields
``a_k = beta h_k`` and the head's relative couplings ``c_d = beta w(d)``, ``d = 1..r``. The weight
of a pattern is ``prod_k exp(a_k s_k) prod_{d, k} exp(c_d s_k s_{k-d})`` and the transfer-matrix
state is the window of the last ``r`` occupations (``2^r`` states, bit 0 the oldest).

What makes this fast, compared with the general :func:`isingattn.exact.transfer_marginals`:

* **One coupling table per head.** A new key ``s_{k+1} = 1`` multiplies a window ``w`` by
  ``C[w] = exp(sum_d c_d w_{r-d})``, the same ``2^r`` numbers for every query and position; the
  query enters only through two numbers per position (the factors of ``s = 0`` and ``s = 1``).
  One step is a product with ``C``, two pair sums over the oldest bit and two scalings.
* **Probability space with bounded steps, not log space.** The factors are scaled so that one
  step changes the total weight by at most ``exp(±sum_d |c_d| / 2)`` (the scale is a per-query
  number known from the fields alone), and the weights are renormalized exactly once per block
  of :data:`BLOCK` steps: the sum at a block's end scales the factors of the next block's first
  step, which saves a pass over the messages per block. No ``exp``/``log`` runs per state.
  It covers heads with ``sum_d |c_nd| <=`` :func:`_fast_limit` (float32: 20, float64: 160);
  beyond, a factor or a message entry that matters later leaves the exponent range. The
  hand-written gradient's derivative messages need more room: it covers
  ``sum_d |c_nd| <=`` :func:`_grad_limit` (18, 144).
* **A log-domain path for the other heads** (:func:`_log_marginals_tile`), chosen per head at
  run time: log messages, log-sum-exp over the oldest key, re-centred at every step, with the
  same shifts as the probability-space factors (the larger branch of a step is 0), so nothing
  over- or underflows at any coupling strength and float32 keeps the rounding of the
  log-weights' own terms. It returns ``log m``, which the layer turns into weights
  ``exp(log m - max)`` per row: they stay O(1) where every marginal underflows. Its gradient
  is JAX autodiff (checkpointed per block). Weak heads run the fast path on couplings with the
  strong heads' set to 0 and keep their numbers bit for bit; the log-domain path runs (a
  ``lax.cond``) only when some head is strong, and the compiled kernel runs it per head.
* **Queries on the fastest axis.** Messages are ``(N, 2^r, Q)`` arrays, so every operation is a
  contiguous vector operation over queries, processed in tiles of :data:`TILE_QUERIES`.
* **Two lanes per tile.** A recursion is a chain of dependent steps, which XLA's CPU runtime
  runs on one thread. A tile's queries are split into :data:`LANES` independent recursions
  that share one loop body, so the runtime runs their steps concurrently (two lanes keep two
  cores busy; smaller pieces are too small for the runtime's thread pool).
* **Backward messages in bit-reversed order** (:func:`_backward_step`). A backward step sums
  out the newest key and brings in the oldest; with the state index bit-reversed those are its
  lowest and highest bits, so the step reads adjacent pairs and writes two halves, like a
  forward step: one kernel (in the standard order a step writes interleaved pairs: two kernels
  and a concatenation). The forward message at a block end is reversed once for the readout.
* **Block readout.** Keys are grouped in blocks of ``K = min(BLOCK, r)``; the window after a
  block's last key holds every key of the block, so the block's marginals (and their derivative
  when the couplings get no gradient) are one product of the forward and backward messages at
  the block end and one small contraction. The forward pass keeps the messages only at block
  ends, so the memory is ``O(N Q S 2^r / K)`` per tile instead of ``O(N Q S 2^r)``; the
  marginals' backward sweep recomputes nothing, the VJP's recomputes the windows inside a
  block for its pair statistics.
* **Gradients by the Hessian's symmetry.** With natural parameters ``theta = (a, c)`` the
  marginals are ``m = d log Z / d a``, so their Jacobian is a block of the (symmetric) Hessian of
  ``log Z``: the vector-Jacobian product with an upstream ``g`` equals the derivative of
  ``(m, E[Phi])`` along ``a -> a + eps g``, where ``Phi_d = sum_k s_k s_{k-d}``
  (``d log Z / d c_d = E[Phi_d]``). :func:`_vjp_tile` computes it by hand: every message
  carries its derivative along ``g`` next to it, so the backward pass is one more
  forward-backward sweep with doubled messages and keeps no per-state residuals (a
  ``jax.jvp`` of the recursion computes the same numbers with more passes).
  Both the field and the coupling gradient come from one joint per key: the window before
  key ``k`` together with ``s_k = 1``, whose covariance with ``G`` summed over windows is
  ``da_k`` and, weighted by the window's bits, every pair ``s_k s_{k-d}`` with ``d <= r``.
* **Causal packing** (:func:`transfer_inference`): under a causal mask rows ``t`` and
  ``T - 1 - t`` share one chain, cut out of the square by slices and reshapes
  (:func:`_skew_pack`) whose gradient is a pad, not a scatter.
* **A compiled forward pass and gradient on the CPU** (:mod:`isingattn._kernels.transfer`,
  ``backend="auto"`` of :func:`banded_chain_marginals`): the same recursions in numba, one head
  and up to 128 queries at a time with their messages in the core's cache (XLA streams every step's
  messages through memory), on threads of its own; the gradient of the heads beyond
  :func:`_grad_limit` stays JAX's log-domain autodiff (:func:`_compiled_bwd`), and sharded
  inputs under plain ``jit`` take this module's VJP on each device (:func:`_partitioned_bwd`).

Measured timings and the variants tried and dropped are in ``docs/guide/transfer.md``
(Implementation notes) and ``docs/guide/attention.md``.

The result is exact (the same numbers as enumeration to float precision);
``tests/attention/test_banded.py`` compares marginals, ``log Z`` and gradients, and
``tests/attention/test_strong_couplings.py`` the layer at ``beta w`` up to 200 per distance.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from .. import _vma
from .._kernels import ffi, transfer

#: Steps between exact renormalizations of the messages (and the checkpoint spacing).
BLOCK = 8
#: Queries processed together (the last, contiguous axis of every message array).
TILE_QUERIES = 128
#: Independent lanes of queries per tile. Their recursions share one loop body, so XLA's CPU
#: runtime runs them concurrently (one recursion alone is a chain of dependent steps).
LANES = 2
#: Lanes of the hand-written gradient (:func:`_vjp_tile`): one. Its loop bodies are long enough
#: to keep the runtime busy, and a second lane only doubles the code XLA compiles.
VJP_LANES = 1


def _window_features(r, dtype):
    """``(2^r, r)``: column ``d - 1`` is the occupation at distance ``d`` behind the next key,
    i.e. bit ``r - d`` of the window index (bit 0 = oldest key of the window)."""
    states = jnp.arange(1 << r)
    shifts = (r - 1) - jnp.arange(r)
    return ((states[:, None] >> shifts[None, :]) & 1).astype(dtype)


def _factors(a, c, feat):
    """Per-step factors of ``s = 0`` / ``s = 1`` and the coupling table, scaled to bounded steps.

    ``a``: ``(nb, BLOCK, N, Q)`` natural fields (``-inf`` where masked); ``c``: ``(N, r)``.
    Returns ``f0, f1`` (same shape as ``a``), ``C`` ``(N, 2^r, 1)`` with ``max C = 1``, and the
    log of the scale taken out of every step (``(nb, BLOCK, N, Q)``).
    """
    cmax = jnp.sum(jnp.maximum(c, 0), axis=-1)
    cmin = jnp.sum(jnp.minimum(c, 0), axis=-1)
    C = jnp.exp(c @ feat.T - cmax[:, None])[:, :, None]
    ap = a + cmax[:, None]
    up = jnp.maximum(ap, 0)
    f1 = jnp.exp(jnp.minimum(ap, 0))
    f0 = jnp.exp(-up)
    # One step multiplies the total weight by a number in [f0 + f1 Cmin, f0 + f1]; dividing by
    # the geometric mean of the two ends bounds the change by exp(+-(cmax - cmin) / 2). The
    # scale is common to both branches, so it changes no ratio (hence no gradient).
    lo = f0 + f1 * jnp.exp(cmin - cmax)[:, None]
    g = jax.lax.stop_gradient(jnp.sqrt(lo * (f0 + f1)))
    log_scale = jnp.log(g) + up  # g carries no gradient; up does (it left f0 and f1)
    return f0 / g, f1 / g, C, log_scale


def _pair_sums(x, C):
    """Sums over the oldest key of a window: ``sum_b x(b, u)`` and ``sum_b C(b, u) x(b, u)``."""
    N, R, Q = x.shape
    pairs = x.reshape(N, R // 2, 2, Q)
    coupled = (x * C).reshape(N, R // 2, 2, Q)
    return pairs[:, :, 0] + pairs[:, :, 1], coupled[:, :, 0] + coupled[:, :, 1]


def _forward_step(alpha, C, f0, f1):
    """Window distribution after key ``k - 1`` -> after key ``k`` (unnormalized)."""
    m0, m1 = _pair_sums(alpha, C)
    return jnp.concatenate([m0 * f0[:, None], m1 * f1[:, None]], axis=1)


def _bitrev(x):
    """Axis 1 (``2^r`` window states) permuted by bit reversal of the state index."""
    shape = x.shape
    r = shape[1].bit_length() - 1
    y = x.reshape(shape[0], *([2] * r), *shape[2:])
    y = jnp.transpose(y, (0, *range(r, 0, -1), *range(r + 1, y.ndim)))
    return y.reshape(shape)


def _backward_step(beta, C_lo, C_hi, f):
    """``beta_{k-1}(w) = f0 beta_k(w >> 1) + f1 C(w) beta_k((w >> 1) | newest)`` on messages
    whose state index is bit-reversed (:func:`_bitrev`: bit 0 = the newest key). The key summed
    out is then the lowest bit (adjacent pairs) and the key coming in the highest (the two
    halves), the memory pattern of :func:`_forward_step`: one kernel, where the standard order
    (pairs written interleaved) needs two kernels and a concatenation.
    ``C_lo, C_hi``: the halves of the bit-reversed coupling table (:func:`_reversed_table`);
    ``f``: ``(N, 2, Q)``, the factors of ``s = 0, 1`` stacked in one array (the scan's slices
    of two separate arrays would be read by a slower kernel)."""
    N, R, Q = beta.shape
    y = beta.reshape(N, R // 2, 2, Q) * f[:, None]
    return jnp.concatenate([y[:, :, 0] + C_lo * y[:, :, 1], y[:, :, 0] + C_hi * y[:, :, 1]],
                           axis=1)


def _reversed_table(C):
    """The halves of the coupling table with its state index bit-reversed (for
    :func:`_backward_step`)."""
    Crev = _bitrev(C)
    half = Crev.shape[1] // 2
    return Crev[:, :half], Crev[:, half:]


def _start(N, R, Q, dtype):
    return jnp.zeros((N, R, Q), dtype).at[:, 0].set(1.0)  # before the first key: all 0


def _block_readout(K, feat):
    """``(2^r, K)``: column ``i`` is the occupation of key ``i`` of a block of ``K <= r`` keys in
    the window after the block's last key (key ``K - 1 - i`` steps back from it)."""
    return feat[:, K - 1::-1]


def _block_marginals(P, W):
    """Marginals of a block's keys from ``P = alpha * beta`` at the block end (``(N, 2^r, Q)``,
    unnormalized) and :func:`_block_readout`'s ``W``: ``((K, N, Q), 1 / sum_w P)``."""
    inv = 1.0 / jnp.sum(P, axis=1)
    return jnp.einsum("nwq,wk->knq", P, W) * inv, inv


def _lanes(Q, lanes=None):
    """How many lanes a tile of ``Q`` queries is split into (at most ``lanes``, default
    :data:`LANES`)."""
    lanes = LANES if lanes is None else lanes
    return lanes if Q % lanes == 0 and Q >= 8 * lanes else 1


def _split(x, L):
    """Split the query axis (last) into ``L`` lanes."""
    q = x.shape[-1] // L
    return tuple(x[..., j * q:(j + 1) * q] for j in range(L))


def _scan_lanes(body, init, xs, reverse=False):
    """``lax.scan`` of ``body`` over independent lanes in one loop: ``init`` and ``xs`` are
    tuples over lanes, and so are the final carry and the outputs."""
    def run(carry, blk):
        res = [body(c, x) for c, x in zip(carry, blk)]
        return tuple(r[0] for r in res), tuple(r[1] for r in res)

    return _vma.scan(run, init, xs, reverse=reverse)


def _marginals_tile(a, c, feat):
    """``P(s_k = 1)`` for one tile of chains: ``a`` ``(nb, K, N, Q)`` with ``K <= r``, ``c``
    ``(N, r)``.

    The window after a block's last key holds every key of the block, so the block's marginals
    are read from the forward and backward messages at block ends alone:
    ``m_i = sum_w alpha(w) beta(w) [bit of key i in w] / sum_w alpha(w) beta(w)``. The forward
    sweep keeps the message at every block end and its normalization (applied in the next
    block's first step); the backward sweep (bit-reversed messages) needs no recomputation
    inside a block."""
    _, K, N, Q = a.shape
    f0, f1, C, _ = _factors(a, c, feat)
    W = _block_readout(K, feat)

    def forward(carry, blk):
        alpha, s = carry
        b0, b1 = blk
        fs = jnp.stack([b0, b1], axis=-2)
        first = fs[0] * s
        alpha = _forward_step(alpha, C, first[:, 0], first[:, 1])
        for i in range(1, K):
            alpha = _forward_step(alpha, C, fs[i][:, 0], fs[i][:, 1])
        s = 1.0 / jnp.sum(alpha, axis=1, keepdims=True)
        return (alpha, s), (alpha, s)

    R, L = feat.shape[0], _lanes(Q)
    Ql = Q // L
    unit = jnp.ones((N, 1, Ql), a.dtype)
    lanes = tuple(zip(_split(f0, L), _split(f1, L)))
    _, ends = _scan_lanes(forward, ((_start(N, R, Ql, a.dtype), unit),) * L, lanes)

    C_lo, C_hi = _reversed_table(C)
    Wrev = _bitrev(W[None])[0]

    def backward(carry, blk):
        beta, s = carry
        (end, t), b0, b1 = blk
        m, _ = _block_marginals(_bitrev(end) * t * beta, Wrev)
        fs = jnp.stack([b0, b1], axis=-2)
        beta = _backward_step(beta, C_lo, C_hi, fs[K - 1] * s)
        for i in reversed(range(K - 1)):
            beta = _backward_step(beta, C_lo, C_hi, fs[i])
        s = 1.0 / jnp.sum(beta, axis=1, keepdims=True)
        return (beta, s), m

    xs = tuple((e, *lane) for e, lane in zip(ends, lanes))
    _, m = _scan_lanes(backward, ((jnp.ones((N, R, Ql), a.dtype), unit),) * L, xs,
                       reverse=True)
    return jnp.concatenate(m, axis=-1)


def _vjp_tile(a, c, feat, g, pairs=True):
    """Vector-Jacobian product of :func:`_marginals_tile` with ``g`` (same shape as ``a``).

    The marginals are ``m = d log Z / d a``, so the product is the derivative of ``(m, E[Phi])``
    along ``a -> a + eps g``: ``da_k = Cov(s_k, G)`` and ``dc_d = Cov(Phi_d, G)`` with
    ``G = sum_k g_k s_k``. It is computed by carrying, next to every message, its derivative
    along ``g`` (forward: ``A = d alpha``; backward: ``B = d beta``). A common factor of the two
    branches of a step changes nothing, so the derivative of the step factors is taken as
    ``d f0 = 0``, ``d f1 = g f1``. Returns ``da`` (shape of ``a``) and ``dc`` ``(N, r)``.

    With ``pairs=False`` only ``da`` (``dc`` is None): a block's ``da`` is then read from the
    messages at its end (as in :func:`_marginals_tile`) and the windows inside a block, which
    the pair statistics of ``dc`` need, are never recomputed. With the pairs, ``da`` comes per
    key from the joint of the recomputed window before the key and the key, which the pair
    statistics use anyway.
    """
    _, K, N, Q = a.shape
    R = feat.shape[0]
    half = R // 2
    f0, f1, C, _ = _factors(a, c, feat)
    W = _block_readout(K, feat)
    L = _lanes(Q, VJP_LANES)
    Q = Q // L

    def step(M, F):
        """``M = (alpha, A)`` stacked ``(N, 2, R, Q)``, after key ``k`` from before it, in one
        kernel (one per key rather than one per message; ``back`` keeps ``beta`` and ``B``
        apart, where stacking them costs more). ``F`` ``(N, 3, Q)``: ``f0, f1, g f1`` stacked
        (one materialized array, which the kernels read faster than the scan's slices of
        separate arrays); ``A``'s coupled half gains ``g f1`` times ``alpha``'s coupled pair
        sums."""
        P = M.reshape(N, 2, half, 2, Q)
        Pc = (M * C[:, None]).reshape(N, 2, half, 2, Q)
        s0 = P[:, :, :, 0] + P[:, :, :, 1]
        s1 = Pc[:, :, :, 0] + Pc[:, :, :, 1]
        e0, e1, eg = F[:, None, 0:1], F[:, None, 1:2], F[:, None, 2:3]
        lo = s0 * e0
        hi = s1 * e1 + jnp.concatenate([jnp.zeros_like(s1[:, :1]), s1[:, :1]], axis=1) * eg
        return jnp.concatenate([lo, hi], axis=2)

    def fstack(b0, b1, gb):
        return jnp.stack([b0, b1, gb * b1], axis=-2)

    C_lo, C_hi = _reversed_table(C)
    Wrev = _bitrev(W[None])[0]

    def back(beta, B, F):
        """``(beta, B)`` before key ``k`` from after it, both bit-reversed (see
        :func:`_backward_step`); ``F`` as in ``step``. Also returns the ``s_k = 1`` halves of
        the step, ``f1 beta`` and ``f1 (B + g beta)``, indexed by the other keys
        (bit-reversed)."""
        bp, Bp = beta.reshape(N, half, 2, Q), B.reshape(N, half, 2, Q)
        y = bp * F[:, None, 0:2]
        d = jnp.stack([Bp[:, :, 0] * F[:, 0:1],
                       Bp[:, :, 1] * F[:, 1:2] + bp[:, :, 1] * F[:, 2:3]], axis=2)
        beta = jnp.concatenate([y[:, :, 0] + C_lo * y[:, :, 1], y[:, :, 0] + C_hi * y[:, :, 1]],
                               axis=1)
        B = jnp.concatenate([d[:, :, 0] + C_lo * d[:, :, 1], d[:, :, 0] + C_hi * d[:, :, 1]],
                            axis=1)
        return beta, B, y[:, :, 1], d[:, :, 1]

    def forward(carry, blk):
        M, s = carry
        b0, b1, gb = blk
        F = fstack(b0, b1, gb)
        M = step(M, F[0] * s)  # s: the previous block's normalization
        for i in range(1, K):
            M = step(M, F[i])
        end = (M, 1.0 / jnp.sum(M[:, 0], axis=1, keepdims=True))
        return end, end

    zeros = jnp.zeros((N, R, Q), a.dtype)
    unit = jnp.ones((N, 1, Q), a.dtype)
    lanes = tuple(zip(_split(f0, L), _split(f1, L), _split(g, L)))
    M0 = jnp.stack([_start(N, R, Q, a.dtype), zeros], axis=1)
    _, ends = _scan_lanes(forward, ((M0, unit),) * L, lanes)  # every block's end
    ones = jnp.ones((N, R, Q), a.dtype)

    if not pairs:
        xs = tuple((e, *lane) for e, lane in zip(ends, lanes))

        def backward_da(carry, blk):
            beta, B, s = carry
            (M, t), b0, b1, gb = blk
            alpha, A = _bitrev(M[:, 0]) * t, _bitrev(M[:, 1]) * t
            dP = A * beta + alpha * B
            m, inv = _block_marginals(alpha * beta, Wrev)
            dm = jnp.einsum("nwq,wk->knq", dP, Wrev) * inv - m * (jnp.sum(dP, axis=1) * inv)
            F = fstack(b0, b1, gb)
            beta, B, _, _ = back(beta, B, F[K - 1] * s)
            for i in reversed(range(K - 1)):
                beta, B, _, _ = back(beta, B, F[i])
            return (beta, B, 1.0 / jnp.sum(beta, axis=1, keepdims=True)), dm

        _, da = _scan_lanes(backward_da, ((ones, zeros, unit),) * L, xs, reverse=True)
        return jnp.concatenate(da, axis=-1), None

    def backward(carry, blk, kept):
        beta, B, s, acc = carry
        start, t = kept  # the block's start (the previous block's end) and its normalizer
        b0, b1, gb = blk
        F = fstack(b0, b1, gb)
        before = [start]  # recomputed windows before each key of the block
        if K > 1:
            before.append(step(start, F[0] * t))
        for i in range(1, K - 1):
            before.append(step(before[-1], F[i]))
        dm = [None] * K
        accq = 0.0  # the block's pair statistics, per query
        for i in reversed(range(K)):
            bef, Abef = before[i][:, 0], before[i][:, 1]
            # (the block's last key, the first one here, carries the next block's normalization)
            beta, B, h, dh = back(beta, B, F[i] * s if i == K - 1 else F[i])
            # the s_k = 1 halves, indexed like the pairs of the window before key k
            h, dh = _bitrev(h)[:, :, None], _bitrev(dh)[:, :, None]
            if i == K - 1:  # the block's windows share one scale: sum_w alpha beta = Z
                rb, rB = _bitrev(beta), _bitrev(B)
                inv = 1.0 / jnp.sum(bef * rb, axis=1, keepdims=True)
                rel = jnp.sum(Abef * rb + bef * rB, axis=1, keepdims=True) * inv  # E[G]
            # Joint of (window w before key k, s_k = 1): bef(w) C(w) hi(w >> 1). Its covariance
            # with G, per window, gives dm_k (summed over w) and every pair s_k s_{k-d} (d <= r:
            # the bits of w). The pairs are summed over the block's keys here, over queries at
            # the block's end, and weighted by C and contracted with the bits at the very end
            # (C is the same for every key and query).
            if i == 0 and K > 1:
                # the block's start was kept before the previous block's normalization t
                # (applied to the half-size factors, before the products can leave the range)
                h, dh = h * t[:, :, None], dh * t[:, :, None]
            bv, Av = bef.reshape(N, half, 2, Q), Abef.reshape(N, half, 2, Q)
            cov = ((Av * h + bv * (dh - h * rel[:, :, None]))
                   * inv[:, :, None]).reshape(N, R, Q)
            dm[i] = jnp.einsum("nwq,nw->nq", cov, C[:, :, 0])
            accq = accq + cov
        acc = acc + jnp.sum(accq, axis=2)
        return (beta, B, 1.0 / jnp.sum(beta, axis=1, keepdims=True), acc), jnp.stack(dm)

    nb = a.shape[0]

    def start_of(e, j):
        """The start of block ``j``: block ``j - 1``'s end, the chain's start for block 0."""
        prev = jax.tree.map(
            lambda x: jax.lax.dynamic_index_in_dim(x, jnp.maximum(j - 1, 0), keepdims=False), e)
        return jax.tree.map(lambda x, x0: jnp.where(j >= 1, x, x0), prev, (M0, unit))

    def run(carry, blk):
        # A block's start reaches the body through the loop carry, copied there one iteration
        # ahead, so that XLA does not fuse the scan's slice of the kept array into every
        # consumer; kept as the forward sweep's ends, it spares that sweep a carry copy.
        lanes_c, kept, j = carry
        res = [backward(c, x, k) for c, x, k in zip(lanes_c, blk, kept)]
        nxt = tuple(start_of(e, j - 1) for e in ends)
        return (tuple(r[0] for r in res), nxt, j - 1), tuple(r[1] for r in res)

    acc0 = jnp.zeros((N, R), a.dtype)
    init = (((ones, zeros, unit, acc0),) * L, tuple(start_of(e, nb - 1) for e in ends), nb - 1)
    (final, _, _), da = _vma.scan(run, init, lanes, reverse=True)
    acc = sum(f[3] for f in final)
    # s_{k-d} is bit r - d of the window before key k (bit 0: the oldest, d = r)
    dc = (acc * C[:, :, 0]) @ feat
    return jnp.concatenate(da, axis=-1), dc


def _fast_limit(dtype):
    """The largest ``max_n sum_d |c_nd|`` of a head that the probability-space path takes:
    :data:`BLOCK` steps between renormalizations stay inside the exponent range, with a margin
    (float32: 20; the measurement is in ``docs/guide/transfer.md``). Heads beyond it take the
    log-domain path (:func:`_log_marginals_tile`). The limit scales with the dtype's exponent
    range: float64 160."""
    return 20.0 * math.log(float(jnp.finfo(dtype).max)) / math.log(float(jnp.finfo("float32").max))


def _grad_limit(dtype):
    """The largest ``max_n sum_d |c_nd|`` of a head whose gradient :func:`_vjp_tile` computes in
    probability space: its derivative messages carry sums of ``g`` over keys on top of the
    messages, so they leave the exponent range before the messages do; 18 keeps a margin below
    where float32 breaks (float64: 144; see ``docs/guide/transfer.md``). Heads between it and
    :func:`_fast_limit` are differentiated through the log-domain path."""
    return 0.9 * _fast_limit(dtype)


def _strong_heads(c, dtype):
    """``(N,)`` bool: the heads whose couplings are beyond :func:`_fast_limit`."""
    return jax.lax.stop_gradient(jnp.sum(jnp.abs(c), axis=-1) > _fast_limit(dtype))


def _edge_heads(c, dtype, strong):
    """``(N,)`` bool: the heads between :func:`_grad_limit` and :func:`_fast_limit` (``strong``
    from :func:`_strong_heads`): probability space forward, log-domain gradient."""
    return jax.lax.stop_gradient(jnp.sum(jnp.abs(c), axis=-1) > _grad_limit(dtype)) & ~strong


def _weak(c, strong):
    """The couplings with the strong heads' set to 0 (their fast-path results are discarded)."""
    return jnp.where(strong[:, None], jnp.zeros_like(c), c)


def _with_strong(x, strong, fn):
    """``x`` (head axis -2) with the strong heads' entries replaced by ``fn()``; ``fn`` runs
    only when some head is strong (``lax.cond``), so weak heads pay nothing for it."""
    def mixed(x):
        return jax.tree.map(lambda u, v: jnp.where(strong[:, None], v, u), x, fn())

    return jax.lax.cond(jnp.any(strong), mixed, lambda x: x, x)


def _neg(dtype):
    """A finite stand-in for ``log 0`` in the log-domain path: ``exp`` of it is 0, and sums of a
    few of them stay finite, so no ``inf - inf`` reaches a value or a gradient."""
    return -min(1e18, math.sqrt(float(jnp.finfo(dtype).max)))


def _log_tables(a, c, feat):
    """Log-domain factors of a tile: ``a`` ``(nb, K, N, Q)`` (``-inf`` = held), ``c`` ``(N, r)``.

    Returns ``l0, l1`` (shape of ``a``), the log-factors of ``s = 0, 1``, and ``lC``
    ``(N, 2^r, 1)``, the log coupling table, shifted as in :func:`_factors` so that the larger
    branch of a step is 0 and no term carries more than the weights' own spread:
    ``lC = c . w - cmax <= 0``, ``l0 = -u``, ``l1 = a + cmax - u`` with ``u = max(a + cmax, 0)``;
    and ``u`` ``(nb, K, N, Q)`` (``log Z`` adds its sum). The shifts are constants
    (``stop_gradient``) common to both branches, so the gradients are those of the true weights.
    """
    neg = _neg(a.dtype)
    a = jnp.where(a == -jnp.inf, neg, a)
    cmax = jax.lax.stop_gradient(jnp.sum(jnp.maximum(c, 0), axis=-1))
    lC = (c @ feat.T - cmax[:, None])[:, :, None]
    ap = a + cmax[:, None]
    up = jax.lax.stop_gradient(jnp.maximum(ap, 0))
    return -up, ap - up, lC, up


def _lae(x, y):
    """``log(exp(x) + exp(y))`` of finite arrays, about their maximum (a constant for autodiff:
    the same gradient, a smaller program to compile; see ``docs/guide/transfer.md``)."""
    top = jax.lax.stop_gradient(jnp.maximum(x, y))
    return top + jnp.log(jnp.exp(x - top) + jnp.exp(y - top))


def _lse(x, axis):
    """``log sum exp`` of finite ``x`` along ``axis`` (dropped), about its maximum."""
    top = jax.lax.stop_gradient(jnp.max(x, axis=axis, keepdims=True))
    return jnp.squeeze(top, axis) + jnp.log(jnp.sum(jnp.exp(x - top), axis=axis))


def _log_forward_step(alpha, lC, l0, l1):
    """:func:`_forward_step` on log messages, re-centred (max 0); returns the new message and
    the shift taken out ``(N, Q)`` (a constant: ``stop_gradient``)."""
    N, R, Q = alpha.shape
    p = alpha.reshape(N, R // 2, 2, Q)
    pc = (alpha + lC).reshape(N, R // 2, 2, Q)
    x = jnp.concatenate([_lae(p[:, :, 0], p[:, :, 1]) + l0[:, None],
                         _lae(pc[:, :, 0], pc[:, :, 1]) + l1[:, None]], axis=1)
    top = jax.lax.stop_gradient(jnp.max(x, axis=1, keepdims=True))
    return x - top, top[:, 0]


def _log_backward_step(beta, lC_lo, lC_hi, l0, l1):
    """:func:`_backward_step` on log messages (bit-reversed state index), re-centred."""
    N, R, Q = beta.shape
    y = beta.reshape(N, R // 2, 2, Q)
    y0, y1 = y[:, :, 0] + l0[:, None], y[:, :, 1] + l1[:, None]
    x = jnp.concatenate([_lae(y0, lC_lo + y1), _lae(y0, lC_hi + y1)], axis=1)
    return x - jax.lax.stop_gradient(jnp.max(x, axis=1, keepdims=True))


def _log_start(N, R, Q, dtype):
    return jnp.full((N, R, Q), _neg(dtype), dtype).at[:, 0].set(0.0)


def _log_marginals_tile(a, c, feat):
    """``log P(s_k = 1)`` ``(nb, K, N, Q)`` for one tile, in the log domain: the couplings' range
    is unbounded (no factor over- or underflows; the messages are re-centred at every step).

    The blocks of :func:`_marginals_tile` (a block's marginals are read from the forward and
    backward messages at its end, ``K <= r``); held keys get about :func:`_neg` (``exp``: 0).
    Differentiable by JAX autodiff; every block's body is a ``jax.checkpoint``, so the gradient
    keeps one message per block and recomputes the steps inside it."""
    _, K, N, Q = a.shape
    R = feat.shape[0]
    neg = _neg(a.dtype)
    l0, l1, lC, _ = _log_tables(a, c, feat)
    ls = jnp.stack([l0, l1], axis=2)  # (nb, K, 2, N, Q)
    lC_lo, lC_hi = _reversed_table(lC)

    def fstep(alpha, f):
        return _log_forward_step(alpha, lC, f[0], f[1])[0], None

    def bstep(beta, f):
        return _log_backward_step(beta, lC_lo, lC_hi, f[0], f[1]), None

    @jax.checkpoint
    def forward(alpha, blk):
        alpha, _ = _vma.scan(fstep, alpha, blk)
        return alpha, alpha

    _, ends = _vma.scan(forward, _log_start(N, R, Q, a.dtype), ls)
    has = _bitrev(_block_readout(K, feat)[None])[0] > 0  # (2^r, K), bit-reversed windows

    @jax.checkpoint
    def backward(beta, blk):
        end, f = blk
        P = _bitrev(end) + beta  # log of the window posterior at the block end, unnormalized
        lz = _lse(P, 1)
        lm = _lse(P[:, :, None] + jnp.where(has, 0.0, neg)[None, :, :, None], 1)
        beta, _ = _vma.scan(bstep, beta, f, reverse=True)
        return beta, jnp.moveaxis(lm - lz[:, None], 1, 0)

    _, lm = _vma.scan(backward, jnp.zeros((N, R, Q), a.dtype), (ends, ls), reverse=True)
    return lm


def _log_partition_log_tile(a, c, feat):
    """``log Z`` ``(N, Q)`` of one tile in the log domain (any range of couplings;
    differentiable by JAX autodiff, checkpointed per block)."""
    N, Q = a.shape[2:]
    l0, l1, lC, up = _log_tables(a, c, feat)

    def step(alpha, f):
        return _log_forward_step(alpha, lC, f[0], f[1])

    @jax.checkpoint
    def forward(alpha, blk):
        alpha, shifts = _vma.scan(step, alpha, blk)
        return alpha, jnp.sum(shifts, axis=0)

    alpha, shifts = _vma.scan(forward, _log_start(N, feat.shape[0], Q, a.dtype),
                                 jnp.stack([l0, l1], axis=2))
    return _lse(alpha, 1) + jnp.sum(shifts, axis=0) + jnp.sum(up, axis=(0, 1))


def _map_tiles(fn, a, c, *rest):
    """``fn(tile, c, *rest_tile)`` on every tile (leading axis) of ``a`` and ``rest``, in turn."""
    return jax.lax.map(lambda x: fn(x[0], c, *x[1:]), (a, *rest))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _banded_core(a, c, r, coupling_grad):
    """Tiled ``a`` ``(nt, nb, K, N, Q)`` -> the marginals, or for the strong heads
    (:func:`_strong_heads`) their logarithms (see :func:`_chain_values`)."""
    feat = _window_features(r, a.dtype)
    strong = _strong_heads(c, a.dtype)
    m = _map_tiles(lambda x, c: _marginals_tile(x, c, feat), a, _weak(c, strong))
    return _with_strong(m, strong, lambda: _map_tiles(
        lambda x, c: _log_marginals_tile(x, c, feat), a, c))


def _core_fwd(a, c, r, coupling_grad):
    return _banded_core(a, c, r, coupling_grad), (a, c)


def _core_bwd(r, coupling_grad, res, g):
    """The VJP. Weak heads: the hand-written one (:func:`_vjp_tile`), on couplings with the
    other heads' set to 0; the others (only when there are some): JAX autodiff of the
    log-domain marginals (:func:`_log_marginals_tile`), selected per head — for the strong
    heads those logarithms are the forward pass's output (whose ``g`` this is), for the heads
    between :func:`_grad_limit` and :func:`_fast_limit` (probability space in the forward pass,
    out of the hand-written VJP's exponent range) their exponentials.

    Frozen couplings: the field part alone (no pair statistics). Both run in the forward
    pass's blocks (its readout needs blocks of at most ``r`` keys)."""
    a, c = res
    feat = _window_features(r, a.dtype)
    strong = _strong_heads(c, a.dtype)
    edge = _edge_heads(c, a.dtype, strong)
    # the VJP is linear in g: run it on g / max|g| per head (the derivative messages grow with
    # g's scale, which the exponent range must not depend on; per head, so that no head's
    # numbers depend on another's) and scale the results back
    scale = jax.lax.stop_gradient(jnp.max(jnp.abs(g), axis=(0, 1, 2, 4), keepdims=True))
    scale = jnp.where(scale > 0, scale, 1.0).astype(g.dtype)
    da, dc = _core_bwd_unit(feat, strong, edge, coupling_grad, a, c, g / scale)
    if not coupling_grad:
        return da * scale, dc
    # inside shard_map, shared couplings get the sum of every shard's gradient
    return _vma.sum_like((da * scale, dc * scale.reshape(-1, 1)), res)


def _core_bwd_unit(feat, strong, edge, coupling_grad, a, c, g):
    """:func:`_core_bwd` for an upstream ``g`` with ``max |g| <= 1``."""
    other = strong | edge
    cw = _weak(c, other)

    def values(x, c):  # what the forward pass returned on the other heads
        lm = _log_marginals_tile(x, c, feat)
        return jnp.where(strong[:, None], lm, jnp.exp(lm))

    if not coupling_grad:  # the caller holds c constant (see banded_chain_marginals)
        da = _map_tiles(lambda x, c, gx: _vjp_tile(x, c, feat, gx, pairs=False)[0], a, cw, g)

        def other_da():
            def tile(x, c, gx):
                out, pullback = jax.vjp(lambda x: values(x, c), x)
                return pullback(_vma.like(gx, out))[0]

            return _map_tiles(tile, a, c, g)

        return _with_strong(da, other, other_da), jnp.zeros_like(c)

    da, dc = _map_tiles(lambda x, c, gx: _vjp_tile(x, c, feat, gx), a, cw, g)

    def other_grads():
        def tile(x, c, gx):
            out, pullback = jax.vjp(values, x, c)
            return pullback(_vma.like(gx, out))

        da, dc = _map_tiles(tile, a, c, g)
        return da, jnp.sum(dc, axis=0)

    return _with_strong((da, jnp.sum(dc, axis=0)), other, other_grads)


_banded_core.defvjp(_core_fwd, _core_bwd)


def _log_partition_tile(a, c, feat):
    _, K, N, Q = a.shape
    f0, f1, C, log_scale = _factors(a, c, feat)

    def forward(alpha, blk):
        b0, b1 = blk
        for i in range(K):
            alpha = _forward_step(alpha, C, b0[i], b1[i])
        total = jax.lax.stop_gradient(jnp.sum(alpha, axis=1, keepdims=True))
        return alpha / total, jnp.log(total[:, 0])

    L = _lanes(Q)
    lanes = tuple(zip(_split(f0, L), _split(f1, L)))
    alphas, logs = _scan_lanes(forward, (_start(N, feat.shape[0], Q // L, a.dtype),) * L, lanes)
    last = jnp.concatenate([jnp.log(jnp.sum(x, axis=1)) for x in alphas], axis=-1)
    return (jnp.sum(jnp.concatenate(logs, axis=-1), axis=0) + last
            + jnp.sum(log_scale, axis=(0, 1)))


def _tiles(a, block=BLOCK, fill=-jnp.inf):
    """``(..., N, S)`` -> ``(tiles, blocks, block, N, TILE)`` padded with ``fill`` (``-inf``:
    held keys), and the function that undoes it for an array of the tiled shape."""
    *batch, N, S = a.shape
    Q = math.prod(batch)
    x = jnp.transpose(a.reshape(Q, N, S), (2, 1, 0))  # (S, N, Q)
    tile = min(TILE_QUERIES, Q)
    nt = -(-Q // tile)
    nb = -(-S // block)
    x = jnp.pad(x, ((0, nb * block - S), (0, 0), (0, nt * tile - Q)), constant_values=fill)
    x = jnp.moveaxis(x.reshape(nb, block, N, nt, tile), 3, 0)

    def untile(y):
        y = jnp.moveaxis(y, 0, 3).reshape(nb * block, N, nt * tile)[:S, :, :Q]
        return jnp.transpose(y, (2, 1, 0)).reshape(*batch, N, S)

    return x, untile


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _native_core(a, c, r, coupling_grad):
    """:func:`_banded_core` by the compiled kernel (:mod:`isingattn._kernels.transfer`), ``a``
    ``(..., N, S)`` (strong heads: log marginals, in the kernel's log-domain path); the VJP is
    :func:`_core_bwd` on the tiled arrays (it needs only ``a`` and ``c``)."""
    return transfer.transfer_marginals(a, c, _fast_limit(a.dtype))


def _native_fwd(a, c, r, coupling_grad):
    return _native_core(a, c, r, coupling_grad), (a, c)


def _native_bwd(r, coupling_grad, res, g):
    a, c = res
    if a.ndim == 3 and jax.device_count() > 1 and not _vma._manual_axes():
        # under jit with sharded inputs: each device differentiates its own chains
        return _partitioned_bwd(r, coupling_grad)(a, c, g)
    return _compiled_bwd(r, coupling_grad, a, c, g)


def _compiled_bwd(r, coupling_grad, a, c, g):
    """:func:`_core_bwd` of chains ``a`` ``(Q, N, S)`` by the compiled VJP
    (:func:`isingattn._kernels.transfer.transfer_vjp`) on the heads within :func:`_grad_limit`;
    the others (only when there are some) by :func:`_tiled_bwd`, selected per head."""
    strong = _strong_heads(c, a.dtype)
    edge = _edge_heads(c, a.dtype, strong)
    other = strong | edge
    # the VJP is linear in g: run it on g / max|g| per head (as _core_bwd)
    scale = jax.lax.stop_gradient(jnp.max(jnp.abs(g), axis=(0, 2), keepdims=True))
    scale = jnp.where(scale > 0, scale, 1.0).astype(g.dtype)
    da, dc = transfer.transfer_vjp(a, jax.lax.stop_gradient(c), g / scale, other,
                                   coupling_grad)
    da, dc = da * scale, dc * scale.reshape(-1, 1)
    if coupling_grad:
        dc = _vma.sum_like(dc, c)
    else:
        dc = jnp.zeros_like(c)

    def mixed(x):
        da_o, dc_o = _tiled_bwd(r, coupling_grad, a, c, g)
        return (jnp.where(other[None, :, None], da_o, x[0]),
                jnp.where(other[:, None], dc_o, x[1]))

    return jax.lax.cond(jnp.any(other), mixed, lambda x: x, (da, dc))


def _tiled_bwd(r, coupling_grad, a, c, g):
    """:func:`_core_bwd` of chains ``a`` ``(..., N, S)`` with upstream ``g``: ``(da, dc)``."""
    K = min(BLOCK, r)
    x, untile = _tiles(a, K)
    gx, _ = _tiles(g, K, fill=0.0)
    da, dc = _core_bwd(r, coupling_grad, (x, c), gx)
    return untile(da), dc


@functools.cache
def _partitioned_bwd(r, coupling_grad):
    """:func:`_tiled_bwd` of ``(Q, N, S)`` chains as a ``custom_partitioning`` op: XLA splits
    the chains axis over the devices it is sharded on, each device runs the VJP on its own
    chains and the couplings' gradient is summed over them (without it the tile loop's slices
    of the sharded tiles gather the whole batch onto every device). Under ``vmap`` it runs once
    per mapped element (each has its own couplings' gradient)."""
    from jax.custom_batching import custom_vmap
    from jax.experimental.custom_partitioning import custom_partitioning
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    run = functools.partial(_tiled_bwd, r, coupling_grad)
    op = custom_partitioning(run)

    def chains_axis(arg_shapes):
        spec = getattr(arg_shapes[0].sharding, "spec", None)
        return spec[0] if spec else None

    def shardings(mesh, axis):
        rows = NamedSharding(mesh, P(axis, None, None))
        return rows, NamedSharding(mesh, P(None, None))

    def infer(mesh, arg_shapes, result_shape):
        return shardings(mesh, chains_axis(arg_shapes))

    def partition(mesh, arg_shapes, result_shape):
        axis = chains_axis(arg_shapes)
        rows, whole = shardings(mesh, axis)

        def lower(a, c, g):
            da, dc = run(a, c, g)
            return da, (dc if axis is None else jax.lax.psum(dc, axis))

        return mesh, lower, (rows, whole), (rows, whole, rows)

    op.def_partition(partition, infer_sharding_from_operands=infer,
                     sharding_rule="q n s, n r, q n s -> q n s, n r",
                     need_replication_factors=("n", "s", "r"))

    @custom_vmap
    def f(a, c, g):
        return op(a, c, g)

    @f.def_vmap
    def rule(axis_size, in_batched, a, c, g):
        args = [x if b else jnp.broadcast_to(x, (axis_size,) + x.shape)
                for x, b in zip((a, c, g), in_batched)]
        return jax.lax.map(lambda x: f(*x), tuple(args)), (True, True)

    return f


_native_core.defvjp(_native_fwd, _native_bwd)

#: Where the forward pass of :func:`banded_chain_marginals` runs: ``"auto"`` (the compiled
#: kernel of :mod:`isingattn._kernels.transfer` where it can run: JAX on the CPU; else
#: JAX), ``"numba"`` or ``"jax"``.
BACKENDS = ffi.BACKENDS


def _use_native(backend):
    return ffi.resolve_backend(backend) == "numba"


def _chain_values(a, c, coupling_grad, backend):
    """The chains of :func:`banded_chain_marginals`: ``(x, strong)`` with ``x`` ``(..., N, S)``
    the marginals on the heads within :func:`_fast_limit` and ``log m`` on the others
    (``strong`` ``(N,)``), whose marginals may underflow while their ratios matter (the
    layer's weights). Differentiable in ``a`` and ``c`` (reverse mode)."""
    c = c.astype(a.dtype)
    if not coupling_grad:
        c = jax.lax.stop_gradient(c)
    r = c.shape[-1]
    strong = _strong_heads(c, a.dtype)
    native = _use_native(backend)
    if native and a.dtype not in (jnp.float32, jnp.float64):
        if backend == "numba":
            raise ValueError(f"backend='numba' runs float32 and float64; got {a.dtype} (use "
                             "backend='jax')")
        native = False
    if native:
        N, S = a.shape[-2:]
        x = _native_core(a.reshape(-1, N, S), c, r, bool(coupling_grad)).reshape(a.shape)
        return x, strong
    x, untile = _tiles(a, min(BLOCK, r))  # a block's keys fit in one window (readout)
    return untile(_banded_core(x, c, r, bool(coupling_grad))), strong


def banded_chain_marginals(a, c, *, coupling_grad=True, backend="auto"):
    """Exact marginals of chains with shared banded couplings.

    ``a``: ``(..., N, S)`` natural fields ``beta h`` (``-inf`` marks a key that is held at 0);
    ``c``: ``(N, r)`` natural couplings ``beta w(d)`` for distances ``d = 1..r`` (``r >= 1``).
    The distribution of chain ``(..., n)`` is ``p(s) ∝ exp(sum_k a_k s_k + sum_k sum_d c_nd s_k
    s_{k-d})``. Returns ``m`` ``(..., N, S)`` with ``m_k = P(s_k = 1)`` (0 where held), finite
    and exact to float precision for any finite ``a`` and ``c``. Reverse-mode differentiable in
    ``a`` and ``c`` (a ``custom_vjp``; see the module notes).

    Heads with ``sum_d |c_nd| <= 20`` (float32; float64: 160) run in probability space, fast;
    the others in the log domain (slower; see ``docs/guide/transfer.md``), chosen per head at
    run time, so one strong head changes neither the results nor the path of the others. The
    gradient takes the log-domain path from 18 (float64: 144).

    ``coupling_grad=False`` holds ``c`` constant (``stop_gradient``): the gradient then needs
    no pair statistics and no recomputation inside blocks, so it costs less.

    ``backend``: where the forward pass runs, ``"auto"`` (default: the compiled kernel of
    :mod:`isingattn._kernels.transfer` on the CPU, else JAX), ``"numba"`` or ``"jax"``; the
    same numbers to float precision, and the same gradient (always JAX's). Raises
    ``ValueError`` for an unknown backend, and for ``"numba"`` where it cannot run or with a
    dtype other than float32/64.
    """
    x, strong = _chain_values(a, c, coupling_grad, backend)
    return _with_strong(x, strong, lambda: jnp.exp(x))


def banded_chain_log_partition(a, c):
    """``log Z`` ``(..., N)`` of the chains of :func:`banded_chain_marginals` (differentiable by
    JAX autodiff: ``d log Z / d a = m``), finite for any finite ``a`` and ``c``, with the same
    per-head choice of path."""
    *batch, N, _ = a.shape
    c = c.astype(a.dtype)
    x, _ = _tiles(a)
    feat = _window_features(c.shape[-1], a.dtype)
    strong = _strong_heads(c, a.dtype)
    lz = _map_tiles(lambda t, c: _log_partition_tile(t, c, feat), x, _weak(c, strong))
    lz = _with_strong(lz, strong, lambda: _map_tiles(  # (nt, N, tile)
        lambda t, c: _log_partition_log_tile(t, c, feat), x, c))
    Q = math.prod(batch)
    return jnp.moveaxis(lz, 0, 1).reshape(N, -1)[:, :Q].T.reshape(*batch, N)


def _causal_packing(T, S, r):
    """Static index tables that pack causal rows in pairs ``(t, T - 1 - t)``.

    Under a causal mask row ``t`` has at most ``L_t = min(t + 1, S)`` allowed keys, all at the
    start. Two rows share one chain: the first row's keys, ``r`` keys held at 0 (which decouple
    the halves exactly: no coupling reaches across them), then the second row's keys. For
    ``T <= S`` every packed chain has ``T + 1 + r`` keys instead of ``2 S``.

    Returns ``src`` ``(P, Lp)`` (flat ``t * S + k`` index of the source, ``-1`` for held keys)
    and ``dst`` ``(T, S)`` (flat ``p * Lp + position`` of each ``(t, k)``, ``-1`` if not in
    the span).
    """
    import numpy as np

    span = np.minimum(np.arange(T) + 1, S)
    pairs = [(t, T - 1 - t) for t in range((T + 1) // 2)]
    lengths = [span[t] + (r + span[u] if u != t else 0) for t, u in pairs]
    Lp = int(max(lengths))
    src = np.full((len(pairs), Lp), -1, np.int64)
    dst = np.full((T, S), -1, np.int64)
    for p, (t, u) in enumerate(pairs):
        src[p, : span[t]] = t * S + np.arange(span[t])
        dst[t, : span[t]] = p * Lp + np.arange(span[t])
        if u != t:
            off = span[t] + r
            src[p, off: off + span[u]] = u * S + np.arange(span[u])
            dst[u, : span[u]] = p * Lp + off + np.arange(span[u])
    return src, dst


def _skew_read(x, start, step, width):
    """``y[..., p, j] = x[..., p, start + step * p + j]`` for ``j < width`` (0 past the end of
    ``x``'s rows; ``start + step * p >= 0`` for every row): each row read from its own offset,
    by a flat reshape with row stride ``L + step`` (no gather)."""
    *batch, P, L = x.shape
    V = max(L, start + max(step, 0) * (P - 1) + width, width - step)  # no read past a row
    flat = jnp.pad(x, [(0, 0)] * len(batch) + [(0, 0), (0, V - L)]).reshape(*batch, P * V)
    n = P * (V + step)
    flat = jnp.pad(flat, [(0, 0)] * len(batch) + [(0, max(0, start + n - P * V))])
    return flat[..., start:start + n].reshape(*batch, P, V + step)[..., :width]


def _first_keys(x, n):
    """``x[..., :n]``, padded with zeros to ``n`` columns."""
    L = x.shape[-1]
    return x[..., :n] if L >= n else jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, n - L)])


def _pack(a, r, fill):
    """:func:`_skew_pack` with ``fill`` at the held keys."""
    B, N, T, _ = a.shape
    P, Lp = (T + 1) // 2, T + 1 + r
    hi = jnp.flip(a[:, :, T - P:], axis=2)  # row T - 1 - p at p
    if T % 2:  # the middle row is the first half of its chain only
        hi = jnp.concatenate([hi[:, :, :P - 1], jnp.full_like(hi[:, :, P - 1:], fill)], 2)
    rest = jnp.concatenate([jnp.full((B, N, P, P + r), fill, a.dtype), hi], axis=-1)
    first = jnp.arange(Lp) <= jnp.arange(P)[:, None]  # (P, Lp): row p's own keys 0..p
    return jnp.where(first, _first_keys(a[:, :, :P], Lp),
                     _skew_read(rest, P - 1, -1, Lp))  # rest[p, P - 1 - p + j]


def _unpack(x, S, r):
    """:func:`_skew_unpack`."""
    P, Lp = x.shape[-2:]
    T = Lp - 1 - r
    lo = jnp.where(jnp.arange(S) <= jnp.arange(P)[:, None], _first_keys(x, S), 0.0)
    hi = jnp.flip(_skew_read(x, 1 + r, 1, S), axis=2)  # x[p, p + 1 + r + k]
    return jnp.concatenate([lo, hi[:, :, T % 2:]], axis=2)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _skew_pack(a, r):
    """Causal rows ``a`` ``(B, N, T, S)``, ``2 <= T <= S``, packed in pairs ``(p, T - 1 - p)``:
    ``(B, N, P, T + 1 + r)`` chains, ``P = ceil(T / 2)``.

    Chain ``p`` holds row ``p``'s keys ``0, ..., p``, ``r`` held keys (``-inf``: no coupling
    reaches across them), then row ``T - 1 - p``'s keys ``0, ..., T - 1 - p`` (odd ``T``: the
    middle row alone). The second part starts at ``p + 1 + r``: it is read from each row's
    own offset by a reshape (:func:`_skew_read`), not gathered: the index tables of
    :func:`_causal_packing` differentiate to a scatter. Packing and :func:`_skew_unpack` are
    each other's transposes, and each is the other's VJP (JAX's transposes of the reshapes
    write the flattened rows element by element)."""
    return _pack(a, r, -jnp.inf)


def _skew_pack_fwd(a, r):
    return _skew_pack(a, r), jnp.zeros((0, a.shape[-1]), a.dtype)  # S, in a shape


def _skew_pack_bwd(r, s, g):
    return (_unpack(g, s.shape[-1], r),)


_skew_pack.defvjp(_skew_pack_fwd, _skew_pack_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def _skew_unpack(x, S, r):
    """Inverse of :func:`_skew_pack`: chains ``x`` ``(B, N, P, T + 1 + r)`` -> rows ``(B, N, T,
    S)``, 0 at the keys no chain holds."""
    return _unpack(x, S, r)


def _skew_unpack_fwd(x, S, r):
    return _unpack(x, S, r), None


def _skew_unpack_bwd(S, r, _, g):
    return (_pack(g, r, 0.0),)


_skew_unpack.defvjp(_skew_unpack_fwd, _skew_unpack_bwd)


def transfer_inference(h, mask, couplings, beta, r, *, causal=False, log_partition=False,
                       backend="auto", coupling_grad=True):
    """Marginals of every (batch, head, query) model of the layer (layout ``(B, N, T, S)``).

    ``causal``: the mask allows no key after the query's position (``k <= t``); rows are then
    packed in pairs so that the chains hold only the keys that can be allowed.
    ``coupling_grad=False`` (no gradient can reach ``beta * J``: frozen couplings at a concrete
    ``beta``) skips the coupling gradient's statistics. ``log_partition=True`` adds ``log Z`` per query ``(B, N,
    T)``: one more forward pass over unpacked rows (:func:`banded_chain_log_partition`, JAX
    autodiff), the softmax-limit rows in closed form. ``backend``: where the marginals' forward
    pass runs (:func:`banded_chain_marginals`).
    """
    from ._inference import Inference

    B, N, T, S = h.shape
    c = jnp.broadcast_to(beta * couplings.band(S).astype(h.dtype), (N, r))
    mask = jnp.broadcast_to(mask, h.shape)
    a = jnp.where(mask, beta * h, -jnp.inf)
    limit, m_lim, u_lim, lz_lim = _sparse_limit(a, c)
    a = jnp.where(limit, -jnp.inf, a)  # the chains skip the rows the limit answers
    a = jnp.transpose(a, (0, 2, 1, 3))  # (B, T, N, S): one chain per (b, t, n)
    lz = None
    if log_partition:  # unpacked rows: a packed pair's chain gives log Z_t + log Z_u
        lz = jnp.transpose(banded_chain_log_partition(a, c), (0, 2, 1))  # (B, N, T)
        lz = jnp.where(limit[..., 0], lz_lim[..., 0], lz)
    bad = None
    if causal and T > 1:
        # a packed chain holds two rows: a NaN field in one would reach the other through the
        # shared messages, so a row with a NaN runs as empty and comes back NaN
        bad = jnp.transpose(jnp.any(jnp.isnan(a), axis=-1, keepdims=True), (0, 2, 1, 3))
        a = jnp.where(jnp.isnan(a).any(axis=-1, keepdims=True), -jnp.inf, a)
        rows = jnp.moveaxis(a, 1, 2)  # (B, N, T, S)
        if T <= S:
            packed = _skew_pack(rows, r)
        else:  # rows longer than S: chains of uneven length, by index tables
            src, dst = _causal_packing(T, S, r)
            packed = jnp.where(src >= 0, jnp.take(rows.reshape(B, N, T * S),
                                                  jnp.asarray(src.clip(0)), axis=-1), -jnp.inf)
        x, strong = _chain_values(jnp.moveaxis(packed, 1, 2), c,  # (B, P, N, Lp)
                                  coupling_grad, backend)
        x = jnp.moveaxis(x, 2, 1)
        if T <= S:
            x = _skew_unpack(x, S, r)
        else:
            x = x.reshape(B, N, -1)
            x = jnp.where(dst >= 0, jnp.take(x, jnp.asarray(dst.clip(0)), axis=-1), 0.0)
    else:
        x, strong = _chain_values(a, c, coupling_grad, backend)
        x = jnp.transpose(x, (0, 2, 1, 3))
    m, u = _rows(x, strong, mask)
    if bad is not None:
        m, u = jnp.where(bad, jnp.nan, m), jnp.where(bad, jnp.nan, u)
    u = jnp.where(mask, jnp.where(limit, u_lim, u), 0.0)
    m = jnp.where(mask, jnp.where(limit, m_lim, m), 0.0)
    return Inference(m, u, m, lz)


def _rows(x, strong, mask):
    """Marginals and weights ``(B, N, T, S)`` from :func:`_chain_values`' ``x`` (unpacked): on
    the strong heads ``x`` is ``log m``, and the weights are ``exp(log m - max)`` over the
    row's allowed keys, which stay O(1) where every ``m`` underflows; elsewhere both are ``x``."""
    def mixed(x):
        s = strong[:, None, None]
        top = jax.lax.stop_gradient(jnp.max(jnp.where(mask, x, -jnp.inf), axis=-1, keepdims=True))
        top = jnp.where(jnp.isfinite(top), top, 0.0)
        u = jnp.exp(jnp.where(mask, x, top) - top)
        return jnp.where(s, jnp.exp(x), x), jnp.where(s, u, x)

    return jax.lax.cond(jnp.any(strong), mixed, lambda x: (x, x), x)


def _sparse_limit(a, c):
    """The rows whose every key is almost surely empty, answered in closed form.

    When ``a_max + 2 sum_d max(c_d, 0) < -A`` (``a_max`` the row's largest natural field), every
    key that joins a pattern multiplies its weight by at most ``exp(-A)`` whatever it couples
    to, so the patterns with two or more keys change the marginals by a relative
    ``S exp(-A)``. With ``A = log S + log(1 / eps) + 2`` that is below the float precision,
    and ``m_k = exp(a_k) / (1 + sum_j exp(a_j))`` (the one-key patterns) is the exact answer:
    the ``b -> -inf`` softmax limit. The chains cannot give it there: their factors
    ``exp(a_k)`` underflow (float32: below about -87), which left the normalized weights
    wrong, not just rounded. Returns the rows (bool, ``(B, N, T, 1)``), their marginals,
    weights proportional to them that stay O(1) (``exp(a_k - a_max)``) and ``log Z =
    log(1 + sum_j exp(a_j))`` ``(B, N, T, 1)``; values on other rows are finite and unused."""
    S = a.shape[-1]
    amax = jnp.max(a, axis=-1, keepdims=True)  # -inf on rows with no allowed key
    cpos = jnp.sum(jnp.maximum(c, 0), axis=-1)[:, None, None]
    bound = math.log(S) - math.log(jnp.finfo(a.dtype).eps) + 2
    limit = jax.lax.stop_gradient(jnp.isfinite(amax) & (amax + 2 * cpos < -bound))
    x = jnp.where(limit, a, 0.0)
    shift = jax.lax.stop_gradient(jnp.max(x, axis=-1, keepdims=True))
    u = jnp.exp(x - shift)
    log_z = jax.nn.softplus(shift + jnp.log(jnp.sum(u, axis=-1, keepdims=True)))
    return limit, jnp.exp(x - log_z), u, log_z
