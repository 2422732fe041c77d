"""2D Ising ferromagnet on periodic L x L lattices: the phase transition seen by Swendsen–Wang.

For every L and beta on a grid around beta_c = ln(1 + sqrt 2) / 2 this samples the torus with
:class:`~isingattn.samplers.SwendsenWangSampler` and measures, per site,

* energy e = <E> / N, with the exact finite-lattice value (Kaufman) and Onsager's L = infinity
  curve overlaid;
* |m| = <|M|> / N, with Onsager–Yang's spontaneous magnetization overlaid;
* specific heat c = beta^2 Var(E) / N, with Kaufman's exact finite-lattice curve;
* susceptibility chi = beta N (<m^2> - <|m|>^2);
* Binder cumulant U = 1 - <m^4> / (3 <m^2>^2), whose curves for different L cross near beta_c.

Error bars: MCSE of means from arviz's ESS; for c, chi and U the spread of the per-chain
estimates over sqrt(chains). Results go to ``<out>/ising2d_phase.csv`` (one row per (L, beta),
appended as soon as the point is done, so an interrupted run keeps its finished points and a
re-run skips them; ``--fresh`` starts over), ``ising2d_phase.json`` (Binder crossings) and ``ising2d_phase.png``.

Usage::

    .venv/bin/python analysis/ising2d_phase.py                    # L = 8, 16, 32
    .venv/bin/python analysis/ising2d_phase.py --sizes 8 16 --samples 500 --out /tmp/phase
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time

import jax
import numpy as np
from tqdm import tqdm

from isingattn.diagnostics import effective_sample_size, magnetization
from isingattn.exact import (
    BETA_C,
    kaufman_mean_energy,
    kaufman_specific_heat,
    onsager_energy_per_site,
    onsager_magnetization,
)
from isingattn.models import square_lattice
from isingattn.samplers import SwendsenWangSampler

from _results import ResultsTable  # analysis/_results.py (the script's folder)

FIELDS = ["L", "beta", "e", "e_err", "e_exact", "abs_m", "abs_m_err", "c", "c_err", "c_exact",
          "chi", "chi_err", "binder", "binder_err", "ess_e", "ess_m", "mean_cluster_size",
          "seconds"]


def default_betas():
    coarse = np.linspace(0.30, 0.60, 13)
    fine = np.linspace(0.41, 0.47, 7)
    return np.unique(np.round(np.concatenate([coarse, fine, [BETA_C]]), 6))


def _mcse(x):
    x = np.asarray(x, float)
    ess = float(effective_sample_size(x, method="mean"))
    return x.std() / np.sqrt(max(ess, 1.0)), ess


def _per_chain(stat, *series):
    """Estimate ``stat`` on every chain; return (estimate on all chains, spread / sqrt(chains))."""
    allv = stat(*(s.reshape(1, -1) for s in series))[0]
    per = np.array([stat(*(s[c:c + 1] for s in series))[0] for c in range(series[0].shape[0])])
    return float(allv), float(per.std(ddof=1) / np.sqrt(len(per)))


def measure_point(sampler, L, beta, key, num_samples, num_chains, num_burnin):
    model = square_lattice(L, beta=beta)
    N = L * L
    t0 = time.perf_counter()
    s = sampler.sample(model, key, num_samples, num_chains=num_chains, num_burnin=num_burnin)
    E = np.asarray(s.energy, float)  # (chain, draw)
    m = np.asarray(magnetization(s, model), float)
    am = np.abs(m)
    e_err, ess_e = _mcse(E / N)
    m_err, ess_m = _mcse(am)

    def c_stat(E):
        return beta**2 * E.var(axis=-1) / N

    def chi_stat(m):
        return beta * N * ((m**2).mean(-1) - np.abs(m).mean(-1) ** 2)

    def u_stat(m):
        return 1 - (m**4).mean(-1) / (3 * (m**2).mean(-1) ** 2)

    c, c_err = _per_chain(c_stat, E)
    chi, chi_err = _per_chain(chi_stat, m)
    U, U_err = _per_chain(u_stat, m)
    return {
        "L": L, "beta": beta, "e": E.mean() / N, "e_err": e_err,
        "e_exact": float(kaufman_mean_energy(L, L, beta)) / N,
        "abs_m": am.mean(), "abs_m_err": m_err, "c": c, "c_err": c_err,
        "c_exact": float(kaufman_specific_heat(L, L, beta)), "chi": chi, "chi_err": chi_err,
        "binder": U, "binder_err": U_err, "ess_e": ess_e, "ess_m": ess_m,
        "mean_cluster_size": float(np.mean(s.info["mean_cluster_size"])),
        "seconds": time.perf_counter() - t0,
    }


def binder_crossings(rows):
    """beta where U_L1(beta) = U_L2(beta) for consecutive sizes (linear interpolation of the
    difference between grid points; the crossing closest to beta_c if there are several)."""
    sizes = sorted({int(r["L"]) for r in rows})
    out = []
    for L1, L2 in itertools.pairwise(sizes):
        a = {r["beta"]: r["binder"] for r in rows if int(r["L"]) == L1}
        b = {r["beta"]: r["binder"] for r in rows if int(r["L"]) == L2}
        bs = sorted(set(a) & set(b))
        d = np.array([b[x] - a[x] for x in bs])
        cands = []
        for i in range(len(bs) - 1):
            if d[i] == 0 or d[i] * d[i + 1] < 0:
                t = d[i] / (d[i] - d[i + 1]) if d[i] != d[i + 1] else 0.0
                cands.append(bs[i] + t * (bs[i + 1] - bs[i]))
        if cands:
            best = min(cands, key=lambda x: abs(x - BETA_C))
            out.append({"L1": L1, "L2": L2, "beta_cross": best,
                        "relative_to_beta_c": best / BETA_C - 1})
    return out


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({int(r["L"]) for r in rows})
    colors = plt.cm.viridis(np.linspace(0.1, 0.85, len(sizes)))
    fig, axes = plt.subplots(2, 3, figsize=(15, 9), constrained_layout=True)
    grid = np.linspace(0.28, 0.62, 400)
    ax_e, ax_m, ax_c, ax_chi, ax_u, ax_dev = axes.ravel()
    ax_e.plot(grid, onsager_energy_per_site(grid), "k-", lw=1.5, label="Onsager, L = ∞")
    ax_m.plot(grid, onsager_magnetization(grid), "k-", lw=1.5, label="Onsager–Yang, L = ∞")
    for L, col in zip(sizes, colors):
        r = sorted((x for x in rows if int(x["L"]) == L), key=lambda x: x["beta"])
        b = np.array([x["beta"] for x in r])

        def col_(k, r=r):
            return np.array([x[k] for x in r])

        ax_e.plot(grid, kaufman_mean_energy(L, L, grid) / L**2, "-", color=col, lw=0.8, alpha=0.7)
        ax_e.errorbar(b, col_("e"), col_("e_err"), fmt="o", ms=4, color=col, label=f"SW, L = {L}")
        ax_m.errorbar(b, col_("abs_m"), col_("abs_m_err"), fmt="o-", ms=4, lw=0.8, color=col,
                      label=f"L = {L}")
        ax_c.plot(grid, kaufman_specific_heat(L, L, grid), "-", color=col, lw=0.8, alpha=0.7)
        ax_c.errorbar(b, col_("c"), col_("c_err"), fmt="o", ms=4, color=col, label=f"L = {L}")
        ax_chi.errorbar(b, col_("chi"), col_("chi_err"), fmt="o-", ms=4, lw=0.8, color=col,
                        label=f"L = {L}")
        ax_u.errorbar(b, col_("binder"), col_("binder_err"), fmt="o-", ms=4, lw=0.8, color=col,
                      label=f"L = {L}")
        z = (col_("e") - col_("e_exact")) / col_("e_err")
        ax_dev.plot(b, z, "o-", ms=4, lw=0.8, color=col, label=f"L = {L}")
    for ax in axes.ravel():
        ax.axvline(BETA_C, color="gray", ls=":", lw=1)
        ax.set_xlabel(r"$\beta J$")
        ax.grid(alpha=0.3)
    ax_e.set_ylabel("energy per site  e")
    ax_e.set_title("energy (lines: Kaufman exact finite L; black: Onsager)")
    ax_m.set_ylabel(r"$\langle |m| \rangle$")
    ax_m.set_title("|magnetization| per site")
    ax_c.set_ylabel(r"$c = \beta^2\,\mathrm{Var}(E)/N$")
    ax_c.set_title("specific heat (lines: Kaufman exact finite L)")
    ax_chi.set_ylabel(r"$\chi = \beta N(\langle m^2\rangle - \langle |m|\rangle^2)$")
    ax_chi.set_yscale("log")
    ax_chi.set_title("susceptibility")
    ax_u.set_ylabel(r"$U = 1 - \langle m^4\rangle / 3\langle m^2\rangle^2$")
    ax_u.set_title(r"Binder cumulant (dotted: $\beta_c$)")
    ax_dev.axhline(0, color="k", lw=0.8)
    for yv in (-2, 2):
        ax_dev.axhline(yv, color="gray", lw=0.8, ls="--")
    ax_dev.set_ylabel("(e − e_Kaufman) / MCSE")
    ax_dev.set_title("energy vs exact finite-lattice value")
    for ax in axes.ravel():
        ax.legend(fontsize=8)
    fig.suptitle("2D Ising ferromagnet, periodic L×L, Swendsen–Wang", fontsize=14)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32],
                   help="lattice sizes L (periodic L x L; default: %(default)s)")
    p.add_argument("--betas", type=float, nargs="+", default=None,
                   help="inverse temperatures (default: 0.30..0.60 plus a fine grid near beta_c)")
    p.add_argument("--samples", type=int, default=2000,
                   help="draws (SW updates) per chain (default: %(default)s)")
    p.add_argument("--chains", type=int, default=4,
                   help="independent chains per point, for the error bars (default: %(default)s)")
    p.add_argument("--burnin", type=int, default=200,
                   help="SW updates discarded at the start of each chain (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the JAX key (default: 0)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"),
                   help="folder for ising2d_phase.csv/.json/.png (default: analysis/results)")
    p.add_argument("--fresh", action="store_true",
                   help="start over: delete the points already in the CSV")
    args = p.parse_args(argv)
    for name in ("samples", "chains"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1; got {getattr(args, name)}")
    if args.burnin < 0 or min(args.sizes) < 3:
        p.error(f"--burnin must be >= 0 and --sizes >= 3 (periodic lattices); got "
                f"{args.burnin} and {args.sizes}")
    os.makedirs(args.out, exist_ok=True)
    csv_path = os.path.join(args.out, "ising2d_phase.csv")
    # samples, chains, burn-in and seed set a point's precision, not what it measures (its
    # error bars say how precise it is), so a re-run with others may add points to the table
    table = ResultsTable(
        csv_path, FIELDS, lambda r: (int(r["L"]), round(r["beta"], 6)),
        parse=lambda r: {k: float(v) for k, v in r.items()}, fresh=args.fresh)
    done = table.done
    betas = np.asarray(args.betas if args.betas else default_betas(), float)
    todo = [(L, float(b)) for L in args.sizes for b in betas if (L, round(float(b), 6)) not in done]
    sampler = SwendsenWangSampler()
    key = jax.random.key(args.seed)
    for L, b in tqdm(todo, desc="(L, beta) points", unit="pt"):
        k = jax.random.fold_in(jax.random.fold_in(key, L), round(b * 1e6))
        table.append(measure_point(sampler, L, b, k, args.samples, args.chains, args.burnin))
    rows = [r for r in table.rows if int(r["L"]) in args.sizes]
    crossings = binder_crossings(rows)
    with open(os.path.join(args.out, "ising2d_phase.json"), "w") as f:
        json.dump({"beta_c": BETA_C, "binder_crossings": crossings,
                   "samples": args.samples, "chains": args.chains}, f, indent=2)
    plot(rows, os.path.join(args.out, "ising2d_phase.png"))
    for c in crossings:
        print(f"Binder crossing L={c['L1']}/{c['L2']}: beta = {c['beta_cross']:.4f} "
              f"(beta_c = {BETA_C:.4f}, {100 * c['relative_to_beta_c']:+.2f}%)")
    print(f"wrote {csv_path} and ising2d_phase.png / .json in {args.out}")


if __name__ == "__main__":
    main()
