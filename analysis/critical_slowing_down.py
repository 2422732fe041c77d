"""Critical slowing down of the 2D Ising model: Metropolis vs Swendsen–Wang vs Wolff.

At beta_c = ln(1 + sqrt 2) / 2 on periodic L x L lattices this measures the integrated
autocorrelation time tau_int of the energy E and of |m| for each algorithm and size, IN SWEEPS:

* Metropolis (``MetropolisSampler``, checkerboard updates on the lattice): one draw every
  ``thinning`` sweeps, tau_sweeps = tau_draws * thinning;
* Swendsen–Wang: one step = one sweep (every spin can change), thinning 1;
* Wolff: one step = one cluster flip; a flip touches |C| spins, so
  tau_sweeps = tau_flips * <|C|> / N (``info["sweep_fraction"]`` gives <|C|>/N per step).

tau_int = 1 + 2 sum_t rho(t) (the ESS convention; Sokal's papers quote half of it) comes from
:func:`isingattn.diagnostics.integrated_autocorr_time` (autocorrelation averaged over chains,
Sokal's automatic window M >= 5 tau), with Sokal's error
sigma_tau = tau sqrt(2 (2M + 1) / N_draws). Each (algorithm, L) point runs in chunks of the same
shape (one compilation) after one discarded burn-in chunk, until the kept draws reach
``--target`` tau or the point's time budget ``--max-seconds`` is spent (the CSV says which).
The dynamic exponent z comes from a weighted fit of log tau = z log L + const; its error is the
fit's, inflated by sqrt(chi^2/dof) when the points scatter more than their error bars.

Literature (tau of E, sweeps): Metropolis z ~ 2.17, Swendsen–Wang z ~ 0.2-0.35, Wolff
(in sweeps) ~ 0.25 or smaller.

Results: ``<out>/critical_slowing_down.csv`` (one row per algorithm, L and observable,
appended when a point is done; a re-run skips finished points), ``critical_slowing_down.json``
(fits) and ``critical_slowing_down.png``.

Usage::

    .venv/bin/python analysis/critical_slowing_down.py                     # L = 8..64
    .venv/bin/python analysis/critical_slowing_down.py --sizes 8 16 --max-seconds 30
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
import warnings

import jax
import numpy as np
from tqdm import tqdm

from isingattn.diagnostics import abs_magnetization, integrated_autocorr_time
from isingattn.exact import BETA_C
from isingattn.models import square_lattice
from isingattn.samplers import BACKENDS

ALGORITHMS = ("metropolis", "swendsen_wang", "wolff")
LITERATURE_Z = {"metropolis": "2.17", "swendsen_wang": "0.2-0.35", "wolff": "~0.25 or less"}
FIELDS = ["algorithm", "L", "observable", "tau_sweeps", "tau_err", "tau_draws", "window",
          "draws_per_chain", "chains", "thinning", "sweeps_per_draw", "draws_over_tau",
          "converged", "seconds"]


def make_sampler(name):
    if name not in BACKENDS:
        return None
    if name == "wolff":
        return BACKENDS[name](num_flips=1)
    return BACKENDS[name]()


def thinning_for(name, L):
    """Metropolis: keep about 10 draws per expected tau of |m| (measured here: ~0.05 L^2.17
    sweeps at beta_c) to bound memory and time; cluster algorithms keep every step."""
    if name == "metropolis":
        return max(1, int(0.05 * L**2.17 / 10))
    return 1


def measure(name, L, key, *, chains, chunk, target, max_seconds, min_draws=2000):
    sampler = make_sampler(name)
    model = square_lattice(L, beta=BETA_C)
    L * L
    thin = thinning_for(name, L)
    t0 = time.perf_counter()
    x = None
    E, M, frac = [], [], []
    k = 0
    while True:
        opts = {"num_burnin": 0, "thinning": thin}
        if x is not None:
            opts["initial_states"] = x
        s = sampler.sample(model, jax.random.fold_in(key, k), chunk, num_chains=chains, **opts)
        x = s.spins[:, -1]
        if k > 0:  # chunk 0 is burn-in
            E.append(np.asarray(s.energy, float))
            M.append(np.asarray(abs_magnetization(s, model), float))
            frac.append(float(np.mean(s.info["sweep_fraction"])) if name == "wolff" else thin)
        k += 1
        if k < 2:
            continue
        Es, Ms = np.concatenate(E, 1), np.concatenate(M, 1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            taus = [integrated_autocorr_time(y) for y in (Es, Ms)]
        draws = Es.shape[1]
        # per-chain means bias rho(t) down by ~ tau / draws at every lag: insist on long chains
        enough = draws >= min_draws and all(np.isfinite(t) and draws >= target * t for t in taus)
        if enough or time.perf_counter() - t0 > max_seconds:
            break
    sweeps_per_draw = float(np.mean(frac))
    rows = []
    for obs, y in (("E", Es), ("abs_m", Ms)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            tau, M_win = integrated_autocorr_time(y, return_window=True)
        n_tot = y.size
        err = tau * np.sqrt(2 * (2 * M_win + 1) / n_tot) if np.isfinite(tau) else np.nan
        rows.append({
            "algorithm": name, "L": L, "observable": obs,
            "tau_sweeps": tau * sweeps_per_draw, "tau_err": err * sweeps_per_draw,
            "tau_draws": tau, "window": int(M_win), "draws_per_chain": y.shape[1],
            "chains": chains, "thinning": thin, "sweeps_per_draw": sweeps_per_draw,
            "draws_over_tau": y.shape[1] / tau if np.isfinite(tau) else np.nan,
            "converged": bool(np.isfinite(tau) and y.shape[1] >= target * tau),
            "seconds": time.perf_counter() - t0,
        })
    return rows


def fit_z(L, tau, err):
    """Weighted least squares of log tau on log L: (z, z_err, chi2/dof)."""
    L, tau, err = map(np.asarray, (L, tau, err))
    ok = np.isfinite(tau) & np.isfinite(err) & (tau > 0)
    L, tau, err = L[ok], tau[ok], err[ok]
    if len(L) < 2:
        return np.nan, np.nan, np.nan
    x, y, s = np.log(L), np.log(tau), err / tau
    w = 1 / s**2
    A = np.stack([x, np.ones_like(x)], 1)
    cov = np.linalg.inv(A.T @ (A * w[:, None]))
    z, c = cov @ (A.T @ (w * y))
    dof = max(len(L) - 2, 1)
    chi2 = float(np.sum(w * (y - (z * x + c)) ** 2)) / dof if len(L) > 2 else 0.0
    return float(z), float(np.sqrt(cov[0, 0]) * max(1.0, np.sqrt(chi2))), chi2


def load_rows(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for r in csv.DictReader(f):
            r = dict(r)
            for k in ("L", "window", "draws_per_chain", "chains", "thinning"):
                r[k] = int(r[k])
            for k in ("tau_sweeps", "tau_err", "tau_draws", "sweeps_per_draw",
                      "draws_over_tau", "seconds"):
                r[k] = float(r[k])
            r["converged"] = r["converged"] == "True"
            out.append(r)
    return out


def plot(rows, fits, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    style = {"metropolis": ("C3", "o", "Metropolis"), "swendsen_wang": ("C0", "s", "Swendsen–Wang"),
             "wolff": ("C2", "^", "Wolff")}
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), constrained_layout=True)
    for ax, obs, title in zip(axes, ("E", "abs_m"), ("energy E", "|m|")):
        for name in ALGORITHMS:
            r = sorted((x for x in rows if x["algorithm"] == name and x["observable"] == obs),
                       key=lambda x: x["L"])
            if not r:
                continue
            col, mk, lab = style[name]
            L = np.array([x["L"] for x in r])
            tau = np.array([x["tau_sweeps"] for x in r])
            err = np.array([x["tau_err"] for x in r])
            conv = np.array([x["converged"] for x in r])
            f = fits.get(f"{name}/{obs}", {})
            z, ze = f.get("z", np.nan), f.get("z_err", np.nan)
            ax.errorbar(L[conv], tau[conv], err[conv], fmt=mk, color=col, ms=7, capsize=3,
                        label=f"{lab}: z = {z:.2f} ± {ze:.2f}")
            if (~conv).any():
                ax.errorbar(L[~conv], tau[~conv], err[~conv], fmt=mk, color=col, ms=7,
                            mfc="none", capsize=3, label=f"{lab}: run < target·τ (open)")
            if np.isfinite(z):
                grid = np.geomspace(L.min() * 0.9, L.max() * 1.1, 50)
                ax.plot(grid, np.exp(f["intercept"]) * grid**z, "-", color=col, lw=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("L")
        ax.set_ylabel(r"$\tau_{\mathrm{int}}$ [sweeps]")
        ax.set_title(rf"$\tau_{{\mathrm{{int}}}}$ of {title} at $\beta_c$")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=9)
    fig.suptitle("Critical slowing down, 2D Ising, periodic L×L (Wolff: flips × ⟨|C|⟩/N)",
                 fontsize=13)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compute_fits(rows):
    fits = {}
    for name in ALGORITHMS:
        for obs in ("E", "abs_m"):
            r = [x for x in rows if x["algorithm"] == name and x["observable"] == obs]
            if len(r) < 2:
                continue
            L = [x["L"] for x in r]
            z, ze, chi2 = fit_z(L, [x["tau_sweeps"] for x in r], [x["tau_err"] for x in r])
            y = np.log([x["tau_sweeps"] for x in r])
            intercept = float(np.mean(y - z * np.log(L))) if np.isfinite(z) else np.nan
            fits[f"{name}/{obs}"] = {"z": z, "z_err": ze, "chi2_per_dof": chi2,
                                     "intercept": intercept, "sizes": sorted(L),
                                     "literature_z": LITERATURE_Z[name]}
    return fits


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    p.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    p.add_argument("--chains", type=int, default=8)
    p.add_argument("--chunk", type=int, default=500, help="draws per chain per chunk")
    p.add_argument("--target", type=float, default=200.0,
                   help="stop a point once draws per chain >= target * tau")
    p.add_argument("--min-draws", type=int, default=2000,
                   help="kept draws per chain before a point may stop (short chains bias tau "
                        "down: each chain's own mean is removed)")
    p.add_argument("--max-seconds", type=float, default=300.0, help="time budget per point")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    p.add_argument("--fresh", action="store_true", help="ignore points already in the CSV")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    csv_path = os.path.join(args.out, "critical_slowing_down.csv")
    if args.fresh and os.path.exists(csv_path):
        os.remove(csv_path)
    rows = load_rows(csv_path)
    done = {(r["algorithm"], r["L"]) for r in rows}
    missing = [a for a in args.algorithms if make_sampler(a) is None]
    if missing:
        print(f"not registered in isingattn.samplers.BACKENDS, skipped: {', '.join(missing)}")
    todo = [(a, L) for a in args.algorithms if a not in missing for L in args.sizes
            if (a, L) not in done]
    key = jax.random.key(args.seed)
    new = not os.path.exists(csv_path)
    with open(csv_path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        for a, L in tqdm(todo, desc="(algorithm, L) points", unit="pt"):
            k = jax.random.fold_in(jax.random.fold_in(key, L), ALGORITHMS.index(a))
            for row in measure(a, L, k, chains=args.chains, chunk=args.chunk,
                               target=args.target, max_seconds=args.max_seconds,
                               min_draws=args.min_draws):
                w.writerow(row)
                rows.append(row)
            f.flush()
    rows = [r for r in rows if r["L"] in args.sizes and r["algorithm"] in args.algorithms]
    fits = compute_fits(rows)
    with open(os.path.join(args.out, "critical_slowing_down.json"), "w") as f:
        json.dump({"beta_c": BETA_C, "fits": fits}, f, indent=2)
    plot(rows, fits, os.path.join(args.out, "critical_slowing_down.png"))
    for kname, fv in fits.items():
        print(f"z[{kname}] = {fv['z']:.3f} ± {fv['z_err']:.3f} (chi2/dof {fv['chi2_per_dof']:.2f}; "
              f"literature {fv['literature_z']}; L = {fv['sizes']})")
    for r in sorted(rows, key=lambda r: (r["algorithm"], r["L"], r["observable"])):
        print(f"{r['algorithm']:>14} L={r['L']:<3} {r['observable']:<5} tau = "
              f"{r['tau_sweeps']:9.3f} ± {r['tau_err']:.3f} sweeps  ({r['draws_over_tau']:.0f} tau "
              f"per chain{'' if r['converged'] else ', short'})")
    print(f"wrote {csv_path} and critical_slowing_down.png / .json in {args.out}")


if __name__ == "__main__":
    main()
