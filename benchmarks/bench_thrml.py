"""Block Gibbs throughput: isingattn vs thrml (Extropic's JAX block-sampling library), side by
side.

Anchor: ``thrml`` (an optional benchmark dependency: ``pip install -e '.[bench]'``; without it the
script says so and times ours alone). thrml samples one chain per program, its free blocks
updated in turn; chains are ``jax.vmap``-ed over keys and initial states, as its examples do.
Each contestant keeps one draw per chain after ``sweeps`` sweeps (a sweep = every block once).

Workloads (issue 24):

* (L) 32 x 32 periodic ferromagnet, J = 1, beta = 0.44, 100 chains x 1000 sweeps; thrml's two
  colour blocks (a checkerboard) against our chromatic Gibbs (the compiled kernel, and
  ``backend="jax"``, the XLA sweep) and chromatic Metropolis;
* (D) one dense SK model, n = 64, beta = 1, 100 chains x 200 sweeps; thrml's blocks are single
  sites (a dense graph has no larger independent sets), ours sequential Gibbs.

Throughput = spin updates per second = chains x sweeps x n / time; medians of ``--repeats``
calls after a warm-up call, the contestants taking turns within each repeat; compile time
(first call minus the median) apart. As a check that both sample the same distribution, the
mean energy per spin of the kept draws is printed for each (they agree within the chains'
spread at equilibrium; at the lattice's critical point 1000 sweeps are not fully mixed).

Run: ``.venv/bin/python benchmarks/bench_thrml.py [--only L,D] [--repeats 3] [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from isingattn.models import sherrington_kirkpatrick, square_lattice
from isingattn.samplers import GibbsSampler, MetropolisSampler


def _thrml_runner(n, edge_list, biases, weights, beta, blocks, chains, sweeps):
    """A jitted ``run(key) -> (chains, n) spins`` of thrml's block Gibbs, or None without it."""
    try:
        from thrml import Block, SamplingSchedule, SpinNode, sample_states
        from thrml.models import IsingEBM, IsingSamplingProgram, hinton_init
    except ImportError:
        return None
    nodes = [SpinNode() for _ in range(n)]
    ebm = IsingEBM(nodes, [(nodes[i], nodes[j]) for i, j in edge_list], jnp.asarray(biases),
                   jnp.asarray(weights), jnp.asarray(beta))
    free = [Block([nodes[i] for i in b]) for b in blocks]
    program = IsingSamplingProgram(ebm, free, [])
    schedule = SamplingSchedule(n_warmup=sweeps - 1, n_samples=1, steps_per_sample=1)
    everything = [Block(nodes)]

    @jax.jit
    def run(key):
        k_init, k_run = jax.random.split(key)
        init = hinton_init(k_init, ebm, free, (chains,))
        keys = jax.random.split(k_run, chains)
        out = jax.vmap(lambda k, *x: sample_states(k, program, schedule, list(x), [],
                                                   everything))(keys, *init)
        return 2 * out[0][:, 0].astype(jnp.float32) - 1  # (chains, n), site order

    return run


def _ours(sampler, model, chains, sweeps):
    calls = iter(range(10**6))

    def run():
        return sampler.sample(model, jax.random.key(next(calls)), 1, num_chains=chains,
                              num_burnin=sweeps - 1).spins[..., 0, :]

    return run


def _energy_per_spin(model, x):
    x = np.asarray(x, np.float64).reshape(-1, model.n)
    return float(np.mean(np.asarray(jax.vmap(model.energy)(jnp.asarray(x, model.dtype)))) / model.n)


def _compare(label, model, chains, sweeps, runs, repeats):
    updates = chains * sweeps * model.n
    print(f"\n({label}) {chains} chains x {sweeps} sweeps x n = {model.n} = "
          f"{updates / 1e6:.1f}M spin updates")
    last = {}

    def timed(fn):
        t = time.perf_counter()
        last[fn] = jax.block_until_ready(fn())
        return time.perf_counter() - t

    first = {name: timed(fn) for name, fn in runs.items()}
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            times[name].append(timed(fn))
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, fn in runs.items():
        print(f"  {name:<34}{med[name]:8.3f} s {updates / med[name] / 1e6:9.1f} M/s  (compile "
              f"{max(first[name] - med[name], 0):.2f} s)  <E>/n = "
              f"{_energy_per_spin(model, last[fn]):+.4f}")
    return med


