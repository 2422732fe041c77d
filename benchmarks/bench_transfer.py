"""Transfer-matrix benchmark.

Prints, from one run (after warm-up; compile time reported apart; medians of repeats):
  1. n = 10^5, range r = 8 (random banded couplings, sparse, float32): log Z alone,
     log Z + marginals, transfer_moments (log Z, marginals, <E> in one forward-backward pass),
     on the compiled kernel and on the JAX recursions side by side, and 100 exact samples;
     checked against the closed form of the uniform chain at the same n for accuracy.
  2. A banded n = 20 model (dense, range r = 3): log Z + marginals + correlations + <E> by the
     transfer matrix vs our enumeration (isingattn.exact.moments), ratio and largest difference.

Run: .venv/bin/python benchmarks/bench_transfer.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import timed

from isingattn import exact
from isingattn.models import IsingModel, SparseIsingModel, chain


def long_banded(n, r, repeats):
    rng = np.random.default_rng(0)
    edges = np.array([(i, i + d) for d in range(1, r + 1) for i in range(n - d)], np.int32)
    model = SparseIsingModel(
        h=rng.normal(0, 0.5, n), edges=edges, J=rng.normal(0, 0.3, len(edges)), beta=1.0
    )
    print(f"[1] transfer matrix, n = {n}, range r = {r} (2^{r} = {1 << r} window states), "
          f"{len(edges)} couplings, float32, medians of {repeats}; backend 'numba' (the "
          "compiled kernel, the default on the CPU) and 'jax' (log-domain recursions)")
    per_state = {}
    for backend in ("numba", "jax"):
        f1, m1, _, lz = timed(lambda m, b=backend: exact.transfer_log_partition(m, backend=b), model,
                              repeats=repeats)
        f2, m2, _, mg = timed(
            lambda m, b=backend: (exact.transfer_log_partition(m, backend=b),
                                  exact.transfer_marginals(m, backend=b)), model,
            repeats=repeats)
        f4, m4, _, mo = timed(
            lambda m, b=backend: exact.transfer_moments(m, correlations=False, backend=b), model,
            repeats=repeats)
        per_state[backend] = per = m2 / (n * (1 << r)) * 1e9
        print(f"  {backend}:")
        print(f"    log Z:                     {m1:7.3f} s  (first call incl. compile {f1:.2f} s)")
        print(f"    log Z + marginals:         {m2:7.3f} s  (first call incl. compile {f2:.2f} s)"
              f" = {per:.1f} ns per (site x window state)")
        print(f"    transfer_moments (log Z, marginals, <E>, one pass): {m4:7.3f} s  (first "
              f"call incl. compile {f4:.2f} s)")
        print(f"    log Z = {float(lz):.3f}, marginals finite: "
              f"{bool(np.isfinite(mg[1]).all())}, <E> = {float(mo.mean_energy):.3f}")
    print(f"    log Z + marginals: jax / numba = {per_state['jax'] / per_state['numba']:.1f}x")
    f3, m3, _, _x = timed(
        lambda m: exact.transfer_sample(m, jax.random.key(0), 100), model, repeats=repeats
    )
    print(f"    100 exact samples (FFBS, JAX):  {m3:7.3f} s  (first call incl. compile {f3:.2f} s)")
    uni = chain(n, J=0.5)
    exact_lz = np.log(2) + (n - 1) * np.log(2 * np.cosh(0.5))
    for backend in ("numba", "jax"):
        err = abs(float(exact.transfer_log_partition(uni, backend=backend)) - exact_lz) / exact_lz
        print(f"    accuracy ({backend}, float32 model): uniform chain n = {n}: |log Z - closed "
              f"form| / log Z = {err:.1e}")


def versus_enumeration(n, r, repeats):
    rng = np.random.default_rng(1)
    J = rng.normal(0, 0.5, (n, n))
    i, j = np.indices((n, n))
    J = np.triu(np.where(np.abs(i - j) <= r, J, 0), 1)
    model = IsingModel(h=rng.normal(0, 0.5, n), J=(J + J.T).astype(np.float32), beta=1.0)
    fe, me, _, ref = timed(exact.moments, model, repeats=repeats)
    ft, mt, _, got = timed(exact.transfer_moments, model, repeats=repeats)
    diff = max(
        float(np.abs(np.asarray(a) - np.asarray(b)).max())
        for a, b in zip(ref, got)
    )
    print(f"[2] banded dense n = {n}, range r = {r}: log Z + marginals + correlations + <E>, "
          f"medians of {repeats}")
    print(f"    enumeration (2^{n} states): {me * 1e3:9.2f} ms  (first call incl. compile "
          f"{fe:.2f} s)")
    print(f"    transfer (2^{r} windows):    {mt * 1e3:9.2f} ms  (first call incl. compile "
          f"{ft:.2f} s)")
    print(f"    enumeration/transfer time = {me / mt:.3g}x on one banded n={n}, r={r} model; "
          f"largest difference {diff:.1e}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    a = p.parse_args()
    print(f"jax {jax.__version__}, devices {jax.devices()}, cpus {os.cpu_count()}")
    if a.quick:
        long_banded(10_000, 4, 3)
        versus_enumeration(14, 3, 3)
    else:
        long_banded(100_000, 8, 5)
        versus_enumeration(20, 3, 5)


if __name__ == "__main__":
    main()
