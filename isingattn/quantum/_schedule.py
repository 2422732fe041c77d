"""Annealing schedules ``A(s)``, ``B(s)`` of the transverse-field Ising Hamiltonian.

``H(s) = -(A(s)/2) sum_i X_i + (B(s)/2) H_P(Z)`` with ``s = t / t_a`` in ``[0, 1]``. ``A`` and
``B`` are energies divided by Planck's constant, in GHz, as D-Wave publishes them per solver; with
``t`` in ns the phase a state of energy ``E`` (GHz) picks up in time ``t`` is ``2 pi E t``.

Every schedule is stored as a table ``(s, A, B)`` and evaluated by linear interpolation (a
two-row table is exact for the linear schedule); the simulator and :func:`effective_beta` use the
same interpolant, so they describe the same Hamiltonian.
"""

from __future__ import annotations

import csv
import os
from typing import NamedTuple

import numpy as np


class AnnealingSchedule(NamedTuple):
    """``A(s)`` and ``B(s)`` in GHz (energy / h) on a table of ``s`` values.

    Fields: ``s`` (K,), strictly increasing from ``s[0] == 0`` to ``s[-1] == 1``; ``A`` (K,),
    the driver (transverse-field) strength ``A(s) >= 0`` in GHz; ``B`` (K,), the problem
    strength ``B(s) >= 0`` in GHz; ``name``, a label recorded in sampler ``info``.

    Build one with :func:`linear_schedule`, :func:`dwave_like_schedule`,
    :func:`schedule_from_table` or :func:`load_schedule_csv` (these validate; the bare constructor
    does not).
    """

    s: np.ndarray
    A: np.ndarray
    B: np.ndarray
    name: str = "custom"

    def __call__(self, s):
        """``(A(s), B(s))`` by linear interpolation in the table (numpy, float64)."""
        s = np.asarray(s, float)
        return np.interp(s, self.s, self.A), np.interp(s, self.s, self.B)

    @property
    def knots(self) -> int:
        return len(self.s)

    def scale(self) -> float:
        """``max_s max(A(s), B(s))`` in GHz (the energy scale of the schedule)."""
        return float(max(np.max(self.A), np.max(self.B)))

    def __repr__(self):
        return (
            f"AnnealingSchedule(name={self.name!r}, knots={self.knots}, "
            f"A(0)={self.A[0]:.4g} GHz, A(1)={self.A[-1]:.4g} GHz, "
            f"B(0)={self.B[0]:.4g} GHz, B(1)={self.B[-1]:.4g} GHz)"
        )


def schedule_from_table(s, A, B, *, name: str = "custom") -> AnnealingSchedule:
    """A validated schedule from a table of ``s``, ``A(s)``, ``B(s)`` (GHz).

    ``s`` must be strictly increasing (the anneal runs forward), start at 0 and end at 1;
    ``A`` and ``B`` must be finite and non-negative, with one value per ``s``.
    """
    s = np.asarray(s, float).reshape(-1) if np.ndim(s) else np.asarray([s], float)
    A = np.asarray(A, float).reshape(-1)
    B = np.asarray(B, float).reshape(-1)
    if not (len(s) == len(A) == len(B)):
        raise ValueError(
            f"schedule table columns must have equal lengths; got s: {len(s)}, A: {len(A)}, "
            f"B: {len(B)}"
        )
    if len(s) < 2:
        raise ValueError(f"schedule table needs at least 2 rows (s = 0 and s = 1); got {len(s)}")
    for col, arr in (("s", s), ("A", A), ("B", B)):
        if not np.all(np.isfinite(arr)):
            i = int(np.argmax(~np.isfinite(arr)))
            raise ValueError(f"schedule column {col} must be finite; row {i} is {arr[i]}")
    if np.any(s < 0) or np.any(s > 1):
        i = int(np.argmax((s < 0) | (s > 1)))
        raise ValueError(
            f"schedule s must lie in [0, 1] (s = t / t_a); row {i} has s = {s[i]:.6g}"
        )
    d = np.diff(s)
    if np.any(d <= 0):
        i = int(np.argmax(d <= 0))
        raise ValueError(
            "schedule s must be strictly increasing (the anneal runs forward in s); "
            f"rows {i} and {i + 1} have s = {s[i]:.6g} then {s[i + 1]:.6g}"
        )
    if s[0] != 0.0 or s[-1] != 1.0:
        raise ValueError(
            f"schedule s must cover the whole anneal, from s = 0 to s = 1; got s from {s[0]:.6g} "
            f"to {s[-1]:.6g}"
        )
    for col, arr in (("A", A), ("B", B)):
        if np.any(arr < 0):
            i = int(np.argmax(arr < 0))
            raise ValueError(
                f"schedule {col}(s) must be >= 0 (GHz); row {i} (s = {s[i]:.6g}) has "
                f"{col} = {arr[i]:.6g}"
            )
    return AnnealingSchedule(s, A, B, name)


