"""Benchmark (d) of issue 3: Swendsen–Wang vs Metropolis on a 64 x 64 torus at beta_c.

Workload: periodic 64 x 64 lattice (N = 4096), J = 1, beta = beta_c = ln(1 + sqrt 2) / 2, the
same number of chains (``--chains``, default 4) for both samplers, every rate counting all chains.

* Swendsen–Wang (:class:`~isingattn.samplers.SwendsenWangSampler`), every connected-component
  path (the compiled union-find ``components="numba"``, the default on the CPU; the in-JAX
  labelling ``"jax"``; scipy on the host ``"scipy"``): sweeps per second (one SW
  update = one sweep) from ``--chains`` chains x ``--sw-sweeps`` updates, median of
  ``--repeats`` timed calls after a warm-up call (compile time = first call - median, apart),
  the repeats of all timed runs interleaved (load changes on a shared machine hit all alike).
* Metropolis (:class:`~isingattn.samplers.MetropolisSampler`, checkerboard updates): sweeps
  per second from ``--chains`` chains x ``--metro-sweeps`` sweeps, timed the same way.
* Like with like: both timed runs keep ONE draw per chain (``num_samples=1``, the other sweeps
  as burn-in), so the rates are those of the two kernels under the same driver. Keeping every
  draw costs extra in the MCMC driver, growing with the number kept (the draw buffer is
  rewritten every sweep), the same for both samplers per kept draw; an earlier version of this
  script timed SW keeping all its draws and Metropolis keeping one, which charged that cost to
  SW alone. ``--with-storage`` adds, for information, the rates of runs that keep what a
  measurement of |m| keeps (SW every update, Metropolis every ``--metro-thin``-th sweep).
* Effective samples of |m| per second = sweeps per second / tau_int(|m|) in sweeps, with
  tau_int = 1 + 2 sum_t rho(t) (the ESS convention, as in ``analysis/critical_slowing_down.py``)
  from :func:`isingattn.diagnostics.integrated_autocorr_time` (Sokal window) on an equilibrated
  run of the same sampler (SW: 4000 updates per chain; Metropolis: ``--metro-tau-sweeps`` sweeps
  per chain, thinned by ``--metro-thin``; arviz's ESS when the run is too short for Sokal's
  window).

Prints the ratio ``SW/Metropolis effective |m| samples per second`` (target >= 20x).
``--chains-sweep 1,4,16`` adds the same rates (SW with its default path and Metropolis, medians of
``--repeats``) at other numbers of chains, with the ratio each would give with the tau values
above (tau_int is a property of one chain): the ratio depends on the number of chains, because
Metropolis vectorizes over chains and an SW step does not get cheaper per chain.

Run: ``.venv/bin/python benchmarks/bench_cluster.py [--repeats 3] [--metro-tau-sweeps 60000]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import jax
import numpy as np

from isingattn.diagnostics import (
    abs_magnetization,
    effective_sample_size,
    integrated_autocorr_time,
)
from isingattn.exact import BETA_C
from isingattn.models import square_lattice
from isingattn.samplers import MetropolisSampler, SwendsenWangSampler


def timed_interleaved(fns, repeats):
    """Time ``fn(r)`` for every function: one warm-up call (``first``, compile included), then
    ``repeats`` timed calls, interleaved (repeat r of every function before repeat r + 1 of
    any) so that load changes on a shared machine hit all of them alike. Returns
    ``[(first, median, out), ...]``."""
    firsts, outs = [], []
    for fn in fns:
        t = time.perf_counter()
        outs.append(fn(0))
        firsts.append(time.perf_counter() - t)
    times = [[] for _ in fns]
    for r in range(repeats):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            outs[i] = fn(r + 1)
            times[i].append(time.perf_counter() - t)
    return [(f, statistics.median(ts), o) for f, ts, o in zip(firsts, times, outs)]


def tau_sweeps(samples, model, sweeps_per_draw):
    m = abs_magnetization(samples, model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        tau = integrated_autocorr_time(m)
    how = "Sokal window"
    if not np.isfinite(tau):
        tau = m.size / float(effective_sample_size(m, method="mean"))
        how = "arviz ESS (run shorter than Sokal's window)"
    return float(tau) * sweeps_per_draw, how


#: the connected-component paths of Swendsen–Wang timed side by side
PATHS = ("numba", "jax", "scipy")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--L", type=int, default=64)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--sw-sweeps", type=int, default=2000)
    p.add_argument("--metro-sweeps", type=int, default=2000)
    p.add_argument("--metro-tau-sweeps", type=int, default=100_000)
    p.add_argument("--metro-thin", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--chains-sweep", default="",
                   help="comma-separated numbers of chains at which to repeat the two rates")
    p.add_argument("--with-storage", action="store_true",
                   help="also time runs that keep their draws (SW every update, Metropolis "
                        "every --metro-thin sweeps)")
    args = p.parse_args(argv)
    L, C = args.L, args.chains
    model = square_lattice(L, beta=BETA_C)
    N = L * L
    key = jax.random.key(0)
    print(f"workload: {L}x{L} periodic lattice (N = {N}) at beta_c = {BETA_C:.6f}, {C} chains; "
          f"medians of {args.repeats} interleaved timed calls after warm-up; jax {jax.__version__} on "
          f"{jax.devices()[0].platform}")

    # equilibrated starting states from SW (cheap), shared by every timed run; the default
    # labelling ("auto": the compiled union-find on the CPU)
    sw = SwendsenWangSampler()
    x0 = sw.sample(model, key, 1, num_chains=C, num_burnin=200).spins[:, -1]

    met = MetropolisSampler()

    def one_draw(sampler, chains, sweeps, x, seed):
        """``fn(r)``: ``sweeps`` sweeps of ``chains`` chains from ``x``, keeping the last draw
        (the timed runs of every rate), key ``fold_in(key, seed + r)``."""
        def run(r):
            return sampler.sample(model, jax.random.fold_in(key, seed + r), 1, num_chains=chains,
                                  num_burnin=sweeps - 1, initial_states=x)

        return run

    timed = timed_interleaved(
        [one_draw(SwendsenWangSampler(components=comp), C, args.sw_sweeps, x0, 0)
         for comp in PATHS] + [one_draw(met, C, args.metro_sweeps, x0, 1000)],
        args.repeats)
    results = {}
    for comp, (first, med, out) in zip(PATHS, timed[:len(PATHS)]):
        sps = C * args.sw_sweeps / med
        results[f"sw-{comp}"] = (sps, out)
        print(f"Swendsen-Wang [{comp:>5} components]: {sps:10.1f} sweeps/s "
              f"({C} chains x {args.sw_sweeps} sweeps in {med:.3f} s; compile+first call "
              f"{first - med:+.2f} s over the median)")
    best = max((f"sw-{comp}" for comp in PATHS), key=lambda k: results[k][0])
    sw_sps, _ = results[best]
    # tau from an equilibrated run that keeps every update
    long = sw.sample(model, jax.random.fold_in(key, 99), 4000, num_chains=C, num_burnin=0,
                     initial_states=x0)
    sw_tau, sw_how = tau_sweeps(long, model, 1.0)
    sw_eff = sw_sps / sw_tau
    print(f"Swendsen-Wang tau_int(|m|) = {sw_tau:.2f} sweeps ({sw_how}, {C} x 4000 updates) "
          f"-> {sw_eff:.1f} effective |m| samples/s ({best})")

    first, med, _ = timed[len(PATHS)]
    m_sps = C * args.metro_sweeps / med
    print(f"Metropolis (checkerboard): {m_sps:10.1f} sweeps/s ({C} chains x {args.metro_sweeps} "
          f"sweeps in {med:.3f} s; compile+first call {first - med:+.2f} s over the median; "
          f"{m_sps * N / 1e6:.1f} M spin updates/s)")
    thin = args.metro_thin
    mlong = met.sample(model, jax.random.fold_in(key, 2000), args.metro_tau_sweeps // thin,
                       num_chains=C, num_burnin=0, thinning=thin, initial_states=x0)
    m_tau, m_how = tau_sweeps(mlong, model, float(thin))
    m_eff = m_sps / m_tau
    print(f"Metropolis tau_int(|m|) = {m_tau:.0f} sweeps ({m_how}, {C} x "
          f"{args.metro_tau_sweeps} sweeps thinned by {thin}) -> {m_eff:.3f} effective |m| "
          "samples/s")
    if args.with_storage:
        def run_sw_kept(r):
            return sw.sample(model, jax.random.fold_in(key, 3000 + r), args.sw_sweeps,
                             num_chains=C, num_burnin=0, initial_states=x0)

        def run_m_kept(r):
            return met.sample(model, jax.random.fold_in(key, 4000 + r),
                              args.metro_sweeps // thin, num_chains=C, num_burnin=0,
                              thinning=thin, initial_states=x0)

        (_, med_s, _), (_, med_m, _) = timed_interleaved([run_sw_kept, run_m_kept],
                                                         args.repeats)
        sps_s = C * args.sw_sweeps / med_s
        sps_m = C * (args.metro_sweeps // thin) * thin / med_m
        print(f"with draws kept (SW all {args.sw_sweeps}, Metropolis every {thin}th): SW "
              f"{sps_s:.1f} sweeps/s, Metropolis {sps_m:.1f} sweeps/s -> effective |m| samples "
              f"per second SW/Metropolis = {(sps_s / sw_tau) / (sps_m / m_tau):.1f}x")
    for c in [int(x) for x in args.chains_sweep.split(",") if x.strip()]:
        xc = sw.sample(model, jax.random.fold_in(key, 5000 + c), 1, num_chains=c,
                       num_burnin=200).spins[:, -1]
        # about as many sweeps of all chains together as the main runs
        n_sw = max(args.sw_sweeps * C // c, 20)
        n_m = max(args.metro_sweeps * C // c, 100)
        (_, med_s, _), (_, med_m, _) = timed_interleaved(
            [one_draw(sw, c, n_sw, xc, 6000), one_draw(met, c, n_m, xc, 7000)], args.repeats)
        sps_s, sps_m = c * n_sw / med_s, c * n_m / med_m
        print(f"{c:4d} chains: SW {sps_s:9.1f} sweeps/s, Metropolis {sps_m:9.1f} sweeps/s -> "
              f"effective |m| samples per second SW/Metropolis = "
              f"{(sps_s / sw_tau) / (sps_m / m_tau):.1f}x")
    print(f"sweeps/s: SW/Metropolis = {sw_sps / m_sps:.2f}x; "
          f"ours SW/Metropolis effective |m| samples per second = {sw_eff / m_eff:.1f}x "
          f"on a {L}x{L} lattice at beta_c, {C} chains each (target >= 20x)")


if __name__ == "__main__":
    main()
