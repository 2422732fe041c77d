"""Training step with sampled gradient sources against exact enumeration, side by side in one run.

The model and data of the annealer-training experiment (``analysis/annealer_training.py``): a
causal 2-layer transformer, width 32, 2 heads, learned banded couplings (r = 2), bracket
sequences of length S = 12 (``--length``), batch 32. One optimizer step of
``isingattn.experiments.Trainer`` (forward, backward, update) per source: ``exact`` (the anchor:
enumeration of the 2^S patterns of every query), ``sampled:exact``, ``sampled:gibbs`` and
``sampled:diabatic`` (the state-vector anneal of every query of the step in one compiled
program; ``--annealing-time``; ``diabatic`` runs the compiled CPU kernel, ``diabatic-jax`` the
JAX path of the same integrator), all with M = 64 draws per query (``--num-samples``).

Compile time (the first step, compilation included) is reported apart. Step times are medians
over ``--repeats`` rounds; in each round every source runs ``--steps`` steps, so the sources share
the machine's state round by round.

Target (annealer-training issue): the diabatic step within 20x of exact at S = 12, M = 64.

Run::

    .venv/bin/python benchmarks/bench_sampled_step.py
    .venv/bin/python benchmarks/bench_sampled_step.py --only diabatic --annealing-time 2.0
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import jax

from isingattn.experiments import BracketTask, TrainConfig, Trainer, batch_rng

SOURCES = {
    "exact": {"method": "exact"},
    "sampled-exact": {"method": "sampled:exact"},
    "gibbs": {"method": "sampled:gibbs",
              "backend_options": {"num_burnin": 50, "thinning": 2}},
    "diabatic": {"method": "sampled:diabatic"},
    "diabatic-jax": {"method": "sampled:diabatic"},
}


def build(source, args):
    spec = dict(SOURCES[source])
    if source.startswith("diabatic"):
        spec["backend_options"] = {"annealing_time": args.annealing_time,
                                   "backend": "jax" if source == "diabatic-jax" else "auto"}
    if source != "exact":
        spec["num_samples"] = args.num_samples
    cfg = TrainConfig(task="bracket", length=args.length, attention="learned",
                      structure="banded", bandwidth=2, layers=2, d_model=32, heads=2,
                      batch=args.batch, steps=1000, lr=3e-3, **spec)
    trainer = Trainer(cfg, BracketTask())
    batch = trainer.task.train_batch(batch_rng(0, 0), cfg.batch, args.length)
    t = time.perf_counter()
    jax.block_until_ready(trainer.step(batch))
    return trainer, batch, time.perf_counter() - t


def run_steps(trainer, batch, n):
    t = time.perf_counter()
    for _ in range(n):
        out = trainer.step(batch)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=int, default=12, help="keys per query S (default 12)")
    ap.add_argument("--num-samples", type=int, default=64, help="draws per query M (default 64)")
    ap.add_argument("--annealing-time", type=float, default=0.5,
                    help="diabatic anneal time in ns (default 0.5)")
    ap.add_argument("--batch", type=int, default=32, help="sequences per step (default 32)")
    ap.add_argument("--only", default=None, help="comma-separated sources (exact is always "
                    f"included); default all: {', '.join(SOURCES)}")
    ap.add_argument("--repeats", type=int, default=5, help="rounds (default %(default)s)")
    ap.add_argument("--steps", type=int, default=3, help="steps per source per round")
    args = ap.parse_args(argv)
    names = list(SOURCES) if args.only is None else ["exact"] + [
        v for v in args.only.split(",") if v != "exact"]
    unknown = [v for v in names if v not in SOURCES]
    if unknown:
        raise SystemExit(f"--only: unknown {unknown}; valid: {', '.join(SOURCES)}")
    print(f"# {platform.processor() or platform.machine()}, {jax.device_count()} device(s) "
          f"{jax.devices()[0].platform}, jax {jax.__version__}")
    print(f"# workload: bracket matching S = {args.length}, batch {args.batch}, 2 layers, "
          f"d_model 32, 2 heads, banded r = 2; M = {args.num_samples}, diabatic t_a = "
          f"{args.annealing_time} ns; medians of {args.repeats} rounds x {args.steps} steps")
    trainers, compile_s = {}, {}
    for v in names:
        tr, b, c = build(v, args)
        trainers[v], compile_s[v] = (tr, b), c
    times = {v: [] for v in names}
    for _ in range(args.repeats):
        for v in names:
            times[v].append(run_steps(*trainers[v], args.steps))
    base = statistics.median(times["exact"])
    print(f"{'source':16s} {'ms/step':>9s} {'spread':>15s} {'x exact':>8s} {'compile s':>10s}")
    for v in names:
        med = statistics.median(times[v])
        lo, hi = min(times[v]), max(times[v])
        print(f"{v:16s} {1e3 * med:9.1f} {f'{1e3 * lo:.0f}-{1e3 * hi:.0f}':>15s} "
              f"{med / base:8.2f} {compile_s[v]:10.1f}")
    if "diabatic" in names:
        print(f"diabatic/exact = {statistics.median(times['diabatic']) / base:.2f}x at S = "
              f"{args.length}, M = {args.num_samples} (target <= 20x)")
    if "diabatic" in names and "diabatic-jax" in names:
        ratio = statistics.median(times["diabatic-jax"]) / statistics.median(times["diabatic"])
        print(f"diabatic-jax/diabatic = {ratio:.2f}x (the JAX path against the kernel)")


if __name__ == "__main__":
    main()
