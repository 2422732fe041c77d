"""Simulated annealing of dense models on the CPU in compiled code, called from inside XLA.

The anneal of :func:`isingattn.samplers.anneal` for dense models (``backend="numba"``): the same
sweep order (the variables ``0 .. n-1`` in turn), acceptance rules and local fields
``f_i = h_i + sum_j J_ij x_j``, as one numba kernel that XLA calls as a typed FFI custom call
(:mod:`.ffi`). It draws its own random numbers: one xoshiro128** generator per read, seeded from
the model's two seed words and the read's index (splitmix64), advanced once per proposal. The
reads of one key therefore differ from the JAX path's (which draws Threefry numbers), but
follow the same distribution, and they do not depend on the number of threads.

Why it is faster: the reads of a model are processed in groups of :data:`CHUNK` held with the
read axis minor, so a proposal is one vectorized pass over the group (generator, ``exp`` by the
polynomial of :mod:`.chromatic`, comparison) and a flip's field update is one multiply-add per
variable over the group, all in the core's cache for the whole anneal; a variable at which no
read of the group flips costs no field update (most of the cold end). The groups are shared out
among threads of the kernel's own (:func:`.ffi.share_units`). Timings:
``docs/guide/annealing.md``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numba
import numpy as np
from numba import carray, types
from numba.extending import overload

from .. import _vma
from . import ffi
from .chromatic import _advance, expf
from .ffi import arguments, buffer, dtype_of, fail, prologue, ptr, results, words

TARGET = "isingattn_simulated_annealing"
_JOB = 17  # words of one thread's job
#: Reads of one model swept together (the vector of one proposal).
CHUNK = 64
#: Below this much work (reads x variables x sweeps) a call runs on one thread.
THREADED_WORK = 1 << 18

_OPT = {"nogil": True, "boundscheck": False, "error_model": "numpy", "cache": True}


@numba.njit(inline="always", **_OPT)
def _splitmix(z):
    """splitmix64: the next state ``z`` and its 64-bit output."""
    z = np.uint64(z + np.uint64(0x9E3779B97F4A7C15))
    y = np.uint64((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9))
    y = np.uint64((y ^ (y >> np.uint64(27))) * np.uint64(0x94D049BB133111EB))
    return z, np.uint64(y ^ (y >> np.uint64(31)))


@numba.njit(**_OPT)
def seed_reads(st, seed0, seed1, r0):
    """The xoshiro128** states ``st`` ``(4, C)`` of the reads ``r0 .. r0 + C - 1`` of a model
    with seed words ``seed0``, ``seed1``: splitmix64 from the seed and the read's index (a
    state of four zero words, which xoshiro cannot leave, has probability 2^-128)."""
    base = (np.uint64(seed0) << np.uint64(32)) | np.uint64(seed1)
    for k in range(st.shape[1]):
        z = np.uint64(base ^ np.uint64((r0 + k) * 0xD1B54A32D192ED03))
        z, a = _splitmix(z)
        z, b = _splitmix(z)
        st[0, k] = np.uint32(a & np.uint64(0xFFFFFFFF))
        st[1, k] = np.uint32(a >> np.uint64(32))
        st[2, k] = np.uint32(b & np.uint64(0xFFFFFFFF))
        st[3, k] = np.uint32(b >> np.uint64(32)) | np.uint32(1)


def _exp(z):
    """``e^z`` in the precision of ``z`` (compiled code only): :func:`.chromatic.expf` for
    float32 (vectorizable), the math library's for float64."""
    return math.exp(z)


@overload(_exp, inline="always")
def _exp_typed(z):
    if isinstance(z, types.Float) and z.bitwidth == 32:
        return lambda z: expf(z)
    return lambda z: math.exp(z)


@numba.njit(inline="always", **_OPT)
def _propose(x, f, d, s0, s1, s2, s3, flips, b, g, one):
    """The proposals at one variable for a group of reads, one vectorized loop: spin ``x``,
    field ``f``, schedule value ``b``; a flip (energy change ``dE = 2 x f``) is accepted iff
    ``u (g + e^{b dE}) < 1`` with ``u`` uniform on (0, 1): Metropolis (``g = 0``: ``u <
    e^{-b dE}``) or Gibbs (``g = 1``: ``u < 1 / (1 + e^{b dE})``). ``d`` receives each read's
    change of spin (0 or -2 x), ``x`` and ``flips`` are updated; returns how many reads
    flipped."""
    moved = 0
    scale = np.float32(1.0 / (1 << 23))
    half = np.float32(0.5)
    for k in range(x.shape[0]):
        u = (np.float32(_advance(s0, s1, s2, s3, k) >> np.uint32(9)) + half) * scale
        xk = x[k]
        ok = u * (g + _exp(b * (xk + xk) * f[k])) < one
        dk = -(xk + xk) if ok else xk - xk
        d[k] = dk
        x[k] = xk + dk
        flips[k] += ok
        moved += ok
    return moved


