"""``isingattn sample MODEL``: draw samples with any backend and write them to ``.npz``."""

from __future__ import annotations

import argparse

import numpy as np


def add_parser(sub):
    from ..samplers import BACKENDS
    from ._common import add_model_argument, positive_int

    p = sub.add_parser(
        "sample", help="sample a model with a backend",
        formatter_class=argparse.RawTextHelpFormatter,
        description="Draw samples and write spins, energies and timings to an .npz file.",
    )
    add_model_argument(p)
    p.add_argument("--sampler", default="exact", choices=sorted(BACKENDS), help="backend")
    p.add_argument("--num-samples", type=positive_int, default=1000, help="draws per chain")
    p.add_argument("--num-chains", type=positive_int, default=1, help="chains per model")
    p.add_argument("--seed", type=int, default=0, help="seed of the JAX key")
    p.add_argument("--out", default="samples.npz",
                   help="output .npz file (default: %(default)s); checked before any work")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.set_defaults(run=run)


def run(args):
    import jax

    from ..samplers import get_sampler
    from ._common import check_output_file, load_model, write_npz

    check_output_file(args.out, args.force, example="samples.npz")
    model = load_model(args.model)
    sampler = get_sampler(args.sampler)
    samples = sampler.sample(model, jax.random.key(args.seed), args.num_samples,
                             num_chains=args.num_chains)
    energy = np.asarray(samples.energy)
    print(f"{args.sampler}: {samples}")
    print(f"mean energy {energy.mean():.6f} +- {energy.std() / np.sqrt(energy.size):.6f} (naive)")
    print(f"timing: {samples.info['timing']}")
    write_npz(args.out, spins=np.asarray(samples.spins, np.int8), energy=energy,
              vartype=samples.vartype.value,
              **{f"timing_{k}": v for k, v in samples.info["timing"].items()})
    print(f"wrote {args.out}")
    return 0
