"""The state-vector anneal on the CPU in compiled code, called from inside XLA programs.

The integrator of :mod:`isingattn.quantum._evolve` (the exponential midpoint rule split
symmetrically, optionally composed into Yoshida's fourth-order triple jump) as one numba kernel,
handed to XLA as a typed FFI custom call (:mod:`.ffi`). Same algorithm as the JAX path
(``_evolve._evolve_one``): every qubit starts in ``|+>``, each sub-step multiplies the state by
the phases ``e^{-i phi E}`` of the pending and the next half step and applies the driver rotation
``c + i s X`` to every qubit; unused qubits are projected out at the end.

Each model runs on a register of its active qubits only (its energies gathered, its result
scattered back): the unused qubits of ``_evolve_one`` are not simulated, and the result is the
one their projection gives.

Why it is faster on the CPU: a model's ``2^k`` amplitudes stay in the core's cache for the whole
anneal (XLA runs each sub-step as kernels over the whole batch, streaming it through memory);
the rotations of two qubits are applied in one pass over the amplitudes (half the loads and
stores of one pass per qubit); the phases use a polynomial sine and cosine that the compiler
vectorizes (with the math library's scalar ``sin``/``cos`` the phases took more than half of
the kernel's time); and the models are shared out among threads of the kernel's own
(contiguous ranges of about equal work: the step count may differ between models). The
arithmetic is float64 whatever the dtype of the energies (the result is rounded to the output
dtype). Timings: ``docs/guide/diabatic.md``.
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

TARGET = "isingattn_anneal_state_vector"
#: Below this much work (sum over models of amplitudes x qubits x sub-steps) a call runs on
#: one thread.
THREADED_WORK = 1 << 24
_C64, _C128 = 15, 18  # XLA_FFI_DataType of complex64, complex128
_JOB = 14  # words of one thread's job
#: Models evolved side by side (interleaved) when they share a step count and a register size.
GROUP = 8
#: Largest register (active qubits) evolved in groups; beyond, one model's amplitudes already
#: make long vector loops, and a group's would leave the core's cache.
GROUP_QUBITS = 10
#: Steps up to which the sub-steps' coefficients are tabulated once per call (beyond, as long
#: an anneal as 2000 ns may need, each model computes them as it goes: no table of gigabytes);
#: a count below 1 (a traced count from non-finite fields) runs no step, as a loop would.
_TABLE_STEPS = 1 << 20

_OPT = {"nogil": True, "boundscheck": False, "fastmath": True, "error_model": "numpy",
        "cache": True}

# sin and cos on [-pi/4, pi/4]: the minimax polynomials of fdlibm's __kernel_sin and
# __kernel_cos (error below 1e-16 there); the argument is reduced by multiples of pi/2 in two
# parts (Cody-Waite), exact to about 1e-16 |x| for the phases met here (|x| << 1e6).
_TWO_OVER_PI = 2.0 / math.pi
_PIO2_HI = 1.5707963267341256e00
_PIO2_LO = 6.0771005065061922e-11
_S1, _S2, _S3 = -1.6666666666666632e-01, 8.3333333332248946e-03, -1.9841269829589539e-04
_S4, _S5, _S6 = 2.7557313707070068e-06, -2.5050760253406863e-08, 1.5896230157221844e-10
_C1, _C2, _C3 = 4.1666666666666019e-02, -1.3888888888839116e-03, 2.4801587269650015e-05
_C4, _C5, _C6 = -2.7557304623183960e-07, 2.0873958177697780e-09, -1.1359647557788195e-11


@numba.njit(inline="always", **_OPT)
def sincos(x):
    """``(sin x, cos x)`` in branch-free arithmetic (vectorizable)."""
    n = np.round(x * _TWO_OVER_PI)
    r = (x - n * _PIO2_HI) - n * _PIO2_LO
    z = r * r
    s = r + r * z * (_S1 + z * (_S2 + z * (_S3 + z * (_S4 + z * (_S5 + z * _S6)))))
    c = 1.0 - 0.5 * z + z * z * (_C1 + z * (_C2 + z * (_C3 + z * (_C4 + z * (_C5 + z * _C6)))))
    q = np.int64(n)
    odd = (q & 1) != 0
    sq = c if odd else s
    cq = s if odd else c
    if (q & 2) != 0:
        sq = -sq
    if ((q + 1) & 2) != 0:
        cq = -cq
    return sq, cq

@numba.njit(**_OPT)
def step_weights(order):
    """The composition weights of one step: ``(1,)`` for the second-order (Strang) step, and
    Yoshida's triple jump ``(w1, w0, w1)`` for order 4 (as ``_evolve._SUBSTEPS``, in float64)."""
    if order == 2:
        return np.ones(1)
    w1 = 1.0 / (2.0 - 2.0 ** (1.0 / 3.0))
    w = np.empty(3)
    w[0] = w[2] = w1
    w[1] = -(2.0 ** (1.0 / 3.0)) * w1
    return w

