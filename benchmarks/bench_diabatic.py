"""The diabatic anneal of a batch whose models need very different step counts, per-model counts
against one count for the whole batch, side by side in one run.

The workload of a diabatic training step late in a run: the query models of two attention
layers on causal registers of 4, 6, 7 and 8 qubits (256, 128, 64 and 64 models, as the layer
groups the query positions of an L = 8 sequence), each model's field sum (``max_i |h_i| +
sum_j |J_ij|``) drawn log-uniform between ``--low`` and ``--high`` (a trained model's queries
ran from a few to a few hundred), D-Wave-like schedule, ``--annealing-time`` ns, 64 draws per
model. One call of :func:`isingattn.quantum.sample_traced` under ``jit`` per register size:

- ``per model``: the default, each model its own automatic step count;
- ``one count``: ``num_steps`` set to the largest automatic count of the call, what every model
  ran before the counts were per model (the anchor).

Times are medians of ``--repeats`` calls after one warm-up; compile time is reported apart.

Run::

    .venv/bin/python benchmarks/bench_diabatic.py
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from isingattn import quantum
from isingattn.models import IsingModel

#: (register qubits, models) of the workload
GROUPS = ((4, 256), (6, 128), (7, 64), (8, 64))


def models(n, count, low, high, rng):
    """``count`` dense models of ``n`` spins, each scaled to a field sum log-uniform in
    ``[low, high]``."""
    h = rng.normal(size=(count, n))
    J = np.triu(rng.normal(size=(count, n, n)), 1)
    J = J + J.transpose(0, 2, 1)
    flip = np.max(np.abs(h) + np.sum(np.abs(J), -1), -1)
    scale = np.exp(rng.uniform(np.log(low), np.log(high), size=count)) / flip
    return IsingModel(h=jnp.asarray(h * scale[:, None], jnp.float32),
                      J=jnp.asarray(J * scale[:, None, None], jnp.float32))


def timed(fn, *args, repeats):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return out, med, first - med


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--annealing-time", type=float, default=0.5, help="ns (default 0.5)")
    ap.add_argument("--low", type=float, default=2.0, help="smallest field sum (default 2)")
    ap.add_argument("--high", type=float, default=250.0, help="largest field sum (default 250)")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls (default 3)")
    args = ap.parse_args(argv)
    sched = quantum.as_schedule("dwave_like")
    t_a = args.annealing_time
    print(f"# {platform.processor() or platform.machine()}, jax {jax.__version__}, "
          f"{jax.devices()[0].platform}")
    print(f"# workload: registers {', '.join(f'{n} qubits x {c}' for n, c in GROUPS)}; field "
          f"sums log-uniform in [{args.low}, {args.high}]; dwave_like, t_a = {t_a} ns, 64 draws; "
          f"medians of {args.repeats}")
    per = jax.jit(lambda m, k: quantum.sample_traced(m, k, 64, sched, t_a))
    rng = np.random.default_rng(0)
    print(f"{'qubits':>6s} {'models':>6s} {'median count':>12s} {'max count':>9s} "
          f"{'per model':>10s} {'one count':>10s} {'ratio':>6s} {'compile s':>10s}")
    total = [0.0, 0.0]
    for n, count in GROUPS:
        m = models(n, count, args.low, args.high, rng)
        key = jax.random.key(n)
        (_, steps), t_per, c_per = timed(per, m, key, repeats=args.repeats)
        steps = np.asarray(steps)
        top = int(steps.max())
        one = jax.jit(lambda m, k, top=top: quantum.sample_traced(m, k, 64, sched, t_a,
                                                                  num_steps=top))
        _, t_one, c_one = timed(one, m, key, repeats=args.repeats)
        total[0] += t_per
        total[1] += t_one
        print(f"{n:6d} {count:6d} {int(np.median(steps)):12d} {top:9d} {t_per * 1e3:8.1f}ms "
              f"{t_one * 1e3:8.1f}ms {t_one / t_per:6.2f} {max(c_per, c_one):10.1f}")
    print(f"all calls: per model {total[0] * 1e3:.1f} ms, one count {total[1] * 1e3:.1f} ms, "
          f"one count / per model = {total[1] / total[0]:.2f}x")


if __name__ == "__main__":
    main()
