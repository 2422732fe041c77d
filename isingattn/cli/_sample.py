"""``isingattn sample MODEL``: draw samples with any backend and write them to ``.npz``."""

from __future__ import annotations

import argparse
import os

import numpy as np


def add_parser(sub):
    from ..samplers import BACKENDS

    p = sub.add_parser(
        "sample", help="sample a model with a backend",
        formatter_class=argparse.RawTextHelpFormatter,
        description="Draw samples and write spins, energies and timings to an .npz file.",
    )
    from ._common import add_model_argument

    add_model_argument(p)
    p.add_argument("--sampler", default="exact", choices=sorted(BACKENDS), help="backend")
    p.add_argument("--num-samples", type=int, default=1000, help="draws per chain")
    p.add_argument("--num-chains", type=int, default=1, help="chains per model")
    p.add_argument("--seed", type=int, default=0, help="seed of the JAX key")
    p.add_argument("--out", default="samples.npz", help="output .npz file")
    p.set_defaults(run=run)


def run(args):
    import jax

    from ..samplers import get_sampler
    from ._common import load_model

    model = load_model(args.model)
    sampler = get_sampler(args.sampler)
    samples = sampler.sample(model, jax.random.key(args.seed), args.num_samples,
                             num_chains=args.num_chains)
    energy = np.asarray(samples.energy)
    print(f"{args.sampler}: {samples}")
    print(f"mean energy {energy.mean():.6f} +- {energy.std() / np.sqrt(energy.size):.6f} (naive)")
    print(f"timing: {samples.info['timing']}")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp.npz"
    np.savez(tmp, spins=np.asarray(samples.spins, np.int8), energy=energy,
             vartype=samples.vartype.value, **{f"timing_{k}": v for k, v in
                                               samples.info["timing"].items()})
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")
    return 0
