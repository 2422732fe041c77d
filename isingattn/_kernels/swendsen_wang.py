"""Swendsen–Wang updates of grid models on the CPU in compiled code, many per call.

The step of :class:`isingattn.samplers.SwendsenWangSampler` for models on a (subset of a)
periodic ``Lx x Ly`` grid (every :func:`~isingattn.models.square_lattice`), run for many steps
in one numba kernel that XLA calls as a typed FFI custom call (:mod:`.ffi`). It draws what the
JAX step draws — per site three words of its xoshiro128** lane: the bond to the right, the bond
below, the flip decision read at a cluster's root — labels the clusters with the union-find of
:mod:`.union_find` (each site's root is its cluster's smallest index, as in every path), and
flips each cluster with probability ``1 / (1 + e^{2 beta H_C})``. With ``h = 0`` (every
probability 1/2) it follows the JAX step's chain exactly; with fields a cluster whose uniform
falls within a rounding of its probability (``exp`` is not XLA's) can decide otherwise.

Why it is faster: the step's pieces — generator, bonds, labelling, cluster fields, flips and
the cluster statistics — run over one chain's arrays while they sit in the core's cache, with
no XLA operation between them, and the chains are shared out among threads of the kernel's own
(:func:`.ffi.share_units`; the union-find alone labels one chain after another on one core).
Timings: ``docs/guide/cluster.md``.
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
from .chromatic import _advance
from .ffi import arguments, buffer, dtype_of, fail, prologue, ptr, results, words
from .union_find import label_grid

TARGET = "isingattn_swendsen_wang_grid"
_JOB = 18  # words of one thread's job
#: Statistics per chain summed over the steps: clusters, mean cluster size, largest cluster.
STATS = 3
#: Below this much work (chains x sites x steps; about 11 ns each) a call runs on one thread:
#: starting and joining another costs tens of microseconds.
THREADED_WORK = 1 << 13

_OPT = {"nogil": True, "boundscheck": False, "error_model": "numpy", "cache": True}


@numba.njit(**_OPT)
def sw_steps(s, st, stats, Jg, p, h, mask, beta, num_steps, has_field, bond, root, H, size,
             w0, w1, w2):
    """``num_steps`` Swendsen–Wang steps of one chain in place.

    ``s`` ``(n,)`` spins in {-1, +1}; ``st`` ``(4, n)`` uint32 the generator lanes (one per
    site); ``stats`` ``(3,)`` float32 receives the sums over the steps of the number of
    clusters of active sites, the active sites per cluster and the largest cluster; ``Jg``,
    ``p`` ``(2, Lx, Ly)``: the couplings of the grid slots (slot 0: the edge to the right,
    1: the edge below; 0 where the graph has none) and their bond probabilities
    ``1 - e^{-2 beta |J|}``; ``h``, ``mask`` ``(n,)``; ``has_field``: whether any ``h`` is
    nonzero. The rest is scratch: ``bond`` ``(1, 2, Lx, Ly)`` bool, ``root`` ``(1, n)``
    int32, ``H`` ``(n,)`` of the spins' dtype (the cluster fields, then the flip factors),
    ``size`` ``(n,)`` int32, ``w0 .. w2`` ``(n,)`` uint32."""
    _, Lx, Ly = Jg.shape
    n = Lx * Ly
    s0, s1, s2, s3 = st[0], st[1], st[2], st[3]
    scale = np.float32(1.0 / (1 << 23))
    one = np.ones(1, s.dtype)[0]
    two = one + one
    active = 0
    for i in range(n):
        active += mask[i]
    r = root[0]
    b0, b1 = bond[0, 0], bond[0, 1]
    for _ in range(num_steps):
        for i in range(n):
            w0[i] = _advance(s0, s1, s2, s3, i)
        for i in range(n):
            w1[i] = _advance(s0, s1, s2, s3, i)
        for i in range(n):
            w2[i] = _advance(s0, s1, s2, s3, i)
        for x in range(Lx):  # rows of contiguous neighbours, so that the loops vectorize
            row = x * Ly
            down = row + Ly if x + 1 < Lx else 0
            Jr, Jd, pr, pd, br, bd = Jg[0, x], Jg[1, x], p[0, x], p[1, x], b0[x], b1[x]
            for y in range(Ly):
                i = row + y
                u1 = np.float32(w1[i] >> np.uint32(9)) * scale
                bd[y] = (Jd[y] * s[i] * s[down + y] > 0) & (u1 < pd[y])
            for y in range(Ly - 1):
                i = row + y
                u0 = np.float32(w0[i] >> np.uint32(9)) * scale
                br[y] = (Jr[y] * s[i] * s[i + 1] > 0) & (u0 < pr[y])
            i = row + Ly - 1  # the right neighbour of the last column wraps
            u0 = np.float32(w0[i] >> np.uint32(9)) * scale
            br[Ly - 1] = (Jr[Ly - 1] * s[i] * s[row] > 0) & (u0 < pr[Ly - 1])
        label_grid(bond, root)
        for i in range(n):
            H[i] = 0
            size[i] = 0
        if has_field:
            for i in range(n):
                H[r[i]] += h[i] * s[i]
        for i in range(n):
            size[r[i]] += mask[i]
        clusters = 0
        largest = 0
        for i in range(n):
            if r[i] == i:
                clusters += mask[i]
                largest = max(largest, size[i])
                # the cluster's decision as a factor, kept at its root in H's place (read
                # only at roots): -1 flips it (with h = 0 its probability is 1/2: no exp)
                u = np.float32(w2[i] >> np.uint32(9)) * scale
                if has_field:
                    flip = u < 1.0 / (1.0 + math.exp(2.0 * beta * H[i]))
                else:
                    flip = u < np.float32(0.5)
                H[i] = one - two * (flip & mask[i])
        for i in range(n):  # masked sites are roots of their own that never flip
            s[i] = s[i] * H[r[i]]
        stats[0] += clusters
        stats[1] += active / max(clusters, 1)
        stats[2] += largest


@numba.njit(**_OPT)
def run_chains(s_in, st_in, s_out, st_out, stats, Jg, p, h, mask, beta, num_steps, has_field,
               c0, c1):
    """The chains ``c0 .. c1 - 1``: ``s_in``, ``s_out`` ``(C, n)``; ``st_in``, ``st_out``
    ``(4, C, n)`` uint32; ``stats`` ``(C, 3)`` float32 (zeroed here)."""
    _, Lx, Ly = Jg.shape
    n = Lx * Ly
    s = np.empty(n, s_in.dtype)
    st = np.empty((4, n), np.uint32)
    bond = np.empty((1, 2, Lx, Ly), np.bool_)
    root = np.empty((1, n), np.int32)
    H = np.empty(n, s_in.dtype)
    size = np.empty(n, np.int32)
    w0 = np.empty(n, np.uint32)
    w1 = np.empty(n, np.uint32)
    w2 = np.empty(n, np.uint32)
    for c in range(c0, c1):
        for i in range(n):
            s[i] = s_in[c, i]
        for j in range(4):
            for i in range(n):
                st[j, i] = st_in[j, c, i]
        for k in range(STATS):
            stats[c, k] = 0.0
        sw_steps(s, st, stats[c], Jg, p, h, mask, beta, num_steps, has_field, bond, root, H,
                 size, w0, w1, w2)
        for i in range(n):
            s_out[c, i] = s[i]
        for j in range(4):
            for i in range(n):
                st_out[j, c, i] = st[j, i]


@numba.njit(nogil=True, cache=True)
def _run(job):
    """One thread's share: ``job`` = [wide, C, Lx, Ly, num_steps, has_field, s, st, s out,
    st out, stats, Jg, p, h, mask, scalars, c0, c1]."""
    C, Lx, Ly, num_steps, has_field = job[1], job[2], job[3], job[4], job[5] != 0
    n = Lx * Ly
    st = carray(ptr(job[7]), (4, C, n), dtype=np.uint32)
    st_out = carray(ptr(job[9]), (4, C, n), dtype=np.uint32)
    stats = carray(ptr(job[10]), (C, STATS), dtype=np.float32)
    mask = carray(ptr(job[14]), (n,), dtype=np.bool_)
    c0, c1 = job[16], job[17]
    if job[0]:
        run_chains(carray(ptr(job[6]), (C, n), dtype=np.float64), st,
                   carray(ptr(job[8]), (C, n), dtype=np.float64), st_out, stats,
                   carray(ptr(job[11]), (2, Lx, Ly), dtype=np.float64),
                   carray(ptr(job[12]), (2, Lx, Ly), dtype=np.float64),
                   carray(ptr(job[13]), (n,), dtype=np.float64), mask,
                   carray(ptr(job[15]), (1,), dtype=np.float64)[0], num_steps, has_field, c0,
                   c1)
    else:
        run_chains(carray(ptr(job[6]), (C, n), dtype=np.float32), st,
                   carray(ptr(job[8]), (C, n), dtype=np.float32), st_out, stats,
                   carray(ptr(job[11]), (2, Lx, Ly), dtype=np.float32),
                   carray(ptr(job[12]), (2, Lx, Ly), dtype=np.float32),
                   carray(ptr(job[13]), (n,), dtype=np.float32), mask,
                   carray(ptr(job[15]), (1,), dtype=np.float32)[0], num_steps, has_field, c0,
                   c1)


@numba.cfunc(ffi.HANDLE_SIG, nopython=True, cache=True)
def _handle(frame_ptr, create, join, worker, error_args, threads):
    """The custom call: arguments ``s`` ``(C, n)``, ``st`` ``(4, C, n)`` uint32, ``Jg``,
    ``p`` ``(2, Lx, Ly)``, ``h`` ``(n,)``, ``mask`` ``(n,)`` bool, ``beta`` ``(1,)`` in the
    spins' dtype and ``(num_steps, has_field)`` int32; results ``s``, ``st`` and the
    statistics ``(C, 3)`` float32. The chains are shared out among threads."""
    frame, done, answer = prologue(frame_ptr, 8, error_args, 3)
    if done:
        return answer
    args = arguments(frame, 8)
    rets = results(frame, 3)
    dt = dtype_of(args[0])
    if dt != ffi.F32 and dt != ffi.F64:
        return fail(frame, error_args)
    s, s_rank, s_dims = buffer(args[0], dt, 2)
    st, st_rank, st_dims = buffer(args[1], ffi.U32, 3)
    Jg, j_rank, j_dims = buffer(args[2], dt, 3)
    p, p_rank, _ = buffer(args[3], dt, 3)
    h, h_rank, _ = buffer(args[4], dt, 1)
    mask, m_rank, _ = buffer(args[5], ffi.PRED, 1)
    beta, b_rank, _ = buffer(args[6], dt, 1)
    ints, i_rank, _ = buffer(args[7], ffi.S32, 1)
    so, so_rank, _ = buffer(rets[0], dt, 2)
    sto, sto_rank, _ = buffer(rets[1], ffi.U32, 3)
    stats, t_rank, _ = buffer(rets[2], ffi.F32, 2)
    if (s_rank != 2 or st_rank != 3 or j_rank != 3 or p_rank != 3 or h_rank != 1
            or m_rank != 1 or b_rank != 1 or i_rank != 1 or so_rank != 2 or sto_rank != 3
            or t_rank != 2):
        return fail(frame, error_args)
    sd, std, jd = words(s_dims, 2), words(st_dims, 3), words(j_dims, 3)
    C, n = sd[0], sd[1]
    iv = carray(ptr(ints), (2,), dtype=np.int32)
    if (jd[0] != 2 or jd[1] * jd[2] != n or std[0] != 4 or std[1] != C or std[2] != n
            or iv[0] < 0):
        return fail(frame, error_args)
    T = min(threads, C)
    if C * n * max(iv[0], 1) < THREADED_WORK:
        T = 1
    head = np.array([dt == ffi.F64, C, jd[1], jd[2], iv[0], iv[1], s, st, so, sto, stats, Jg,
                     p, h, mask, beta], np.int64)
    ffi.share_units(_run, head, C, max(T, 1), create, join, worker)
    return ptr(0)


@numba.cfunc(types.voidptr(types.voidptr), nopython=True, cache=True)
def _worker(job):
    _run(carray(job, (_JOB,), dtype=np.int64))
    return ptr(0)


def register():
    """Register the kernel with XLA (once per process)."""
    return ffi.register_threaded(TARGET, _handle, _worker)


def grid_steps(s, rng, Jg, p, h, mask, beta, num_steps):
    """``num_steps`` Swendsen–Wang steps of the chains of one grid model, in one compiled call.

    Args:
      s: ``(C, n)`` float32 or float64 spins in {-1, +1}, ``n = Lx * Ly`` in row-major order;
      rng: 4 uint32 arrays ``(C, n)``, the chains' xoshiro128** lanes (one per site);
      Jg: ``(2, Lx, Ly)`` the couplings of the grid slots (slot 0: the edge to the right,
        slot 1: the edge below, modulo the grid; 0 where the graph has no such edge); p: their
        bond probabilities ``1 - e^{-2 beta |J|}`` (the sampler's bond rule);
      h, mask: ``(n,)``; beta: scalar; num_steps: int (may be traced).

    Returns ``(s, rng, stats)``: the spins and lanes after the steps and per chain the sums over
    the steps of the number of clusters, the active sites per cluster and the largest cluster
    ``(C, 3)`` float32."""
    register()
    dt = s.dtype
    C, n = s.shape
    beta = jnp.asarray(beta, dt)
    h = jnp.asarray(h, dt)
    ints = jnp.stack([jnp.asarray(num_steps, jnp.int32),
                      jnp.any(h != 0).astype(jnp.int32)])
    ins = (s, jnp.stack(rng), jnp.asarray(Jg, dt), jnp.asarray(p, dt), h, jnp.asarray(mask, bool), beta.reshape(1), ints)
    shapes = [((C, n), dt), ((4, C, n), jnp.uint32), ((C, STATS), jnp.float32)]
    so, sto, stats = jax.ffi.ffi_call(
        TARGET, [_vma.result_like(sh, d, s) for sh, d in shapes],
        vmap_method="sequential")(*ins)
    return so, tuple(sto[j] for j in range(4)), stats