@numba.njit(**_OPT)
def anneal_group(J, h, mask, betas, x, st, flips, f, d, gibbs):
    """Anneal one group of reads of one model in place.

    ``J`` ``(n, n)`` symmetric with a zero diagonal, ``h``, ``mask`` ``(n,)``, ``betas``
    ``(S,)``; ``x`` ``(n, C)`` spins in {-1, +1}, read axis minor; ``st`` ``(4, C)`` the reads'
    generator states; ``flips`` ``(C,)`` int32 receives each read's accepted flips; ``f``
    ``(n, C)`` and ``d`` ``(C,)`` scratch in the spins' dtype (float32 or float64, the
    arithmetic's precision); ``gibbs``: the Gibbs rule, else Metropolis."""
    n, C = x.shape
    s0, s1, s2, s3 = st[0], st[1], st[2], st[3]
    one = np.ones(1, x.dtype)[0]
    g = one if gibbs else one - one
    for i in range(n):
        for k in range(C):
            f[i, k] = h[i]
    for j in range(n):
        for i in range(n):
            Jij = J[i, j]
            if Jij != 0:
                xj, fi = x[j], f[i]
                for k in range(C):
                    fi[k] += Jij * xj[k]
    for s in range(betas.shape[0]):
        b = betas[s]
        for i in range(n):
            if not mask[i]:
                continue
            moved = _propose(x[i], f[i], d, s0, s1, s2, s3, flips, b, g, one)
            if moved:
                Ji = J[i]
                for j in range(n):
                    Jij = Ji[j]
                    fj = f[j]
                    for k in range(C):
                        fj[k] += Jij * d[k]


@numba.njit(**_OPT)
def run_units(J, h, mask, betas, x0, seeds, x_out, acc, u0, u1, gibbs):
    """The units ``u0 .. u1 - 1`` of a call, unit ``m * G + g`` the group ``g`` (reads
    ``g C .. (g + 1) C - 1``, :data:`CHUNK` ``= C``) of model ``m``: ``J`` ``(Mj, n, n)``
    (``Mj`` 1: shared), ``h``, ``mask`` ``(M, n)``, ``betas`` ``(M, S)``, ``x0`` and ``x_out``
    ``(M, n, R)``, ``seeds`` ``(M, 2)`` uint32, ``acc`` ``(M, R)`` int32."""
    n, R = x0.shape[1], x0.shape[2]
    G = (R + CHUNK - 1) // CHUNK
    for u in range(u0, u1):
        m, g = u // G, u % G
        r0 = g * CHUNK
        C = min(CHUNK, R - r0)
        # contiguous (n, C) buffers, so that the loops over reads vectorize
        x = np.empty((n, C), x0.dtype)
        f = np.empty((n, C), x0.dtype)
        d = np.empty(C, x0.dtype)
        st = np.empty((4, C), np.uint32)
        flips = np.zeros(C, np.int32)
        for i in range(n):
            for k in range(C):
                x[i, k] = x0[m, i, r0 + k]
        seed_reads(st, seeds[m, 0], seeds[m, 1], r0)
        anneal_group(J[m if J.shape[0] > 1 else 0], h[m], mask[m], betas[m], x, st, flips, f,
                     d, gibbs)
        for i in range(n):
            for k in range(C):
                x_out[m, i, r0 + k] = x[i, k]
        for k in range(C):
            acc[m, r0 + k] = flips[k]


@numba.njit(nogil=True, cache=True)
def _run(job):
    """One thread's share: ``job`` = [wide, M, Mj, n, R, S, gibbs, J, h, mask, betas, x0,
    seeds, x out, acc, u0, u1]."""
    M, Mj, n, R, S, gibbs = job[1], job[2], job[3], job[4], job[5], job[6] != 0
    mask = carray(ptr(job[9]), (M, n), dtype=np.bool_)
    seeds = carray(ptr(job[12]), (M, 2), dtype=np.uint32)
    acc = carray(ptr(job[14]), (M, R), dtype=np.int32)
    u0, u1 = job[15], job[16]
    if job[0]:
        run_units(carray(ptr(job[7]), (Mj, n, n), dtype=np.float64),
                  carray(ptr(job[8]), (M, n), dtype=np.float64), mask,
                  carray(ptr(job[10]), (M, S), dtype=np.float64),
                  carray(ptr(job[11]), (M, n, R), dtype=np.float64), seeds,
                  carray(ptr(job[13]), (M, n, R), dtype=np.float64), acc, u0, u1, gibbs)
    else:
        run_units(carray(ptr(job[7]), (Mj, n, n), dtype=np.float32),
                  carray(ptr(job[8]), (M, n), dtype=np.float32), mask,
                  carray(ptr(job[10]), (M, S), dtype=np.float32),
                  carray(ptr(job[11]), (M, n, R), dtype=np.float32), seeds,
                  carray(ptr(job[13]), (M, n, R), dtype=np.float32), acc, u0, u1, gibbs)


