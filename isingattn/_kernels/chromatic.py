"""Chromatic single-site sweeps (Gibbs, Metropolis) of sparse models on the CPU in compiled code.

The sweep of ``SingleSiteSampler._chromatic_sweep`` (:mod:`isingattn.samplers._mcmc`) run for
many sweeps in one numba kernel that XLA calls as a typed FFI custom call (:mod:`.ffi`): the
sites of one colour class update at once, from their neighbours' current values, with the
uniforms of the same xoshiro128** lanes (lane ``l`` of the class's ``l``-th site, every lane
advanced once per class), so the kernel draws what the XLA sweep draws; the update rules are the
samplers' own (``u (1 + e^{-z}) < 1`` for Gibbs, ``u < e^{-beta dE}`` for Metropolis).

Why it is faster: the configuration is held with the chain axis minor, ``(n, chains)``, for the
whole call (the driver's layout is transposed once on entry and once on exit, not per sweep),
a site's field is a few multiply-adds over contiguous rows of chains, the generator and the
update run as loops over chains that the compiler vectorizes, and ``exp`` in float32 is a
polynomial (Cephes' ``expf``, relative error about ``1e-7``) that vectorizes where the math
library's does not; float64 models use the math library's ``exp``. The same ``exp`` rounding is
not promised, so a rare update whose uniform falls within ``1e-7`` of its acceptance probability
can differ from the XLA sweep's. Timings: ``docs/guide/mcmc.md``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numba
import numpy as np
from llvmlite import ir
from numba import carray, types
from numba.extending import intrinsic

from .. import _vma
from . import ffi
from .ffi import arguments, buffer, dtype_of, fail, prologue, ptr, results, words

TARGET = "isingattn_chromatic_sweeps"
GIBBS, METROPOLIS = 0, 1
_JOB = 22  # words of one thread's job
#: Below this much work (chains x sites x sweeps) a call runs on one thread.
THREADED_WORK = 1 << 18
#: Chains per thread at least (a vector of chains per update).
MIN_CHAINS = 16

_OPT = {"nogil": True, "boundscheck": False, "error_model": "numpy", "cache": True}


@intrinsic
def _as_float32(typingctx, bits):
    """The float32 whose bit pattern is the int32 ``bits``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


_LOG2E = np.float32(1.44269504088896341)
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(-2.12194440e-4)
_P0, _P1, _P2 = np.float32(1.9875691500e-4), np.float32(1.3981999507e-3), np.float32(
    8.3334519073e-3)
_P3, _P4, _P5 = np.float32(4.1665795894e-2), np.float32(1.6666665459e-1), np.float32(
    5.0000001201e-1)
_HI, _LO = np.float32(88.72283), np.float32(-87.33654)


@numba.njit(inline="always", **_OPT)
def expf(x):
    """``e^x`` in float32 by Cephes' polynomial: ``inf`` above 88.72, 0 below -87.34 (as the
    float32 ``exp`` overflows and underflows), branch-free within (vectorizable)."""
    big = x > _HI
    small = x < _LO
    x = min(max(x, _LO), _HI)
    k = np.float32(np.floor(x * _LOG2E + np.float32(0.5)))
    r = x - k * _LN2_HI - k * _LN2_LO
    p = ((((_P0 * r + _P1) * r + _P2) * r + _P3) * r + _P4) * r + _P5
    p = p * r * r + r + np.float32(1.0)
    e = p * _as_float32(np.int32((np.int32(k) + 127) << 23))
    if big:
        e = np.float32(np.inf)
    if small:
        e = np.float32(0.0)
    return e


@numba.njit(inline="always", **_OPT)
def _advance(s0, s1, s2, s3, k):
    """One xoshiro128** step of lane ``k`` of the state rows ``s0 .. s3``; returns its 32 bits
    (numba widens uint32 arithmetic to 64 bits: truncated where it matters)."""
    a0, a1, a2, a3 = s0[k], s1[k], s2[k], s3[k]
    v = np.uint32(a1 * np.uint32(5))
    v = np.uint32((v << np.uint32(7)) | (v >> np.uint32(25)))
    r = np.uint32(v * np.uint32(9))
    t = np.uint32(a1 << np.uint32(9))
    a2 ^= a0
    a3 ^= a1
    a1 ^= a2
    a0 ^= a3
    a2 ^= t
    s0[k], s1[k], s2[k] = a0, a1, a2
    s3[k] = np.uint32((a3 << np.uint32(11)) | (a3 >> np.uint32(21)))
    return r