@numba.njit(inline="always", **_OPT)
def _substep(j, tables, num_steps, h_t, weights, cum):
    """Sub-step ``j``'s half phase step ``pi dt B / 2`` and ``cos``, ``sin`` of its driver angle
    ``pi dt A`` (coefficients at the sub-step's midpoint, as ``_evolve._evolve_one``)."""
    nsub = weights.shape[0]
    step, sub = j // nsub, j % nsub
    s_mid = (step + cum[sub] + 0.5 * weights[sub]) / num_steps
    dt = weights[sub] * h_t
    A = np.interp(s_mid, tables[0], tables[1])
    B = np.interp(s_mid, tables[0], tables[2])
    theta = math.pi * dt * A
    return math.pi * dt * B / 2, math.cos(theta), math.sin(theta)

@numba.njit(**_OPT)
def substeps(tables, t_a, num_steps, weights, table):
    """``(T, coef, cs, sn, pending, cum, h_t)``: ``T`` sub-steps (none for ``num_steps < 1``,
    as a loop of no steps), and when ``table`` per sub-step ``j`` the phase coefficient
    ``coef[j]`` (pending half step plus this one's, so the state gets ``e^{-i coef E}``) and
    ``cos``, ``sin`` of the driver angle (else empty: :func:`_substep` computes them as they are
    needed); ``pending``, the half step after the last; ``cum``, ``h_t``: what
    :func:`_substep` needs."""
    nsub = weights.shape[0]
    cum = np.zeros(nsub + 1)
    for j in range(nsub):
        cum[j + 1] = cum[j] + weights[j]
    T = max(num_steps, 0) * nsub
    h_t = t_a / max(num_steps, 1)
    n = T if table else 0
    coef = np.empty(n)
    cs = np.empty(n)
    sn = np.empty(n)
    pending = 0.0
    # the midpoints move by less than a step from one sub-step to the next (Yoshida's middle
    # sub-step goes backwards): the schedule's segment is found by walking from the last one
    # (no search per sub-step), A and B interpolated as np.interp does (held at the ends), and
    # the angles' cos and sin computed afterwards in one vectorizable pass
    xs, As, Bs = tables[0], tables[1], tables[2]
    P = xs.shape[0]
    seg = 0
    for j in range(n):
        step, sub = j // nsub, j % nsub
        s_mid = (step + cum[sub] + 0.5 * weights[sub]) / num_steps
        while seg > 0 and xs[seg] > s_mid:
            seg -= 1
        while seg + 2 < P and xs[seg + 1] <= s_mid:
            seg += 1
        if P == 1 or s_mid <= xs[0]:
            A, B = np.float64(As[0]), np.float64(Bs[0])
        elif s_mid >= xs[P - 1]:
            A, B = np.float64(As[P - 1]), np.float64(Bs[P - 1])
        else:  # in float64 whatever the table's dtype
            x0, x1 = np.float64(xs[seg]), np.float64(xs[seg + 1])
            a0, a1 = np.float64(As[seg]), np.float64(As[seg + 1])
            b0, b1 = np.float64(Bs[seg]), np.float64(Bs[seg + 1])
            f = (s_mid - x0) / (x1 - x0)
            A = a0 + f * (a1 - a0)
            B = b0 + f * (b1 - b0)
        dt = weights[sub] * h_t
        half = math.pi * dt * B / 2
        coef[j] = pending + half
        cs[j] = math.pi * dt * A  # the angle, replaced by its cosine below
        pending = half
    for j in range(n):
        sn[j], cs[j] = sincos(cs[j])
    if T > 0 and not table:
        pending = _substep(T - 1, tables, num_steps, h_t, weights, cum)[0]
    return T, coef, cs, sn, pending, cum, h_t

