"""Exact state-vector simulation of a transverse-field Ising anneal.

``H(t) = -(A(s)/2) sum_i X_i + (B(s)/2) H_P(Z)``, ``s = t / t_a``, with ``A``, ``B`` in GHz
(energy / h) and ``t`` in ns: the state evolves as ``d psi / dt = -i 2 pi H(t) psi``.
``H_P(z) = sum_i a_i z_i + sum_{i<j} b_ij z_i z_j`` is the problem energy in the annealer's
(dimod's) sign; for a SPIN model it is our energy without the offset, ``a = -h``, ``b = -J``
(``H_P(z) = E(z) + offset``). BINARY models are converted to SPIN first (``z = 2 x - 1``), which
changes ``H_P`` only by a constant. ``beta`` of the model plays no part: the schedule and
``t_a`` set how the output is distributed. The offset only adds a global phase and is left out.

State layout: amplitude index ``k`` <-> qubit ``i`` takes bit ``i`` of ``k``, bit 1 = spin +1
(the ordering of :mod:`isingattn.exact`). Masked variables are left out of the simulated
register (held at the low value); a batch whose models have different masks is simulated on a
register of ``max(number of active variables)`` qubits, where a model's unused qubits have no
problem terms (they stay in ``|+>``, an eigenstate of the driver, and are projected out at the
end, which is exactly the evolution without them).

Integrator: the exponential midpoint rule split symmetrically (Strang),
``e^{-i tau D/2} e^{-i tau X} e^{-i tau D/2}`` with coefficients at the midpoint of the step; the
diagonal part is an elementwise phase on a precomputed energy vector, the driver part a 2x2
rotation per qubit applied by pairing amplitudes that differ in one bit. ``order=4`` composes
three such steps (Yoshida's triple jump). Every step is exactly unitary, so the norm is kept to
rounding; the error of the state is ``O(dt^2)`` (``O(dt^4)``).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._kernels import ffi
from .._validation import check_choice, check_positive_int, is_concrete
from ..models import ModelBase, Vartype
from ._schedule import AnnealingSchedule, as_schedule

#: Largest number of simulated (unmasked) qubits: 2^22 complex amplitudes.
MAX_QUBITS = 22
#: Largest n for which a full table over all 2^n states of the model is returned.
MAX_TABLE_N = 24

_YOSHIDA_W1 = 1.0 / (2.0 - 2.0 ** (1.0 / 3.0))
_YOSHIDA_W0 = -(2.0 ** (1.0 / 3.0)) * _YOSHIDA_W1
_SUBSTEPS = {2: (1.0,), 4: (_YOSHIDA_W1, _YOSHIDA_W0, _YOSHIDA_W1)}
#: Target amplitude error of the automatic step count (see :func:`default_num_steps`).
DEFAULT_TOLERANCE = 1e-4
#: Largest phase per step (radians, of :func:`total_phase`) the automatic count allows.
_MAX_STEP_PHASE = 0.8
#: Fewest steps of the automatic step count: resolves the shape of A(s), B(s) even when the
#: anneal is so short that the phases alone would allow fewer (measured on the D-Wave-like
#: schedule: 16 steps leave a relative error of 2e-4 in p - uniform, 64 steps 2e-5).
MIN_STEPS = 64
#: Significant bits the automatic step count is rounded up to (see :func:`default_num_steps`).
COUNT_BITS = 4
#: Constant ``K_p`` of the step-count rule per order (see :func:`default_num_steps`).
_STEP_CONSTANT = {2: 2.71, 4: 1.21}
#: Points of the grid on which the schedule's moments of the step-count rule are integrated.
_MOMENT_GRID = 4097


def _real_dtype():
    return jnp.result_type(float)


def _complex_dtype():
    return jnp.complex128 if _real_dtype() == jnp.float64 else jnp.complex64


class Problem(NamedTuple):
    """A (batch of) model(s) prepared for simulation (host-side bookkeeping, see
    :func:`prepare`).

    ``h``, ``J``: SPIN-form fields and couplings in our sign, on the simulated register, shapes
    ``(M, k)`` and ``(M, k, k)`` (``M`` = flattened batch); ``active`` ``(M, k)`` marks the
    register qubits that carry a variable; ``variable`` ``(M, k)`` is the model variable on each
    qubit (-1 for unused qubits); ``position`` ``(M, n)`` is the qubit of each model variable
    (-1 when masked).
    """

    h: np.ndarray
    J: np.ndarray
    active: np.ndarray
    variable: np.ndarray
    position: np.ndarray
    batch_shape: tuple
    n: int
    vartype: Vartype

    @property
    def num_qubits(self) -> int:
        return self.h.shape[-1]

    @property
    def flip_scales(self) -> np.ndarray:
        """``(M,)``: each model's ``max_i (|h_i| + sum_j |J_ij|)``, its largest single-flip
        half-energy (0 for a model without variables)."""
        flips = np.abs(self.h) + np.sum(np.abs(self.J), axis=-1)
        return np.max(flips, axis=-1, initial=0.0)

    @property
    def flip_scale(self) -> float:
        """``max_i (|h_i| + sum_j |J_ij|)``: the largest single-flip half-energy in the batch."""
        return float(np.max(self.flip_scales, initial=0.0))


def _too_large(k, n):
    return ValueError(
        f"the state-vector simulator supports at most {MAX_QUBITS} active (unmasked) variables "
        f"(2^{MAX_QUBITS} complex amplitudes); this model has {k} active of n = {n}. For larger "
        "models use a classical sampler from isingattn.samplers (simulated annealing, MCMC), "
        "the QPU backend, or isingattn.quantum.effective_model (the short-anneal Boltzmann "
        "approximation) with an exact or MCMC method."
    )


def prepare(model: ModelBase) -> Problem:
    """``model`` (one or a batch) in SPIN form with its active (unmasked) variables laid onto a
    compact qubit register: a :class:`Problem` of ``k`` qubits, ``k`` the most active
    variables of any model of the batch (host-side, NumPy).

    Raises ``TypeError`` for a non-model or traced parameters (the layout is computed on the
    host: call it outside ``jit`` or through ``jax.pure_callback``) and ``ValueError`` when a
    model has more than ``MAX_QUBITS`` active variables (``2^k`` amplitudes per model)."""
    if not isinstance(model, ModelBase):
        raise TypeError(f"model must be an IsingModel or SparseIsingModel; got {type(model)}")
    dense = model.to_dense()
    if not is_concrete(dense.h, dense.J, dense.mask):
        raise TypeError(
            "the diabatic simulator needs concrete model parameters (it lays out the qubit "
            "register on the host); call it outside jit, or through jax.pure_callback"
        )
    spin = dense.to_vartype(Vartype.SPIN)
    batch = model.batch_shape
    n = model.n
    h = np.broadcast_to(np.asarray(spin.active_h, np.float64), batch + (n,)).reshape(-1, n)
    J = np.broadcast_to(np.asarray(spin.active_J, np.float64), batch + (n, n)).reshape(-1, n, n)
    mask = np.broadcast_to(np.asarray(spin.mask), batch + (n,)).reshape(-1, n)
    M = h.shape[0]
    counts = mask.sum(axis=-1)
    k = int(counts.max()) if M else 0
    if k > MAX_QUBITS:
        raise _too_large(k, n)
    order = np.argsort(~mask, axis=-1, kind="stable")[:, :k]  # active variables first
    rows = np.arange(M)[:, None]
    active = mask[rows, order]
    variable = np.where(active, order, -1)
    hc = np.where(active, h[rows, order], 0.0)
    Jc = J[rows[:, :, None], order[:, :, None], order[:, None, :]]
    Jc = Jc * (active[:, :, None] & active[:, None, :])
    position = np.full((M, n), -1, np.int64)
    for m in range(M):
        position[m, order[m][active[m]]] = np.nonzero(active[m])[0]
    return Problem(hc, Jc, active, variable, position, batch, n, model.vartype)


def _spins(bits_idx, nbits, dtype):
    return (2 * ((bits_idx[:, None] >> jnp.arange(nbits, dtype=jnp.int32)) & 1) - 1).astype(dtype)


def _energy_one(h, J):
    """``E(z) = -(h.z + sum_{i<j} J_ij z_i z_j)`` for all ``2^k`` states (offset left out): the
    low and high halves of the bits form two small tables joined by one matrix product."""
    k = h.shape[-1]
    dt = h.dtype
    kl = k // 2
    kh = k - kl
    ZL = _spins(jnp.arange(1 << kl, dtype=jnp.int32), kl, dt)
    ZH = _spins(jnp.arange(1 << kh, dtype=jnp.int32), kh, dt)
    hL, hH = h[:kl], h[kl:]
    JLL, JHH, JHL = J[:kl, :kl], J[kl:, kl:], J[kl:, :kl]
    EL = -(ZL @ hL + 0.5 * jnp.sum((ZL @ JLL) * ZL, axis=-1))
    EH = -(ZH @ hH + 0.5 * jnp.sum((ZH @ JHH) * ZH, axis=-1))
    cross = -(ZH @ JHL) @ ZL.T
    return (EH[:, None] + EL[None, :] + cross).reshape(-1)


@jax.jit
def problem_energies(h, J):
    """Energy vectors ``E(z)`` over the ``2^k`` register states, ``(M, 2^k)``, for SPIN-form
    ``h`` ``(M, k)`` and ``J`` ``(M, k, k)`` in our sign (``H_P = E`` up to the offset)."""
    return jax.vmap(_energy_one)(h, J)


def _rotate_all(psi, c, s):
    """Apply ``prod_i (c + i s X_i)`` to ``psi`` (2^k,): for each qubit, pair the halves of
    blocks of ``2^(i+1)`` amplitudes (those differ in bit ``i``)."""
    k = psi.shape[-1].bit_length() - 1
    isn = jax.lax.complex(jnp.zeros_like(s), s)
    for i in range(k):
        r = psi.reshape(1 << (k - 1 - i), 2 << i)
        a, b = r[:, : 1 << i], r[:, 1 << i :]
        psi = jnp.concatenate([c * a + isn * b, c * b + isn * a], axis=1).reshape(-1)
    return psi


def _evolve_one(energy, active, s_tab, A_tab, B_tab, t_a, num_steps, weights):
    """Final state of one model; ``weights`` the composition weights of one step.

    Every qubit starts in ``|+>`` and every qubit gets the same driver rotation (one scalar
    angle, no per-qubit masking in the inner loop). Unused qubits carry no problem terms, so they
    stay in ``|+>`` (an eigenstate of ``X``) up to the phase ``e^{i sum theta}``; at the end the
    component with those qubits at 0 is kept and rescaled, which is the state of the register
    with the unused qubits left out (held at the low value)."""
    cdtype = _complex_dtype()
    rdtype = energy.dtype
    k = active.shape[-1]
    size = energy.shape[-1]
    psi = jnp.full((size,), 2.0 ** (-k / 2), cdtype)
    nsub = len(weights)
    w = jnp.asarray(weights, rdtype)
    cum = jnp.concatenate([jnp.zeros(1, rdtype), jnp.cumsum(w)])
    N = num_steps.astype(rdtype)
    h_t = t_a / N  # ns per step

    def body(j, carry):
        psi, pending, total = carry
        step, sub = j // nsub, j % nsub
        s_mid = (step.astype(rdtype) + cum[sub] + 0.5 * w[sub]) / N
        dt = w[sub] * h_t
        A = jnp.interp(s_mid, s_tab, A_tab)
        B = jnp.interp(s_mid, s_tab, B_tab)
        half = jnp.pi * dt * B / 2  # 2 pi * (B/2) * (dt/2)
        phase = (pending + half) * energy
        psi = psi * jax.lax.complex(jnp.cos(phase), -jnp.sin(phase))
        theta = jnp.pi * dt * A  # exp(-i 2 pi dt (-(A/2) X)) = cos + i sin X
        psi = _rotate_all(psi, jnp.cos(theta), jnp.sin(theta))
        return psi, half, total + theta

    zero = jnp.zeros((), rdtype)
    psi, pending, total = jax.lax.fori_loop(0, num_steps * nsub, body, (psi, zero, zero))
    phase = pending * energy
    psi = psi * jax.lax.complex(jnp.cos(phase), -jnp.sin(phase))
    unused_bits = jnp.sum(jnp.where(active, 0, 1 << jnp.arange(k, dtype=jnp.int32)))
    u = (k - jnp.sum(active)).astype(rdtype)
    keep = (jnp.arange(size, dtype=jnp.int32) & unused_bits) == 0
    fix = jnp.exp2(u / 2) * jax.lax.complex(jnp.cos(u * total), -jnp.sin(u * total))
    return jnp.where(keep, psi * fix, 0).astype(cdtype)


@functools.partial(jax.jit, static_argnames=("order", "backend"))
def _evolve_batch(energy, active, s_tab, A_tab, B_tab, t_a, num_steps, order, backend="jax"):
    """Final states ``(M, 2^k)`` of every model, ``num_steps`` steps (a scalar, or ``(M,)``:
    each model's own): on ``backend`` ``"numba"`` by the compiled kernel
    (:mod:`isingattn._kernels.anneal`, float64 arithmetic), on ``"jax"`` by :func:`_evolve_one`
    mapped over the batch."""
    if backend == "numba":
        from .._kernels import anneal  # compiled on first use, not when isingattn is imported

        return anneal.evolve_states(energy, active, s_tab, A_tab, B_tab, t_a, num_steps, order)
    weights = _SUBSTEPS[order]
    fn = lambda e, a, n: _evolve_one(e, a, s_tab, A_tab, B_tab, t_a, n, weights)
    k = active.shape[-1]
    steps = jnp.broadcast_to(jnp.asarray(num_steps, jnp.int32), energy.shape[:1])
    return jax.lax.map(lambda t: fn(*t), (energy, active, steps),
                       batch_size=max(1, (1 << 16) >> k))


def check_annealing_time(annealing_time) -> float:
    """``annealing_time`` (ns) as a float: finite and >= 0, else a clear error."""
    try:
        t = float(annealing_time)
    except (TypeError, ValueError):
        raise TypeError(
            f"annealing_time must be a number of ns >= 0; got {annealing_time!r}"
        ) from None
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"annealing_time must be finite and >= 0 (ns); got {annealing_time!r}")
    return t


def check_order(order) -> int:
    """The order of the splitting integrator, checked: ``order`` itself when it is 4 (Yoshida
    composition of three Strang steps) or 2 (Strang), else a ``ValueError`` naming the valid
    orders. What :func:`evolve`, :func:`final_state` and
    :class:`isingattn.samplers.DiabaticAnnealingSampler` accept as ``order``."""
    check_choice("order", order, _SUBSTEPS)
    return order


def total_phase(schedule: AnnealingSchedule, annealing_time: float, flip_scale: float) -> float:
    """``Phi = pi t_a int_0^1 (A(s) + F B(s)) ds`` (radians): the phase scale of the anneal, with
    ``F = max_i (|h_i| + sum_j |J_ij|)`` the largest single-flip half-energy."""
    return float(_total_phase(schedule, annealing_time, flip_scale))


def _total_phase(schedule, annealing_time, F):
    """:func:`total_phase` of a flip scale or an array of them (any array module; the integrals
    enter as Python floats, so an array keeps its dtype)."""
    intA = float(np.trapezoid(schedule.A, schedule.s))
    intB = float(np.trapezoid(schedule.B, schedule.s))
    return math.pi * annealing_time * (intA + F * intB)


@functools.lru_cache(maxsize=64)
def _moments(table: bytes, knots: int, order: int) -> tuple[float, ...]:
    s, A, B = np.frombuffer(table).reshape(3, knots)
    grid = np.union1d(np.linspace(0.0, 1.0, _MOMENT_GRID), s)
    a = np.interp(grid, s, A)
    b = np.interp(grid, s, B)
    return (0.0,) + tuple(math.comb(order - 2, k - 1)
                          * float(np.trapezoid(a ** (order + 1 - k) * b ** k, grid))
                          for k in range(1, order))


def error_moments(schedule: AnnealingSchedule, order: int = 4) -> tuple[float, ...]:
    """``(c_0, ..., c_{p-1})`` with ``c_0 = 0`` and ``c_k = binom(p - 2, k - 1) int_0^1
    A^(p+1-k) B^k ds`` (``p`` the order): the coefficients of the step-count rule's error
    integral ``int_0^1 A^2 (F B) (A + F B)^(p-2) ds = sum_k c_k F^k``
    (:func:`default_num_steps`), on the schedule's linear interpolant (GHz^(p+1))."""
    table = np.stack([np.asarray(x, np.float64) for x in (schedule.s, schedule.A, schedule.B)])
    return _moments(table.tobytes(), table.shape[1], check_order(order))


def default_num_steps(
    schedule: AnnealingSchedule, annealing_time: float, flip_scale: float, *, order: int = 4,
    tolerance: float = DEFAULT_TOLERANCE,
) -> int:
    """Steps for an amplitude error of about ``tolerance``.

    Every factor of the splitting is exact where the driver is off or the problem part is, so
    its error comes from their commutators; the rule bounds it by the error integral
    ``G = int_0^1 A^2 (F B) (A + F B)^(p-2) ds`` (:func:`error_moments`; ``F = max_i (|h_i| +
    sum_j |J_ij|)``) and by the phase per step:
    ``N = max(K_p ((pi t_a)^(p+1) G / tolerance)^(1/p), Phi / 0.8, MIN_STEPS)`` with ``Phi``
    from :func:`total_phase`, ``K_4 = 1.21``, ``K_2 = 2.71``: 1.2 times the largest ratio of
    the steps needed (for a largest amplitude error ``<= tolerance``) to
    ``((pi t_a)^(p+1) G / tolerance)^(1/p)``, and 1/1.2 of a phase of 1 rad per step, over
    random models of 5 to 11 qubits (linear and D-Wave-like schedules, ``t_a`` from 0.05 to
    5 ns, ``F`` from 0.5 to 350; ``benchmarks/bench_step_count.py``). Measured to hold a
    tolerance of 1e-4 (largest error seen 1.3e-5); at 1e-6 the largest error seen was 1.9e-6
    (a few hundred steps, where the error no longer falls steadily with the count).
    Rounded up to :data:`COUNT_BITS` significant bits (at most 1/8 more steps), so that the
    models of a batch, each with its own count, have few distinct counts (the compiled kernel
    tabulates the sub-steps once per count).
    """
    return int(_num_steps(schedule, annealing_time, np.array([float(flip_scale)]), order,
                          tolerance)[0])


#: Most steps one anneal can take (the kernels count in int32).
_MAX_STEPS = 2**31 - 1


def _num_steps(schedule, annealing_time, flip_scales, order, tolerance,
               min_steps=MIN_STEPS) -> np.ndarray:
    """:func:`default_num_steps` of every entry of the float64 array ``flip_scales`` (int64)."""
    F = np.asarray(flip_scales, np.float64)
    return _step_counts(np, schedule, annealing_time, F, order, tolerance,
                        min_steps).astype(np.int64)


def _step_counts(xp, schedule, annealing_time, F, order, tolerance, min_steps=MIN_STEPS):
    """The rule of :func:`default_num_steps` for every entry of the flip scales ``F``, in the
    array module ``xp``: ``numpy`` on the host (float64), ``jax.numpy`` inside a traced program
    (in ``F``'s dtype; :func:`isingattn.quantum.traced_num_steps`). One implementation for both,
    the schedule's integrals and moments computed once for all entries. Returns the counts as
    whole numbers in ``F``'s float dtype (1 where the total phase is 0)."""
    order = check_order(order)
    w = math.pi * annealing_time
    phi_total = _total_phase(schedule, annealing_time, F)
    G = w ** (order + 1) * xp.polyval(
        xp.asarray(error_moments(schedule, order)[::-1], F.dtype), F)
    n = xp.maximum(xp.ceil(_STEP_CONSTANT[order] * (xp.maximum(G, 0.0) / tolerance)
                           ** (1.0 / order)),
                   xp.ceil(phi_total / _MAX_STEP_PHASE))
    n = xp.maximum(float(min_steps), n)
    # rounded up to COUNT_BITS significant bits (frexp's exponent is the bit length of n)
    unit = 2.0 ** xp.maximum(0, xp.frexp(n)[1] - COUNT_BITS)
    n = xp.ceil(n / unit) * unit
    return xp.where(phi_total > 0, n, 1.0)


class Evolution(NamedTuple):
    """Result of :func:`evolve`: ``amplitudes`` ``(M, 2^k)`` complex, the final state of each
    model's register (``M`` the flattened batch, ``k`` qubits); ``problem``, the
    :class:`Problem` it ran on; ``num_steps`` ``(M,)`` int, each model's time steps, and
    ``order``, the order of the product formula used."""

    amplitudes: jax.Array  # (M, 2^k)
    problem: Problem
    num_steps: np.ndarray  # (M,)
    order: int


def evolve(model, schedule="linear", annealing_time=1.0, *, num_steps=None, order=4,
           tolerance=DEFAULT_TOLERANCE, min_steps=MIN_STEPS, backend="auto") -> Evolution:
    """Simulate the anneal ``H(s) = -A(s)/2 sum_i X_i + B(s)/2 H_problem`` of every model of the
    batch on its compact register (:func:`prepare`), from the ground state of the driver, over
    ``annealing_time`` (ns) along ``schedule`` (a name or an ``AnnealingSchedule``), by a
    product formula of ``order`` (2 or 4) in ``num_steps`` steps (an int, or one per model of
    the batch; default: each model enough for ``tolerance`` by the step-count rule of the
    module doc, from its own flip scale, and at least ``min_steps``), on ``backend``: ``"auto"``
    (default: the compiled CPU kernel where JAX runs on the CPU, else JAX), ``"numba"`` or
    ``"jax"`` (same integrator; the kernel computes in float64 whatever the dtype). Returns an
    :class:`Evolution`; sample it with :func:`sample_register` / :func:`register_to_states`.

    Raises ``ValueError`` for a non-positive or non-finite ``annealing_time`` or ``tolerance``,
    an ``order`` other than 2 or 4, a step count (given or automatic) beyond ``2^31 - 1``, an
    unknown ``backend`` (or ``"numba"`` off the CPU), or too many active variables,
    ``TypeError`` as :func:`prepare`."""
    backend = ffi.resolve_backend(backend)
    schedule = as_schedule(schedule)
    t_a = check_annealing_time(annealing_time)
    order = check_order(order)
    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance > 0):
        raise ValueError(f"tolerance must be a finite number > 0; got {tolerance!r}")
    prob = prepare(model)
    M = prob.h.shape[0]
    if num_steps is None:
        min_steps = check_positive_int("min_steps", min_steps)
        steps = _num_steps(schedule, t_a, np.asarray(prob.flip_scales, np.float64).reshape(M),
                           order, tolerance, min_steps)
        if M and steps.max() > _MAX_STEPS:
            raise ValueError(
                f"the automatic step count for annealing_time={t_a} ns and tolerance={tolerance} "
                f"is {int(steps.max())} for the model with the largest fields, beyond "
                f"{_MAX_STEPS}: pass a larger tolerance, a shorter annealing_time or num_steps")
        steps = steps.astype(np.int32)
    elif np.ndim(num_steps) == 0:
        steps = check_positive_int("num_steps", num_steps)
        if steps > _MAX_STEPS:
            raise ValueError(f"num_steps must be at most {_MAX_STEPS}; got {steps}")
        steps = np.full(M, steps, np.int32)
    else:
        steps = np.asarray(num_steps)
        if (steps.size != M or not np.issubdtype(steps.dtype, np.integer)
                or (M and (steps.min() < 1 or steps.max() > _MAX_STEPS))):
            raise ValueError(f"num_steps must be an integer in [1, {_MAX_STEPS}] or one per model "
                             f"({M}); got {steps.dtype} of shape {steps.shape}"
                             + (f" from {steps.min()} to {steps.max()}"
                                if steps.size and np.issubdtype(steps.dtype, np.integer) else ""))
        steps = steps.reshape(M).astype(np.int32)
    rdtype = _real_dtype()
    h = jnp.asarray(prob.h, rdtype)
    J = jnp.asarray(prob.J, rdtype)
    if h.shape[0] == 0:
        amps = jnp.zeros((0, 1 << prob.num_qubits), _complex_dtype())
        return Evolution(amps, prob, steps, order)
    energy = problem_energies(h, J)
    amps = _evolve_batch(
        energy, jnp.asarray(prob.active), jnp.asarray(schedule.s, rdtype),
        jnp.asarray(schedule.A, rdtype), jnp.asarray(schedule.B, rdtype),
        jnp.asarray(t_a, rdtype), jnp.asarray(steps), order, backend,
    )
    return Evolution(amps, prob, steps, order)