@numba.njit(inline="always", **_OPT)
def _gibbs(x, f, s0, s1, s2, s3, flips, beta, low, high, one, scale, wide):
    spread = high - low
    C = x.shape[0]
    if wide:
        for k in range(C):
            u = np.float32(_advance(s0, s1, s2, s3, k) >> np.uint32(9)) * scale
            e = math.exp(-(beta * f[k] * spread))
            new = high if u * (one + e) < one else low
            flips[k] += new != x[k]
            x[k] = new
    else:
        for k in range(C):
            u = np.float32(_advance(s0, s1, s2, s3, k) >> np.uint32(9)) * scale
            e = expf(-(beta * f[k] * spread))
            new = high if u * (one + e) < one else low
            flips[k] += new != x[k]
            x[k] = new


@numba.njit(inline="always", **_OPT)
def _metropolis(x, f, s0, s1, s2, s3, flips, beta, low, high, scale, wide):
    total = low + high
    C = x.shape[0]
    if wide:
        for k in range(C):
            u = np.float32(_advance(s0, s1, s2, s3, k) >> np.uint32(9)) * scale
            old = x[k]
            flipped = total - old
            e = math.exp(-beta * (-f[k] * (flipped - old)))  # e^{-beta dE}, as the XLA sweep
            new = flipped if u < e else old
            flips[k] += new != old
            x[k] = new
    else:
        for k in range(C):
            u = np.float32(_advance(s0, s1, s2, s3, k) >> np.uint32(9)) * scale
            old = x[k]
            flipped = total - old
            e = expf(-beta * (-f[k] * (flipped - old)))
            new = flipped if u < e else old
            flips[k] += new != old
            x[k] = new


@numba.njit(**_OPT)
def sweep_chains(xt, st, flips, perm, nbr, Jn, h, mask, bounds, beta, num_sweeps, rule, low,
                 high, one, wide, f):
    """``num_sweeps`` chromatic sweeps of all chains, in place.

    ``xt`` ``(n + 1, C)``: the configurations with the chain axis minor and a zero row ``n``
    (the neighbour tables' padding); ``st`` ``(4, lanes, C)`` uint32: the xoshiro128** states;
    ``flips`` ``(C,)``: receives the sum over sweeps of each chain's changed sites; ``perm``
    ``(n,)``: the sites class by class, class ``c`` at ``perm[bounds[c]:bounds[c + 1]]``;
    ``nbr``, ``Jn`` ``(n, D)``: the neighbours (``n`` for padding) and couplings of the site at
    ``perm[p]`` in row ``p``; ``h``, ``mask`` ``(n,)`` likewise; ``rule``: :data:`GIBBS` or
    :data:`METROPOLIS`; ``low``, ``high``: the vartype's values and ``one`` 1, in the
    configurations' dtype; ``wide``: float64 arithmetic (the math library's ``exp``); ``f``
    ``(C,)`` scratch of the configurations' dtype."""
    C = xt.shape[1]
    lanes = st.shape[1]
    D = nbr.shape[1]
    scale = np.float32(1.0 / (1 << 23))
    for _ in range(num_sweeps):
        for c in range(bounds.shape[0] - 1):
            a, b = bounds[c], bounds[c + 1]
            for lane in range(lanes):
                s0, s1, s2, s3 = st[0, lane], st[1, lane], st[2, lane], st[3, lane]
                p = a + lane
                if p >= b or not mask[p]:  # the stream advances as in the XLA sweep
                    for k in range(C):
                        _advance(s0, s1, s2, s3, k)
                    continue
                for k in range(C):
                    f[k] = h[p]
                for d in range(D):
                    row = xt[nbr[p, d]]
                    J = Jn[p, d]
                    for k in range(C):
                        f[k] = f[k] + J * row[k]
                if rule == GIBBS:
                    _gibbs(xt[perm[p]], f, s0, s1, s2, s3, flips, beta, low, high, one, scale,
                           wide)
                else:
                    _metropolis(xt[perm[p]], f, s0, s1, s2, s3, flips, beta, low, high, scale,
                                wide)


