"""``isingattn exact MODEL``: exact log Z, marginals, correlations, mean energy, ground state
(of one model, or of every model of a batch)."""

from __future__ import annotations

import argparse

import numpy as np

from .._io import write_json
from ._common import add_model_argument, check_output_file, load_model


def add_parser(sub):
    p = sub.add_parser(
        "exact", help="exact inference on a model", formatter_class=argparse.RawTextHelpFormatter,
        description="Exact log Z, marginals, correlations, mean energy and a ground state; for a "
        "batch of models (a model file with leading batch dimensions), of each model.",
    )
    add_model_argument(p)
    p.add_argument("--method", choices=["enumerate", "transfer"], default="enumerate",
                   help="enumerate (n <= 30) or transfer (banded couplings, any length)")
    p.add_argument("--no-correlations", action="store_true", help="skip <x_i x_j>")
    p.add_argument("--out", help="write results to this JSON file (arrays keep the batch "
                   "dimensions); checked before any work")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.set_defaults(run=run)


def _summary(name, values, fmt="{:.6f}"):
    v = np.asarray(values, np.float64)
    if v.ndim == 0:
        return f"{name} = {fmt.format(float(v))}"
    return (f"{name}: {v.size} models, mean {fmt.format(v.mean())}, min {fmt.format(v.min())}, "
            f"max {fmt.format(v.max())}")


def run(args):
    from .. import exact

    if args.out:
        check_output_file(args.out, args.force)
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
    batch = tuple(model.batch_shape)
    result = {"model": args.model, "n": model.n, "batch_shape": list(batch),
              "method": args.method, **result}
    beta = np.asarray(model.beta)
    shown = beta if beta.size <= 8 else f"array of shape {beta.shape}"
    print(f"model {args.model}: n = {model.n}, "
          + (f"batch of {int(np.prod(batch))} models {batch}, " if batch else "")
          + f"beta = {shown}")
    print(_summary("log Z", result["log_partition"]))
    mags = np.asarray(result["marginals"])
    print(f"<x_i>: mean {mags.mean():+.4f}, min {mags.min():+.4f}, max {mags.max():+.4f}")
    if "mean_energy" in result:
        print(_summary("<E>", result["mean_energy"]))
    if "ground_energy" in result:
        print(_summary("ground-state energy", result["ground_energy"]))
    if args.out:
        write_json(args.out, result)
        print(f"wrote {args.out}")
    return 0