#: From this stride of the lower qubit on, a two-qubit pass runs on views of the four blocks
#: of a group (below it the blocks are too short for vectors).
_VIEW_BIT = 16


@numba.njit(inline="always", **_OPT)
def _rotate_four(x0, y0, x1, y1, x2, y2, x3, y3, c, s):
    """``(c + i s X)`` on both qubits of the four amplitudes ``x_j + i y_j`` (``j`` the two
    qubits' bits): the low qubit mixes 0 with 1 and 2 with 3, then the high one 0 with 2 and 1
    with 3. Returns the eight new parts in the order of the arguments."""
    a0r, a0i = c * x0 - s * y1, c * y0 + s * x1
    a1r, a1i = c * x1 - s * y0, c * y1 + s * x0
    a2r, a2i = c * x2 - s * y3, c * y2 + s * x3
    a3r, a3i = c * x3 - s * y2, c * y3 + s * x2
    return (c * a0r - s * a2i, c * a0i + s * a2r, c * a1r - s * a3i, c * a1i + s * a3r,
            c * a2r - s * a0i, c * a2i + s * a0r, c * a3r - s * a1i, c * a3i + s * a1r)

@numba.njit(inline="always", **_OPT)
def _rotate_two(re, im, size, bit, c, s):
    """``(c + i s X)`` on the qubits of ``bit`` and ``2 bit`` in one pass."""
    if bit >= _VIEW_BIT:
        _rotate_two_blocks(re, im, size, bit, c, s)
        return
    for base in range(0, size, 4 * bit):
        for a in range(base, base + bit):
            b, d, e = a + bit, a + 2 * bit, a + 3 * bit
            (re[a], im[a], re[b], im[b], re[d], im[d], re[e], im[e]) = _rotate_four(
                re[a], im[a], re[b], im[b], re[d], im[d], re[e], im[e], c, s)

@numba.njit(inline="always", **_OPT)
def _rotate_two_blocks(re, im, size, bit, c, s):
    """:func:`_rotate_two` through views of each group's four blocks of ``bit`` amplitudes:
    the same arithmetic, in a loop over a block that the compiler vectorizes (the loop over
    indices into the whole arrays it does not; timings in ``docs/guide/diabatic.md``)."""
    for base in range(0, size, 4 * bit):
        r0, i0 = re[base:base + bit], im[base:base + bit]
        r1, i1 = re[base + bit:base + 2 * bit], im[base + bit:base + 2 * bit]
        r2, i2 = re[base + 2 * bit:base + 3 * bit], im[base + 2 * bit:base + 3 * bit]
        r3, i3 = re[base + 3 * bit:base + 4 * bit], im[base + 3 * bit:base + 4 * bit]
        for t in range(bit):
            (r0[t], i0[t], r1[t], i1[t], r2[t], i2[t], r3[t], i3[t]) = _rotate_four(
                r0[t], i0[t], r1[t], i1[t], r2[t], i2[t], r3[t], i3[t], c, s)


@numba.njit(inline="always", **_OPT)
def _rotate_one(re, im, size, bit, c, s):
    for base in range(0, size, 2 * bit):
        for a in range(base, base + bit):
            b = a + bit
            ra, ia, rb, ib = re[a], im[a], re[b], im[b]
            re[a], im[a] = c * ra - s * ib, c * ia + s * rb
            re[b], im[b] = c * rb - s * ia, c * ib + s * ra

@numba.njit(**_OPT)
def _active_count(active, m):
    ka = 0
    for q in range(active.shape[1]):
        if active[m, q]:
            ka += 1
    return ka