def _full_indices(prob: Problem) -> np.ndarray:
    """For each model, the full-model state index of every register state, ``(M, 2^k)``
    (one pass per qubit: no ``2^k x k`` bit table)."""
    k = prob.num_qubits
    M = prob.variable.shape[0]
    idx = np.arange(1 << k, dtype=np.int64)
    out = np.zeros((M, 1 << k), np.int64)
    for j in range(k):
        bit = (idx >> j) & 1
        var = prob.variable[:, j]
        shift = np.where(var >= 0, np.left_shift(1, np.maximum(var, 0), dtype=np.int64), 0)
        out += bit[None, :] * shift[:, None]
    return out


def _check_table(prob: Problem):
    if prob.n > MAX_TABLE_N:
        raise ValueError(
            f"a table over all 2^n states supports n <= {MAX_TABLE_N}; this model has n = "
            f"{prob.n}. Draw samples with DiabaticAnnealingSampler instead (it simulates only the "
            "unmasked variables)."
        )


@functools.partial(jax.jit, static_argnames=("size",))
def _scatter(values, cols, size):
    # register states with an unused qubit at 1 have value 0 and share the index of the state
    # with that qubit at 0: add, not set
    full = jnp.zeros((values.shape[0], size), values.dtype)
    return full.at[jnp.arange(values.shape[0])[:, None], cols].add(values)


