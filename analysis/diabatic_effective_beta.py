"""Short diabatic anneals sample a high-temperature Boltzmann distribution: check the derived
effective beta against the exact state-vector simulation.

For each schedule (linear ``A0 = B1 = 1 GHz``; the D-Wave-like pair) and a geometric grid of
anneal times ``t_a`` the script computes the exact output distribution ``p`` of a random model
(fields and couplings) and its total variation distance (TVD) to

* the uniform distribution (the ``t_a -> 0`` limit): ``O(t_a^2)``;
* the Boltzmann distribution of :func:`isingattn.quantum.effective_model` (fields at ``beta_h``,
  couplings at ``beta_J``), first-order and short-time expansions: ``O(t_a^4)``;
* the Boltzmann distribution of the model at the best single beta
  (:func:`isingattn.quantum.single_effective_beta`): ``O(t_a^2)`` when the model has both fields
  and couplings, ``O(t_a^4)`` for a couplings-only model (also shown).

Slopes are fitted on the log-log curves over the shortest anneals (``--fit-points``) and printed
next to the predicted ones. Writes ``<out>/diabatic_effective_beta.csv`` (one row per schedule,
model and ``t_a``, appended as soon as the point is done: an interrupted run keeps its finished
points and a re-run with the same settings skips them; ``--fresh`` starts over) and
``<out>/diabatic_effective_beta.png``. Runs in double precision. Run::

    .venv/bin/python analysis/diabatic_effective_beta.py --out analysis/results
"""

from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
from tqdm import tqdm

from isingattn import exact
from isingattn.models import IsingModel
from isingattn.quantum import (
    dwave_like_schedule,
    effective_beta,
    effective_model,
    linear_schedule,
    output_distribution,
    single_effective_beta,
)

from _results import ResultsTable  # analysis/_results.py (the script's folder)

SCHEDULES = {
    "linear": (linear_schedule(1.0, 1.0), (0.01, 2.0)),
    "dwave_like": (dwave_like_schedule(), (0.003, 0.6)),
}
COLUMNS = ["schedule", "model", "t_a_ns", "beta_h", "beta_J", "beta_single", "tv_uniform",
           "tv_first_order", "tv_short_time", "tv_single_beta"]


def make_model(n: int, seed: int, fields: bool = True) -> IsingModel:
    """Fields and couplings ~ N(0, 0.5^2) (fields zero when ``fields`` is False)."""
    rng = np.random.default_rng(seed)
    h = 0.5 * rng.normal(size=n) * fields
    J = np.triu(0.5 * rng.normal(size=(n, n)), 1)
    return IsingModel(h=h, J=J + J.T)


def tv(p, q) -> float:
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def point_key(row):
    return row["schedule"], row["model"], f"{float(row['t_a_ns']):.9g}"


def run(n: int, points: int, seed: int, tolerance: float, done=frozenset()):
    """Yield the row of every (schedule, model, t_a) point whose key is not in ``done``."""
    models = {"fields+couplings": make_model(n, seed), "couplings only": make_model(n, seed, False)}
    for sname, (sched, (lo, hi)) in SCHEDULES.items():
        for mname, model in models.items():
            for t in np.geomspace(lo, hi, points):
                if point_key({"schedule": sname, "model": mname, "t_a_ns": t}) in done:
                    continue
                p = output_distribution(model, sched, t, tolerance=tolerance)
                b = effective_beta(sched, t)
                single = float(single_effective_beta(model, sched, t))
                yield {
                    "schedule": sname, "model": mname, "t_a_ns": float(t), "beta_h": b.fields,
                    "beta_J": b.couplings, "beta_single": single,
                    "tv_uniform": tv(p, 2.0**-n),
                    "tv_first_order": tv(
                        p, exact.probabilities(effective_model(model, sched, t))),
                    "tv_short_time": tv(p, exact.probabilities(
                        effective_model(model, sched, t, expansion="short_time"))),
                    "tv_single_beta": tv(p, exact.probabilities(model.with_beta(single))),
                }


def slopes(rows, fit_points):
    out = []
    for sname in SCHEDULES:
        for mname in ("fields+couplings", "couplings only"):
            sel = sorted((r for r in rows if r["schedule"] == sname and r["model"] == mname),
                         key=lambda r: r["t_a_ns"])[:fit_points]
            t = np.log([r["t_a_ns"] for r in sel])
            for col, pred in (("tv_uniform", 2), ("tv_first_order", 4), ("tv_short_time", 4),
                              ("tv_single_beta", 2 if mname == "fields+couplings" else 4)):
                s = np.polyfit(t, np.log([r[col] for r in sel]), 1)[0]
                out.append((sname, mname, col, float(s), pred))
    return out


