"""Critical slowing down of the 2D Ising model: Metropolis vs Swendsen–Wang vs Wolff.

At beta_c = ln(1 + sqrt 2) / 2 on periodic L x L lattices this measures the integrated
autocorrelation time tau_int of the energy E, of |m| and of the signed magnetization m for each
algorithm and size, IN SWEEPS:

* Metropolis (``MetropolisSampler``, checkerboard updates on the lattice): one sweep per step,
  observables recorded every ``thinning`` sweeps (1 up to L = 32, a few sweeps at L = 48, 64,
  always <= tau_E / 50 so the fast part of the energy's autocorrelation is resolved),
  tau_sweeps = tau_draws * thinning;
* Swendsen–Wang: one step = one sweep (every spin can change);
* Wolff: one step = one cluster flip; a flip touches |C| spins, so
  tau_sweeps = tau_flips * <|C|> / N (the kernel's ``info["sweep_fraction"]``).

The chains run on the samplers' driver (:func:`isingattn.samplers.init_chains` /
:func:`~isingattn.samplers.run_chains`) in chunks of the same shape, with an observer that
records only E and m per draw: returning every configuration through ``sampler.sample`` would
cost ~30x more than the sweeps at thinning 1.

tau_int = 1 + 2 sum_t rho(t) (the ESS convention; Sokal's papers quote half of it) comes from
:func:`isingattn.diagnostics.integrated_autocorr_time` with ``mean="pooled"``: one mean over all
chains is removed, so the many chains (64 by default) add up without the ~2 M tau / N_chain
downward bias of per-chain means; Sokal's automatic window M >= 5 tau; Sokal's error
sigma_tau = tau sqrt(2 (2M + 1) / N_total). A check column gives the per-chain-mean estimate too.
Each (algorithm, L) point discards a burn-in (>= 30 expected tau), then runs chunks of the same
shape (one compilation) until chains * draws >= ``--target`` tau and draws per chain >=
``--min-tau-per-chain`` tau for E and |m|, or the point's ``--max-seconds`` are spent (the CSV's
``converged`` says which). A point is fitted when its chains hold at least 50 tau each (so the
window is short against a chain and tau is unbiased), with its precision in its error bar; the
others are drawn open. The signed m is recorded but does not steer the run length: under
Metropolis its sign reverses ~20x more slowly than |m| decorrelates (m carries the slowest, odd
mode), so its Metropolis chains hold only ~10 tau and are not fitted; under the cluster
algorithms, which flip the sign at once, tau(m) is below one sweep. The raw series are kept
(``series/<algorithm>_L<L>.npz``), so the analysis can be redone without rerunning (``--refit``).

The dynamic exponent z comes from weighted fits of log tau = z log L + const (error from the fit,
inflated by sqrt(chi^2/dof) when the points scatter more than their error bars):

* primary, fixed before the data were taken: L >= 16 (corrections to scaling are large on
  small lattices, and more so for E, whose autocorrelation has a large fast, non-critical part);
* all sizes, and over all sizes two three-parameter forms, tau = A L^z (1 + B / L) (a
  correction to scaling) and tau = A + B L^z (an L-independent part of tau_int from the fast,
  non-critical modes), as sensitivity checks;
* effective exponents z_eff(L, 2L) = log2(tau(2L) / tau(L)) show the drift with L.

Literature (tau in sweeps): Metropolis/heat bath z ~ 2.17 (Nightingale & Blöte 1996/2000:
2.1665 ± 0.0012), the same for E, |m| and m; Swendsen–Wang z ~ 0.2-0.35 for E (some authors
fit log L instead); Wolff in sweeps ~ 0.25 or smaller.

Results in ``--out`` (default analysis/results): ``critical_slowing_down.csv`` (one row per
algorithm, L and observable, appended when a point is done; a re-run skips finished points),
``critical_slowing_down.json`` (fits), ``critical_slowing_down.png`` and ``series/``.

Usage (low priority on a shared machine; the CSV makes runs resumable in chunks)::

    nice -n 19 .venv/bin/python analysis/critical_slowing_down.py   # L = 8..64, all three
    .venv/bin/python analysis/critical_slowing_down.py --sizes 8 16 --max-seconds 30
    .venv/bin/python analysis/critical_slowing_down.py --refit      # fits/plot from the CSV
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import jax
import numpy as np
from tqdm import tqdm

from isingattn.diagnostics import integrated_autocorr_time
from isingattn.exact import BETA_C
from isingattn.models import square_lattice
from isingattn.samplers import BACKENDS, init_chains, observables, run_chains

from _results import ResultsTable  # analysis/_results.py (the script's folder)

ALGORITHMS = ("metropolis", "swendsen_wang", "wolff")
OBSERVABLES = ("E", "abs_m", "m")
STOP_ON = ("E", "abs_m")  # signed m under Metropolis is ~20x slower (sign flips): recorded only
SIZES = (8, 12, 16, 24, 32, 48, 64)
FIT_MIN_L = 16
LITERATURE_Z = {"metropolis": "2.17", "swendsen_wang": "0.2-0.35", "wolff": "~0.25 or less"}
FIELDS = ["algorithm", "L", "observable", "tau_sweeps", "tau_err", "tau_draws", "window",
          "tau_sweeps_chain_mean", "draws_per_chain", "chains", "thinning", "sweeps_per_draw",
          "burnin_sweeps", "tau_total", "tau_per_chain", "converged", "seconds"]


def make_sampler(name):
    if name not in BACKENDS:
        return None
    if name == "wolff":
        return BACKENDS[name](num_flips=1)
    return BACKENDS[name]()


def tau_guess(name, L):
    """Rough tau in steps, to size burn-in and thinning (Metropolis: ~0.06 L^2.17 sweeps for
    |m|, from a first run; clusters: a few steps)."""
    return 0.06 * L**2.17 if name == "metropolis" else 10.0


def thinning_for(name, L):
    """Metropolis: record every ~tau(|m|)/150 sweeps, at most 5 (tau_E is a third of
    tau(|m|), so thinning <= tau_E / 50); cluster algorithms record every step."""
    if name != "metropolis":
        return 1
    # at most 5: thinning by k adds about k / 4 sweeps to tau_E for k <= 10 (its fast part is
    # summed coarsely), measured on the L = 24, 32 series
    return int(min(5, max(1, round(tau_guess(name, L) / 150))))


#: What the chains record per draw: energy and magnetization (the driver's observer).
OBSERVE = observables("energy", "magnetization")


def tau_all(series, mean):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return {k: integrated_autocorr_time(v, mean=mean, return_window=True)
                for k, v in series.items()}


def as_series(E, m):
    return {"E": E, "abs_m": np.abs(m), "m": m}


def measure(name, L, key, *, chains, chunk, target, min_tau_per_chain, max_seconds,
            series_dir=None):
    sampler = make_sampler(name)
    model = square_lattice(L, beta=BETA_C)
    thin = thinning_for(name, L)
    burnin_draws = max(1, int(np.ceil(30 * tau_guess(name, L) / thin)), 200 // thin)
    t0 = time.perf_counter()
    state = init_chains(sampler, model, key, chains)
    # burn-in (a loop bound of the driver for Metropolis and SW; Wolff's scan compiles once)
    state = run_chains(sampler, model, state, 0, num_burnin=burnin_draws * thin).chains
    burnin_sweeps = burnin_draws * thin  # in steps (Wolff: flips)
    E, M, SW = [], [], []
    while True:
        run = run_chains(sampler, model, state, chunk, thinning=thin, observe=OBSERVE)
        state = run.chains
        E.append(np.asarray(run.draws["energy"], np.float64))
        M.append(np.asarray(run.draws["magnetization"], np.float64))
        # sweeps per draw: thin steps, each a sweep (Wolff: the flipped fraction |C| / N)
        SW.append(thin * np.asarray(run.info.get("sweep_fraction", 1.0), np.float64))
        Es, Ms = np.concatenate(E, 1), np.concatenate(M, 1)
        taus = tau_all(as_series(Es, Ms), "pooled")
        draws = Es.shape[1]
        enough = all(np.isfinite(taus[k][0]) and chains * draws >= target * taus[k][0]
                     and draws >= min_tau_per_chain * taus[k][0] for k in STOP_ON)
        if enough or time.perf_counter() - t0 > max_seconds:
            break
    sweeps_per_draw = float(np.mean(SW))
    if series_dir is not None:
        os.makedirs(series_dir, exist_ok=True)
        np.savez_compressed(os.path.join(series_dir, f"{name}_L{L}.npz"), E=Es.astype(np.float32),
                            m=Ms.astype(np.float32), sweeps_per_draw=sweeps_per_draw,
                            thinning=thin, burnin_steps=burnin_sweeps)
    return rows_from_series(name, L, Es, Ms, sweeps_per_draw, thin, burnin_sweeps, target,
                            min_tau_per_chain, time.perf_counter() - t0)


def rows_from_series(name, L, Es, Ms, sweeps_per_draw, thin, burnin_steps, target,
                     min_tau_per_chain, seconds):
    series = as_series(Es, Ms)
    pooled, chain = tau_all(series, "pooled"), tau_all(series, "chain")
    chains, draws = Es.shape
    rows = []
    for obs in OBSERVABLES:
        tau, M_win = pooled[obs]
        ok = np.isfinite(tau)
        err = tau * np.sqrt(2 * (2 * M_win + 1) / (chains * draws)) if ok else np.nan
        rows.append({
            "algorithm": name, "L": L, "observable": obs,
            "tau_sweeps": tau * sweeps_per_draw, "tau_err": err * sweeps_per_draw,
            "tau_draws": tau, "window": int(M_win),
            "tau_sweeps_chain_mean": chain[obs][0] * sweeps_per_draw,
            "draws_per_chain": draws, "chains": chains, "thinning": thin,
            "sweeps_per_draw": sweeps_per_draw,
            "burnin_sweeps": burnin_steps * sweeps_per_draw / thin,
            "tau_total": chains * draws / tau if ok else np.nan,
            "tau_per_chain": draws / tau if ok else np.nan,
            "converged": bool(ok and chains * draws >= target * tau
                              and draws >= min_tau_per_chain * tau),
            "seconds": seconds,
        })
    return rows


def fit_z(L, tau, err):
    """Weighted least squares of log tau on log L: (z, z_err, chi2/dof, intercept)."""
    L, tau, err = map(np.asarray, (L, tau, err))
    ok = np.isfinite(tau) & np.isfinite(err) & (tau > 0)
    L, tau, err = L[ok], tau[ok], err[ok]
    if len(L) < 2:
        return np.nan, np.nan, np.nan, np.nan
    x, y, s = np.log(L), np.log(tau), err / tau
    w = 1 / s**2
    A = np.stack([x, np.ones_like(x)], 1)
    cov = np.linalg.inv(A.T @ (A * w[:, None]))
    z, c = cov @ (A.T @ (w * y))
    dof = len(L) - 2
    chi2 = float(np.sum(w * (y - (z * x + c)) ** 2)) / dof if dof > 0 else np.nan
    infl = max(1.0, np.sqrt(chi2)) if dof > 0 else 1.0
    return float(z), float(np.sqrt(cov[0, 0]) * infl), chi2, float(c)


CORRECTED_FORMS = {
    # name: (model of tau(L), initial (p0, z, p2))
    "A L^z (1 + B/L)": (lambda L, lnA, z, B: np.exp(lnA) * L**z * (1 + B / L), (-3.0, 2.0, 0.0)),
    "A + B L^z": (lambda L, A, z, B: A + B * L**z, (1.0, 2.0, 0.05)),
}


def fit_z_corrected(L, tau, err, form):
    """Weighted nonlinear least squares of ``tau`` with one correction term, ``form`` a key of
    :data:`CORRECTED_FORMS`: ``A L^z (1 + B/L)`` (a correction to scaling) or ``A + B L^z`` (an
    L-independent part of tau_int from the fast, non-critical modes). Returns (z, z_err,
    chi2/dof); NaN when fewer than 4 sizes, the fit fails or it ends on a bound."""
    from scipy.optimize import curve_fit

    L, tau, err = map(np.asarray, (L, tau, err))
    ok = np.isfinite(tau) & np.isfinite(err) & (tau > 0)
    L, tau, err = L[ok].astype(float), tau[ok], err[ok]
    if len(L) < 4:
        return np.nan, np.nan, np.nan
    f, p0 = CORRECTED_FORMS[form]
    # keep the correction a correction: |B / L| <= 1/2 on the smallest lattice for A L^z (1 +
    # B/L); A + B L^z with B > 0. A fit that ends on such a bound is reported as NaN.
    lo, hi = ([-np.inf, -5, -0.5 * L.min()], [np.inf, 5, 0.5 * L.min()]) if "1 + B/L" in form \
        else ([-np.inf, -5, 0.0], [np.inf, 5, np.inf])
    try:
        with np.errstate(all="ignore"):
            p, cov = curve_fit(f, L, tau, p0=p0, sigma=err, absolute_sigma=True, maxfev=20000,
                               bounds=(lo, hi))
    except (RuntimeError, ValueError):
        return np.nan, np.nan, np.nan
    if np.any(np.isclose(p, lo, rtol=1e-6, atol=1e-9) | np.isclose(p, hi, rtol=1e-6, atol=1e-9)):
        return np.nan, np.nan, np.nan
    dof = len(L) - 3
    chi2 = float(np.sum(((tau - f(L, *p)) / err) ** 2)) / dof
    return float(p[1]), float(np.sqrt(cov[1, 1]) * max(1.0, np.sqrt(chi2))), chi2


def parse_row(r):
    """A CSV row (strings) back to values."""
    for k in ("L", "window", "draws_per_chain", "chains", "thinning"):
        r[k] = int(r[k])
    for k in FIELDS:
        if k not in ("algorithm", "observable", "converged") and not isinstance(r[k], int):
            r[k] = float(r[k])
    r["converged"] = r["converged"] == "True"
    return r


FIT_MIN_TAU_PER_CHAIN = 50.0


def fittable(row):
    """A point enters the fits when its chains are long enough for an unbiased tau (at least
    FIT_MIN_TAU_PER_CHAIN tau per chain, so the window M = 5 tau is small against the chain);
    its precision is in its error bar, whether or not it reached ``--target``."""
    return bool(np.isfinite(row["tau_sweeps"]) and row["tau_per_chain"] >= FIT_MIN_TAU_PER_CHAIN)


def select(rows, name, obs, fitted=True):
    """(L, tau, err) of one algorithm and observable, sorted by L: the points that enter the
    fits (``fitted=True``) or the others (``False``)."""
    r = sorted((x for x in rows if x["algorithm"] == name and x["observable"] == obs
                and fittable(x) == fitted), key=lambda x: x["L"])
    return (np.array([x["L"] for x in r]), np.array([x["tau_sweeps"] for x in r]),
            np.array([x["tau_err"] for x in r]))


def compute_fits(rows):
    fits = {}
    for name in ALGORITHMS:
        for obs in OBSERVABLES:
            L, tau, err = select(rows, name, obs)
            if len(L) < 2:
                continue
            out = {"literature_z": LITERATURE_Z[name], "sizes": L.tolist()}
            for label, lo in ((f"L>={FIT_MIN_L}", FIT_MIN_L), ("all", 0)):
                keep = L >= lo
                z, ze, chi2, c = fit_z(L[keep], tau[keep], err[keep])
                out[label] = {"z": z, "z_err": ze, "chi2_per_dof": chi2, "intercept": c,
                              "sizes": L[keep].tolist()}
            for form in CORRECTED_FORMS:
                z, ze, chi2 = fit_z_corrected(L, tau, err, form)
                out[f"all, {form}"] = {"z": z, "z_err": ze, "chi2_per_dof": chi2,
                                       "sizes": L.tolist()}
            pairs = {}
            for a in L:
                if 2 * a in L:
                    i, j = list(L).index(a), list(L).index(2 * a)
                    ze = np.hypot(err[i] / tau[i], err[j] / tau[j]) / np.log(2)
                    pairs[f"{a}-{2 * a}"] = [float(np.log2(tau[j] / tau[i])), float(ze)]
            out["z_eff(L, 2L)"] = pairs
            fits[f"{name}/{obs}"] = out
    return fits


STYLE = {"metropolis": ("C3", "o", "Metropolis"), "swendsen_wang": ("C0", "s", "Swendsen–Wang"),
         "wolff": ("C2", "^", "Wolff")}
TITLES = {"E": "energy E", "abs_m": "|m|", "m": "signed m"}


def plot(rows, fits, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 10), constrained_layout=True)
    primary = f"L>={FIT_MIN_L}"
    for ax, obs in zip(axes.flat, OBSERVABLES):
        for name in ALGORITHMS:
            L, tau, err = select(rows, name, obs)
            if not len(L) and not len(select(rows, name, obs, fitted=False)[0]):
                continue
            col, mk, lab = STYLE[name]
            f = fits.get(f"{name}/{obs}", {}).get(primary, {})
            z, ze = f.get("z", np.nan), f.get("z_err", np.nan)
            if len(L):
                zl = f": z = {z:.2f} ± {ze:.2f} (L ≥ {FIT_MIN_L})" if np.isfinite(z) else ""
                ax.errorbar(L, tau, err, fmt=mk, color=col, ms=6, capsize=3, label=lab + zl)
            Ls, ts, es = select(rows, name, obs, fitted=False)
            if len(Ls):
                ax.errorbar(Ls, ts, es, fmt=mk, color=col, mfc="none", ms=6, capsize=3,
                            label=f"{lab}: < {FIT_MIN_TAU_PER_CHAIN:.0f} τ per chain "
                                  "(open; not fitted)")
            if np.isfinite(z):
                grid = np.geomspace(FIT_MIN_L * 0.9, L.max() * 1.1, 50)
                ax.plot(grid, np.exp(f["intercept"]) * grid**z, "-", color=col, lw=1)
        if ax.has_data():
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
        ax.set_xlabel("L")
        ax.set_ylabel(r"$\tau_{\mathrm{int}}$ [sweeps]")
        ax.set_title(rf"$\tau_{{\mathrm{{int}}}}$ of {TITLES[obs]} at $\beta_c$")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=9)
    ax = axes.flat[3]
    for name in ALGORITHMS:
        col, mk, lab = STYLE[name]
        for obs, fill in zip(OBSERVABLES, ("full", "none", "left")):
            pairs = fits.get(f"{name}/{obs}", {}).get("z_eff(L, 2L)", {})
            if not pairs or obs == "m":
                continue
            Lm = [np.sqrt(int(k.split("-")[0]) * int(k.split("-")[1])) for k in pairs]
            v = np.array(list(pairs.values()))
            ax.errorbar(Lm, v[:, 0], v[:, 1], fmt=mk + "-", color=col, fillstyle=fill, ms=6,
                        capsize=3, lw=0.8, label=f"{lab}, {TITLES[obs]}")
    ax.axhline(2.1665, color="k", ls=":", lw=1, label="2.1665 (Nightingale & Blöte)")
    if len(ax.lines) > 1:  # some L, 2L pair exists
        ax.set_xscale("log", base=2)
    ax.set_xlabel(r"$\sqrt{L \cdot 2L}$")
    ax.set_ylabel(r"$z_{\mathrm{eff}} = \log_2[\tau(2L)/\tau(L)]$")
    ax.set_title("effective exponents between L and 2L")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, ncol=2)
    fig.suptitle("Critical slowing down, 2D Ising at β$_c$, periodic L×L "
                 "(τ in sweeps; Wolff: flips × ⟨|C|⟩/N)", fontsize=13)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                   help="lattice sizes L (periodic L x L at beta_c; default: %(default)s)")
    p.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS,
                   help="algorithms to measure (default: all three)")
    p.add_argument("--chains", type=int, default=64,
                   help="independent chains per point, pooled for tau (default: %(default)s)")
    p.add_argument("--chunk", type=int, default=1000,
                   help="draws per chain per jitted call (default: %(default)s)")
    p.add_argument("--target", type=float, default=20000.0,
                   help="stop a point once chains * draws >= target * tau for every observable "
                        "(Sokal's relative error is then about sqrt(20 / target))")
    p.add_argument("--min-tau-per-chain", type=float, default=50.0,
                   help="and draws per chain >= this many tau")
    p.add_argument("--max-seconds", type=float, default=600.0,
                   help="time budget per point; the CSV's converged says whether the targets "
                   "were met (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the JAX key (default: 0)")
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"),
                   help="folder for critical_slowing_down.csv/.json/.png and series/ "
                   "(default: analysis/results)")
    p.add_argument("--fresh", action="store_true",
                   help="start over: delete the points already in the CSV")
    p.add_argument("--refit", action="store_true",
                   help="run nothing: rewrite rows from the saved series, then fit and plot")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    csv_path = os.path.join(args.out, "critical_slowing_down.csv")
    series_dir = os.path.join(args.out, "series")
    # every row carries its chains, thinning and run length, and tau does not depend on them:
    # points measured with other settings (e.g. a larger L with fewer chains) join the table
    table = ResultsTable(csv_path, FIELDS, lambda r: (r["algorithm"], r["L"]), parse=parse_row,
                         fresh=args.fresh)
    rows = table.rows
    if args.refit:
        old = {(r["algorithm"], r["L"]): r for r in rows}
        old_conv = {(r["algorithm"], r["L"], r["observable"]): r["converged"] for r in rows}
        rows = []
        for (a, L), r in sorted(old.items()):
            s = np.load(os.path.join(series_dir, f"{a}_L{L}.npz"))
            rows += rows_from_series(a, L, s["E"].astype(float), s["m"].astype(float),
                                     float(s["sweeps_per_draw"]), int(s["thinning"]),
                                     int(s["burnin_steps"]), args.target,
                                     args.min_tau_per_chain, r["seconds"])
            for row in rows[-len(OBSERVABLES):]:  # the run-time verdict on the run length
                verdict = old_conv[(a, L, row["observable"])]
                row["converged"] = verdict and bool(np.isfinite(row["tau_draws"]))
        table.rewrite(rows)
    done = table.done
    missing = [a for a in args.algorithms if make_sampler(a) is None]
    if missing:
        print(f"not registered in isingattn.samplers.BACKENDS, skipped: {', '.join(missing)}")
    todo = [] if args.refit else [(a, L) for a in args.algorithms if a not in missing
                                  for L in args.sizes if (a, L) not in done]
    key = jax.random.key(args.seed)
    for a, L in tqdm(todo, desc="(algorithm, L) points", unit="pt"):
        k = jax.random.fold_in(jax.random.fold_in(key, L), ALGORITHMS.index(a))
        table.append(measure(a, L, k, chains=args.chains, chunk=args.chunk,
                             target=args.target, min_tau_per_chain=args.min_tau_per_chain,
                             max_seconds=args.max_seconds, series_dir=series_dir))
    rows = [r for r in table.rows if r["L"] in args.sizes and r["algorithm"] in args.algorithms]
    fits = compute_fits(rows)
    with open(os.path.join(args.out, "critical_slowing_down.json"), "w") as f:
        json.dump({"beta_c": BETA_C, "fit_min_L": FIT_MIN_L, "fits": fits}, f, indent=2)
    plot(rows, fits, os.path.join(args.out, "critical_slowing_down.png"))
    for kname, fv in fits.items():
        parts = []
        for label in (f"L>={FIT_MIN_L}", "all", *(f"all, {f}" for f in CORRECTED_FORMS)):
            g = fv[label]
            parts.append(f"{label}: {g['z']:.3f} ± {g['z_err']:.3f} (chi2/dof "
                         f"{g['chi2_per_dof']:.2f})")
        print(f"z[{kname}]  " + ";  ".join(parts) + f"  [literature {fv['literature_z']}]")
        print("    z_eff(L,2L): " + ", ".join(f"{k}: {v[0]:.2f}±{v[1]:.2f}"
                                              for k, v in fv["z_eff(L, 2L)"].items()))
    for r in sorted(rows, key=lambda r: (r["algorithm"], r["L"], r["observable"])):
        print(f"{r['algorithm']:>14} L={r['L']:<3} {r['observable']:<5} tau = "
              f"{r['tau_sweeps']:9.3f} ± {r['tau_err']:7.3f} sweeps (chain means: "
              f"{r['tau_sweeps_chain_mean']:9.3f}; {r['tau_total']:.0f} tau in all, "
              f"{r['tau_per_chain']:.0f} per chain, thin {r['thinning']}, "
              f"{r['seconds']:.0f} s{'' if r['converged'] else ', SHORT'})")
    print(f"wrote {csv_path}, critical_slowing_down.png / .json and series/ in {args.out}")


if __name__ == "__main__":
    main()