def _to_full(values, prob: Problem):
    _check_table(prob)
    cols = jnp.asarray(_full_indices(prob).astype(np.int32))  # n <= MAX_TABLE_N < 31
    full = _scatter(values, cols, 1 << prob.n)
    return full.reshape(prob.batch_shape + (1 << prob.n,))


def final_state(model, schedule="linear", annealing_time=1.0, *, num_steps=None, order=4,
                tolerance=DEFAULT_TOLERANCE, backend="auto") -> jax.Array:
    """Amplitudes ``<z|U(t_a)|+...+>`` of the annealed state, shape ``batch + (2^n,)``.

    Index ``k`` <-> variable ``i`` takes bit ``i`` of ``k`` (bit 1 = +1 / 1), as in
    :func:`isingattn.exact.probabilities`; states with a masked variable off its low value have
    amplitude 0. ``U`` solves ``i d/dt U = 2 pi H(t) U`` (``A``, ``B`` in GHz, ``t`` in ns) with
    ``H_P = E + offset`` in SPIN form, so the global phase is fixed. complex64, or complex128
    when ``jax_enable_x64`` is on.

    Args:
      model: dense or sparse model (any batch shape, ``n <= 24``, at most 22 active variables).
      schedule: :class:`AnnealingSchedule`, ``"linear"``, ``"dwave_like"`` or a CSV path.
      annealing_time: ``t_a`` in ns (>= 0).
      num_steps: integration steps; by default from :func:`default_num_steps`.
      order: 4 (Yoshida composition of three Strang steps, default) or 2 (Strang).
      tolerance: target amplitude error of the automatic step count.
      backend: ``"auto"`` (default), ``"numba"`` (the compiled CPU kernel) or ``"jax"``; see
        :func:`evolve`.
    """
    ev = evolve(model, schedule, annealing_time, num_steps=num_steps, order=order,
                tolerance=tolerance, backend=backend)
    return _to_full(ev.amplitudes, ev.problem)