@numba.njit(**_OPT)
def run_sweeps(x, s, x_out, s_out, rate, perm, nbr, Jn, h, mask, bounds, sc, num_sweeps,
               rule, wide):
    """The driver's layout in and out: ``x`` ``(C, n)``, ``s`` ``(4, C, lanes)``; ``sc``: beta,
    the vartype's low and high values, the number of active sites and 1, in the configurations'
    dtype; ``rate`` ``(C,)`` receives the sum over sweeps of the fraction of active sites
    changed."""
    C, n = x.shape
    lanes = s.shape[2]
    xt = np.zeros((n + 1, C), x.dtype)
    st = np.empty((4, lanes, C), np.uint32)
    for i in range(n):
        for k in range(C):
            xt[i, k] = x[k, i]
    for j in range(4):
        for lane in range(lanes):
            for k in range(C):
                st[j, lane, k] = s[j, k, lane]
    flips = np.zeros(C, np.int64)
    f = np.empty(C, x.dtype)
    sweep_chains(xt, st, flips, perm, nbr, Jn, h, mask, bounds, sc[0], num_sweeps, rule, sc[1],
                 sc[2], sc[4], wide, f)
    for k in range(C):
        for i in range(n):
            x_out[k, i] = xt[i, k]
        for j in range(4):
            for lane in range(lanes):
                s_out[j, k, lane] = st[j, lane, k]
        rate[k] = flips[k] / sc[3]


@numba.njit(nogil=True, cache=True)
def _run(job):
    """One thread's share: ``job`` = [wide, C, n, lanes, D, classes, num_sweeps, rule, x, s,
    x out, s out, rate, perm, nbr, Jn, h, mask, bounds, scalars, c0, c1]: the chains
    ``c0 .. c1 - 1``."""
    C, n, lanes, D, ncls, num_sweeps, rule = job[1], job[2], job[3], job[4], job[5], job[6], job[7]
    c0, c1 = job[20], job[21]
    s = carray(ptr(job[9]), (4, C, lanes), dtype=np.uint32)[:, c0:c1]
    s_out = carray(ptr(job[11]), (4, C, lanes), dtype=np.uint32)[:, c0:c1]
    perm = carray(ptr(job[13]), (n,), dtype=np.int32)
    nbr = carray(ptr(job[14]), (n, D), dtype=np.int32)
    mask = carray(ptr(job[17]), (n,), dtype=np.bool_)
    bounds = carray(ptr(job[18]), (ncls + 1,), dtype=np.int32)
    if job[0]:
        sc = carray(ptr(job[19]), (5,), dtype=np.float64)
        run_sweeps(carray(ptr(job[8]), (C, n), dtype=np.float64)[c0:c1], s,
                   carray(ptr(job[10]), (C, n), dtype=np.float64)[c0:c1], s_out,
                   carray(ptr(job[12]), (C,), dtype=np.float64)[c0:c1], perm, nbr,
                   carray(ptr(job[15]), (n, D), dtype=np.float64),
                   carray(ptr(job[16]), (n,), dtype=np.float64), mask, bounds, sc, num_sweeps,
                   rule, True)
    else:
        sc = carray(ptr(job[19]), (5,), dtype=np.float32)
        run_sweeps(carray(ptr(job[8]), (C, n), dtype=np.float32)[c0:c1], s,
                   carray(ptr(job[10]), (C, n), dtype=np.float32)[c0:c1], s_out,
                   carray(ptr(job[12]), (C,), dtype=np.float32)[c0:c1], perm, nbr,
                   carray(ptr(job[15]), (n, D), dtype=np.float32),
                   carray(ptr(job[16]), (n,), dtype=np.float32), mask, bounds, sc, num_sweeps,
                   rule, False)


