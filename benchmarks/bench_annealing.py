"""Simulated annealing: ours against dwave-samplers' (neal, C++) side by side, one run.

Ours twice: the default on the CPU (``backend="auto"``: the compiled kernel of
``isingattn._kernels.simulated``) and the JAX sweep (``backend="jax"``), each against neal.

Workloads (dense random models, J_ij ~ N(0, 1), h_i ~ N(0, 1); default geometric schedule with
the default beta range, Metropolis, sequential sweeps, both samplers with the same parameters):

1. one dense n = 64 model, 1000 reads x 1000 sweeps;
2. 512 dense n = 64 models, 32 reads x 256 sweeps each.

Each sampler is warmed up once (ours: compile; the compile time is reported separately), then
run ``--repeats`` times alternating with the other; medians of wall-clock seconds are compared.
Mean energies are printed with their standard errors: the two should agree statistically.

Usage: ``.venv/bin/python benchmarks/bench_annealing.py [--repeats 3] [--quick]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

from isingattn.models import random_dense
from isingattn.samplers import NealSampler, SimulatedAnnealingSampler


def _run(sampler, model, key, reads, sweeps):
    t0 = time.perf_counter()
    s = sampler.sample(model, key, reads, num_sweeps=sweeps)
    jax.block_until_ready(s.spins)
    return time.perf_counter() - t0, np.asarray(s.energy, float).reshape(-1), s.info


def _neal_core_s(info):
    """Seconds dwave-samplers itself reported (pre/post-processing and sampling, C++ and its
    Python wrapper), without the adapter's per-model BQM construction."""
    return sum(sum(ci.get("timing", {}).values()) for ci in info["child_info"]) * 1e-9


def workload(name, model, reads, sweeps, repeats):
    ours = {"kernel": SimulatedAnnealingSampler(), "jax": SimulatedAnnealingSampler(backend="jax")}
    neal = NealSampler()
    t_first = {k: _run(s, model, jax.random.key(0), reads, sweeps)[0] for k, s in ours.items()}
    _run(neal, model, jax.random.key(0), reads, sweeps)
    t_ours = {k: [] for k in ours}
    e_ours = {k: [] for k in ours}
    t_neal, t_core, e_neal = [], [], []
    for r in range(repeats):  # alternating, so that a change of machine load hits all three
        for k, s in ours.items():
            t, e, _ = _run(s, model, jax.random.key(100 + r), reads, sweeps)
            t_ours[k].append(t)
            e_ours[k].append(e)
        t, e, info = _run(neal, model, jax.random.key(100 + r), reads, sweeps)
        t_neal.append(t)
        t_core.append(_neal_core_s(info))
        e_neal.append(e)
    mn, mc = statistics.median(t_neal), statistics.median(t_core)
    en = np.concatenate(e_neal)
    print(f"== {name}")
    print(f"   neal: median {mn:.3f} s over {repeats} repeats "
          f"(dwave-samplers' own calls: {mc:.3f} s, the rest is BQM construction per model)")
    ratios = {}
    for k in ours:
        mo = statistics.median(t_ours[k])
        eo = np.concatenate(e_ours[k])
        se = np.hypot(eo.std() / np.sqrt(eo.size), en.std() / np.sqrt(en.size))
        print(f"   ours ({k}): median {mo:.3f} s over {repeats} repeats "
              f"(compile ~{max(t_first[k] - mo, 0.0):.2f} s, first call {t_first[k]:.2f} s); "
              f"mean energy per read {eo.mean():.4f} vs neal {en.mean():.4f} "
              f"({(eo.mean() - en.mean()) / se:+.2f} standard errors)")
        print(f"   ours ({k})/neal = {mn / mo:.2f}x on {name} "
              f"(against dwave-samplers' calls alone: {mc / mo:.2f}x)")
        ratios[k] = mn / mo
    return ratios


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="smaller workloads (smoke test)")
    a = p.parse_args(argv)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; Metropolis, geometric schedule, "
          "default beta range, sequential sweeps")
    scale = 10 if a.quick else 1
    one = random_dense(jax.random.key(0), 64)
    many = random_dense(jax.random.key(1), 64, batch_shape=(512 // scale,))
    workload(f"1 dense n=64 problem, {1000 // scale} reads x {1000 // scale} sweeps",
             one, 1000 // scale, 1000 // scale, a.repeats)
    workload(f"{512 // scale} dense n=64 problems, 32 reads x {256 // scale} sweeps",
             many, 32, 256 // scale, a.repeats)


if __name__ == "__main__":
    main()