def output_distribution(model, schedule="linear", annealing_time=1.0, *, num_steps=None,
                        order=4, tolerance=DEFAULT_TOLERANCE, backend="auto") -> jax.Array:
    """Probabilities ``|<z|U(t_a)|+...+>|^2`` of measuring each computational state after the
    anneal, shape ``batch + (2^n,)``, in the layout of :func:`isingattn.exact.probabilities`
    (arguments as in :func:`final_state`, ``backend`` included).

    Example:
      >>> import jax
      >>> from isingattn.models import random_dense
      >>> from isingattn.quantum import output_distribution
      >>> p = output_distribution(random_dense(jax.random.key(0), 4), "linear", 0.5)
      >>> p.shape, round(float(p.sum()), 4)
      ((16,), 1.0)
    """
    ev = evolve(model, schedule, annealing_time, num_steps=num_steps, order=order,
                tolerance=tolerance, backend=backend)
    return _to_full(jnp.abs(ev.amplitudes) ** 2, ev.problem)


@functools.partial(jax.jit, static_argnames=("num_samples",))
def sample_register(key, probs, num_samples):
    """Register-state indices drawn from ``probs`` ``(M, 2^k)``: ``(M, num_samples)``.

    Two-level inverse CDF (high half of the bits from row sums, then the low half within the
    row), so each level is a short cumulative sum and a binary search, not a pass over all
    ``2^k`` states per draw."""
    M, size = probs.shape
    k = size.bit_length() - 1
    kl = k // 2
    rows = probs.reshape(M, 1 << (k - kl), 1 << kl)

    def one(key, p):
        ku, kl_ = jax.random.split(key)
        rs = jnp.sum(p, axis=1)
        crow = jnp.cumsum(rs)
        u = jax.random.uniform(ku, (num_samples,), p.dtype) * crow[-1]
        hi = jnp.clip(jnp.searchsorted(crow, u, side="right"), 0, rs.shape[0] - 1)
        ccol = jnp.cumsum(p[hi], axis=1)  # (num_samples, 2^kl)
        v = jax.random.uniform(kl_, (num_samples,), p.dtype) * ccol[:, -1]
        lo = jax.vmap(lambda c, x: jnp.searchsorted(c, x, side="right"))(ccol, v)
        lo = jnp.clip(lo, 0, (1 << kl) - 1)
        return (hi << kl) + lo

    keys = jax.random.split(key, M)
    return jax.lax.map(lambda t: one(*t), (keys, rows), batch_size=max(1, (1 << 16) >> k))


def register_to_states(indices, prob: Problem, dtype) -> jax.Array:
    """Register indices ``(M, S)`` -> model states ``(M, S, n)`` in the model's vartype, masked
    variables at the low value."""
    n, k = prob.n, prob.num_qubits
    bits = (indices[..., None] >> jnp.arange(k, dtype=indices.dtype)) & 1  # (M, S, k)
    pos = jnp.asarray(np.clip(prob.position, 0, max(k - 1, 0)))  # (M, n)
    on = jnp.asarray(prob.position >= 0)
    if k == 0:
        full = jnp.zeros(indices.shape + (n,), jnp.int32)
    else:
        full = jnp.take_along_axis(bits, pos[:, None, :], axis=-1) * on[:, None, :]
    if prob.vartype is Vartype.SPIN:
        full = 2 * full - 1
    return full.astype(dtype)
