"""The automatic step count of the anneal simulator: the steps it takes against the steps a
model needs, and against the former phase-based rule, side by side in one run.

For random models (``fields``: strong random fields, weak banded couplings, like an attention
query; ``dense``: dense random couplings), on the linear and D-Wave-like schedules, anneal times
``--annealing-times`` and a range of field sums ``F = max_i |h_i| + sum_j |J_ij|``, the script
finds the fewest steps (on a grid of ratio 2^(1/4)) at which the largest amplitude error is
within the tolerance, the error measured against the same integrator at 8 times the rule's count
(float64). It prints, per configuration, the medians of:

- ``needed``: that fewest count;
- ``rule``: :func:`isingattn.quantum.default_num_steps`, and the largest error at it;
- ``former``: the rule before (``phi = (tol / (c_p Phi))^(1/p)`` per step, ``c_4 = 2e-3``,
  ``c_2 = 1e-2``, at most 0.25 rad, ``Phi`` the total phase; rounded as the rule rounds), and
  the largest error at it;

and the largest ``needed / (pi^(p+1) t_a^(p+1) G / tol)^(1/p)`` (``G`` the rule's error
integral) over the models for which a phase of 1 rad per step is not enough (the rule's phase
bound, 0.8 rad, covers the others): the rule's constant ``K_p`` is 1.2 times the largest such
ratio measured. Deterministic (fixed seeds); no timing: the count is the cost.

Run::

    .venv/bin/python benchmarks/bench_step_count.py            # the full grid (minutes)
    .venv/bin/python benchmarks/bench_step_count.py --quick    # a few configurations
"""

from __future__ import annotations

import argparse
import math

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp

from isingattn import quantum
from isingattn.models import IsingModel

#: The former rule's error constants (the anchor).
FORMER_CONSTANT = {2: 1e-2, 4: 2e-3}
GRID = np.unique(np.round(2 ** (np.arange(12, 100) / 4)).astype(np.int64))


def former_num_steps(schedule, t_a, F, order, tol):
    phi_total = quantum.total_phase(schedule, t_a, F)
    phi = min(0.25, (tol / (FORMER_CONSTANT[order] * phi_total)) ** (1 / order))
    n = max(quantum.MIN_STEPS, math.ceil(phi_total / phi))
    e = max(0, n.bit_length() - quantum.COUNT_BITS)  # rounded as the rule rounds
    return ((n + (1 << e) - 1) >> e) << e


def random_models(kind, scale, n, count, rng):
    band = np.abs(np.subtract.outer(np.arange(n), np.arange(n))) <= 2
    if kind == "fields":
        h = rng.normal(0, scale, (count, n))
        J = np.triu(rng.normal(0, 0.3, (count, n, n)) * band, 1)
    else:
        h = rng.normal(0, 0.3 * scale, (count, n))
        J = np.triu(rng.normal(0, scale / np.sqrt(n), (count, n, n)), 1)
    return h, J + np.swapaxes(J, -1, -2)


