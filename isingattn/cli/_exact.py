"""``isingattn exact MODEL``: exact log Z, marginals, correlations, mean energy, ground state."""

from __future__ import annotations

import argparse

import numpy as np

from ._common import add_model_argument, load_model, write_json


def add_parser(sub):
    p = sub.add_parser(
        "exact", help="exact inference on a model", formatter_class=argparse.RawTextHelpFormatter,
        description="Exact log Z, marginals, correlations, mean energy and a ground state.",
    )
    add_model_argument(p)
    p.add_argument("--method", choices=["enumerate", "transfer"], default="enumerate",
                   help="enumerate (n <= 30) or transfer (banded couplings, any length)")
    p.add_argument("--no-correlations", action="store_true", help="skip <x_i x_j>")
    p.add_argument("--out", help="write results to this JSON file")
    p.set_defaults(run=run)


def run(args):
    from .. import exact

    model = load_model(args.model)
    if args.method == "transfer":
        result = {
            "log_partition": exact.transfer_log_partition(model),
            "marginals": exact.transfer_marginals(model),
        }
        if not args.no_correlations:
            result["correlations"] = exact.transfer_correlations(model)
    else:
        mo = exact.moments(model, correlations=not args.no_correlations)
        result = {"log_partition": mo.log_partition, "marginals": mo.marginals}
        if mo.correlations is not None:
            result["correlations"] = mo.correlations
            result["mean_energy"] = mo.mean_energy
        state, energy = exact.ground_state(model)
        result["ground_state"] = state
        result["ground_energy"] = energy
    result = {"model": args.model, "n": model.n, "method": args.method, **result}
    print(f"model {args.model}: n = {model.n}, beta = {np.asarray(model.beta)}")
    print(f"log Z = {float(np.asarray(result['log_partition'])):.6f}")
    mags = np.asarray(result["marginals"])
    print(f"<x_i>: mean {mags.mean():+.4f}, min {mags.min():+.4f}, max {mags.max():+.4f}")
    if "mean_energy" in result:
        print(f"<E> = {float(result['mean_energy']):.6f}")
    if "ground_energy" in result:
        print(f"ground-state energy = {float(result['ground_energy']):.6f}")
    if args.out:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    return 0