@numba.njit(**_OPT)
def evolve_models(energy, active, tables, t_a, steps, order, out, perm, m0, m1):
    """Final states ``out[m]`` ``(2^k,)`` complex of the models ``m = perm[m0 .. m1 - 1]``
    (``perm`` orders the models by their counts and register sizes, so that models with the
    same count run one after another): energies ``energy`` ``(M, 2^k)``, qubits in use
    ``active`` ``(M, k)``, schedule ``tables`` ``(3, P)`` (``s``, ``A``, ``B``), anneal time
    ``t_a`` (ns), ``steps[m]`` steps of the product formula of ``order`` (2 or 4) for model
    ``m``.

    Each model is evolved on a register of its active qubits only: the energy does not depend on
    the unused ones, so their states are the entries with those bits 0 (gathered), and the
    result is scattered back with every entry that has an unused qubit at 1 set to 0 (the
    projection ``_evolve._evolve_one`` makes at the end, without simulating them). Up to
    :data:`GROUP` consecutive models with the same count and number of active qubits (at most
    :data:`GROUP_QUBITS`) are evolved side by side, their amplitudes interleaved (the model
    fastest): the same arithmetic per model, in vectors across the models, where a small
    register alone gives the compiler too short loops. The sub-steps' coefficients are
    tabulated again only where the count changes (the automatic counts are rounded to a few
    significant bits, so a batch has few distinct ones)."""
    k = active.shape[1]
    weights = step_weights(order)
    num_steps = steps[perm[m0]] if m1 > m0 else 0
    table = num_steps <= _TABLE_STEPS
    T, coef, cs, sn, pending, cum, h_t = substeps(tables, t_a, num_steps, weights, table)
    size = energy.shape[1]
    cap = max(size, (1 << min(k, GROUP_QUBITS)) * GROUP)
    re = np.empty(cap)
    im = np.empty(cap)
    E = np.empty(cap)
    full = np.empty((GROUP, size), np.int64)  # register index of each small-register state
    pos = np.empty(k, np.int64)
    ms = np.empty(GROUP, np.int64)
    i = m0
    while i < m1:
        m = perm[i]
        if steps[m] != num_steps:
            num_steps = steps[m]
            table = num_steps <= _TABLE_STEPS
            T, coef, cs, sn, pending, cum, h_t = substeps(tables, t_a, num_steps, weights,
                                                          table)
        ka = _active_count(active, m)
        # the group: this model and the next ones of the same count and register size
        g = 1
        ms[0] = m
        if ka <= GROUP_QUBITS:
            while (g < GROUP and i + g < m1 and steps[perm[i + g]] == num_steps
                   and _active_count(active, perm[i + g]) == ka):
                ms[g] = perm[i + g]
                g += 1
        W = 1  # lanes: a power of two (the unused ones evolve a zero-energy register)
        while W < g:
            W *= 2
        n_a = 1 << ka
        a0 = 2.0 ** (-ka / 2)
        for lane in range(W):
            ml = ms[min(lane, g - 1)]
            ka_l = 0
            for q in range(k):
                if active[ml, q]:
                    pos[ka_l] = q
                    ka_l += 1
            for b in range(n_a):
                x = 0
                for q in range(ka):
                    x |= ((b >> q) & 1) << pos[q]
                full[lane, b] = x
                re[b * W + lane] = a0
                im[b * W + lane] = 0.0
                E[b * W + lane] = energy[ml, x] if lane < g else 0.0
        n = n_a * W
        last = 0.0
        for j in range(T):
            if table:
                phi, c, s = coef[j], cs[j], sn[j]
            else:  # a very long anneal: coefficients as they are needed, not in a table
                half, c, s = _substep(j, tables, num_steps, h_t, weights, cum)
                phi = last + half
                last = half
            for b in range(n):
                sa, ca = sincos(phi * E[b])
                r, im_b = re[b], im[b]
                re[b] = r * ca + im_b * sa
                im[b] = im_b * ca - r * sa
            q = 0
            while q + 1 < ka:
                if W > 1:  # a qubit's stride times the lanes: blocks of at least GROUP
                    _rotate_two_blocks(re, im, n, (1 << q) * W, c, s)
                else:
                    _rotate_two(re, im, n, 1 << q, c, s)
                q += 2
            if q < ka:
                _rotate_one(re, im, n, (1 << q) * W, c, s)
        for lane in range(g):
            ml = ms[lane]
            for a in range(size):
                out[ml, a] = 0
            for b in range(n_a):
                x = b * W + lane
                sa, ca = sincos(pending * E[x])
                out[ml, full[lane, b]] = complex(re[x] * ca + im[x] * sa,
                                                 im[x] * ca - re[x] * sa)
        i += g