def plot(rows, path, n):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    styles = {"tv_uniform": ("uniform", "k", "o"),
              "tv_first_order": ("effective model, first order", "C0", "s"),
              "tv_short_time": ("effective model, short time", "C1", "^"),
              "tv_single_beta": ("single beta", "C2", "d")}
    for ax, sname in zip(axes[:2], SCHEDULES):
        for mname, ls in (("fields+couplings", "-"), ("couplings only", ":")):
            sel = [r for r in rows if r["schedule"] == sname and r["model"] == mname]
            t = np.array([r["t_a_ns"] for r in sel])
            cols = styles if mname == "fields+couplings" else {"tv_single_beta": styles[
                "tv_single_beta"]}
            for col, (label, c, m) in cols.items():
                lab = label + ("" if mname == "fields+couplings" else " (couplings-only model)")
                ax.loglog(t, [r[col] for r in sel], ls, color=c, marker=m, ms=4, label=lab)
        sel = [r for r in rows if r["schedule"] == sname and r["model"] == "fields+couplings"]
        t = np.array([r["t_a_ns"] for r in sel])
        y0 = sel[0]["tv_uniform"]
        ax.loglog(t, y0 * (t / t[0]) ** 2, "--", color="0.6", lw=1, label="slope 2")
        y4 = sel[0]["tv_first_order"]
        ax.loglog(t, y4 * (t / t[0]) ** 4, "--", color="0.3", lw=1, label="slope 4")
        ax.set_xlabel("annealing time $t_a$ (ns)")
        ax.set_ylabel("total variation distance of the output to ...")
        ax.set_title(f"{sname} schedule, n = {n}")
        ax.set_ylim(1e-9, 2)
        ax.legend(fontsize=7)
    ax = axes[2]
    for sname, c in zip(SCHEDULES, ("C0", "C3")):
        sched = SCHEDULES[sname][0]
        t = np.geomspace(*SCHEDULES[sname][1], 60)
        b = effective_beta(sched, t)
        b0 = effective_beta(sched, t, expansion="short_time")
        ax.loglog(t, b.fields, "-", color=c, label=f"{sname}: $\\beta_h$ first order")
        ax.loglog(t, b.couplings, "--", color=c, label=f"{sname}: $\\beta_J$ first order")
        ax.loglog(t, b0.fields, ":", color=c, label=f"{sname}: $\\beta_h$ short time")
    ax.set_xlabel("annealing time $t_a$ (ns)")
    ax.set_ylabel("effective inverse temperature")
    ax.set_title("effective beta of the anneal")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--out", default=os.path.join("analysis", "results"),
                    help="folder for diabatic_effective_beta.csv/.png (default: %(default)s)")
    ap.add_argument("--n", type=int, default=6,
                    help="number of spins of the random model (state vector 2^n; default: 6)")
    ap.add_argument("--points", type=int, default=12,
                    help="anneal times per schedule, a geometric grid (default: %(default)s)")
    ap.add_argument("--fit-points", type=int, default=4,
                    help="shortest anneals used for the fitted slopes (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the random model's fields and couplings (default: 0)")
    ap.add_argument("--tolerance", type=float, default=1e-10,
                    help="amplitude tolerance of the simulator's automatic step count")
    ap.add_argument("--fresh", action="store_true",
                    help="start over: delete the points already in the CSV")
    args = ap.parse_args(argv)
    if args.n < 1 or args.points < 2 or args.fit_points < 2:
        ap.error(f"need --n >= 1, --points >= 2 and --fit-points >= 2 (a slope needs two "
                 f"points); got {args.n}, {args.points} and {args.fit_points}")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    csv_path = os.path.join(args.out, "diabatic_effective_beta.csv")
    table = ResultsTable(
        csv_path, COLUMNS, point_key,
        settings={"n": args.n, "points": args.points, "seed": args.seed},  # the model, the grid
        parse=lambda r: {k: v if k in ("schedule", "model") else float(v) for k, v in r.items()},
        fresh=args.fresh)
    done = table.done
    todo = 2 * len(SCHEDULES) * args.points - len(done)
    for row in tqdm(run(args.n, args.points, args.seed, args.tolerance, done), total=todo,
                    desc="(schedule, model, t_a) points", unit="pt"):
        table.append(row)
    order = {name: i for i, name in enumerate(SCHEDULES)}
    rows = sorted(table.rows, key=lambda r: (order[r["schedule"]], r["model"], r["t_a_ns"]))
    png_path = os.path.join(args.out, "diabatic_effective_beta.png")
    plot(rows, png_path, args.n)
    print(f"n = {args.n} spins, {args.points} anneal times per schedule, "
          f"{time.perf_counter() - t0:.1f} s")
    print(f"log-log slopes of TVD vs t_a over the {args.fit_points} shortest anneals:")
    print(f"  {'schedule':<11}{'model':<18}{'distance to':<18}{'measured':>9}{'predicted':>10}")
    for sname, mname, col, s, pred in slopes(rows, args.fit_points):
        print(f"  {sname:<11}{mname:<18}{col[3:]:<18}{s:9.3f}{pred:10d}")
    print(f"wrote {csv_path} and {png_path}")


if __name__ == "__main__":
    main()
