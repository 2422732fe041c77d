"""Effective inverse temperature of a short (diabatic) anneal, from first-order perturbation
theory in the problem Hamiltonian. Derivation and validity: docs/guide/diabatic.md.

With ``psi(s) = pi t_a int_s^1 A(s') ds'`` the driver phase still to come after ``s`` (radians;
``A`` in GHz, ``t_a`` in ns), the output distribution of the anneal is, to first order in ``B``,

    p(z) = 2^-n [1 - beta_h sum_i a_i z_i - beta_J sum_{i<j} b_ij z_i z_j] + O(gamma^2),
    beta_h = 2 pi t_a int_0^1 B(s) sin(2 psi(s)) ds,
    beta_J = 2 pi t_a int_0^1 B(s) sin(4 psi(s)) ds,

with ``a``, ``b`` the annealer-sign fields and couplings (``a = -h``, ``b = -J`` for a SPIN model)
and ``gamma = pi t_a int_0^1 B ds * ||H_P||``. That is the expansion of the Boltzmann
distribution of the model with fields ``beta_h h`` and couplings ``beta_J J``. For short anneals
``beta_h = 4 pi^2 t_a^2 int_0^1 B(s) int_s^1 A ds' ds (1 + O(t_a^2))`` and ``beta_J = 2 beta_h``
to the same order: the couplings are seen at twice the inverse temperature of the fields.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from .._validation import check_choice
from ..models import IsingModel, ModelBase, Vartype
from ._evolve import check_annealing_time
from ._schedule import AnnealingSchedule, as_schedule

EXPANSIONS = ("first_order", "short_time")
_MAX_POINTS = 1 << 20  # quadrature points: resolves sin(4 psi) up to psi(0) ~ 4000 rad


class EffectiveBeta(NamedTuple):
    """First-order effective inverse temperatures of an anneal (dimensionless: per unit of the
    model's energy ``E``, like the model's own ``beta``).

    Fields: ``fields`` is ``beta_h``, the inverse temperature seen by the fields ``h``;
    ``couplings`` is ``beta_J``, the one seen by the couplings ``J`` (``2 beta_h`` for short
    anneals); ``driver_phase`` is ``psi(0) = pi t_a int_0^1 A ds`` (rad), the short-time regime
    being ``driver_phase << 1``; ``problem_phase`` is ``pi t_a int_0^1 B ds`` (rad per unit
    energy), which times the size of ``H_P`` is the expansion parameter ``gamma`` (the first
    correction is ``O(gamma^2)``, and ``O(t_a^4)`` for short anneals).
    """

    fields: np.ndarray | float
    couplings: np.ndarray | float
    driver_phase: np.ndarray | float
    problem_phase: np.ndarray | float


def _grid(schedule: AnnealingSchedule, points: int):
    s = np.union1d(schedule.s, np.linspace(0.0, 1.0, points))
    A, B = schedule(s)
    return s, A, B


def _remaining(s, f):
    """``int_s^1 f`` on the grid (trapezoid, exact for piecewise-linear ``f`` on its knots)."""
    seg = 0.5 * (f[1:] + f[:-1]) * np.diff(s)
    tail = np.concatenate([np.cumsum(seg[::-1])[::-1], [0.0]])
    return tail


def _one(schedule: AnnealingSchedule, t_a: float, expansion: str) -> EffectiveBeta:
    intA = np.trapezoid(schedule.A, schedule.s)
    intB = np.trapezoid(schedule.B, schedule.s)
    driver = np.pi * t_a * intA
    problem = np.pi * t_a * intB
    # resolve the oscillation of sin(4 psi): >= 64 points per radian of 4 psi(0)
    points = int(min(_MAX_POINTS, max(4097, 64 * 4 * driver + 1)))
    s, A, B = _grid(schedule, points)
    psi = np.pi * t_a * _remaining(s, A)
    if expansion == "first_order":
        bh = 2 * np.pi * t_a * np.trapezoid(B * np.sin(2 * psi), s)
        bJ = 2 * np.pi * t_a * np.trapezoid(B * np.sin(4 * psi), s)
    else:
        bh = 4 * np.pi * t_a * np.trapezoid(B * psi, s)
        bJ = 2 * bh
    return EffectiveBeta(float(bh), float(bJ), float(driver), float(problem))


def effective_beta(schedule="linear", annealing_time=1.0, *,
                   expansion: str = "first_order") -> EffectiveBeta:
    """Effective inverse temperatures ``(beta_h, beta_J)`` of an anneal of length ``t_a``.

    ``expansion="first_order"`` (default): first order in the problem Hamiltonian, exact in the
    driver, ``beta_h = 2 pi t_a int_0^1 B(s) sin(2 psi(s)) ds`` and ``beta_J`` the same with
    ``sin(4 psi)``, ``psi(s) = pi t_a int_s^1 A``. ``expansion="short_time"``: its leading term
    for ``t_a -> 0``, ``beta_h = 4 pi^2 t_a^2 int_0^1 B(s) int_s^1 A(s') ds' ds`` and
    ``beta_J = 2 beta_h`` (for the linear schedule ``beta_h = pi^2 A0 B1 t_a^2 / 6``).

    Either way the anneal's output distribution differs from the Boltzmann distribution of
    :func:`effective_model` by ``O(t_a^4)`` in total variation as ``t_a -> 0`` (relative
    ``O(t_a^2)``: the distribution itself departs from uniform by ``O(t_a^2)``). A single
    ``beta`` describes the output only when the model has fields alone or couplings alone; see
    :func:`single_effective_beta`.

    Args:
      schedule: :class:`AnnealingSchedule`, ``"linear"``, ``"dwave_like"`` or a CSV path.
      annealing_time: ``t_a`` in ns, a number or an array of them.
      expansion: ``"first_order"`` or ``"short_time"``.

    Returns:
      :class:`EffectiveBeta`, each field a float (or an array shaped like ``annealing_time``).

    Example:
      >>> from isingattn.quantum import effective_beta, linear_schedule
      >>> b = effective_beta(linear_schedule(1.0, 1.0), 0.1, expansion="short_time")
      >>> round(b.fields, 6), round(b.couplings / b.fields, 6)  # pi^2 t_a^2 / 6
      (0.016449, 2.0)
    """
    schedule = as_schedule(schedule)
    check_choice("expansion", expansion, EXPANSIONS)
    if np.ndim(annealing_time) == 0:
        return _one(schedule, check_annealing_time(annealing_time), expansion)
    arr = np.asarray(annealing_time, float)
    out = [_one(schedule, check_annealing_time(t), expansion) for t in arr.reshape(-1)]
    return EffectiveBeta(*(np.array(col).reshape(arr.shape) for col in zip(*out)))


def effective_model(model: ModelBase, schedule="linear", annealing_time=1.0, *,
                    expansion: str = "first_order") -> IsingModel:
    """The dense model whose Boltzmann distribution (at ``beta = 1``) is the first-order
    prediction of the anneal's output: SPIN fields ``beta_h h`` and couplings ``beta_J J``
    (SPIN form of ``model``, masks kept), returned in ``model``'s vartype. Compare with
    :func:`output_distribution` through :func:`isingattn.exact.probabilities`."""
    if not isinstance(model, ModelBase):
        raise TypeError(f"model must be an IsingModel or SparseIsingModel; got {type(model)}")
    b = effective_beta(schedule, annealing_time, expansion=expansion)
    spin = model.to_dense().to_vartype(Vartype.SPIN)
    dt = spin.dtype
    eff = IsingModel(
        h=jnp.asarray(b.fields, dt) * spin.active_h,
        J=jnp.asarray(b.couplings, dt) * spin.active_J,
        beta=jnp.ones(model.batch_shape, dt),
        mask=spin.mask,
        labels=model.labels,
    )
    return eff.to_vartype(model.vartype)


def single_effective_beta(model: ModelBase, schedule="linear", annealing_time=1.0, *,
                          expansion: str = "first_order"):
    """The one ``beta`` whose Boltzmann distribution of ``model`` is closest to the anneal's
    output at leading order: ``beta = (beta_h sum_i h_i^2 + beta_J sum_{i<j} J_ij^2) /
    (sum_i h_i^2 + sum_{i<j} J_ij^2)`` (SPIN form, active variables), the least-squares fit of
    ``beta E`` to ``beta_h E_h + beta_J E_J`` over uniform states, which minimizes KL and chi^2
    to leading order. Shape ``batch``. Exact at first order only when fields or couplings vanish.
    """
    b = effective_beta(schedule, annealing_time, expansion=expansion)
    spin = model.to_dense().to_vartype(Vartype.SPIN)
    h2 = jnp.sum(spin.active_h**2, axis=-1)
    J2 = 0.5 * jnp.sum(spin.active_J**2, axis=(-2, -1))
    h2, J2 = jnp.broadcast_arrays(h2, J2)
    tot = h2 + J2
    beta = (b.fields * h2 + b.couplings * J2) / jnp.where(tot > 0, tot, 1.0)
    return jnp.where(tot > 0, beta, b.couplings)


def annealing_time_for_beta(schedule, beta: float, *, which: str = "couplings",
                            expansion: str = "first_order",
                            max_problem_phase: float = 1.0) -> float:
    """The shortest ``t_a`` (ns) at which ``effective_beta(...).<which>`` reaches ``beta``
    (``which`` is ``"fields"`` or ``"couplings"``).

    The search stays in the regime where the expansion holds: ``problem_phase = pi t_a int B``
    at most ``max_problem_phase`` (radians per unit of energy; the first correction is of
    order ``(problem_phase * |H_P|)^2``, so with ``|H_P| ~ 1`` the default 1.0 is the edge of
    that regime). Raises when ``beta`` is not reached there."""
    import scipy.optimize

    schedule = as_schedule(schedule)
    if which not in ("fields", "couplings"):
        raise ValueError(f"which must be 'fields' or 'couplings'; got {which!r}")
    if not (np.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be finite and > 0; got {beta!r}")
    if not (np.isfinite(max_problem_phase) and max_problem_phase > 0):
        raise ValueError(f"max_problem_phase must be finite and > 0; got {max_problem_phase!r}")
    t_max = max_problem_phase / (np.pi * np.trapezoid(schedule.B, schedule.s))

    def f(t):
        return getattr(effective_beta(schedule, t, expansion=expansion), which) - beta

    # scan the rising branch on a geometric grid up to t_max, then refine
    grid = np.geomspace(t_max * 1e-6, t_max, 121)
    prev_t, prev = 0.0, -beta
    for t in grid:
        cur = f(t)
        if cur >= 0:
            return float(scipy.optimize.brentq(f, prev_t, t, xtol=1e-14 * t, rtol=1e-12))
        if cur < prev:
            break
        prev_t, prev = t, cur
    raise ValueError(
        f"beta = {beta} is not reached by the first-order {which} beta of this schedule within "
        f"the short-anneal regime (problem_phase <= {max_problem_phase}, t_a <= {t_max:.4g} ns; "
        f"largest value {prev + beta:.4g} at t_a = {prev_t:.4g} ns). Use a schedule with a larger "
        "B(s), scale the model's energies up, or raise max_problem_phase knowingly."
    )
