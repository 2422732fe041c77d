"""``isingattn demo``: the main job on built-in defaults.

Builds a default model, computes its exact Boltzmann statistics, draws samples with every
backend in :data:`isingattn.samplers.BACKENDS` that can handle it, and prints how close each
backend's marginals, correlations and mean energy come to the exact values. Results are written
to ``OUT/demo.json`` after each backend, so an interrupted run keeps what it finished.
"""

from __future__ import annotations

import os
import time

import numpy as np


def add_parser(sub):
    p = sub.add_parser("demo", help="run the main job on built-in defaults",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--out", default="isingattn-demo", help="output folder (default: %(default)s)")
    p.add_argument("--n", type=int, default=12, help="variables of the default model")
    p.add_argument("--beta", type=float, default=0.5, help="inverse temperature")
    p.add_argument("--num-samples", type=int, default=2000, help="draws per chain")
    p.add_argument("--num-chains", type=int, default=4, help="chains per backend")
    p.add_argument("--seed", type=int, default=0, help="seed of the JAX key")
    p.set_defaults(run=run)


def run(args):
    import jax
    from tqdm import tqdm

    from .. import exact
    from ..models import random_dense
    from ..samplers import BACKENDS
    from ._common import write_json

    key = jax.random.key(args.seed)
    k_model, k_sample = jax.random.split(key)
    model = random_dense(k_model, args.n, J_scale=1.0 / np.sqrt(args.n), h_scale=0.5,
                         beta=args.beta)
    print(f"default model: dense SPIN, n = {model.n}, beta = {args.beta}, "
          f"J ~ N(0, 1/n), h ~ N(0, 0.25)")
    t0 = time.perf_counter()
    mo = exact.moments(model)
    gs, ge = exact.ground_state(model)
    print(f"exact: log Z = {float(mo.log_partition):.6f}, <E> = {float(mo.mean_energy):.6f}, "
          f"ground energy = {float(ge):.6f} ({time.perf_counter() - t0:.2f} s)")
    results = {
        "model": {"n": model.n, "beta": args.beta, "h": model.h, "J": model.J},
        "exact": {"log_partition": mo.log_partition, "marginals": mo.marginals,
                  "mean_energy": mo.mean_energy, "ground_state": gs, "ground_energy": ge},
        "backends": {},
    }
    path = os.path.join(args.out, "demo.json")
    write_json(path, results)
    rows = []
    iu = np.triu_indices(model.n, 1)
    for name in tqdm(list(BACKENDS), desc="backends", unit="backend"):
        sampler = BACKENDS[name]()
        s = sampler.sample(model, k_sample, args.num_samples, num_chains=args.num_chains)
        x = np.asarray(s.flat(), float)
        marg_err = np.abs(x.mean(0) - np.asarray(mo.marginals)).max()
        corr = (x.T @ x) / x.shape[0]
        corr_err = np.abs(corr[iu] - np.asarray(mo.correlations)[iu]).max()
        e_mean = float(np.asarray(s.energy).mean())
        row = {"backend": name, "max_marginal_error": marg_err,
               "max_correlation_error": corr_err, "mean_energy": e_mean,
               "mean_energy_error": e_mean - float(mo.mean_energy),
               "total_s": s.info["timing"]["total_s"]}
        rows.append(row)
        results["backends"][name] = row
        write_json(path, results)
    print(f"\n{'backend':<12}{'max |dm|':>10}{'max |dC|':>10}{'<E>':>12}{'d<E>':>10}{'time s':>9}")
    for r in rows:
        print(f"{r['backend']:<12}{r['max_marginal_error']:>10.4f}"
              f"{r['max_correlation_error']:>10.4f}{r['mean_energy']:>12.4f}"
              f"{r['mean_energy_error']:>+10.4f}{r['total_s']:>9.2f}")
    print(f"\nwrote {path}")
    return 0