@numba.njit(nogil=True, cache=True)
def _run(job):
    """One thread's share: ``job`` = [dtype, M, size, k, P, energy, active, tables, t_a,
    order and steps, out, the order of the models, m0, m1]."""
    M, size, k, P = job[1], job[2], job[3], job[4]
    active = carray(ptr(job[6]), (M, k), dtype=np.bool_)
    ints = carray(ptr(job[9]), (M + 1,), dtype=np.int32)
    order, steps = ints[0], ints[1:]
    if job[0] == ffi.F32:
        evolve_models(carray(ptr(job[5]), (M, size), dtype=np.float32), active,
                      carray(ptr(job[7]), (3, P), dtype=np.float32),
                      carray(ptr(job[8]), (1,), dtype=np.float32)[0], steps, order,
                      carray(ptr(job[10]), (M, size), dtype=np.complex64),
                      carray(ptr(job[11]), (M,), dtype=np.int64), job[12], job[13])
    else:
        evolve_models(carray(ptr(job[5]), (M, size), dtype=np.float64), active,
                      carray(ptr(job[7]), (3, P), dtype=np.float64),
                      carray(ptr(job[8]), (1,), dtype=np.float64)[0], steps, order,
                      carray(ptr(job[10]), (M, size), dtype=np.complex128),
                      carray(ptr(job[11]), (M,), dtype=np.int64), job[12], job[13])

@numba.cfunc(ffi.HANDLE_SIG, nopython=True, cache=True)
def _handle(frame_ptr, create, join, worker, error_args, threads):
    """The custom call: check the frame (five arguments: energies, active qubits, schedule
    tables, anneal time, the order followed by each model's step count; one complex result),
    share the models out among threads in ranges of about equal work and run them. Addresses
    and the thread count come in as arguments (:func:`.ffi.threaded_handler`), so that the
    compiled code can be cached on disk."""
    frame, done, answer = prologue(frame_ptr, 5, error_args)
    if done:
        return answer
    args = arguments(frame, 5)
    dt = dtype_of(args[0])
    if dt != ffi.F32 and dt != ffi.F64:
        return fail(frame, error_args)
    energy, rank, e_dims = buffer(args[0], dt, 1)
    active, a_rank, a_dims = buffer(args[1], ffi.PRED, 1)
    tables, t_rank, t_dims = buffer(args[2], dt, 2)
    t_a, p_rank, _ = buffer(args[3], dt, 0)
    ints, s_rank, s_dims = buffer(args[4], ffi.S32, 1)
    out, out_rank, _ = buffer(result(frame), _C64 if dt == ffi.F32 else _C128, 1)
    if (rank < 0 or a_rank != rank or t_rank != 2 or p_rank != 0 or s_rank != 1
            or out_rank != rank):
        return fail(frame, error_args)
    dims = words(e_dims, rank)
    adims = words(a_dims, rank)
    tdims = words(t_dims, 2)
    size, k = dims[rank - 1], adims[rank - 1]
    M = lead(dims, rank, 1)
    if M != lead(adims, rank, 1) or words(s_dims, 1)[0] != M + 1:
        return fail(frame, error_args)
    counts = carray(ptr(ints), (M + 1,), dtype=np.int32)
    active_arr = carray(ptr(active), (M, k), dtype=np.bool_)
    order = counts[0]
    if size != 1 << k or tdims[0] != 3 or tdims[1] < 1 or (order != 2 and order != 4):
        return fail(frame, error_args)
    # the models in the order of their counts (equal counts share the sub-steps' table) and
    # register sizes (equal ones evolve side by side); each model's work is its amplitudes x
    # qubits x steps, and the threads get contiguous ranges of that order of about equal work
    key = np.empty(M, np.int64)
    for m in range(M):
        key[m] = np.int64(counts[1 + m]) * 64 + _active_count(active_arr, m)
    perm = np.argsort(key, kind="mergesort")
    work = np.empty(M + 1, np.float64)
    work[0] = 0.0
    for i in range(M):
        ka = key[perm[i]] & 63  # the register size, read back from the sort key
        work[i + 1] = work[i] + max(counts[1 + perm[i]], 1) * (1 << ka) * max(ka, 1)
    total = work[M] * (order - 1)
    T = min(threads, M)
    if total < THREADED_WORK:
        T = 1
    # one buffer for the job rows and the order, which the threads read: held by the rows'
    # view until they are done (a separate array would be freed after its last use here)
    rows = max(T, 1)
    block = np.empty(rows * _JOB + M, np.int64)
    block[rows * _JOB:] = perm
    jobs = block[:rows * _JOB].reshape((rows, _JOB))
    order_at = block.ctypes.data + 8 * rows * _JOB
    i = 0
    for t in range(rows):
        jobs[t, 0], jobs[t, 1], jobs[t, 2], jobs[t, 3], jobs[t, 4] = dt, M, size, k, tdims[1]
        jobs[t, 5], jobs[t, 6], jobs[t, 7], jobs[t, 8] = energy, active, tables, t_a
        jobs[t, 9], jobs[t, 10], jobs[t, 11] = ints, out, order_at
        jobs[t, 12] = i
        while i < M and work[i + 1] * T <= work[M] * (t + 1):
            i += 1
        if t == T - 1:
            i = M
        jobs[t, 13] = i
    ffi.share_out(_run, jobs, T, create, join, worker)
    return ptr(0)

