"""Marginals of banded chains on the CPU in compiled code, called from inside XLA programs.

The forward pass of the ``transfer`` method (:func:`~isingattn.attention._banded.
banded_chain_marginals`) as one numba kernel, handed to XLA as a typed FFI custom call
(:mod:`.ffi`). Same algorithm and numbers as the JAX kernel
(:func:`~isingattn.attention._banded._marginals_tile`): messages over the ``2^r`` windows, the
factors scaled to bounded steps, renormalized once per block of ``min(8, r)`` keys, forward
messages kept at block ends and the block's marginals read from them and the backward message at
the block end. Heads whose couplings are beyond the fast limit take the log-domain path of
:func:`~isingattn.attention._banded._log_marginals_tile` (:func:`_log_unit`) and get ``log m``.

Why it is faster on the CPU: a unit of work is one head and :data:`LANES` queries, whose
messages (``2^r x LANES`` numbers) stay in the core's cache for the whole chain, where XLA
streams every step's messages through memory and runs one small kernel per step; and the units
are shared out among threads of the kernel's own (``pthread_create`` from the handler, joined
before it returns), where XLA's CPU runtime runs a recursion on one thread and the two lanes of
:mod:`isingattn.attention._banded` keep both cores busy only part of the time. Timings (the
forward pass of ``bench_attention.py``'s T = 512 workload) are in ``docs/guide/attention.md``
and ``docs/guide/transfer.md``.

Only the forward pass is here; the gradient stays the JAX one (its ``custom_vjp`` needs only the
fields and couplings); :func:`.ffi.resolve_backend` decides whether it runs. Every function is
cached on disk by numba; the handler XLA calls is a few instructions compiled per process that
pass this process's addresses to the cached :func:`_handle`.
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
#: Queries of one head processed together: the last (contiguous) axis of every message. Shorter
#: rows cost more per number (figures in ``docs/guide/transfer.md``).
LANES = 64
#: Threads of one call at most (the calling thread included).
MAX_THREADS = ffi.MAX_THREADS
#: Below this many state updates (queries x heads x keys x 2^r) a call runs on one thread.
THREADED_WORK = 1 << 24

_OPT = {"nogil": True, "boundscheck": False, "fastmath": True, "error_model": "numpy",
        "cache": True}

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
def _readout(end, beta, rev, acc, tmp, r, K):
    # acc[i] = sum over windows with key i of the block set, acc[K] = sum over all windows
    # (key i of the block is bit r - K + i of the window after the block's last key;
    # rev: the bit reversal of the state index)
    L = end.shape[1]
    acc[:, :] = 0
    for w in range(end.shape[0]):
        ew = end[w]
        bw = beta[rev[w]]  # beta is kept bit-reversed
        for q in range(L):
            tmp[q] = ew[q] * bw[q]
        z = acc[K]
        for q in range(L):
            z[q] += tmp[q]
        for i in range(K):
            if (w >> (r - K + i)) & 1:
                ai = acc[i]
                for q in range(L):
                    ai[q] += tmp[q]

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
def marginals_units(a, c, out, fast_limit, u0, u1):
    """Marginals ``out`` ``(Q, N, S)`` of the chains with fields ``a`` ``(Q, N, S)``
    (``-inf`` = held at 0) and couplings ``c`` ``(N, r)``, for the units ``u0 .. u1 - 1``
    (unit ``u``: head ``u // G``, queries ``(u % G) * LANES`` onwards, ``G`` groups of
    :data:`LANES` queries per head); on the heads with ``sum_d |c_nd| > fast_limit``,
    their logarithms, by the log-domain path (:func:`_log_unit`)."""
    Q, S = a.shape[0], a.shape[2]
    r = c.shape[1]
    R = 1 << r
    K = min(8, r)
    nb = (S + K - 1) // K
    L = LANES
    G = (Q + L - 1) // L
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
            for w in range(R // 2):  # the halves of the bit-reversed table
                C_lo[w] = C[rev[w]]
                C_hi[w] = C[rev[w + R // 2]]
                lC_lo[w] = lC[rev[w]]
                lC_hi[w] = lC[rev[w + R // 2]]
            strong = cmax - cmin > fast_limit
            ecm = math.exp(cmin - cmax)
        if strong:
            _log_unit(a, out, n, q0, nq, cmax, lC, lC_lo, lC_hi, rev, r, K, nb,
                      F0, F1, ends, buf, acc, mx, tmp)
            continue
        for k in range(nb * K):  # per-step factors, scaled to bounded steps
            for q in range(L):
                ap = a[q0 + q, n, k] + cmax if (k < S and q < nq) else -np.inf
                e = math.exp(-abs(ap))  # exp(min(ap, 0)) or exp(-max(ap, 0)): one exp
                f1 = e if ap <= 0 else 1.0
                f0 = 1.0 if ap <= 0 else e
                g = 1.0 / math.sqrt((f0 + f1 * ecm) * (f0 + f1))
                F0[k, q] = f0 * g
                F1[k, q] = f1 * g
        cur = 0
        buf[0, :, :] = 0
        buf[0, 0, :] = 1  # before the first key: every window entry 0
        for b in range(nb):
            for i in range(K):
                k = b * K + i
                _forward_step(buf[cur], buf[1 - cur], C, F0[k], F1[k])
                cur = 1 - cur
            _normalize(buf[cur], tmp)
            ends[b] = buf[cur]
        buf[cur, :, :] = 1
        for b in range(nb - 1, -1, -1):
            _readout(ends[b], buf[cur], rev, acc, tmp, r, K)
            for i in range(K):
                k = b * K + i
                if k < S:
                    for q in range(nq):
                        out[q0 + q, n, k] = acc[i, q] / acc[K, q]
            for i in range(K - 1, -1, -1):
                k = b * K + i
                _backward_step(buf[cur], buf[1 - cur], C_lo, C_hi, F0[k], F1[k])
                cur = 1 - cur
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
    units = N * ((Q + LANES - 1) // LANES)
    T = min(threads, units)
    if Q * N * S << cd[1] < THREADED_WORK:
        T = 1
    jobs = np.empty((max(T, 1), 11), np.int64)
    for t in range(T):
        jobs[t, 0] = dt
        jobs[t, 1] = Q
        jobs[t, 2] = N
        jobs[t, 3] = S
        jobs[t, 4] = cd[1]
        jobs[t, 5] = a
        jobs[t, 6] = c
        jobs[t, 7] = out
        jobs[t, 8] = limit
        jobs[t, 9] = units * t // T
        jobs[t, 10] = units * (t + 1) // T
    ffi.share_out(_run, jobs, T, create, join, worker)
    return ptr(0)

@numba.cfunc(types.voidptr(types.voidptr), nopython=True, cache=True)
def _worker(job):
    _run(carray(job, (11,), dtype=np.int64))
    return ptr(0)


def _compile_handler():
    return ffi.threaded_handler(_handle, _worker, MAX_THREADS)


def _register():
    return ffi.register(TARGET, _compile_handler)


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