def lattice(chains, sweeps, repeats):
    L = 32
    model = square_lattice(L, J=1.0, periodic=True, beta=0.44)
    edges = np.asarray(model.edges)
    colour = (np.arange(L * L) // L + np.arange(L * L) % L) % 2
    runs = {}
    thrml = _thrml_runner(L * L, edges, np.zeros(L * L), np.ones(len(edges)), 0.44,
                          [np.nonzero(colour == c)[0] for c in (0, 1)], chains, sweeps)
    if thrml is not None:
        keys = iter(range(10**6))
        runs["thrml block Gibbs (2 colours)"] = lambda: thrml(jax.random.key(next(keys)))
    runs["ours Gibbs chromatic (kernel)"] = _ours(GibbsSampler(order="chromatic"), model, chains,
                                                  sweeps)
    runs["ours Gibbs chromatic (XLA)"] = _ours(GibbsSampler(order="chromatic", backend="jax"),
                                               model, chains, sweeps)
    runs["ours Metropolis chromatic (kernel)"] = _ours(MetropolisSampler(order="chromatic"),
                                                       model, chains, sweeps)
    med = _compare("L: 32x32 periodic lattice, beta = 0.44", model, chains, sweeps, runs, repeats)
    _ratios(med, "L", ["ours Gibbs chromatic (kernel)", "ours Gibbs chromatic (XLA)",
                       "ours Metropolis chromatic (kernel)"], "thrml block Gibbs (2 colours)", 5)


def dense(chains, sweeps, repeats):
    model = sherrington_kirkpatrick(jax.random.key(1), 64, h_sigma=0.3, beta=1.0)
    n = model.n
    J = np.asarray(model.J)
    edges = np.array([(i, j) for i in range(n) for j in range(i + 1, n)])
    # thrml's energy is -beta (sum b s + sum_edges W s s); ours -sum h x - sum_{i<j} J_ij x x
    thrml = _thrml_runner(n, edges, np.asarray(model.h), J[edges[:, 0], edges[:, 1]], 1.0,
                          [np.array([i]) for i in range(n)], chains, sweeps)
    runs = {}
    if thrml is not None:
        keys = iter(range(10**6))
        runs["thrml block Gibbs (64 single sites)"] = lambda: thrml(jax.random.key(next(keys)))
    runs["ours Gibbs sequential"] = _ours(GibbsSampler(), model, chains, sweeps)
    med = _compare("D: 1 dense SK model, n = 64, beta = 1", model, chains, sweeps, runs, repeats)
    _ratios(med, "D", ["ours Gibbs sequential"], "thrml block Gibbs (64 single sites)", None)


def _ratios(med, label, ours, anchor, target):
    if anchor not in med:
        print("  thrml is not installed (pip install -e '.[bench]'): no ratio")
        return
    for name in ours:
        goal = f" (target >= {target}x)" if target else ""
        print(f"  {name} / thrml = {med[anchor] / med[name]:.2f}x on {label}{goal}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="L,D", help="comma-separated workloads among L,D")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="fewer sweeps (checks the script)")
    args = p.parse_args(argv)
    todo = set(args.only.split(","))
    try:
        import thrml
        anchor = f"thrml {thrml.__version__}"
    except ImportError:
        anchor = "thrml not installed"
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {anchor}; medians of "
          f"{args.repeats} repeats after warm-up")
    if "L" in todo:
        lattice(100, 50 if args.quick else 1000, args.repeats)
    if "D" in todo:
        dense(100, 20 if args.quick else 200, args.repeats)


if __name__ == "__main__":
    main()