@numba.cfunc(types.voidptr(types.voidptr), nopython=True, cache=True)
def _worker(job):
    _run(carray(job, (_JOB,), dtype=np.int64))
    return ptr(0)


def _register():
    return ffi.register_threaded(TARGET, _handle, _worker)


def evolve_states(energy, active, s_tab, A_tab, B_tab, t_a, num_steps, order):
    """Final states of the anneal of a batch of models, in one compiled call.

    Args:
      energy: ``(M, 2^k)`` float32 or float64, each model's problem energy over its register.
      active: ``(M, k)`` bool, the qubits that carry a variable (the others are projected out).
      s_tab, A_tab, B_tab: ``(P,)`` the schedule table (``A``, ``B`` in GHz at ``s``).
      t_a: the anneal time (ns), a scalar; num_steps: the number of steps, an int32 scalar or
        ``(M,)`` (each model's own; may be traced); order: 2 or 4, the product formula (static).

    Returns ``(M, 2^k)`` complex64 (complex128 for float64 energies): the amplitudes
    ``_evolve._evolve_one`` computes, in float64 arithmetic. Raises ``ValueError`` for
    mismatched shapes, another dtype or another order."""
    if order not in (2, 4):
        raise ValueError(f"order must be 2 or 4; got {order!r}")
    _register()
    energy = jnp.asarray(energy)
    dt = energy.dtype
    if dt not in (jnp.float32, jnp.float64):
        raise ValueError(f"energy must be float32 or float64; got {dt}")
    active = jnp.asarray(active, bool)
    if energy.ndim != 2 or active.ndim != 2 or energy.shape[0] != active.shape[0] or (
            energy.shape[1] != 1 << active.shape[1]):
        raise ValueError(f"energy must be (M, 2^k) and active (M, k); got energy {energy.shape}, "
                         f"active {active.shape}")
    M = energy.shape[0]
    steps = jnp.asarray(num_steps, jnp.int32)
    if steps.ndim > 1 or (steps.ndim == 1 and steps.shape[0] != M):
        raise ValueError(f"num_steps must be a scalar or (M,) = ({M},); got shape {steps.shape}")
    cdt = jnp.complex64 if dt == jnp.float32 else jnp.complex128
    if M == 0:
        return jnp.zeros(energy.shape, cdt)
    tables = jnp.stack([jnp.asarray(s_tab, dt), jnp.asarray(A_tab, dt), jnp.asarray(B_tab, dt)])
    ints = jnp.concatenate([jnp.full((1,), order, jnp.int32), jnp.broadcast_to(steps, (M,))])
    return jax.ffi.ffi_call(TARGET, _vma.result_like(energy.shape, cdt, energy, active),
                            vmap_method="sequential")(energy, active, tables,
                                                      jnp.asarray(t_a, dt), ints)