def measure(schedule, t_a, h, J, order, tol, check_only=False):
    """(F, needed, rule, error at rule, former, error at former) of one model (with
    ``check_only``, needed and the former rule's figures are NaN)."""
    model = IsingModel(jnp.asarray(h), jnp.asarray(J))
    F = float(np.max(np.abs(h) + np.abs(J).sum(-1)))
    rule = quantum.default_num_steps(schedule, t_a, F, order=order, tolerance=tol)
    former = former_num_steps(schedule, t_a, F, order, tol)

    def state(N):
        return np.asarray(quantum.final_state(model, schedule, t_a, num_steps=int(N), order=order))

    ref = state(8 * rule)

    def err(N):
        return float(np.abs(state(N) - ref).max())

    if check_only:
        return F, math.nan, rule, err(rule), math.nan, math.nan
    lo, hi = 0, int(np.searchsorted(GRID, 4 * max(rule, former)))
    while lo < hi:  # fewest grid count within tol (the error falls with the count)
        mid = (lo + hi) // 2
        if err(GRID[mid]) <= tol:
            hi = mid
        else:
            lo = mid + 1
    return F, int(GRID[lo]), rule, err(rule), former, err(former)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few configurations")
    ap.add_argument("--order", type=int, default=4, choices=(2, 4))
    ap.add_argument("--tolerance", type=float, default=1e-4)
    ap.add_argument("--qubits", type=int, default=8)
    ap.add_argument("--models", type=int, default=3, help="models per configuration")
    ap.add_argument("--scales", default="0.3,1,3,10,30,100",
                    help="comma-separated field scales of the full grid (F is about 2-4 times "
                         "the scale)")
    ap.add_argument("--annealing-times", default="0.05,0.1,0.5,2,5",
                    help="comma-separated anneal times (ns) of the full grid")
    ap.add_argument("--check-only", action="store_true",
                    help="only the rule's count and its error (no search, no former rule): "
                         "for strong fields, where the former rule's counts take long")
    args = ap.parse_args(argv)
    if args.models < 1 or not 1 <= args.qubits <= quantum.MAX_QUBITS or not args.tolerance > 0:
        ap.error(f"--models must be >= 1, --qubits in [1, {quantum.MAX_QUBITS}], --tolerance "
                 f"> 0; got {args.models}, {args.qubits}, {args.tolerance}")
    rng = np.random.default_rng(7)
    if args.quick:
        grid = [("dwave_like", 0.5, s, "fields") for s in (1, 30, 100)]
    else:
        grid = [(name, t_a, s, kind) for name in ("dwave_like", "linear")
                for t_a in map(float, args.annealing_times.split(","))
                for s in map(float, args.scales.split(","))
                for kind in ("fields", "dense")]
    p, tol = args.order, args.tolerance
    print(f"order {p}, tolerance {tol:g}, {args.qubits} qubits, {args.models} models per row; "
          "medians per row")
    print(f"{'schedule':10s} {'t_a':>5s} {'kind':6s} {'F':>7s} {'needed':>7s} {'rule':>7s} "
          f"{'err':>8s} {'former':>7s} {'err':>8s} {'former/rule':>11s}")
    ratios, worst_rule, worst_former, total = [], 0.0, 0.0, np.zeros(3)
    for name, t_a, scale, kind in grid:
        schedule = quantum.as_schedule(name)
        h, J = random_models(kind, scale, args.qubits, args.models, rng)
        rows = np.array([measure(schedule, t_a, h[b], J[b], p, tol, args.check_only)
                         for b in range(len(h))])
        F, need, rule, e_rule, former, e_former = np.median(rows, axis=0)
        print(f"{name:10s} {t_a:5.2f} {kind:6s} {F:7.1f} {need:7.0f} {rule:7.0f} {e_rule:8.1e} "
              f"{former:7.0f} {e_former:8.1e} {former / rule:11.2f}", flush=True)
        worst_rule = max(worst_rule, rows[:, 3].max())
        worst_former = max(worst_former, rows[:, 5].max())
        total += rows[:, [1, 2, 4]].sum(0)
        moments = quantum.error_moments(schedule, p)
        for Fb, needed in rows[:, :2]:
            # the fit of K_p: models that need more than MIN_STEPS and more than 1 rad per step
            if needed > max(quantum.MIN_STEPS, quantum.total_phase(schedule, t_a, Fb)):
                G = (math.pi * t_a) ** (p + 1) * sum(c * Fb ** j for j, c in enumerate(moments))
                ratios.append(needed / (G / tol) ** (1 / p))
    if args.check_only:
        print(f"largest error at the rule's count {worst_rule:.2e} (tolerance {tol:g})")
        return
    print(f"largest error at the rule's count {worst_rule:.2e}, at the former rule's "
          f"{worst_former:.2e} (tolerance {tol:g})")
    print(f"steps summed over the models: needed {total[0]:.0f}, rule {total[1]:.0f}, former "
          f"{total[2]:.0f} (former / rule {total[2] / total[1]:.2f})")
    if ratios:
        print(f"largest needed / (pi^(p+1) t_a^(p+1) G / tol)^(1/p) over the {len(ratios)} "
              f"models that need more than {quantum.MIN_STEPS} steps and more than 1 rad of "
              f"the total phase per step: {max(ratios):.3f} (x 1.2 = {1.2 * max(ratios):.3f})")


if __name__ == "__main__":
    main()