@numba.cfunc(ffi.HANDLE_SIG, nopython=True, cache=True)
def _handle(frame_ptr, create, join, worker, error_args, threads):
    """The custom call: arguments ``J`` ``(Mj, n, n)``, ``h`` ``(M, n)``, ``mask`` ``(M, n)``
    bool, ``betas`` ``(M, S)``, ``x0`` ``(M, n, R)``, ``seeds`` ``(M, 2)`` uint32, ``rule``
    ``(1,)`` int32 (1: Gibbs); results ``x`` ``(M, n, R)`` and ``acc`` ``(M, R)`` int32. The
    groups of reads are shared out among threads."""
    frame, done, answer = prologue(frame_ptr, 7, error_args, 2)
    if done:
        return answer
    args = arguments(frame, 7)
    rets = results(frame, 2)
    dt = dtype_of(args[0])
    if dt != ffi.F32 and dt != ffi.F64:
        return fail(frame, error_args)
    J, j_rank, j_dims = buffer(args[0], dt, 3)
    h, h_rank, _ = buffer(args[1], dt, 2)
    mask, m_rank, _ = buffer(args[2], ffi.PRED, 2)
    betas, b_rank, b_dims = buffer(args[3], dt, 2)
    x0, x_rank, x_dims = buffer(args[4], dt, 3)
    seeds, s_rank, _ = buffer(args[5], ffi.U32, 2)
    rule, r_rank, _ = buffer(args[6], ffi.S32, 1)
    xo, xo_rank, _ = buffer(rets[0], dt, 3)
    acc, a_rank, _ = buffer(rets[1], ffi.S32, 2)
    if (j_rank != 3 or h_rank != 2 or m_rank != 2 or b_rank != 2 or x_rank != 3
            or s_rank != 2 or r_rank != 1 or xo_rank != 3 or a_rank != 2):
        return fail(frame, error_args)
    jd, xd, bd = words(j_dims, 3), words(x_dims, 3), words(b_dims, 2)
    M, n, R, S = xd[0], xd[1], xd[2], bd[1]
    if jd[1] != n or jd[2] != n or (jd[0] != 1 and jd[0] != M) or bd[0] != M:
        return fail(frame, error_args)
    gibbs = carray(ptr(rule), (1,), dtype=np.int32)[0]
    units = M * ((R + CHUNK - 1) // CHUNK)
    T = min(threads, units)
    if M * R * n * max(S, 1) < THREADED_WORK:
        T = 1
    head = np.array([dt == ffi.F64, M, jd[0], n, R, S, gibbs, J, h, mask, betas, x0, seeds,
                     xo, acc], np.int64)
    ffi.share_units(_run, head, units, max(T, 1), create, join, worker)
    return ptr(0)


@numba.cfunc(types.voidptr(types.voidptr), nopython=True, cache=True)
def _worker(job):
    _run(carray(job, (_JOB,), dtype=np.int64))
    return ptr(0)


def register():
    """Register the kernel with XLA (once per process)."""
    return ffi.register_threaded(TARGET, _handle, _worker)


def anneal_dense(J, h, mask, betas, x0, seeds, *, gibbs):
    """Simulated annealing of a batch of dense SPIN models in one compiled call.

    Args:
      J: ``(Mj, n, n)`` float32 or float64 symmetric couplings with a zero diagonal, ``Mj`` 1
        (shared by every model) or ``M``; h, mask: ``(M, n)`` (masked variables never flip);
      betas: ``(M, S)`` the schedule, one value per sweep; x0: ``(M, n, R)`` initial spins in
        {-1, +1}, reads minor; seeds: ``(M, 2)`` uint32; gibbs: the Gibbs rule, else Metropolis.

    Returns ``(x, acc)``: the spins ``(M, n, R)`` after the anneal and each read's number of
    accepted flips ``(M, R)`` int32."""
    register()
    dt = x0.dtype
    M, n, R = x0.shape
    ins = (jnp.asarray(J, dt), jnp.asarray(h, dt), jnp.asarray(mask, bool),
           jnp.asarray(betas, dt), x0, jnp.asarray(seeds, jnp.uint32),
           jnp.full((1,), int(bool(gibbs)), jnp.int32))
    shapes = [((M, n, R), dt), ((M, R), jnp.int32)]
    return jax.ffi.ffi_call(TARGET, [_vma.result_like(sh, t, x0) for sh, t in shapes],
                            vmap_method="sequential")(*ins)
