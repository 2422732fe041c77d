"""Plots of a :class:`ComparisonTable` (matplotlib is imported inside the functions).

Figures are built as ``matplotlib.figure.Figure`` objects without pyplot, so no global backend
state is touched; they save to files and display in notebooks alike."""

from __future__ import annotations

import functools
import math
import os

import numpy as np

from .._io import atomic_write


def _ok_rows(table):
    return [r for r in table.rows if r.get("status", "ok") == "ok"]


def _colors(names):
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    return {n: cmap(i % 10) for i, n in enumerate(names)}


def _title(table, what):
    m = table.model
    beta = m.get("beta")
    beta = f"{float(beta):.4g}" if np.ndim(beta) == 0 else f"{np.mean(beta):.4g} (mean)"
    batch = m.get("batch_shape") or []
    b = f", batch {tuple(batch)} (first model shown)" if batch else ""
    return f"{what}\nn = {m.get('n')} {m.get('vartype', '')}, model beta = {beta}{b}"


def _finish(fig, path):
    """Lay out ``fig``, write it to ``path`` when one is given, and return it."""
    fig.tight_layout()
    if path:
        fig.savefig(path, dpi=110)
    return fig


def _fin(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def plot_energy_histograms(table, path=None, *, ncols=3):
    """Small multiples: each sampler's energy histogram (step line) over the exact Boltzmann
    energy distribution (grey bars, when known). Returns the figure (saved to ``path``)."""
    from matplotlib.figure import Figure

    rows = [r for r in _ok_rows(table) if "energy_hist" in table.curves.get(r["sampler"], {})]
    k = max(1, len(rows))
    ncols = min(ncols, k)
    nrows = math.ceil(k / ncols)
    fig = Figure(figsize=(4.2 * ncols, 3.2 * nrows + 0.8))
    axes = fig.subplots(nrows, ncols, squeeze=False, sharex=True)
    colors = _colors([r["sampler"] for r in rows])
    lev = table.reference.get("energy_levels")
    pr = table.reference.get("energy_probabilities")
    for ax, r in zip(axes.flat, rows):
        name = r["sampler"]
        h = table.curves[name]["energy_hist"]
        edges, dens = np.asarray(h["edges"]), np.asarray(h["density"])
        if lev is not None:
            ex, _ = np.histogram(np.asarray(lev), bins=edges, weights=np.asarray(pr))
            ax.bar(edges[:-1], ex / np.diff(edges), width=np.diff(edges), align="edge",
                   color="0.8", edgecolor="0.6", lw=0.5, label="exact Boltzmann")
        ax.stairs(dens, edges, color=colors[name], lw=2, label=name)
        sub = f"TV = {r['tv']:.3f}" if _fin(r.get("tv")) else ""
        ax.set_title(f"{name}  {sub}", fontsize=10)
        ax.legend(fontsize=8, loc="upper right")
        ax.set_ylabel("probability density")
    for ax in axes[-1]:
        ax.set_xlabel("energy E(x)  (physics sign, no beta)")
    for ax in list(axes.flat)[len(rows):]:
        ax.set_visible(False)
    if not rows:
        axes.flat[0].set_visible(True)
        axes.flat[0].text(0.5, 0.5, "no sampler finished", ha="center", va="center")
    what = "sampled vs exact" if lev is not None else "sampled (no exact reference)"
    fig.suptitle(_title(table, f"Energy histograms: {what}"), fontsize=11)
    return _finish(fig, path)


def plot_beta_eff(table, path=None):
    """Effective beta of each sampler with a 95% interval (+-1.96 standard errors) against the
    model's beta (dashed line). A log axis is used when the estimates span more than a factor
    of 20 (annealers that freeze out far below the model's temperature); infinite estimates
    (only local minima sampled) are drawn as arrows at the edge and labelled."""
    from matplotlib.figure import Figure

    rows = [r for r in _ok_rows(table)
            if isinstance(r.get("beta_eff"), (int, float)) and not math.isnan(r["beta_eff"])]
    fig = Figure(figsize=(7.5, 1.6 + 0.5 * max(1, len(rows))))
    ax = fig.subplots()
    colors = _colors([r["sampler"] for r in rows])
    beta = table.model.get("beta")
    finite = [r["beta_eff"] for r in rows if math.isfinite(r["beta_eff"])]
    ref = [float(np.mean(beta))] if beta is not None else []
    vals = np.array(finite + ref)
    log = bool(vals.size and np.all(vals > 0) and vals.max() / vals.min() > 20)
    for i, r in enumerate(rows):
        b, se = r["beta_eff"], r.get("beta_eff_se")
        c = colors[r["sampler"]]
        if math.isfinite(b):
            xerr = 1.96 * se if _fin(se) else None
            if log and xerr is not None:
                xerr = [[min(xerr, b * 0.999)], [xerr]]
            ax.errorbar(b, i, xerr=xerr, fmt="o", color=c, capsize=4, ms=6)
        else:
            edge = (vals.max() * (3 if log else 1.1)) if b > 0 else (
                vals.min() / 3 if log else vals.min() - 0.1 * abs(vals.min()))
            ax.plot(edge, i, ">" if b > 0 else "<", color=c, ms=10)
            ax.annotate(f"{'+' if b > 0 else '-'}inf", (edge, i), textcoords="offset points",
                        xytext=(-8 if b > 0 else 8, 8), ha="right" if b > 0 else "left",
                        fontsize=8, color=c)
    ax.set_yticks(range(len(rows)), [f"{r['sampler']} ({r.get('beta_method', '')})"
                                     for r in rows])
    ax.set_ylim(-0.7, len(rows) - 0.3)
    if log:
        ax.set_xscale("log")
    if ref:
        ax.axvline(ref[0], color="k", ls="--", lw=1, label=f"model beta = {ref[0]:.3g}")
        ax.legend(fontsize=8, loc="best")
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.set_xlabel("effective beta, 95% interval" + (" (log scale)" if log else "")
                  + "; +inf: only local minima sampled")
    ax.invert_yaxis()
    ax.set_title(_title(table, "Effective inverse temperature"), fontsize=11)
    return _finish(fig, path)


def plot_distance_vs_samples(table, path=None):
    """Total variation to the reference against the number of samples (log-log), with the
    expected curve of a perfect i.i.d. sampler (black dashed) when exact probabilities are
    known: a good sampler follows it (slope -1/2), a biased one levels off."""
    from matplotlib.figure import Figure

    rows = [r for r in _ok_rows(table) if "tv_curve" in table.curves.get(r["sampler"], {})]
    fig = Figure(figsize=(7, 4.8))
    ax = fig.subplots()
    colors = _colors([r["sampler"] for r in rows])
    for r in rows:
        c = table.curves[r["sampler"]]["tv_curve"]
        ax.loglog(c["num_samples"], c["tv"], "o-", color=colors[r["sampler"]], ms=3,
                  label=r["sampler"])
    ref = table.reference.get("tv_iid_curve")
    if ref is not None:
        ax.loglog(ref["num_samples"], ref["tv"], "k--", lw=1.5,
                  label="perfect i.i.d. sampler (expected)")
    if not rows and ref is None:
        ax.text(0.5, 0.5, "no reference distribution (n too large for exact enumeration):\n"
                "distances not computed", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("number of samples N (all chains, first draws of each)")
    ax.set_ylabel("total variation distance to exact")
    ax.grid(True, which="both", alpha=0.3)
    if rows or ref is not None:
        ax.legend(fontsize=8)
    ax.set_title(_title(table, "Distance to the Boltzmann distribution vs samples"), fontsize=11)
    return _finish(fig, path)


def plot_autocorrelation(table, path=None):
    """Energy autocorrelation against lag (mean over chains), with each sampler's
    ``tau_int`` in the legend; i.i.d. samplers drop to zero after lag 0."""
    from matplotlib.figure import Figure

    rows = [r for r in _ok_rows(table) if "energy_acf" in table.curves.get(r["sampler"], {})]
    fig = Figure(figsize=(7, 4.8))
    ax = fig.subplots()
    colors = _colors([r["sampler"] for r in rows])
    maxlag, taumax = 1, 1.0
    for r in rows:
        c = table.curves[r["sampler"]]["energy_acf"]
        tau = r.get("tau_int_energy")
        lab = f"{r['sampler']} (tau_int = {tau:.3g})" if _fin(tau) else r["sampler"]
        ax.plot(c["lag"], c["rho"], "o-", color=colors[r["sampler"]], lw=1.5, ms=3, label=lab)
        maxlag = max(maxlag, len(c["lag"]) - 1)
        taumax = max(taumax, tau) if _fin(tau) else taumax
    if not rows:
        ax.text(0.5, 0.5, "no sampler with at least 4 draws per chain", ha="center",
                va="center", transform=ax.transAxes)
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlim(0, min(maxlag, max(20, int(10 * taumax))))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("lag (draws)")
    ax.set_ylabel("autocorrelation of the energy")
    if rows:
        ax.legend(fontsize=8)
    ax.set_title(_title(table, "Energy autocorrelation"), fontsize=11)
    return _finish(fig, path)


#: file name -> plot function
PLOTS = {
    "energy_histograms.png": plot_energy_histograms,
    "beta_eff.png": plot_beta_eff,
    "distance_vs_samples.png": plot_distance_vs_samples,
    "autocorrelation.png": plot_autocorrelation,
}


def plot_comparison(table, out_dir, *, prefix: str = "") -> list:
    """Write the comparison plots of a :class:`ComparisonTable` as PNG files into ``out_dir``:
    ``energy_histograms.png``, ``beta_eff.png``, ``distance_vs_samples.png``,
    ``autocorrelation.png`` (each name after ``prefix``). Returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for fname, fn in PLOTS.items():
        path = os.path.join(out_dir, prefix + fname)
        fig = fn(table)
        atomic_write(path, functools.partial(fig.savefig, dpi=110, format="png"))
        paths.append(path)
    return paths