def linear_schedule(A0: float = 1.0, B1: float = 1.0) -> AnnealingSchedule:
    """``A(s) = A0 (1 - s)``, ``B(s) = B1 s`` (GHz): the textbook linear interpolation.

    Example:
      >>> sched = linear_schedule(1.0, 1.0)
      >>> [float(x) for x in sched(0.25)]
      [0.75, 0.25]
    """
    for name, v in (("A0", A0), ("B1", B1)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be a finite energy > 0 in GHz; got {v!r}")
    return schedule_from_table([0.0, 1.0], [A0, 0.0], [0.0, B1], name="linear")


def dwave_like_schedule(
    A0: float = 6.0, B0: float = 0.2, B1: float = 11.0, decay: float = 4.0, power: float = 2.0,
    knots: int = 1001,
) -> AnnealingSchedule:
    """A smooth parametric pair with the shape of a D-Wave schedule (GHz):

    ``A(s) = A0 (1 - s) exp(-decay s)``, ``B(s) = B0 + (B1 - B0) s^power``.

    The transverse field starts at ``A0`` and falls off roughly exponentially to 0 at ``s = 1``;
    the problem scale grows from ``B0`` to ``B1`` with upward curvature, the two crossing near
    ``s ~ 0.3``. The defaults give magnitudes like those of published D-Wave schedules; they are
    not a fit to any particular solver (use :func:`load_schedule_csv` with the solver's own
    table for that). Tabulated on ``knots`` evenly spaced values of ``s``.
    """
    for name, v in (("A0", A0), ("B1", B1), ("power", power)):
        if not (np.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be finite and > 0; got {v!r}")
    if not (np.isfinite(decay) and decay >= 0):
        raise ValueError(f"decay must be finite and >= 0; got {decay!r}")
    if not (np.isfinite(B0) and 0 <= B0 <= B1):
        raise ValueError(f"B0 must satisfy 0 <= B0 <= B1 = {B1}; got {B0!r}")
    if int(knots) < 2:
        raise ValueError(f"knots must be an integer >= 2; got {knots!r}")
    s = np.linspace(0.0, 1.0, int(knots))
    A = A0 * (1 - s) * np.exp(-decay * s)
    B = B0 + (B1 - B0) * s**power
    return schedule_from_table(s, A, B, name="dwave_like")


def _is_number(x: str) -> bool:
    try:
        float(x)
        return True
    except ValueError:
        return False


def load_schedule_csv(path, *, name: str | None = None) -> AnnealingSchedule:
    """Read a schedule table from CSV: columns ``s``, ``A(s)``, ``B(s)`` in GHz, in that order.

    This is the layout of the per-solver schedule tables D-Wave publishes (extra columns, such
    as ``C (normalized)``, are ignored; a header row, if present, is skipped). Rows must be
    sorted by increasing ``s`` from 0 to 1.
    """
    path = os.fspath(path)
    rows = []
    with open(path, newline="") as f:
        for lineno, row in enumerate(csv.reader(f), start=1):
            cells = [c.strip() for c in row if c.strip() != ""]
            if not cells or cells[0].startswith("#"):
                continue
            if not all(_is_number(c) for c in cells[:3]):
                if rows:
                    raise ValueError(
                        f"{path}:{lineno}: expected three numbers s, A, B (GHz); got {row!r}"
                    )
                continue  # header
            if len(cells) < 3:
                raise ValueError(f"{path}:{lineno}: expected columns s, A, B; got {row!r}")
            rows.append([float(c) for c in cells[:3]])
    if not rows:
        raise ValueError(f"{path}: no numeric rows s, A, B found")
    t = np.asarray(rows)
    label = name if name is not None else os.path.splitext(os.path.basename(path))[0]
    return schedule_from_table(t[:, 0], t[:, 1], t[:, 2], name=label)


def save_schedule_csv(schedule: AnnealingSchedule, path) -> None:
    """Write ``schedule`` as CSV with header ``s,A(s) (GHz),B(s) (GHz)`` (the layout
    :func:`load_schedule_csv` reads)."""
    with open(os.fspath(path), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["s", "A(s) (GHz)", "B(s) (GHz)"])
        for row in zip(schedule.s, schedule.A, schedule.B):
            w.writerow([f"{v:.10g}" for v in row])


def example_schedule_csv(path, knots: int = 101) -> str:
    """Write a small example table (the default :func:`dwave_like_schedule` on ``knots`` rows)
    to ``path`` in D-Wave's CSV layout and return the path. Generated, not downloaded."""
    save_schedule_csv(dwave_like_schedule(knots=knots), path)
    return os.fspath(path)


SCHEDULES = {"linear": linear_schedule, "dwave_like": dwave_like_schedule}


def as_schedule(schedule) -> AnnealingSchedule:
    """An :class:`AnnealingSchedule` from a schedule, a name in :data:`SCHEDULES`, or a path to
    a CSV table."""
    if isinstance(schedule, AnnealingSchedule):
        return schedule
    if isinstance(schedule, str) and schedule in SCHEDULES:
        return SCHEDULES[schedule]()
    if isinstance(schedule, (str, os.PathLike)) and os.path.exists(schedule):
        return load_schedule_csv(schedule)
    raise ValueError(
        f"schedule must be an AnnealingSchedule, one of {sorted(SCHEDULES)}, or the path of a "
        f"CSV table (s, A, B in GHz); got {schedule!r}"
    )
