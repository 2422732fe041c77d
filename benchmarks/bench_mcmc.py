"""Fixed-temperature single-site MCMC throughput: isingattn vs dwave-neal, side by side.

Anchor: dwave-samplers' ``SimulatedAnnealingSampler`` (dwave-neal) with a constant schedule,
``beta_schedule_type="custom", beta_schedule=[beta] * num_sweeps``, i.e. fixed-temperature
Metropolis sweeps in C++. Ours: :class:`~isingattn.samplers.MetropolisSampler` (and
:class:`~isingattn.samplers.GibbsSampler`), each keeping one draw after ``num_sweeps`` sweeps
(``num_burnin = num_sweeps - 1, num_samples = 1``), like neal's one read per chain.

Throughput = spin updates (flips attempted) per second = models x chains x sweeps x n / time.
Each timing is the median of ``--repeats`` calls after a warm-up call, the contestants taking
turns within each repeat (a shared machine's load then hits all of them alike); our compile
time (first call minus the median) is reported separately. Workloads (issue 3):

* (a) 512 dense SK models, n = 64, 32 chains each, 256 sweeps: ours in one batched call,
  neal once per model (target >= 2x, aim >= 3x);
* (b) one dense SK model, n = 64, 1000 chains x 1000 sweeps (target >= 1.5x);
* (c) 32 x 32 periodic lattice, 100 chains x 1000 sweeps, chromatic (checkerboard) updates
  (target >= 2x);
* (d) keeping every draw: 64 dense SK models, n = 64, 32 chains, 256 sweeps with Gibbs, kept
  every sweep (256 draws per chain) against kept once (``num_burnin = 255``); the anchor is our
  own keep-one run (target <= 1.3x its time). Energies are computed on first access of
  ``Samples.energy``, timed apart.

Run: ``.venv/bin/python benchmarks/bench_mcmc.py [--only a,b,c] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

from isingattn.models import sherrington_kirkpatrick, square_lattice
from isingattn.samplers import GibbsSampler, MetropolisSampler


def _ours(sampler, model, chains, sweeps):
    calls = iter(range(10**6))

    def run():
        s = sampler.sample(model, jax.random.key(next(calls)), 1, num_chains=chains,
                           num_burnin=sweeps - 1)
        jax.block_until_ready(s.spins)

    return run


def _neal(bqms, beta, chains, sweeps):
    from dwave.samplers import SimulatedAnnealingSampler

    sa = SimulatedAnnealingSampler()
    sched = [float(beta)] * sweeps
    seeds = iter(range(10**6))

    def run():
        for bqm in bqms:
            sa.sample(bqm, num_reads=chains, num_sweeps=sweeps, beta_schedule_type="custom",
                      beta_schedule=sched, seed=next(seeds))

    return run


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def bench(label, model, bqms, chains, sweeps, samplers, repeats, target):
    B = int(np.prod(model.batch_shape, dtype=int))
    updates = B * chains * sweeps * model.n
    beta = float(np.ravel(model.beta)[0])
    print(f"\n({label}) workload: {B} model(s), n = {model.n}, {chains} chains, {sweeps} sweeps "
          f"= {updates / 1e6:.1f}M spin updates; beta = {beta:.3g}")
    runs = {"neal": _neal(bqms, beta, chains, sweeps)}
    runs.update({name: _ours(s, model, chains, sweeps) for name, s in samplers})
    first = {name: _timed(fn) for name, fn in runs.items()}  # warm-up (and our compile)
    # repeats interleave the contestants, so a change in machine load hits all of them
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            times[name].append(_timed(fn))
    med = {name: statistics.median(t) for name, t in times.items()}
    print(f"  neal (one call per model)      {med['neal']:8.3f} s  "
          f"{updates / med['neal'] / 1e6:8.1f} M/s")
    for name, _ in samplers:
        compile_s = max(first[name] - med[name], 0.0)
        print(f"  ours {name:<26}{med[name]:8.3f} s  {updates / med[name] / 1e6:8.1f} M/s   "
              f"(compile {compile_s:.2f} s)")
    for name, _ in samplers:
        print(f"  ours/neal = {med['neal'] / med[name]:.2f}x on {label} with {name} "
              f"(target >= {target}x)")


def bench_keep(repeats):
    m = sherrington_kirkpatrick(jax.random.key(2), 64, h_sigma=0.3, batch_shape=(64,), beta=1.0)
    gibbs, chains, sweeps = GibbsSampler(), 32, 256
    print(f"\n(d) workload: 64 dense n = 64 models, {chains} chains, {sweeps} Gibbs sweeps; "
          f"keep every sweep ({64 * chains * sweeps} draws) or one per chain")
    calls = iter(range(10**6))

    def run(num_samples):
        s = gibbs.sample(m, jax.random.key(next(calls)), num_samples, num_chains=chains,
                         num_burnin=sweeps - num_samples)
        jax.block_until_ready(s.spins)
        return s

    runs = {"keep one": lambda: run(1), "keep every": lambda: run(sweeps)}
    first = {name: _timed(fn) for name, fn in runs.items()}
    times = {name: [] for name in runs} | {"energies": []}
    for _ in range(repeats):
        for name, fn in runs.items():
            times[name].append(_timed(fn))
        s = run(sweeps)
        times["energies"].append(_timed(lambda s=s: jax.block_until_ready(s.energy)))
    med = {name: statistics.median(t) for name, t in times.items()}
    for name in runs:
        print(f"  {name:<12}{med[name]:8.3f} s   (compile {max(first[name] - med[name], 0):.2f} s)")
    print(f"  energies of every draw, on first access: {med['energies']:.3f} s")
    print(f"  keep every / keep one = {med['keep every'] / med['keep one']:.2f}x "
          "(target <= 1.3x)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="a,b,c,d", help="comma-separated workloads among a,b,c,d")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    todo = set(args.only.split(","))
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; medians of {args.repeats} "
          "repeats after warm-up")
    metro, gibbs = MetropolisSampler(), GibbsSampler()
    if "a" in todo:
        m = sherrington_kirkpatrick(jax.random.key(0), 64, h_sigma=0.3, batch_shape=(512,),
                                    beta=1.0)
        bqms = [m[i].to_bqm() for i in range(512)]
        bench("a: 512 dense n=64 problems", m, bqms, 32, 256,
              [("metropolis sequential", metro), ("gibbs sequential", gibbs)], args.repeats, 2)
    if "b" in todo:
        m = sherrington_kirkpatrick(jax.random.key(1), 64, h_sigma=0.3, beta=1.0)
        bench("b: 1 dense n=64 problem", m, [m.to_bqm()], 1000, 1000,
              [("metropolis sequential", metro), ("gibbs sequential", gibbs)], args.repeats, 1.5)
    if "c" in todo:
        m = square_lattice(32, J=1.0, periodic=True, beta=0.44)
        bench("c: 32x32 lattice", m, [m.to_bqm()], 100, 1000,
              [("metropolis chromatic", MetropolisSampler(order="chromatic")),
               ("gibbs chromatic", GibbsSampler(order="chromatic"))], args.repeats, 2)
    if "d" in todo:
        bench_keep(args.repeats)


if __name__ == "__main__":
    main()