@numba.cfunc(ffi.HANDLE_SIG, nopython=True, cache=True)
def _handle(frame_ptr, create, join, worker, error_args, threads):
    """The custom call: arguments ``x`` ``(C, n)``, ``s`` ``(4, C, lanes)`` uint32, ``perm``,
    ``nbr``, ``Jn``, ``h``, ``mask``, ``bounds``, the scalars ``(beta, low, high, active, 1)``
    in the configurations' dtype and ``(num_sweeps, rule)`` int32; results ``x``, ``s`` and the
    rate sums ``(C,)``. The chains are shared out among threads."""
    frame, done, answer = prologue(frame_ptr, 10, error_args, 3)
    if done:
        return answer
    args = arguments(frame, 10)
    rets = results(frame, 3)
    dt = dtype_of(args[0])
    if dt != ffi.F32 and dt != ffi.F64:
        return fail(frame, error_args)
    x, x_rank, x_dims = buffer(args[0], dt, 2)
    s, s_rank, s_dims = buffer(args[1], ffi.U32, 3)
    perm, p_rank, _ = buffer(args[2], ffi.S32, 1)
    nbr, n_rank, n_dims = buffer(args[3], ffi.S32, 2)
    Jn, j_rank, _ = buffer(args[4], dt, 2)
    h, h_rank, _ = buffer(args[5], dt, 1)
    mask, m_rank, _ = buffer(args[6], ffi.PRED, 1)
    bounds, b_rank, b_dims = buffer(args[7], ffi.S32, 1)
    scal, c_rank, _ = buffer(args[8], dt, 1)
    ints, i_rank, _ = buffer(args[9], ffi.S32, 1)
    xo, xo_rank, _ = buffer(rets[0], dt, 2)
    so, so_rank, _ = buffer(rets[1], ffi.U32, 3)
    rate, r_rank, _ = buffer(rets[2], dt, 1)
    if (x_rank != 2 or s_rank != 3 or p_rank != 1 or n_rank != 2 or j_rank != 2
            or h_rank != 1 or m_rank != 1 or b_rank != 1 or c_rank != 1 or i_rank != 1
            or xo_rank != 2 or so_rank != 3 or r_rank != 1):
        return fail(frame, error_args)
    xd, sd, nd = words(x_dims, 2), words(s_dims, 3), words(n_dims, 2)
    C, n = xd[0], xd[1]
    iv = carray(ptr(ints), (2,), dtype=np.int32)
    if (sd[0] != 4 or sd[1] != C or nd[0] != n or iv[0] < 0
            or (iv[1] != GIBBS and iv[1] != METROPOLIS)):
        return fail(frame, error_args)
    T = min(threads, C // MIN_CHAINS)
    if C * n * max(iv[0], 1) < THREADED_WORK:
        T = 1
    head = np.array([dt == ffi.F64, C, n, sd[2], nd[1], words(b_dims, 1)[0] - 1, iv[0], iv[1],
                     x, s, xo, so, rate, perm, nbr, Jn, h, mask, bounds, scal], np.int64)
    ffi.share_units(_run, head, C, max(T, 1), create, join, worker)
    return ptr(0)


@numba.cfunc(types.voidptr(types.voidptr), nopython=True, cache=True)
def _worker(job):
    _run(carray(job, (_JOB,), dtype=np.int64))
    return ptr(0)


def _register():
    return ffi.register_threaded(TARGET, _handle, _worker)


def chromatic_sweeps(x, s, perm, nbr, Jn, h, mask, bounds, beta, num_sweeps, *, rule, low,
                     high, active):
    """``num_sweeps`` chromatic sweeps of the chains of one sparse model, in one compiled call.

    Args:
      x: ``(C, n)`` float32 or float64 configurations; s: 4 uint32 arrays ``(C, lanes)`` (the
        xoshiro128** states, ``lanes`` at least the largest class).
      perm, bounds: int32, the sites class by class (class ``c`` at
        ``perm[bounds[c]:bounds[c + 1]]``); nbr ``(n, D)`` int32 and Jn ``(n, D)``: the
        neighbours (``n`` pads) and couplings of site ``perm[p]`` in row ``p``; h, mask ``(n,)``
        in the same order.
      beta: scalar; num_sweeps: int32 scalar (may be traced); rule: :data:`GIBBS` or
        :data:`METROPOLIS`; low, high: the vartype's values; active: the unmasked sites.

    Returns ``(x, s, rate_sum)``: the configurations and states after the sweeps, and per chain
    the sum over sweeps of the fraction of active sites that changed."""
    _register()
    dt = x.dtype
    C, n = x.shape
    lanes = s[0].shape[1]
    S = jnp.stack(s)
    scal = jnp.stack([jnp.asarray(beta, dt), jnp.asarray(low, dt), jnp.asarray(high, dt),
                      jnp.asarray(active, dt), jnp.ones((), dt)])
    ints = jnp.stack([jnp.asarray(num_sweeps, jnp.int32), jnp.int32(rule)])
    ins = (x, S, jnp.asarray(perm, jnp.int32), jnp.asarray(nbr, jnp.int32),
           jnp.asarray(Jn, dt), jnp.asarray(h, dt), jnp.asarray(mask, bool),
           jnp.asarray(bounds, jnp.int32), scal, ints)
    shapes = [((C, n), dt), ((4, C, lanes), jnp.uint32), ((C,), dt)]
    xo, so, rate = jax.ffi.ffi_call(
        TARGET, [_vma.result_like(sh, d, x) for sh, d in shapes],
        vmap_method="sequential")(*ins)
    return xo, tuple(so[j] for j in range(4)), rate
