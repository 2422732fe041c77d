"""``isingattn compare MODEL --samplers a,b,c``: run several backends on one model and compare
their sampling quality against the exact distribution.

Writes ``OUT/compare.csv`` and ``OUT/compare.json`` after each sampler (an interrupted run keeps
every finished row) and the plots ``OUT/*.png`` at the end (also after an interruption).
"""

from __future__ import annotations

import argparse
import os


def add_parser(sub):
    from ..samplers import BACKENDS
    from ._common import add_model_argument

    p = sub.add_parser(
        "compare", help="compare samplers on one model (table + plots)",
        formatter_class=argparse.RawTextHelpFormatter,
        description=__doc__.split(":", 1)[1].strip(),
    )
    add_model_argument(p)
    p.add_argument("--samplers", default="all",
                   help="comma-separated backends, or 'all' (default). Available: "
                   + ", ".join(BACKENDS))
    p.add_argument("--num-samples", type=int, default=1000, help="draws per chain")
    p.add_argument("--num-chains", type=int, default=4, help="chains per sampler")
    p.add_argument("--reference", choices=["exact", "none"], default="exact",
                   help="distances against exact enumeration (n <= 30) or none")
    p.add_argument("--num-bootstrap", type=int, default=100,
                   help="bootstrap resamples for the pseudo-likelihood beta_eff (large n)")
    p.add_argument("--seed", type=int, default=0, help="seed of the JAX key")
    p.add_argument("--out", default="isingattn-compare", help="output folder (default: %(default)s)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(run=run)


def parse_samplers(text):
    from ..samplers import BACKENDS

    if text.strip() == "all":
        return list(BACKENDS)
    names = [s.strip() for s in text.split(",") if s.strip()]
    if not names:
        raise ValueError("--samplers must name at least one backend")
    unknown = [n for n in names if n not in BACKENDS]
    if unknown:
        raise ValueError(f"unknown sampler(s) {', '.join(unknown)}; valid: {', '.join(BACKENDS)}")
    return names


def run_comparison(model, names, args, out, *, header=None, extra_callback=None):
    """Shared by ``compare`` and ``demo``: run, write CSV/JSON after each sampler, plots at the
    end (also on interruption). Returns the table."""
    import jax

    from ..diagnostics import compare_samplers, plot_comparison

    os.makedirs(out, exist_ok=True)
    csv_path = os.path.join(out, "compare.csv")
    json_path = os.path.join(out, "compare.json")

    def write(table, row):
        table.to_csv(csv_path)
        table.to_json(json_path)
        if extra_callback is not None:
            extra_callback(table, row)

    state = {}

    def cb(table, row):
        state["table"] = table
        write(table, row)

    try:
        table = compare_samplers(
            model, names, key=jax.random.key(args.seed), num_samples=args.num_samples,
            num_chains=args.num_chains,
            reference=None if getattr(args, "reference", "exact") == "none" else "exact",
            num_bootstrap=getattr(args, "num_bootstrap", 100), progress=True, callback=cb,
        )
    finally:
        table_so_far = state.get("table")
        if table_so_far is not None and not getattr(args, "no_plots", False):
            paths = plot_comparison(table_so_far, out)
            state["plots"] = paths
    print()
    if header:
        print(header)
    print(table.format())
    for r in table.rows:
        if r["status"] != "ok":
            print(f"note: {r['sampler']} {r['status']}")
    print(f"\nwrote {csv_path}, {json_path}")
    for p in state.get("plots", []):
        print(f"wrote {p}")
    return table


def run(args):
    from .. import exact
    from ._common import load_model

    model = load_model(args.model)
    names = parse_samplers(args.samplers)
    if args.reference == "exact" and model.n > exact.MAX_ENUMERATION_N:
        print(f"note: n = {model.n} > {exact.MAX_ENUMERATION_N}: no exact reference; distances "
              "and moment errors are left out, beta_eff is by pseudo-likelihood")
        args.reference = "none"
    print(f"model {args.model}: n = {model.n}, vartype {model.vartype.value}, batch "
          f"{model.batch_shape}; samplers: {', '.join(names)}; {args.num_chains} chains x "
          f"{args.num_samples} draws")
    run_comparison(model, names, args, args.out)
    return 0
