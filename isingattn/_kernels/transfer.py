"""Marginals of banded chains on the CPU in compiled code, called from inside XLA programs.

The forward pass of the ``transfer`` method (:func:`~isingattn.attention._banded.
banded_chain_marginals`) as one numba kernel, handed to XLA as a typed FFI custom call
(:mod:`.ffi`). Same algorithm and numbers as the JAX kernel
(:func:`~isingattn.attention._banded._marginals_tile`): messages over the ``2^r`` windows, the
factors scaled to bounded steps, renormalized once per block of ``min(8, r)`` keys, forward
messages kept at block ends and the block's marginals read from them and the backward message at
the block end. Heads whose couplings are beyond the fast limit take the log-domain path of
:func:`~isingattn.attention._banded._log_marginals_tile` (:func:`_log_unit`) and get ``log m``.

Why it is faster on the CPU: a unit of work is one head and up to :data:`LANES` queries, whose
messages (``2^r x LANES`` numbers) stay in the core's cache for the whole chain, where XLA
streams every step's messages through memory and runs one small kernel per step; and the units
are shared out among threads of the kernel's own (``pthread_create`` from the handler, joined
before it returns), where XLA's CPU runtime runs a recursion on one thread and the two lanes of
:mod:`isingattn.attention._banded` keep both cores busy only part of the time. Timings (the
forward pass of ``bench_attention.py``'s T = 512 workload) are in ``docs/guide/attention.md``
and ``docs/guide/transfer.md``.

The gradient is here too (:func:`transfer_vjp`): the hand-written VJP of
:func:`~isingattn.attention._banded._vjp_tile` (messages carried with their derivative along the
upstream gradient, the windows of a block recomputed for the couplings' pair statistics) in the
same units and threads, for the heads within the probability-space gradient's range; the others
keep JAX's log-domain autodiff. :func:`.ffi.resolve_backend` decides whether they run. Every
function is cached on disk by numba; the handler XLA calls is a few instructions compiled per
process that pass this process's addresses to the cached :func:`_handle`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numba
import numpy as np
from numba import carray, types

from .. import _vma
from . import ffi
from .ffi import arguments, buffer, dtype_of, fail, lead, prologue, ptr, result, words

TARGET = "isingattn_transfer_marginals"
#: The most queries of one head processed together (:func:`lanes`): the last (contiguous) axis
#: of every message. Shorter rows cost more per number, longer ones leave the core's cache
#: (figures in ``docs/guide/transfer.md``).
LANES = 128
#: Below this many state updates (queries x heads x keys x 2^r) a call runs on one thread.
THREADED_WORK = 1 << 24

_OPT = {"nogil": True, "boundscheck": False, "fastmath": True, "error_model": "numpy",
        "cache": True}

@numba.njit(cache=True)
def lanes(Q):
    """Queries of one head in a unit of work, for ``Q`` queries a head: the fewest groups of at
    most :data:`LANES`, as even as multiples of 8 (a vector of float32) make them (so a few
    queries, as in decoding, do not pay for a whole row of :data:`LANES`)."""
    n = max(1, (Q + LANES - 1) // LANES)  # the fewest groups
    return min(LANES, max(8, ((Q + n - 1) // n + 7) // 8 * 8))

@numba.njit(cache=True)
def groups(Q):
    """Units of work per head for ``Q`` queries a head: ``ceil(Q /`` :func:`lanes` ``(Q))``."""
    return (Q + lanes(Q) - 1) // lanes(Q)

@numba.njit(**_OPT)
def _forward_step(alpha, nxt, C, f0, f1):
    # window after key k - 1 -> after key k: pair sums over the oldest key (bit 0), the new
    # key's two values in the two halves
    H = alpha.shape[0] // 2
    L = alpha.shape[1]
    for j in range(H):
        c0 = C[2 * j]
        c1 = C[2 * j + 1]
        a0 = alpha[2 * j]
        a1 = alpha[2 * j + 1]
        n0 = nxt[j]
        n1 = nxt[H + j]
        for q in range(L):
            x0 = a0[q]
            x1 = a1[q]
            n0[q] = (x0 + x1) * f0[q]
            n1[q] = (c0 * x0 + c1 * x1) * f1[q]

@numba.njit(**_OPT)
def _backward_step(beta, nxt, C_lo, C_hi, f0, f1):
    # beta_{k-1}(w) = f0 beta_k(w >> 1) + f1 C(w) beta_k((w >> 1) | newest), on messages
    # whose state index is bit-reversed (bit 0 = the newest key), as in _banded: the key
    # summed out is then the lowest bit (adjacent rows) and the key coming in the highest
    # (the two halves), the memory pattern of the forward step (the standard order's
    # interleaved writes make the step much slower; see docs/guide/transfer.md)
    H = beta.shape[0] // 2
    L = beta.shape[1]
    for j in range(H):
        b0 = beta[2 * j]
        b1 = beta[2 * j + 1]
        n0 = nxt[j]
        n1 = nxt[H + j]
        c0 = C_lo[j]
        c1 = C_hi[j]
        for q in range(L):
            t0 = f0[q] * b0[q]
            t1 = f1[q] * b1[q]
            n0[q] = t0 + c0 * t1
            n1[q] = t0 + c1 * t1

@numba.njit(**_OPT)
def _forward_pair(alpha, nxt, C, f0, f1, g0, g1):
    # two forward steps, through the key with factors f then the one with g, in one pass: the
    # four windows that differ in their two oldest keys go to the four that differ in the two
    # new ones (half the message traffic of two _forward_step calls; same sums)
    R = alpha.shape[0]
    H = R // 2
    Q4 = R // 4
    L = alpha.shape[1]
    for i in range(Q4):
        c0, c1, c2, c3 = C[4 * i], C[4 * i + 1], C[4 * i + 2], C[4 * i + 3]
        d00, d01, d10, d11 = C[2 * i], C[2 * i + 1], C[2 * i + H], C[2 * i + 1 + H]
        a0, a1, a2, a3 = alpha[4 * i], alpha[4 * i + 1], alpha[4 * i + 2], alpha[4 * i + 3]
        o00, o10, o01, o11 = nxt[i], nxt[i + Q4], nxt[i + H], nxt[i + Q4 + H]
        for q in range(L):
            x0, x1, x2, x3 = a0[q], a1[q], a2[q], a3[q]
            p00 = (x0 + x1) * f0[q]
            p10 = (x2 + x3) * f0[q]
            p01 = (c0 * x0 + c1 * x1) * f1[q]
            p11 = (c2 * x2 + c3 * x3) * f1[q]
            o00[q] = (p00 + p10) * g0[q]
            o01[q] = (d00 * p00 + d01 * p10) * g1[q]
            o10[q] = (p01 + p11) * g0[q]
            o11[q] = (d10 * p01 + d11 * p11) * g1[q]

@numba.njit(**_OPT)
def _backward_pair(beta, nxt, C_lo, C_hi, f0, f1, g0, g1):
    # two _backward_step calls (through the key with factors f, then the earlier one with g)
    # in one pass over the bit-reversed messages, as _forward_pair
    R = beta.shape[0]
    H = R // 2
    Q4 = R // 4
    L = beta.shape[1]
    for i in range(Q4):
        l0, l1, h0, h1 = C_lo[2 * i], C_lo[2 * i + 1], C_hi[2 * i], C_hi[2 * i + 1]
        ll, lh, hl, hh = C_lo[i], C_hi[i], C_lo[i + Q4], C_hi[i + Q4]
        b0, b1, b2, b3 = beta[4 * i], beta[4 * i + 1], beta[4 * i + 2], beta[4 * i + 3]
        o0, o1, o2, o3 = nxt[i], nxt[H + i], nxt[i + Q4], nxt[H + i + Q4]
        for q in range(L):
            t0 = f0[q] * b0[q]
            t1 = f1[q] * b1[q]
            t2 = f0[q] * b2[q]
            t3 = f1[q] * b3[q]
            u0 = g0[q] * (t0 + l0 * t1)
            u1 = g1[q] * (t2 + l1 * t3)
            v0 = g0[q] * (t0 + h0 * t1)
            v1 = g1[q] * (t2 + h1 * t3)
            o0[q] = u0 + ll * u1
            o1[q] = u0 + lh * u1
            o2[q] = v0 + hl * v1
            o3[q] = v0 + hh * v1

@numba.njit(**_OPT)
def _forward_keys(buf, cur, C, F0, F1, k0, n):
    """``n`` forward steps through keys ``k0 ..`` on the pair of buffers ``buf`` from
    ``buf[cur]``, two keys a pass; returns the buffer holding the result."""
    for i in range(0, n - 1, 2):
        k = k0 + i
        _forward_pair(buf[cur], buf[1 - cur], C, F0[k], F1[k], F0[k + 1], F1[k + 1])
        cur = 1 - cur
    if n % 2:
        k = k0 + n - 1
        _forward_step(buf[cur], buf[1 - cur], C, F0[k], F1[k])
        cur = 1 - cur
    return cur

@numba.njit(**_OPT)
def _backward_keys(buf, cur, C_lo, C_hi, F0, F1, k0, n):
    """``n`` backward steps through keys ``k0 + n - 1`` down to ``k0`` (as
    :func:`_forward_keys`)."""
    k = k0 + n - 1
    if n % 2:
        _backward_step(buf[cur], buf[1 - cur], C_lo, C_hi, F0[k], F1[k])
        cur = 1 - cur
        k -= 1
    while k > k0:
        _backward_pair(buf[cur], buf[1 - cur], C_lo, C_hi, F0[k], F1[k], F0[k - 1], F1[k - 1])
        cur = 1 - cur
        k -= 2
    return cur

@numba.njit(**_OPT)
def _fold_sums(tb, n, acc, K):
    """Sums of the table ``tb[:n]`` (``n`` a power of two) over the rows with one bit set, for
    its top ``K - 1`` bits: ``acc[K - 2]`` over the upper half, then the upper half is added
    onto the lower and ``acc[K - 3]`` is the next bit's, and so on; ``acc[K]`` the total. One
    add per row and level instead of one per row and bit; ``tb`` is overwritten."""
    L = tb.shape[1]
    for i in range(K - 2, -1, -1):
        h = n // 2
        a = acc[i]
        a[:] = 0
        for w in range(h):
            lo = tb[w]
            hi = tb[w + h]
            for q in range(L):
                y = hi[q]
                a[q] += y
                lo[q] += y
        n = h
    z = acc[K]
    z[:] = 0
    for w in range(n):
        t = tb[w]
        for q in range(L):
            z[q] += t[q]

@numba.njit(**_OPT)
def _normalize(x, tmp):
    L = x.shape[1]
    tmp[:] = 0
    for w in range(x.shape[0]):
        xw = x[w]
        for q in range(L):
            tmp[q] += xw[q]
    for q in range(L):
        tmp[q] = 1 / tmp[q]
    for w in range(x.shape[0]):
        xw = x[w]
        for q in range(L):
            xw[q] *= tmp[q]

@numba.njit(**_OPT)
def _readout(end, beta, rev, acc, tb, K):
    # acc[i] = sum over windows with key i of the block set, acc[K] = sum over all windows
    # (key i of the block is bit r - K + i of the window after the block's last key, r bits;
    # rev: the bit reversal of the state index): the products end * beta with the top bit
    # folded into tb (R / 2 rows), then _fold_sums
    H = end.shape[0] // 2
    L = end.shape[1]
    top = acc[K - 1]
    top[:] = 0
    for w in range(H):
        e0, e1, t = end[w], end[w + H], tb[w]
        b0, b1 = beta[rev[w]], beta[rev[w + H]]  # beta is kept bit-reversed
        for q in range(L):
            y = e1[q] * b1[q]
            top[q] += y
            t[q] = e0[q] * b0[q] + y
    _fold_sums(tb, H, acc, K)

#: The log-domain path's stand-in for log 0 (finite: no inf - inf; exp of it is 0), as
#: ``_banded._neg`` for float32 and float64.
NEG = -1e18
# no assumption of finite values (held keys arrive as -inf and are clamped to NEG here)
_LOG_OPT = {**_OPT, "fastmath": {"nsz", "arcp", "contract", "afn", "reassoc"}}

@numba.njit(**_LOG_OPT)
def _recentre(x, top):
    L = x.shape[1]
    for w in range(x.shape[0]):
        xw = x[w]
        for q in range(L):
            xw[q] -= top[q]

@numba.njit(**_LOG_OPT)
def _log_forward_step(alpha, nxt, lC, l0, l1, top):
    # _forward_step on log messages: log-sum-exp over the oldest key, then re-centred
    H = alpha.shape[0] // 2
    L = alpha.shape[1]
    top[:] = NEG * 64
    for j in range(H):
        c0 = lC[2 * j]
        c1 = lC[2 * j + 1]
        a0 = alpha[2 * j]
        a1 = alpha[2 * j + 1]
        n0 = nxt[j]
        n1 = nxt[H + j]
        for q in range(L):
            x0 = a0[q]
            x1 = a1[q]
            y0 = x0 + c0
            y1 = x1 + c1
            v0 = max(x0, x1) + math.log1p(math.exp(-abs(x0 - x1))) + l0[q]
            v1 = max(y0, y1) + math.log1p(math.exp(-abs(y0 - y1))) + l1[q]
            n0[q] = v0
            n1[q] = v1
            top[q] = max(top[q], max(v0, v1))
    _recentre(nxt, top)

@numba.njit(**_LOG_OPT)
def _log_backward_step(beta, nxt, lC_lo, lC_hi, l0, l1, top):
    # _backward_step on log messages (bit-reversed state index), re-centred
    H = beta.shape[0] // 2
    L = beta.shape[1]
    top[:] = NEG * 64
    for j in range(H):
        b0 = beta[2 * j]
        b1 = beta[2 * j + 1]
        n0 = nxt[j]
        n1 = nxt[H + j]
        c0 = lC_lo[j]
        c1 = lC_hi[j]
        for q in range(L):
            t0 = l0[q] + b0[q]
            t1 = l1[q] + b1[q]
            u0 = c0 + t1
            u1 = c1 + t1
            v0 = max(t0, u0) + math.log1p(math.exp(-abs(t0 - u0)))
            v1 = max(t0, u1) + math.log1p(math.exp(-abs(t0 - u1)))
            n0[q] = v0
            n1[q] = v1
            top[q] = max(top[q], max(v0, v1))
    _recentre(nxt, top)

@numba.njit(**_LOG_OPT)
def _log_readout(end, beta, rev, acc, mx, tmp, r, K):
    # acc[i] = log sum over windows with key i of the block set, acc[K] over all windows,
    # each a log-sum-exp about its own maximum (mx), so that a key whose windows are all far
    # below the best one keeps its log marginal
    L = end.shape[1]
    mx[:, :] = NEG * 64
    for w in range(end.shape[0]):
        ew = end[w]
        bw = beta[rev[w]]
        for q in range(L):
            tmp[q] = ew[q] + bw[q]
        for i in range(K + 1):
            if i == K or (w >> (r - K + i)) & 1:
                mi = mx[i]
                for q in range(L):
                    mi[q] = max(mi[q], tmp[q])
    acc[:, :] = 0
    for w in range(end.shape[0]):
        ew = end[w]
        bw = beta[rev[w]]
        for i in range(K + 1):
            if i == K or (w >> (r - K + i)) & 1:
                ai = acc[i]
                mi = mx[i]
                for q in range(L):
                    ai[q] += math.exp(ew[q] + bw[q] - mi[q])
    for i in range(K + 1):
        ai = acc[i]
        mi = mx[i]
        for q in range(L):
            ai[q] = mi[q] + math.log(ai[q])

@numba.njit(**_LOG_OPT)
def _log_unit(a, out, n, q0, nq, cmax, lC, lC_lo, lC_hi, rev, r, K, nb,
              L0, L1, ends, buf, acc, mx, tmp):
    """The log-domain path for one unit (head ``n``, queries ``q0 ..``): writes
    ``log P(s_k = 1)`` (about NEG where held) to ``out``, for heads whose couplings are
    beyond the probability-space range (as ``_banded._log_marginals_tile``)."""
    S = a.shape[2]
    L = L0.shape[1]
    for k in range(nb * K):  # log factors, shifted as in _banded._log_tables
        for q in range(L):
            ap = a[q0 + q, n, k] + cmax if (k < S and q < nq) else NEG
            if not ap > NEG:
                ap = NEG
            up = max(ap, 0.0)
            L0[k, q] = -up
            L1[k, q] = ap - up
    cur = 0
    buf[0, :, :] = NEG
    buf[0, 0, :] = 0
    for b in range(nb):
        for i in range(K):
            k = b * K + i
            _log_forward_step(buf[cur], buf[1 - cur], lC, L0[k], L1[k], tmp)
            cur = 1 - cur
        ends[b] = buf[cur]
    buf[cur, :, :] = 0
    for b in range(nb - 1, -1, -1):
        _log_readout(ends[b], buf[cur], rev, acc, mx, tmp, r, K)
        for i in range(K):
            k = b * K + i
            if k < S:
                for q in range(nq):
                    out[q0 + q, n, k] = acc[i, q] - acc[K, q]
        for i in range(K - 1, -1, -1):
            k = b * K + i
            _log_backward_step(buf[cur], buf[1 - cur], lC_lo, lC_hi, L0[k], L1[k], tmp)
            cur = 1 - cur

@numba.njit(**_OPT)
def _head_table(c, n, rev, lC, C, C_lo, C_hi):
    """Head ``n``'s coupling table (as ``_banded._factors``): ``lC[w]`` and ``C[w] = exp(lC[w])``
    for a new key 1 after window ``w``, shifted by ``cmax``, and the halves of the bit-reversed
    table; returns ``(cmax, cmin)``, the sums of the positive and the negative couplings."""
    r = c.shape[1]
    R = 1 << r
    cmax = 0.0
    cmin = 0.0
    for d in range(r):
        cmax += max(c[n, d], 0.0)
        cmin += min(c[n, d], 0.0)
    for w in range(R):
        t = 0.0
        for d in range(r):
            t += c[n, d] * ((w >> (r - 1 - d)) & 1)
        lC[w] = t - cmax
        C[w] = math.exp(t - cmax)
    for w in range(R // 2):
        C_lo[w] = C[rev[w]]
        C_hi[w] = C[rev[w + R // 2]]
    return cmax, cmin

@numba.njit(**_OPT)
def _step_factors(a, n, q0, nq, cmax, ecm, F0, F1):
    """The per-step factors of ``s = 0`` and ``s = 1`` of head ``n``'s queries ``q0 ..
    q0 + nq - 1`` (the rest of the unit's lanes and the keys past ``S`` held at 0), scaled to
    bounded steps (as ``_banded._factors``)."""
    S = a.shape[2]
    for k in range(F0.shape[0]):
        for q in range(F0.shape[1]):
            ap = a[q0 + q, n, k] + cmax if (k < S and q < nq) else -np.inf
            e = math.exp(-abs(ap))  # exp(min(ap, 0)) or exp(-max(ap, 0)): one exp
            f1 = e if ap <= 0 else 1.0
            f0 = 1.0 if ap <= 0 else e
            g = 1.0 / math.sqrt((f0 + f1 * ecm) * (f0 + f1))
            F0[k, q] = f0 * g
            F1[k, q] = f1 * g

@numba.njit(**_OPT)
def marginals_units(a, c, out, fast_limit, u0, u1):
    """Marginals ``out`` ``(Q, N, S)`` of the chains with fields ``a`` ``(Q, N, S)``
    (``-inf`` = held at 0) and couplings ``c`` ``(N, r)``, for the units ``u0 .. u1 - 1``
    (unit ``u``: head ``u // G``, queries ``(u % G) * L`` onwards, ``G`` groups of
    ``L =`` :func:`lanes` ``(Q)`` queries per head); on the heads with
    ``sum_d |c_nd| > fast_limit``, their logarithms, by the log-domain path (:func:`_log_unit`)."""
    Q, S = a.shape[0], a.shape[2]
    r = c.shape[1]
    R = 1 << r
    K = min(8, r)
    nb = (S + K - 1) // K
    L = lanes(Q)
    G = groups(Q)
    dt = a.dtype
    ends = np.empty((nb, R, L), dt)
    buf = np.empty((2, R, L), dt)
    F0 = np.empty((nb * K, L), dt)
    F1 = np.empty((nb * K, L), dt)
    C = np.empty(R, dt)
    C_lo = np.empty(R // 2, dt)
    C_hi = np.empty(R // 2, dt)
    rev = np.empty(R, np.int64)
    for w in range(R):
        x = 0
        for i in range(r):
            x |= ((w >> i) & 1) << (r - 1 - i)
        rev[w] = x
    acc = np.empty((K + 1, L), dt)
    tmp = np.empty(L, dt)
    tb = np.empty((R // 2, L), dt)
    lC = np.empty(R, dt)
    lC_lo = np.empty(R // 2, dt)
    lC_hi = np.empty(R // 2, dt)
    mx = np.empty((K + 1, L), dt)
    head = -1
    cmax = 0.0
    ecm = 1.0
    strong = False
    for u in range(u0, u1):
        n = u // G
        q0 = (u % G) * L
        nq = min(L, Q - q0)
        if n != head:  # the head's coupling table and scale (as _banded._factors)
            head = n
            cmax, cmin = _head_table(c, n, rev, lC, C, C_lo, C_hi)
            for w in range(R // 2):  # the halves of the bit-reversed log table
                lC_lo[w] = lC[rev[w]]
                lC_hi[w] = lC[rev[w + R // 2]]
            strong = cmax - cmin > fast_limit
            ecm = math.exp(cmin - cmax)
        if strong:
            _log_unit(a, out, n, q0, nq, cmax, lC, lC_lo, lC_hi, rev, r, K, nb,
                      F0, F1, ends, buf, acc, mx, tmp)
            continue
        _step_factors(a, n, q0, nq, cmax, ecm, F0, F1)
        cur = 0
        buf[0, :, :] = 0
        buf[0, 0, :] = 1  # before the first key: every window entry 0
        for b in range(nb):
            cur = _forward_keys(buf, cur, C, F0, F1, b * K, K)
            _normalize(buf[cur], tmp)
            ends[b] = buf[cur]
        buf[cur, :, :] = 1
        for b in range(nb - 1, -1, -1):
            _readout(ends[b], buf[cur], rev, acc, tb, K)
            for i in range(K):
                k = b * K + i
                if k < S:
                    for q in range(nq):
                        out[q0 + q, n, k] = acc[i, q] / acc[K, q]
            cur = _backward_keys(buf, cur, C_lo, C_hi, F0, F1, b * K, K)
            _normalize(buf[cur], tmp)

@numba.njit(nogil=True, cache=True)
def _run(job):
    """One thread's share: ``job`` = [dtype, Q, N, S, r, a, c, out, limit, u0, u1]."""
    Q, N, S, r = job[1], job[2], job[3], job[4]
    if job[0] == ffi.F32:
        limit = carray(ptr(job[8]), (1,), dtype=np.float32)[0]
        marginals_units(carray(ptr(job[5]), (Q, N, S), dtype=np.float32),
                        carray(ptr(job[6]), (N, r), dtype=np.float32),
                        carray(ptr(job[7]), (Q, N, S), dtype=np.float32),
                        limit, job[9], job[10])
    else:
        limit = carray(ptr(job[8]), (1,), dtype=np.float64)[0]
        marginals_units(carray(ptr(job[5]), (Q, N, S), dtype=np.float64),
                        carray(ptr(job[6]), (N, r), dtype=np.float64),
                        carray(ptr(job[7]), (Q, N, S), dtype=np.float64),
                        limit, job[9], job[10])

@numba.cfunc(ffi.HANDLE_SIG, nopython=True, cache=True)
def _handle(frame_ptr, create, join, worker, error_args, threads):
    """The custom call: check the frame, share the units out among threads (the calling
    one takes share 0) and run them. Every address it calls (``pthread_create``,
    ``pthread_join``, the worker, XLA's error constructor's arguments) and the thread count
    come in as arguments, so that the compiled code holds nothing of this process and can
    be cached on disk (see ``docs/guide/transfer.md`` for what per-process compilation
    cost)."""
    frame, done, answer = prologue(frame_ptr, 3, error_args)
    if done:
        return answer
    args = arguments(frame, 3)
    dt = dtype_of(args[0])
    if dt != ffi.F32 and dt != ffi.F64:
        return fail(frame, error_args)
    a, rank, a_dims = buffer(args[0], dt, 2)
    c, c_rank, c_dims = buffer(args[1], dt, 2)
    limit, _, _ = buffer(args[2], dt, 0)
    out, out_rank, _ = buffer(result(frame), dt, 2)
    if rank < 0 or c_rank != 2 or out_rank != rank:
        return fail(frame, error_args)
    dims = words(a_dims, rank)
    cd = words(c_dims, 2)
    N, S = dims[rank - 2], dims[rank - 1]
    if cd[0] != N:
        return fail(frame, error_args)
    Q = lead(dims, rank, 2)
    units = N * groups(Q)
    T = min(threads, units)
    if Q * N * S << cd[1] < THREADED_WORK:
        T = 1
    head = np.array([dt, Q, N, S, cd[1], a, c, out, limit], np.int64)
    ffi.share_units(_run, head, units, T, create, join, worker)
    return ptr(0)

@numba.cfunc(types.voidptr(types.voidptr), nopython=True, cache=True)
def _worker(job):
    _run(carray(job, (11,), dtype=np.int64))
    return ptr(0)


def _register():
    return ffi.register_threaded(TARGET, _handle, _worker)


def transfer_marginals(a, c, fast_limit):
    """Marginals of banded chains: ``a`` ``(..., N, S)`` natural fields (``-inf`` = held),
    ``c`` ``(N, r)`` natural couplings, both float32 or both float64; ``fast_limit`` the largest
    ``sum_d |c_nd|`` of a head that the probability-space path takes. Returns ``(..., N, S)``:
    the marginals, on the heads beyond ``fast_limit`` their logarithms (log-domain path; about
    -1e18 where held); the same numbers as the JAX kernel (``_banded._banded_core``) to float
    precision. Raises ``ValueError`` for mismatched shapes, ``r = 0`` or another dtype."""
    _register()
    a = jnp.asarray(a)
    c = jnp.asarray(c, a.dtype)
    if a.ndim < 2 or c.ndim != 2 or c.shape[0] != a.shape[-2]:
        raise ValueError(f"a must be (..., N, S) and c (N, r) with the same N; got a {a.shape}, "
                         f"c {c.shape}")
    if c.shape[1] < 1:
        raise ValueError(f"c must hold at least one distance (r >= 1); got c {c.shape}")
    if a.dtype not in (jnp.float32, jnp.float64):
        raise ValueError(f"a must be float32 or float64; got {a.dtype}")
    if math.prod(a.shape) == 0:
        return jnp.zeros_like(a)
    limit = jnp.full((1,), fast_limit, a.dtype)
    if a.ndim == 3 and jax.device_count() > 1 and not _vma._manual_axes():
        # under jit with sharded inputs: each device runs the kernel on its own chains
        return _partitioned(a, c, limit)
    return _kernel_call(a, c, limit)


def _kernel_call(a, c, limit):
    return jax.ffi.ffi_call(TARGET, _vma.result_like(a.shape, a.dtype, a, c),
                            vmap_method="sequential")(a, c, limit)


def _make_partitioned():
    """The kernel as a ``custom_partitioning`` op over ``(Q, N, S)`` chains: XLA splits the
    chains axis ``Q`` over the devices its input is sharded on and runs the kernel on each
    shard (without it, the foreign call is fed the whole gathered batch on every device); heads
    and keys stay whole (a chain needs all its keys, a head its couplings)."""
    from jax.experimental.custom_partitioning import custom_partitioning
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    @custom_partitioning
    def op(a, c, limit):
        return _kernel_call(a, c, limit)

    def chains_spec(arg):
        spec = getattr(arg.sharding, "spec", None)
        return P(spec[0] if spec else None, None, None)

    def infer(mesh, arg_shapes, result_shape):
        return NamedSharding(mesh, chains_spec(arg_shapes[0]))

    def partition(mesh, arg_shapes, result_shape):
        out = NamedSharding(mesh, chains_spec(arg_shapes[0]))
        args = (out, NamedSharding(mesh, P(None, None)), NamedSharding(mesh, P(None)))
        return mesh, _kernel_call, out, args

    op.def_partition(partition, infer_sharding_from_operands=infer,
                     sharding_rule="q n s, n r, l -> q n s",
                     need_replication_factors=("n", "s", "r", "l"))
    return op


_PARTITIONED = None


def _partitioned(a, c, limit):
    global _PARTITIONED
    if _PARTITIONED is None:
        _PARTITIONED = _batchable(_make_partitioned())
    return _PARTITIONED(a, c, limit)


def _batchable(op):
    """``op`` (chains ``(Q, N, S)``, independent of one another) under ``jax.vmap``: a mapped
    axis of the chains joins ``Q``; mapped couplings run the plain kernel per element
    (``custom_partitioning`` has no batching rule of its own)."""
    from jax.custom_batching import custom_vmap

    @custom_vmap
    def f(a, c, limit):
        return op(a, c, limit)

    @f.def_vmap
    def rule(axis_size, in_batched, a, c, limit):
        a_b, c_b, l_b = in_batched
        if not a_b:
            a = jnp.broadcast_to(a, (axis_size,) + a.shape)
        if c_b or l_b:
            c = c if c_b else jnp.broadcast_to(c, (axis_size,) + c.shape)
            limit = limit if l_b else jnp.broadcast_to(limit, (axis_size,) + limit.shape)
            return jax.lax.map(lambda x: _kernel_call(*x), (a, c, limit)), True
        out = f(a.reshape((-1,) + a.shape[2:]), c, limit)
        return out.reshape(a.shape), True

    return f


# ----------------------------------------------------------------------------- the VJP
# The vector-Jacobian product of the marginals (``_banded._vjp_tile``, the same algorithm and
# numbers to float rounding): forward messages in the standard state order (bit 0 = the oldest
# key), backward ones bit-reversed, each carried with its derivative along the upstream ``g``;
# see ``_banded`` for the derivation.

VJP_TARGET = "isingattn_transfer_vjp"  # in the forward kernel's units

@numba.njit(**_OPT)
def _vjp_forward_step(al, Ad, nal, nAd, C, f0, f1, gk):
    """``(alpha, A)`` through key ``k`` (factors ``f0, f1``, upstream gradient ``gk``) into
    ``(nal, nAd)``, standard order: :func:`_forward_step` on both, the derivative's ``s_k = 1``
    half gaining ``gk`` times the message's (the key's field enters its factor ``f1``)."""
    H = al.shape[0] // 2
    L = al.shape[1]
    for j in range(H):
        c0 = C[2 * j]
        c1 = C[2 * j + 1]
        a0, a1, d0, d1 = al[2 * j], al[2 * j + 1], Ad[2 * j], Ad[2 * j + 1]
        n0, n1, m0, m1 = nal[j], nal[H + j], nAd[j], nAd[H + j]
        for q in range(L):
            s1 = c0 * a0[q] + c1 * a1[q]
            n0[q] = (a0[q] + a1[q]) * f0[q]
            n1[q] = s1 * f1[q]
            m0[q] = (d0[q] + d1[q]) * f0[q]
            m1[q] = (c0 * d0[q] + c1 * d1[q] + gk[q] * s1) * f1[q]

@numba.njit(**_OPT)
def _forward_derivative_pair(al, Ad, nAd, C, f0, f1, g0, g1, gk, gk1):
    # the derivative's half of two _vjp_forward_step calls (factors f then g, upstream
    # gradients gk, gk1) in one pass: alpha's pair sums are recomputed here (not stored) for
    # the terms the upstream gradient adds
    R = al.shape[0]
    H = R // 2
    Q4 = R // 4
    L = al.shape[1]
    for i in range(Q4):
        c0, c1, c2, c3 = C[4 * i], C[4 * i + 1], C[4 * i + 2], C[4 * i + 3]
        d00, d01, d10, d11 = C[2 * i], C[2 * i + 1], C[2 * i + H], C[2 * i + 1 + H]
        a0, a1, a2, a3 = al[4 * i], al[4 * i + 1], al[4 * i + 2], al[4 * i + 3]
        D0, D1, D2, D3 = Ad[4 * i], Ad[4 * i + 1], Ad[4 * i + 2], Ad[4 * i + 3]
        o00, o10, o01, o11 = nAd[i], nAd[i + Q4], nAd[i + H], nAd[i + Q4 + H]
        for q in range(L):
            x0, x1, x2, x3 = a0[q], a1[q], a2[q], a3[q]
            y0, y1, y2, y3 = D0[q], D1[q], D2[q], D3[q]
            p00 = (x0 + x1) * f0[q]  # alpha after the first key (s_k = 0, 1; older key 0, 1)
            p10 = (x2 + x3) * f0[q]
            p01 = (c0 * x0 + c1 * x1) * f1[q]
            p11 = (c2 * x2 + c3 * x3) * f1[q]
            q00 = (y0 + y1) * f0[q]  # and A
            q10 = (y2 + y3) * f0[q]
            q01 = (c0 * y0 + c1 * y1) * f1[q] + gk[q] * p01
            q11 = (c2 * y2 + c3 * y3) * f1[q] + gk[q] * p11
            o00[q] = (q00 + q10) * g0[q]
            o01[q] = (d00 * (q00 + gk1[q] * p00) + d01 * (q10 + gk1[q] * p10)) * g1[q]
            o10[q] = (q01 + q11) * g0[q]
            o11[q] = (d10 * (q01 + gk1[q] * p01) + d11 * (q11 + gk1[q] * p11)) * g1[q]

@numba.njit(**_OPT)
def _vjp_forward_pair(msg, cur, C, f0, f1, g0, g1, gk, gk1):
    """Two :func:`_vjp_forward_step` calls (keys with factors ``f`` then ``g`` and upstream
    gradients ``gk``, ``gk1``) from buffers ``cur, cur + 1`` of ``msg`` into the other two;
    returns the new ``cur``."""
    _forward_derivative_pair(msg[cur], msg[cur + 1], msg[3 - cur], C, f0, f1, g0, g1, gk, gk1)
    _forward_pair(msg[cur], msg[2 - cur], C, f0, f1, g0, g1)
    return 2 - cur

@numba.njit(**_OPT)
def _vjp_back_step(be, Bd, nbe, nBd, C_lo, C_hi, f0, f1, gk):
    """``(beta, B)`` back through key ``k`` (factors ``f0, f1``, upstream gradient ``gk``)
    into ``(nbe, nBd)``, on bit-reversed messages (bit 0 = the newest key, as
    :func:`_backward_step`; in the standard order the interleaved writes make the step about
    four times slower): the derivative steps as ``B + gk beta`` on the windows with
    ``s_k = 1``. The pieces the couplings' pair statistics read come from :func:`_vjp_halves`
    (stored here they slow the step)."""
    H = be.shape[0] // 2
    L = be.shape[1]
    for j in range(H):
        b0, b1, d0, d1 = be[2 * j], be[2 * j + 1], Bd[2 * j], Bd[2 * j + 1]
        n0, n1, m0, m1 = nbe[j], nbe[H + j], nBd[j], nBd[H + j]
        cl = C_lo[j]
        ch = C_hi[j]
        for q in range(L):
            x = f1[q] * b1[q]
            y = f1[q] * (d1[q] + gk[q] * b1[q])
            p = f0[q] * b0[q]
            dp = f0[q] * d0[q]
            n0[q] = p + cl * x
            n1[q] = p + ch * x
            m0[q] = dp + cl * y
            m1[q] = dp + ch * y

@numba.njit(**_OPT)
def _backward_derivative_pair(be, Bd, nBd, C_lo, C_hi, f0, f1, g0, g1, gk, gk1):
    # the derivative's half of two _vjp_back_step calls (factors f, upstream gradient gk,
    # then g, gk1 for the earlier key) in one pass, as _backward_pair: the later key's term
    # rides on the windows with s_{k-1} = 1, bit 1 of the messages the pair starts from (the
    # first step keeps that key), so both terms go in up front
    R = be.shape[0]
    H = R // 2
    Q4 = R // 4
    L = be.shape[1]
    for i in range(Q4):
        l0, l1, h0, h1 = C_lo[2 * i], C_lo[2 * i + 1], C_hi[2 * i], C_hi[2 * i + 1]
        ll, lh, hl, hh = C_lo[i], C_hi[i], C_lo[i + Q4], C_hi[i + Q4]
        b1, b2, b3 = be[4 * i + 1], be[4 * i + 2], be[4 * i + 3]
        d0, d1, d2, d3 = Bd[4 * i], Bd[4 * i + 1], Bd[4 * i + 2], Bd[4 * i + 3]
        o0, o1, o2, o3 = nBd[i], nBd[H + i], nBd[i + Q4], nBd[H + i + Q4]
        for q in range(L):
            t0 = f0[q] * d0[q]
            t1 = f1[q] * (d1[q] + gk[q] * b1[q])
            t2 = f0[q] * (d2[q] + gk1[q] * b2[q])
            t3 = f1[q] * (d3[q] + (gk[q] + gk1[q]) * b3[q])
            u0 = g0[q] * (t0 + l0 * t1)
            u1 = g1[q] * (t2 + l1 * t3)
            v0 = g0[q] * (t0 + h0 * t1)
            v1 = g1[q] * (t2 + h1 * t3)
            o0[q] = u0 + ll * u1
            o1[q] = u0 + lh * u1
            o2[q] = v0 + hl * v1
            o3[q] = v0 + hh * v1

@numba.njit(**_OPT)
def _vjp_back_pair(msg, cur, C_lo, C_hi, f0, f1, g0, g1, gk, gk1):
    """Two :func:`_vjp_back_step` calls (factors ``f``, upstream gradient ``gk``, then ``g``,
    ``gk1`` for the earlier key) from buffers ``cur, cur + 1`` of ``msg`` into the other
    two; returns the new ``cur``."""
    _backward_derivative_pair(msg[cur], msg[cur + 1], msg[3 - cur], C_lo, C_hi, f0, f1, g0,
                              g1, gk, gk1)
    _backward_pair(msg[cur], msg[2 - cur], C_lo, C_hi, f0, f1, g0, g1)
    return 2 - cur

@numba.njit(**_OPT)
def _vjp_halves(be, Bd, h, dh, f1, gk):
    # the pieces of a backward step through key k that the couplings' pair statistics read,
    # from the messages it stepped from: h = f1 beta and dh = f1 (B + g_k beta) on the
    # windows with s_k = 1, indexed by the other keys (bit-reversed)
    H = be.shape[0] // 2
    L = be.shape[1]
    for j in range(H):
        b1, d1, hj, dj = be[2 * j + 1], Bd[2 * j + 1], h[j], dh[j]
        for q in range(L):
            hj[q] = f1[q] * b1[q]
            dj[q] = f1[q] * (d1[q] + gk[q] * b1[q])

@numba.njit(**_OPT)
def _inverse_sum(x, out):
    L = x.shape[1]
    out[:] = 0
    for w in range(x.shape[0]):
        for q in range(L):
            out[q] += x[w, q]
    for q in range(L):
        out[q] = 1 / out[q]

@numba.njit(inline="always", **_OPT)
def _scaled(f0, f1, s, e0, e1):
    """A key's factors times the normalization ``s`` (per query) into ``e0, e1``."""
    for q in range(f0.shape[0]):
        e0[q] = f0[q] * s[q]
        e1[q] = f1[q] * s[q]

@numba.njit(**_OPT)
def _vjp_forward_keys(msg, cur, C, e0, e1, F0, F1, GK, k0, n):
    """``n`` steps of ``(alpha, A)`` through keys ``k0 ..`` (buffers ``cur``, ``cur + 1`` of
    ``msg``), two keys a pass, the first key with factors ``e0, e1`` (its own scaled by the
    normalization it carries); returns the buffer pair holding the result."""
    if n == 1:
        _vjp_forward_step(msg[cur], msg[cur + 1], msg[2 - cur], msg[3 - cur], C, e0, e1,
                          GK[k0])
        return 2 - cur
    cur = _vjp_forward_pair(msg, cur, C, e0, e1, F0[k0 + 1], F1[k0 + 1], GK[k0], GK[k0 + 1])
    for i in range(2, n - 1, 2):
        k = k0 + i
        cur = _vjp_forward_pair(msg, cur, C, F0[k], F1[k], F0[k + 1], F1[k + 1], GK[k],
                                GK[k + 1])
    if n % 2:
        k = k0 + n - 1
        _vjp_forward_step(msg[cur], msg[cur + 1], msg[2 - cur], msg[3 - cur], C, F0[k], F1[k],
                          GK[k])
        cur = 2 - cur
    return cur

@numba.njit(**_OPT)
def _vjp_backward_keys(msg, cur, C_lo, C_hi, e0, e1, F0, F1, GK, k0, n):
    """``n`` steps of ``(beta, B)`` back through keys ``k0 + n - 1`` down to ``k0``, the last
    key with factors ``e0, e1`` (as :func:`_vjp_forward_keys`)."""
    k = k0 + n - 1
    if n == 1:
        _vjp_back_step(msg[cur], msg[cur + 1], msg[2 - cur], msg[3 - cur], C_lo, C_hi, e0, e1,
                       GK[k])
        return 2 - cur
    cur = _vjp_back_pair(msg, cur, C_lo, C_hi, e0, e1, F0[k - 1], F1[k - 1], GK[k], GK[k - 1])
    k -= 2
    while k > k0:
        cur = _vjp_back_pair(msg, cur, C_lo, C_hi, F0[k], F1[k], F0[k - 1], F1[k - 1], GK[k],
                             GK[k - 1])
        k -= 2
    if k == k0:
        _vjp_back_step(msg[cur], msg[cur + 1], msg[2 - cur], msg[3 - cur], C_lo, C_hi, F0[k],
                       F1[k], GK[k])
        cur = 2 - cur
    return cur

@numba.njit(**_OPT)
def vjp_units(a, c, g, da, dcp, pairs, skip, u0, u1):
    """The VJP of :func:`marginals_units` with upstream ``g`` ``(Q, N, S)`` (``max |g| <= 1``
    per head, as the caller scales it) for the units ``u0 .. u1 - 1`` (as there): ``da``
    ``(Q, N, S)`` and, when ``pairs``, the units' shares of the couplings' gradient ``dcp``
    ``(N, G, r)`` (``G`` units per head; summed by the caller). Heads with ``skip[n]`` (beyond
    the probability-space gradient's range) get zeros; the caller takes them elsewhere."""
    Q, S = a.shape[0], a.shape[2]
    r = c.shape[1]
    R = 1 << r
    H = R // 2
    K = min(8, r)
    nb = (S + K - 1) // K
    L = lanes(Q)
    G = groups(Q)
    dt = a.dtype
    F0 = np.empty((nb * K, L), dt)
    F1 = np.empty((nb * K, L), dt)
    GK = np.empty((nb * K, L), dt)
    endA = np.empty((nb, R, L), dt)
    endD = np.empty((nb, R, L), dt)
    endT = np.empty((nb, L), dt)
    msg = np.empty((4, R, L), dt)  # two (alpha, A) or (beta, B) buffers
    befA = np.empty((K, R, L), dt)
    befD = np.empty((K, R, L), dt)
    hh = np.empty((H, L), dt)  # h and dh of _vjp_halves
    dh = np.empty((H, L), dt)
    h1 = np.empty(L, dt)
    accq = np.empty((R, L), dt)
    acc = np.empty(R, dt)
    C = np.empty(R, dt)
    e0 = np.empty(L, dt)
    e1 = np.empty(L, dt)
    s = np.empty(L, dt)
    inv = np.empty(L, dt)
    rel = np.empty(L, dt)
    tq = np.empty(L, dt)
    rev = np.empty(R, np.int64)  # bit reversal of r bits (the backward messages' order)
    rev1 = np.empty(H, np.int64)  # and of r - 1 bits (h, dh: indexed by the other keys)
    for w in range(R):
        x = 0
        for i in range(r):
            x |= ((w >> i) & 1) << (r - 1 - i)
        rev[w] = x
    for w in range(H):
        x = 0
        for i in range(r - 1):
            x |= ((w >> i) & 1) << (r - 2 - i)
        rev1[w] = x
    C_lo = np.empty(H, dt)
    C_hi = np.empty(H, dt)
    lC = np.empty(R, dt)
    acP = np.empty((K + 1, L), dt)
    acD = np.empty((K + 1, L), dt)
    tP = np.empty((H, L), dt)  # the frozen readout's folded tables
    tD = np.empty((H, L), dt)
    for u in range(u0, u1):
        n = u // G
        grp = u % G
        q0 = grp * L
        nq = min(L, Q - q0)
        if skip[n]:
            for q in range(nq):
                for k in range(S):
                    da[q0 + q, n, k] = 0
            for d in range(r):
                dcp[n, grp, d] = 0
            continue
        cmax, cmin = _head_table(c, n, rev, lC, C, C_lo, C_hi)
        _step_factors(a, n, q0, nq, cmax, math.exp(cmin - cmax), F0, F1)
        for k in range(nb * K):
            for q in range(L):
                GK[k, q] = g[q0 + q, n, k] if k < S and q < nq else 0.0
        # forward: (alpha, A) at every block end and the end's normalization
        cur = 0
        msg[0] = 0
        msg[0, 0] = 1
        msg[1] = 0
        s[:] = 1
        for b in range(nb):
            k = b * K  # the block's first key carries the previous block's normalization
            _scaled(F0[k], F1[k], s, e0, e1)
            cur = _vjp_forward_keys(msg, cur, C, e0, e1, F0, F1, GK, k, K)
            endA[b] = msg[cur]
            endD[b] = msg[cur + 1]
            _inverse_sum(msg[cur], s)
            endT[b] = s
        # backward
        cur = 0
        msg[0] = 1
        msg[1] = 0
        s[:] = 1
        acc[:] = 0
        for b in range(nb - 1, -1, -1):
            k0 = b * K
            if not pairs:
                # the block's marginals and their derivative from the messages at its end
                # P = alpha beta and its derivative dP per window, summed over the windows
                # with each key of the block set; the end is scaled by its normalization t
                # before the products (unscaled, a product can leave the exponent range)
                tn = endT[b]
                topP, topD = acP[K - 1], acD[K - 1]
                topP[:] = 0
                topD[:] = 0
                for w in range(H):  # the block's last key (the top bit) folded in at once
                    a0, a1, d0, d1 = endA[b, w], endA[b, w + H], endD[b, w], endD[b, w + H]
                    b0, b1 = msg[cur, rev[w]], msg[cur, rev[w + H]]
                    B0, B1 = msg[cur + 1, rev[w]], msg[cur + 1, rev[w + H]]
                    pw, dw = tP[w], tD[w]
                    for q in range(L):
                        x0 = a0[q] * tn[q]
                        x1 = a1[q] * tn[q]
                        p1 = x1 * b1[q]
                        g1 = d1[q] * tn[q] * b1[q] + x1 * B1[q]
                        topP[q] += p1
                        topD[q] += g1
                        pw[q] = x0 * b0[q] + p1
                        dw[q] = d0[q] * tn[q] * b0[q] + x0 * B0[q] + g1
                _fold_sums(tP, H, acP, K)
                _fold_sums(tD, H, acD, K)
                for i in range(K):
                    k = k0 + i
                    if k < S:
                        for q in range(nq):
                            iv = 1 / acP[K, q]
                            m = acP[i, q] * iv
                            da[q0 + q, n, k] = acD[i, q] * iv - m * (acD[K, q] * iv)
                # back through the block; its last key carries the later block's normalization
                k = k0 + K - 1
                _scaled(F0[k], F1[k], s, e0, e1)
                cur = _vjp_backward_keys(msg, cur, C_lo, C_hi, e0, e1, F0, F1, GK, k0, K)
                _inverse_sum(msg[cur], s)
                continue
            # the windows before each key of the block, recomputed from the block's start
            if b > 0:
                befA[0] = endA[b - 1]
                befD[0] = endD[b - 1]
                for q in range(L):
                    tq[q] = endT[b - 1, q]
            else:
                befA[0] = 0
                befA[0, 0] = 1
                befD[0] = 0
                tq[:] = 1
            if K > 1:
                _scaled(F0[k0], F1[k0], tq, e0, e1)
                _vjp_forward_step(befA[0], befD[0], befA[1], befD[1], C, e0, e1, GK[k0])
            for i in range(1, K - 1):
                _vjp_forward_step(befA[i], befD[i], befA[i + 1], befD[i + 1], C,
                                  F0[k0 + i], F1[k0 + i], GK[k0 + i])
            accq[:] = 0
            for i in range(K - 1, -1, -1):
                k = k0 + i
                old = cur
                f0k, f1k = F0[k], F1[k]
                if i == K - 1:  # the block's last key carries the later block's normalization
                    _scaled(F0[k], F1[k], s, e0, e1)
                    f0k, f1k = e0, e1
                _vjp_back_step(msg[cur], msg[cur + 1], msg[2 - cur], msg[3 - cur], C_lo, C_hi,
                               f0k, f1k, GK[k])
                cur = 2 - cur
                # the step's h and dh from the messages it stepped from (kept until the next
                # step), with its factor f1; the block's first key's scaled by the block
                # start's normalization (its windows were kept before it)
                if i == 0 and K > 1:
                    for q in range(L):
                        h1[q] = F1[k, q] * tq[q]
                    f1k = h1
                _vjp_halves(msg[old], msg[old + 1], hh, dh, f1k, GK[k])
                bA, bD = befA[i], befD[i]
                if i == K - 1:  # the block's windows share one scale: sum_w alpha beta = Z
                    inv[:] = 0
                    rel[:] = 0
                    for w in range(R):
                        aw, dw = bA[w], bD[w]
                        bw, Bw = msg[cur, rev[w]], msg[cur + 1, rev[w]]
                        for q in range(L):
                            inv[q] += aw[q] * bw[q]
                            rel[q] += dw[q] * bw[q] + aw[q] * Bw[q]
                    for q in range(L):
                        inv[q] = 1 / inv[q]
                        rel[q] *= inv[q]
                # joint of (window w before key k, s_k = 1): its covariance with G
                e0[:] = 0
                for w in range(R):
                    aw, dw = bA[w], bD[w]
                    hv, dv = hh[rev1[w >> 1]], dh[rev1[w >> 1]]
                    cw = C[w]
                    aq = accq[w]
                    for q in range(L):
                        cov = (dw[q] * hv[q] + aw[q] * (dv[q] - hv[q] * rel[q])) * inv[q]
                        e0[q] += cov * cw
                        aq[q] += cov
                if k < S:
                    for q in range(nq):
                        da[q0 + q, n, k] = e0[q]
            for w in range(R):
                t = 0.0
                for q in range(L):
                    t += accq[w, q]
                acc[w] += t
            _inverse_sum(msg[cur], s)
        if pairs:
            for d in range(r):
                t = 0.0
                for w in range(R):
                    if (w >> (r - 1 - d)) & 1:
                        t += acc[w] * C[w]
                dcp[n, grp, d] = t
        else:
            for d in range(r):
                dcp[n, grp, d] = 0

_VJP_JOB = 14

@numba.njit(nogil=True, cache=True)
def _run_vjp(job):
    """One thread's share: ``job`` = [dtype, Q, N, S, r, a, c, g, skip, pairs, da, dcp, u0,
    u1]."""
    Q, N, S, r = job[1], job[2], job[3], job[4]
    G = groups(Q)
    skip = carray(ptr(job[8]), (N,), dtype=np.bool_)
    pairs = carray(ptr(job[9]), (1,), dtype=np.int32)[0] != 0
    if job[0] == ffi.F32:
        vjp_units(carray(ptr(job[5]), (Q, N, S), dtype=np.float32),
                  carray(ptr(job[6]), (N, r), dtype=np.float32),
                  carray(ptr(job[7]), (Q, N, S), dtype=np.float32),
                  carray(ptr(job[10]), (Q, N, S), dtype=np.float32),
                  carray(ptr(job[11]), (N, G, r), dtype=np.float32),
                  pairs, skip, job[12], job[13])
    else:
        vjp_units(carray(ptr(job[5]), (Q, N, S), dtype=np.float64),
                  carray(ptr(job[6]), (N, r), dtype=np.float64),
                  carray(ptr(job[7]), (Q, N, S), dtype=np.float64),
                  carray(ptr(job[10]), (Q, N, S), dtype=np.float64),
                  carray(ptr(job[11]), (N, G, r), dtype=np.float64),
                  pairs, skip, job[12], job[13])

@numba.cfunc(ffi.HANDLE_SIG, nopython=True, cache=True)
def _vjp_handle(frame_ptr, create, join, worker, error_args, threads):
    """The VJP custom call: five arguments (``a``, ``c``, ``g``, the heads to skip, the pairs
    flag), two results (``da``, the units' coupling gradients); threads as in :func:`_handle`."""
    frame, done, answer = prologue(frame_ptr, 5, error_args, 2)
    if done:
        return answer
    args = arguments(frame, 5)
    dt = dtype_of(args[0])
    if dt != ffi.F32 and dt != ffi.F64:
        return fail(frame, error_args)
    a, rank, a_dims = buffer(args[0], dt, 3)
    c, c_rank, c_dims = buffer(args[1], dt, 2)
    g, g_rank, _ = buffer(args[2], dt, 3)
    skip, s_rank, _ = buffer(args[3], ffi.PRED, 1)
    pairs, p_rank, _ = buffer(args[4], ffi.S32, 1)
    outs = ffi.results(frame, 2)
    da, da_rank, _ = buffer(outs[0], dt, 3)
    dcp, dcp_rank, _ = buffer(outs[1], dt, 3)
    if (rank != 3 or c_rank != 2 or g_rank != 3 or s_rank != 1 or p_rank != 1 or da_rank != 3
            or dcp_rank != 3):
        return fail(frame, error_args)
    dims = words(a_dims, 3)
    cd = words(c_dims, 2)
    Q, N, S = dims[0], dims[1], dims[2]
    if cd[0] != N or cd[1] < 1:
        return fail(frame, error_args)
    units = N * groups(Q)
    T = min(threads, units)
    if Q * N * S << cd[1] < THREADED_WORK // 4:
        T = 1
    head = np.array([dt, Q, N, S, cd[1], a, c, g, skip, pairs, da, dcp], np.int64)
    ffi.share_units(_run_vjp, head, units, T, create, join, worker)
    return ptr(0)

@numba.cfunc(types.voidptr(types.voidptr), nopython=True, cache=True)
def _vjp_worker(job):
    _run_vjp(carray(job, (_VJP_JOB,), dtype=np.int64))
    return ptr(0)


def transfer_vjp(a, c, g, skip, pairs):
    """The VJP of :func:`transfer_marginals` on the heads within the probability-space
    gradient's range: ``a`` ``(Q, N, S)`` natural fields, ``c`` ``(N, r)``, ``g`` ``(Q, N, S)``
    the upstream gradient scaled to ``max |g| <= 1`` per head, ``skip`` ``(N,)`` bool (heads
    left to the caller: zeros there), ``pairs``: whether the couplings get a gradient. Returns
    ``(da (Q, N, S), dc (N, r))`` (``dc`` zeros without ``pairs``), the numbers of
    ``_banded._vjp_tile`` to float rounding."""
    ffi.register_threaded(VJP_TARGET, _vjp_handle, _vjp_worker)
    a = jnp.asarray(a)
    Q, N, S = a.shape
    r = c.shape[1]
    G = groups(Q)
    if Q * N * S == 0:
        return jnp.zeros_like(a), jnp.zeros((N, r), a.dtype)
    da, dcp = jax.ffi.ffi_call(
        VJP_TARGET, (_vma.result_like(a.shape, a.dtype, a, c, g),
                     _vma.result_like((N, G, r), a.dtype, a, c, g)),
        vmap_method="sequential")(a, jnp.asarray(c, a.dtype), jnp.asarray(g, a.dtype),
                                  jnp.asarray(skip, bool),
                                  jnp.full((1,), int(bool(pairs)), jnp.int32))
    return da, jnp.sum(dcp, axis=1)
