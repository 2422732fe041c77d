"""Forward-backward over the windows of a banded chain on the CPU in compiled code.

The recursions of :mod:`isingattn.exact._transfer` (``_forward``, and ``_backward`` without
pair correlations) for the bit form ``log w(b) = sum_j [(1 - b_j) z_j + b_j (a_j + sum_t
win[j, t] b_{j-r+t})]``, as one numba kernel that XLA calls as a typed FFI custom call
(:mod:`.ffi`): ``log Z`` of every problem, and optionally the marginals ``P(b_j = 1)`` and the
mean log-weight ``<log w>``.

Probabilities, not logarithms: each message is kept in float64, scaled so that its largest
entry is 1 (the logarithms of the scales add up to ``log Z``), and each step's weights are
``exp`` of the log-weights less their largest value at that position; the window couplings'
weights ``exp(U[s])`` over the ``2^r`` windows are a product table built by doubling (no ``exp``
per window). A step is then a few multiplications per window state, which the compiler
vectorizes, where the log domain needs a ``log1p(exp)`` per state. The price is float64's range:
an entry below ``e^-745`` of its message's largest is lost, which changes ``Z`` by at most
``e^(2C - 745)`` relative, ``C`` the largest total ``|coupling|`` across any cut of the chain
(no window can gain more than ``e^C`` over another from the rest of the chain).
:func:`chain_safe` is that condition with a wide margin (``C <= CUT_LIMIT``), which the caller
checks before using the kernel and otherwise keeps the log-domain JAX recursions.

For the backward pass the forward messages are checkpointed every ``k ~ sqrt(n)`` positions
and recomputed a segment at a time (scratch ``~2 sqrt(n) 2^r`` float64 per thread, where the JAX
recursions keep ``n 2^r``); the problems are shared out among threads of the kernel's own
(:func:`.ffi.share_units`). Timings: ``docs/guide/transfer.md``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numba
import numpy as np
from numba import carray, types

from .. import _vma
from .._constants import BIG
from . import ffi
from .ffi import arguments, buffer, dtype_of, fail, lead, prologue, ptr, results, words

TARGET = "isingattn_transfer_chain"
#: The largest total ``|coupling|`` (bit form, times beta) across any cut of the chain for which
#: the kernel is used: the relative error it can make is below ``e^(2 CUT_LIMIT - 745)``.
CUT_LIMIT = 250.0
#: Below this much work (problems x positions x window states) a call runs on one thread.
THREADED_WORK = 1 << 20
_BIG_HALF = BIG / 2  # a log-weight below -BIG/2 is "excluded"
_JOB = 14  # words of one thread's job

_OPT = {"nogil": True, "boundscheck": False, "fastmath": True, "error_model": "numpy",
        "cache": True}


@numba.njit(**_OPT)
def _tables(w, r, E, U, want_u):
    """Fill ``E[s] = exp(U[s] - u_max)`` for the ``2^r`` windows ``s``, where ``U[s] = sum of
    w[t] over the set bits t of s`` (also written to ``U`` when ``want_u``) and ``u_max = sum of
    the positive w[t]`` (returned): every entry is at most 1, built by doubling."""
    u_max = 0.0
    for t in range(r):
        if w[t] > 0:
            u_max += w[t]
    E[0] = 1.0
    U[0] = 0.0
    size = 1
    for t in range(r):
        wt = w[t]
        if wt > 0:
            g, h = 1.0, math.exp(-wt)
        else:
            g, h = math.exp(wt), 1.0
        for s in range(size):
            e = E[s]
            E[s + size] = e * g
            E[s] = e * h
        if want_u:
            for s in range(size):
                U[s + size] = U[s] + wt
        size *= 2
    return u_max


@numba.njit(inline="always", **_OPT)
def _weights(a_j, z_j, u_max, scale):
    """``(ea, ez, shift)``: the weights of ``b_j = 1`` (times ``E[s]``) and ``b_j = 0`` less
    their largest log-weight ``shift`` at this position, times ``scale``."""
    top = a_j + u_max
    shift = max(z_j, top)
    return scale * math.exp(top - shift), scale * math.exp(z_j - shift), shift


@numba.njit(inline="always", **_OPT)
def _forward_step(cur, nxt, ea, ez, E, H):
    """``nxt`` = the message after one position from ``cur``; returns its largest entry."""
    top = 0.0
    for rest in range(H):
        x0, x1 = cur[2 * rest], cur[2 * rest + 1]
        v0 = ez * (x0 + x1)
        v1 = ea * (x0 * E[2 * rest] + x1 * E[2 * rest + 1])
        nxt[rest] = v0
        nxt[H + rest] = v1
        top = max(top, max(v0, v1))
    return top


@numba.njit(**_OPT)
def chain_problem(a, z, win, marginals, want_energy, E, U, ck, seg, beta, prev, m):
    """One problem: ``a``, ``z`` ``(n,)`` and ``win`` ``(n, r)`` as the module doc; float64
    scratch ``E``, ``U``, ``beta``, ``prev`` ``(2^r,)``, and ``ck`` ``(ceil(n / k), 2^r)``,
    ``seg`` ``(max(k, 2), 2^r)`` for a segment length ``k``. With ``marginals`` the backward
    pass writes ``m[j] = P(b_j = 1)``. Returns ``(log Z, <log w>)`` (the second 0 unless
    ``want_energy``).

    Every message is the previous one scaled by the inverse of its largest entry (folded into
    the step's weights, no pass of its own). The forward pass keeps the message before every
    ``k``-th position (``ck``); the backward pass recomputes a segment's ``k`` messages from its
    checkpoint into ``seg`` (in cache) before walking back through it: memory
    ``(n / k + k) 2^r`` instead of ``n 2^r``, for one more forward pass."""
    n, r = win.shape[0], win.shape[1]
    S = 1 << r
    H = S >> 1
    k = seg.shape[0]
    cur, nxt = seg[0], seg[1]
    for s in range(S):
        cur[s] = 0.0
    cur[0] = 1.0  # the r dummy bits before the chain are 0
    top = 1.0
    logz = 0.0
    for j in range(n):
        if marginals and j % k == 0:
            ck[j // k, :] = cur
        ea, ez, shift = _weights(a[j], z[j], _tables(win[j], r, E, U, False), 1.0 / top)
        logz += shift + math.log(top)
        top = _forward_step(cur, nxt, ea, ez, E, H)
        cur, nxt = nxt, cur
    total = 0.0
    for s in range(S):
        total += cur[s]
    logz += math.log(total)
    if not marginals:
        return logz, 0.0
    elog = 0.0
    for s in range(S):
        beta[s] = 1.0  # nothing to the right of the last window
    btop = 1.0
    for c in range((n + k - 1) // k - 1, -1, -1):
        j0 = c * k
        j1 = min(n, j0 + k)
        seg[0, :] = ck[c]
        top = 0.0
        for s in range(S):
            top = max(top, seg[0, s])
        for j in range(j0, j1 - 1):
            ea, ez, _ = _weights(a[j], z[j], _tables(win[j], r, E, U, False), 1.0 / top)
            top = _forward_step(seg[j - j0], seg[j - j0 + 1], ea, ez, E, H)
        for j in range(j1 - 1, j0 - 1, -1):
            alpha = seg[j - j0]
            ea, ez, _ = _weights(a[j], z[j], _tables(win[j], r, E, U, want_energy), 1.0 / btop)
            zj = 0.0
            w1 = 0.0
            wu = 0.0
            btop = 0.0
            for rest in range(H):
                b0, b1 = ez * beta[rest], ea * beta[H + rest]
                t0, t1 = b1 * E[2 * rest], b1 * E[2 * rest + 1]
                p0, p1 = b0 + t0, b0 + t1
                prev[2 * rest] = p0
                prev[2 * rest + 1] = p1
                al0, al1 = alpha[2 * rest], alpha[2 * rest + 1]
                zj += al0 * p0 + al1 * p1
                w1 += al0 * t0 + al1 * t1
                if want_energy:
                    wu += al0 * t0 * U[2 * rest] + al1 * t1 * U[2 * rest + 1]
                btop = max(btop, max(p0, p1))
            m[j] = w1 / zj
            if want_energy:
                aj = a[j] if a[j] > -_BIG_HALF else 0.0
                zz = z[j] if z[j] > -_BIG_HALF else 0.0
                elog += ((zj - w1) * zz + w1 * aj + wu) / zj
            beta, prev = prev, beta
    return logz, elog


@numba.njit(**_OPT)
def chain_problems(a, z, win, logz, m, elog, marginals, want_energy, u0, u1):
    """Problems ``u0 .. u1 - 1`` of ``a``, ``z`` ``(B, P, n)``, ``win`` ``(B, n, r)`` (problem
    ``u`` is ``(u // P, u % P)``): ``logz`` ``(B, P)``, and with ``marginals`` the marginals
    ``m`` ``(B, P, n)`` and, with ``want_energy``, ``elog`` ``(B, P)``. Scratch per call:
    ``(ceil(n / k) + k + 6) 2^r`` float64, ``k`` about ``sqrt(n)``."""
    P, n, r = a.shape[1], win.shape[1], win.shape[2]
    S = 1 << r
    k = max(1, np.int64(np.sqrt(max(n - 1, 0))) + 1)
    E, U, beta, prev = np.empty(S), np.empty(S), np.empty(S), np.empty(S)
    ck = np.empty(((n + k - 1) // k if marginals else 0, S))
    seg = np.empty((max(k, 2), S))
    aj, zj = np.empty(n), np.empty(n)
    wj = np.empty((n, r))
    mj = np.empty(n)
    for u in range(u0, u1):
        b, p = u // P, u % P
        for j in range(n):
            aj[j] = a[b, p, j]
            zj[j] = z[b, p, j]
            for t in range(r):
                wj[j, t] = win[b, j, t]
        lz, el = chain_problem(aj, zj, wj, marginals, want_energy, E, U, ck, seg, beta, prev,
                               mj)
        logz[b, p] = lz
        if marginals:
            for j in range(n):
                m[b, p, j] = mj[j]
            elog[b, p] = el


@numba.njit(nogil=True, cache=True)
def _run(job):
    """One thread's share: ``job`` = [dtype, B, P, n, r, a, z, win, logz, m, elog, flags
    (marginals, energy), u0, u1]."""
    B, P, n, r = job[1], job[2], job[3], job[4]
    marginals, want_energy = (job[11] & 1) != 0, (job[11] & 2) != 0
    nm = n if marginals else 0
    if job[0] == ffi.F32:
        chain_problems(carray(ptr(job[5]), (B, P, n), dtype=np.float32),
                       carray(ptr(job[6]), (B, P, n), dtype=np.float32),
                       carray(ptr(job[7]), (B, n, r), dtype=np.float32),
                       carray(ptr(job[8]), (B, P), dtype=np.float32),
                       carray(ptr(job[9]), (B, P, nm), dtype=np.float32),
                       carray(ptr(job[10]), (B, P), dtype=np.float32), marginals,
                       want_energy, job[12], job[13])
    else:
        chain_problems(carray(ptr(job[5]), (B, P, n), dtype=np.float64),
                       carray(ptr(job[6]), (B, P, n), dtype=np.float64),
                       carray(ptr(job[7]), (B, n, r), dtype=np.float64),
                       carray(ptr(job[8]), (B, P), dtype=np.float64),
                       carray(ptr(job[9]), (B, P, nm), dtype=np.float64),
                       carray(ptr(job[10]), (B, P), dtype=np.float64), marginals,
                       want_energy, job[12], job[13])


@numba.cfunc(ffi.HANDLE_SIG, nopython=True, cache=True)
def _handle(frame_ptr, create, join, worker, error_args, threads):
    """The custom call: check the frame (four arguments: ``a``, ``z``, ``win``, the flags
    marginals + 2 energy; three results: ``log Z``, marginals, ``<log w>``), share the problems
    out among threads and run them."""
    frame, done, answer = prologue(frame_ptr, 4, error_args, 3)
    if done:
        return answer
    args = arguments(frame, 4)
    rets = results(frame, 3)
    dt = dtype_of(args[0])
    if dt != ffi.F32 and dt != ffi.F64:
        return fail(frame, error_args)
    a, a_rank, a_dims = buffer(args[0], dt, 2)
    z, z_rank, z_dims = buffer(args[1], dt, 2)
    win, w_rank, w_dims = buffer(args[2], dt, 2)
    flag, f_rank, _ = buffer(args[3], ffi.S32, 0)
    logz, l_rank, _ = buffer(rets[0], dt, 1)
    m, m_rank, m_dims = buffer(rets[1], dt, 2)
    elog, e_rank, _ = buffer(rets[2], dt, 1)
    rank = a_rank
    if (rank < 2 or z_rank != rank or w_rank != rank or f_rank != 0 or l_rank != rank - 1
            or m_rank != rank or e_rank != rank - 1):
        return fail(frame, error_args)
    ad, zd, wd, md = words(a_dims, rank), words(z_dims, rank), words(w_dims, rank), words(
        m_dims, rank)
    P, n, r = ad[rank - 2], ad[rank - 1], wd[rank - 1]
    B = lead(ad, rank, 2)
    flags = carray(ptr(flag), (1,), dtype=np.int32)[0]
    if (r < 1 or r > 30 or zd[rank - 2] != P or zd[rank - 1] != n or wd[rank - 2] != n
            or lead(zd, rank, 2) != B or lead(wd, rank, 2) != B or flags < 0 or flags > 3
            or md[rank - 1] != (n if flags & 1 else 0)):
        return fail(frame, error_args)
    units = B * P
    T = min(threads, units)
    if units * max(n, 1) * (1 << r) < THREADED_WORK:
        T = 1
    head = np.array([dt, B, P, n, r, a, z, win, logz, m, elog, flags], np.int64)
    ffi.share_units(_run, head, units, T, create, join, worker)
    return ptr(0)


@numba.cfunc(types.voidptr(types.voidptr), nopython=True, cache=True)
def _worker(job):
    _run(carray(job, (_JOB,), dtype=np.int64))
    return ptr(0)


def _register():
    return ffi.register_threaded(TARGET, _handle, _worker)


def chain_safe(win):
    """Whether the kernel's float64 range is enough for couplings ``win`` ``(..., n, r)`` (bit
    form, times beta): every total ``|coupling|`` across a cut of the chain is finite and at
    most :data:`CUT_LIMIT` (bounded above by the sum of ``|win|`` over the ``r`` positions
    after the cut). A traced boolean scalar over the whole batch."""
    rows = jnp.sum(jnp.abs(win), axis=-1)  # (..., n)
    r = win.shape[-1]
    c = jnp.cumsum(rows, axis=-1)
    c = jnp.concatenate([jnp.zeros(c.shape[:-1] + (1,), c.dtype), c], axis=-1)
    n = rows.shape[-1]
    hi = jnp.minimum(np.arange(n) + r, n)
    cuts = jnp.take(c, hi, axis=-1) - c[..., :n]
    return jnp.all(jnp.isfinite(rows)) & (jnp.max(cuts, initial=0.0) <= CUT_LIMIT)


def chain_moments(a, z, win, *, marginals, energy):
    """``log Z`` (and optionally marginals and ``<log w>``) of the banded chains, one compiled
    call.

    Args:
      a, z: ``(B, P, n)`` float32 or float64: the log-weights of ``b_j = 1`` (without couplings)
        and of ``b_j = 0`` (``-BIG`` for an excluded value).
      win: ``(B, n, r)``, same dtype: the couplings of ``b_j`` to the window before it (bit
        ``t`` of the window is ``b_{j-r+t}``), shared by the ``P`` problems of a row.
      marginals: also return ``P(b_j = 1)`` ``(B, P, n)``; energy: also ``<log w>`` ``(B, P)``
        (needs ``marginals``).

    Returns ``(log Z (B, P), marginals or None, <log w> or None)`` in the input dtype, computed
    in float64. Exact where :func:`chain_safe` holds (the caller's check); raises
    ``ValueError`` for mismatched shapes or another dtype."""
    _register()
    a, z, win = jnp.asarray(a), jnp.asarray(z), jnp.asarray(win)
    dt = a.dtype
    if dt not in (jnp.float32, jnp.float64) or z.dtype != dt or win.dtype != dt:
        raise ValueError(f"a, z and win must be float32 or float64 alike; got {a.dtype}, "
                         f"{z.dtype}, {win.dtype}")
    if (a.ndim != 3 or z.shape != a.shape or win.ndim != 3 or win.shape[:2] != (a.shape[0],
                                                                               a.shape[2])):
        raise ValueError(f"a, z must be (B, P, n) and win (B, n, r); got a {a.shape}, z "
                         f"{z.shape}, win {win.shape}")
    if energy and not marginals:
        raise ValueError("energy=True needs marginals=True (one backward pass gives both)")
    B, P, n = a.shape
    r = win.shape[2]
    if not 1 <= r <= 30:
        raise ValueError(f"the window size r = win.shape[-1] must be in 1..30; got {r}")
    shapes = [((B, P), dt), ((B, P, n if marginals else 0), dt), ((B, P), dt)]
    flags = jnp.int32(int(bool(marginals)) + 2 * int(bool(energy)))
    logz, m, elog = jax.ffi.ffi_call(
        TARGET, [_vma.result_like(s, d, a, z, win) for s, d in shapes],
        vmap_method="sequential")(a, z, win, flags)
    return logz, (m if marginals else None), (elog if energy else None)
