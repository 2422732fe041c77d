"""Exact inference benchmark (issue: foundation).

Prints, from one run:
  1. n = 20: our log Z + marginals + correlations (one enumeration pass) vs dimod.ExactSolver
     computing the energies alone, medians of repeats, ratio.
  2. n = 26: our states per second for log Z + marginals.
  3. n = 26: peak memory of a fresh process doing only that (and of the bare JAX runtime).
  4. The transfer matrix at n = 10^5, range r = 8 (bench_transfer.long_banded).

Run: .venv/bin/python benchmarks/bench_exact.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import host_timed, timed
from bench_transfer import long_banded

from isingattn import exact
from isingattn.models import random_dense


def enumeration_vs_exact_solver(n, repeats):
    import dimod

    model = random_dense(jax.random.key(0), n, J_scale=1 / np.sqrt(n), beta=1.0)
    first, med, _, _mo = timed(lambda m: exact.moments(m), model, repeats=repeats)
    bqm = model.to_bqm()
    d_med, _, ss = host_timed(dimod.ExactSolver().sample, bqm, repeats=max(1, repeats // 2))
    assert len(ss) == 2**n
    print(f"[1] n = {n}, dense random model, 2^{n} = {2**n} states")
    print(f"    ours: log Z + marginals + correlations + <E>: median {med * 1e3:.1f} ms "
          f"(first call incl. compile {first:.2f} s)")
    print(f"    dimod.ExactSolver (energies only): median {d_med * 1e3:.1f} ms")
    print(f"    ours/ExactSolver speed = {d_med / med:.0f}x on one n={n} model "
          f"(target >= 100x)")


def throughput(n, repeats):
    model = random_dense(jax.random.key(1), n, J_scale=1 / np.sqrt(n), beta=1.0)
    first, med, times, _ = timed(lambda m: exact.moments(m, correlations=False), model,
                                 repeats=repeats)
    rate = 2**n / med
    print(f"[2] n = {n}: log Z + marginals, one pass over 2^{n} = {2**n:.3g} states: median "
          f"{med * 1e3:.0f} ms over {len(times)} runs (first call incl. compile {first:.2f} s)")
    print(f"    {rate:.3g} states/s (target >= 5e8 on this 2-core machine)")


def peak_memory(n):
    code = textwrap.dedent(f"""
        import resource, jax, jax.numpy as jnp
        from isingattn import exact
        from isingattn.models import random_dense
        jnp.zeros(1).block_until_ready()
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        m = random_dense(jax.random.key(1), {n}, J_scale=0.2)
        jax.block_until_ready(exact.moments(m, correlations=False))
        print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    base, peak = (int(v) / 1024 for v in out.stdout.split())
    print(f"[3] n = {n}: peak RSS of a fresh process doing log Z + marginals: {peak:.0f} MiB "
          f"(JAX runtime alone: {base:.0f} MiB; target < 1024 MiB)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    a = p.parse_args()
    print(f"jax {jax.__version__}, devices {jax.devices()}, cpus {os.cpu_count()}")
    if a.quick:
        enumeration_vs_exact_solver(14, 3)
        throughput(20, 3)
        peak_memory(20)
        print("[4] transfer matrix (benchmarks/bench_transfer.py):")
        long_banded(10_000, 4, 3)
    else:
        enumeration_vs_exact_solver(20, 5)
        throughput(26, 5)
        peak_memory(26)
        print("[4] transfer matrix (benchmarks/bench_transfer.py):")
        long_banded(100_000, 8, 3)


if __name__ == "__main__":
    main()
