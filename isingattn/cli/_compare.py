"""``isingattn compare MODEL --samplers a,b,c``: run several backends on one model and compare
their sampling quality against the exact distribution.

Writes ``OUT/compare.csv`` and ``OUT/compare.json`` after each sampler (an interrupted run keeps
every finished row) and the plots ``OUT/*.png`` at the end (also after an interruption). Run again
into the same OUT it resumes, like the analysis tables: the settings that change what a row
means (model, draws, chains, reference, bootstrap, seed; kept in ``OUT/compare.settings.json``)
must match, finished samplers (also those not named this time) are kept, and only the missing
ones, and those that ended in an error, are run; ``--force`` starts over.

Exit status: 0 when every sampler ran or was skipped as not applicable (e.g. Wolff with fields,
the QPU without a token); 1 when a sampler ended in an error (``--allow-errors``: 0); 2 for bad
input.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys


def add_parser(sub):
    from ..samplers import BACKENDS
    from ._common import add_model_argument, nonnegative_int, positive_int

    p = sub.add_parser(
        "compare", help="compare samplers on one model (table + plots)",
        formatter_class=argparse.RawTextHelpFormatter,
        description=__doc__.split(":", 1)[1].strip(),
    )
    add_model_argument(p)
    p.add_argument("--samplers", default="all",
                   help="comma-separated backends, or 'all' (default). Available: "
                   + ", ".join(BACKENDS))
    p.add_argument("--num-samples", type=positive_int, default=1000, help="draws per chain")
    p.add_argument("--num-chains", type=positive_int, default=4, help="chains per sampler")
    p.add_argument("--reference", choices=["exact", "none"], default="exact",
                   help="distances against exact enumeration (n <= 30) or none")
    p.add_argument("--num-bootstrap", type=nonnegative_int, default=100,
                   help="bootstrap resamples for the pseudo-likelihood beta_eff (large n)")
    p.add_argument("--seed", type=int, default=0, help="seed of the JAX key")
    p.add_argument("--out", default="isingattn-compare",
                   help="output folder (default: %(default)s); a folder with an earlier run of "
                   "the same settings is resumed")
    p.add_argument("--force", action="store_true",
                   help="start over in --out, replacing an earlier comparison there")
    p.add_argument("--allow-errors", action="store_true",
                   help="exit 0 even when a sampler ended in an error (default: exit 1)")
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
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"--samplers names {', '.join(dup)} more than once")
    return names


def _finished(row):
    """A row worth keeping on resume: it ran, or the backend does not apply (not an error)."""
    return not str(row.get("status", "")).startswith("error")


def run_comparison(model, names, args, out, *, header=None, extra_callback=None,
                   previous=None):
    """Shared by ``compare`` and ``demo``: run, write CSV/JSON after each sampler, plots at the
    end (also on interruption). ``previous``: an earlier table in ``out`` to resume (its
    finished rows are kept and not run again). Returns the table."""
    import jax

    from ..diagnostics import ComparisonTable, compare_samplers, plot_comparison

    os.makedirs(out, exist_ok=True)
    csv_path = os.path.join(out, "compare.csv")
    json_path = os.path.join(out, "compare.json")
    kept = {r["sampler"]: r for r in (previous.rows if previous else []) if _finished(r)}
    old_curves = dict(previous.curves) if previous else {}

    def merged(table):
        rows = {r["sampler"]: r for r in table.rows}
        order = [n for n in names if n in rows or n in kept] + [n for n in kept if n not in names]
        return ComparisonTable(
            rows=[rows.get(n) or kept[n] for n in order], model=table.model,
            curves={**{k: v for k, v in old_curves.items() if k in kept}, **table.curves},
            reference=table.reference, samples=table.samples)

    state = {}

    def cb(table, row):
        state["table"] = full = merged(table)
        full.to_csv(csv_path)
        full.to_json(json_path)
        if extra_callback is not None:
            extra_callback(full, row)

    if kept:
        todo = [n for n in names if n not in kept]
        print(f"resuming {out}: keeping {len(kept)} finished sampler(s) "
              f"({', '.join(kept)}); to run: {', '.join(todo) or 'none'}")
    try:
        table = compare_samplers(
            model, names, key=jax.random.key(args.seed), num_samples=args.num_samples,
            num_chains=args.num_chains,
            reference=None if getattr(args, "reference", "exact") == "none" else "exact",
            num_bootstrap=getattr(args, "num_bootstrap", 100), progress=True, callback=cb,
            skip=set(kept),
        )
        table = merged(table)
        if kept:  # nothing may have run: write the merged table once
            table.to_csv(csv_path)
            table.to_json(json_path)
        state["table"] = table
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


def _settings(args, model):
    settings = {"model": args.model, "num_samples": args.num_samples,
                "num_chains": args.num_chains, "reference": args.reference,
                "num_bootstrap": args.num_bootstrap, "seed": args.seed}
    if os.path.isfile(args.model):  # a model file: its content, not only its name
        with open(args.model, "rb") as f:
            settings["model_sha256"] = hashlib.sha256(f.read()).hexdigest()
    return settings


def _previous(out, settings, force):
    """The earlier comparison in ``out`` to resume (None: none, or ``force``); a clear error when
    it was made with other settings or cannot be read."""
    from ..diagnostics import ComparisonTable

    settings_path = os.path.join(out, "compare.settings.json")
    json_path = os.path.join(out, "compare.json")
    if force:
        return None
    old = None
    if os.path.exists(settings_path):
        try:
            with open(settings_path) as f:
                old = json.load(f)
        except (ValueError, UnicodeDecodeError) as e:
            old = e
        if not isinstance(old, dict):
            why = old if isinstance(old, Exception) else f"not a JSON object: a {type(old).__name__}"
            raise ValueError(f"{settings_path} (the settings of the comparison in {out}) cannot "
                             f"be read ({why}): use --force to start over, or another --out")
    if not os.path.exists(json_path):
        return None
    if old is None:
        raise ValueError(f"{out} holds a comparison (compare.json) without its settings file "
                         "compare.settings.json, so it cannot be resumed safely: use --force to "
                         "replace it, or another --out")
    diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
    if diff:
        shown = ", ".join(f"{k}: {old.get(k)!r} there, {settings.get(k)!r} now" for k in diff)
        raise ValueError(f"{out} holds a comparison made with other settings ({shown}); "
                         "resuming would mix them in one table: use --force to replace it, or "
                         "another --out")
    try:
        return ComparisonTable.from_json(json_path)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"{json_path} cannot be read back ({type(e).__name__}: {e}): use "
                         "--force to start over, or another --out") from None


def run(args):
    from .. import exact
    from .._io import write_json
    from ._common import check_output_dir, load_model

    names = parse_samplers(args.samplers)
    check_output_dir(args.out)
    model = load_model(args.model)
    if args.reference == "exact" and model.n > exact.MAX_ENUMERATION_N:
        print(f"note: n = {model.n} > {exact.MAX_ENUMERATION_N}: no exact reference; distances "
              "and moment errors are left out, beta_eff is by pseudo-likelihood")
        args.reference = "none"
    settings = _settings(args, model)
    previous = _previous(args.out, settings, args.force)
    write_json(os.path.join(args.out, "compare.settings.json"), settings)
    print(f"model {args.model}: n = {model.n}, vartype {model.vartype.value}, batch "
          f"{model.batch_shape}; samplers: {', '.join(names)}; {args.num_chains} chains x "
          f"{args.num_samples} draws")
    table = run_comparison(model, names, args, args.out, previous=previous)
    errors = [r["sampler"] for r in table.rows if not _finished(r)]
    if errors and not args.allow_errors:
        print(f"isingattn compare: {len(errors)} sampler(s) ended in an error: "
              f"{', '.join(errors)} (see the notes above; --allow-errors to exit 0)",
              file=sys.stderr)
        return 1
    return 0
