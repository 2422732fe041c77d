"""Shared by the training experiments (bracket matching, character-level LM, annealer
training): their command line and results table, one point of a sweep as a resumable training
run, and the persistent compilation cache that lets repeated seeds of one shape compile once."""

from __future__ import annotations

import argparse
import json
import math
import os

from isingattn._io import to_jsonable
from isingattn._io import write_json as _write_json
from isingattn.experiments import RunDirectoryError, train
from isingattn.experiments._train import run_status


def sweep_parser(doc, default_out, *, what="the results table, summary and plots",
                 phases=None, report="the summary and plots", epilog="see the module docstring"):
    """The options every training sweep has: ``--out``, ``--runs``, ``--quick``, ``--report``,
    ``--fresh``, ``--cache`` and, given ``phases`` (their names, in order), ``--phases``.
    ``doc``: the script's module docstring (its first paragraph is the description)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=f"Points and files: {epilog}.")
    ap.add_argument("--out", default=default_out, help=f"folder of {what}")
    ap.add_argument("--runs", default=None,
                    help="folder of the run directories (default: OUT/runs; not committed)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny settings (under a minute): checks the pipeline, not the outcome")
    if phases:
        ap.add_argument("--phases", default=",".join(phases),
                        help="comma-separated phases to run (default: %(default)s)")
    ap.add_argument("--report", action="store_true", help=f"only write {report} from the table")
    ap.add_argument("--fresh", action="store_true", help="start the table over")
    ap.add_argument("--cache", default=None,
                    help="persistent compilation cache folder (default: RUNS/.jax_cache)")
    return ap


def open_sweep(args, presets, csv_name, fields, key, parse, *, settings=None, phases=None):
    """Start a sweep from parsed :func:`sweep_parser` options: the preset's name and table, the
    output and runs folders made, the results table opened (resuming it; ``settings``, default
    the preset itself, must match the table's unless ``--report``), the compilation cache on
    unless ``--report``. Returns ``(preset, P, table, phases)`` with ``phases`` the list asked
    for (checked against the valid ``phases``; None when the script has none)."""
    from _results import ResultsTable

    preset = "quick" if args.quick else "full"
    P = presets[preset]
    os.makedirs(args.out, exist_ok=True)
    args.runs = args.runs or os.path.join(args.out, "runs")
    if settings is None:
        settings = {"preset": preset, **P}
    table = ResultsTable(os.path.join(args.out, csv_name), fields, key,
                         settings=None if args.report else settings, parse=parse,
                         fresh=args.fresh)
    asked = None
    if phases:
        asked = args.phases.split(",")
        unknown = set(asked) - set(phases)
        if unknown:
            raise SystemExit(f"--phases: unknown {sorted(unknown)}; valid: {', '.join(phases)}")
    if not args.report:
        enable_compilation_cache(args.cache or os.path.join(args.runs, ".jax_cache"))
    return preset, P, table, asked


def jsonable(x):
    """``x`` with named tuples as dicts, tuples as lists, dict keys as strings and non-finite
    floats as None (JSON has no NaN)."""
    return to_jsonable(x, nonfinite="null")


def write_json(path, data):
    """``data`` as JSON (one-space indent), atomically."""
    _write_json(path, data, indent=1)


def ablation_differences(sweep, axis, metric):
    """The ablation's paired comparisons: for each coupling structure (``banded``,
    ``relative``), ``<structure>-learned`` minus each baseline (``softmax``, ``none``,
    ``<structure>-fixed``, ``<structure>-random``) over the seeds both have, at every value of
    ``axis`` (a row field: ``"length"``, ``"context"``), and the least-squares slope of those
    differences against log2(axis) with its interval where two or more values have them.
    ``sweep``: parsed rows with ``variant``, ``seed``, ``axis`` and ``metric``. Returns
    ``(diffs, trends)``: ``{name: {value: Interval}}`` and ``{name: Slope}``, named
    ``"<learned> - <baseline>"``."""
    from isingattn.experiments._stats import paired_difference, slope_interval

    def by_seed(variant, value):
        return {r["seed"]: r[metric] for r in sweep
                if r["variant"] == variant and r[axis] == value}

    values = sorted({r[axis] for r in sweep})
    diffs, trends = {}, {}
    for structure in ("banded", "relative"):
        learned = f"{structure}-learned"
        for base in ("softmax", "none", f"{structure}-fixed", f"{structure}-random"):
            name = f"{learned} - {base}"
            xs, ys = [], []
            for L in values:
                a, b = by_seed(learned, L), by_seed(base, L)
                common = sorted(set(a) & set(b))
                if common:
                    diffs.setdefault(name, {})[L] = paired_difference(a, b)
                    xs += [math.log2(L)] * len(common)
                    ys += [a[s] - b[s] for s in common]
            if len(set(xs)) >= 2:
                trends[name] = slope_interval(xs, ys)
    return diffs, trends


def enable_compilation_cache(path):
    """Keep compiled programs in ``path`` across runs and processes (seeds and variants of one
    shape share them)."""
    import jax

    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def run_point(config, run_dir, *, progress=False):
    """Train ``config`` into ``run_dir``, continuing an interrupted run there; returns
    ``final.json``'s contents. A run directory from another protocol stops the sweep with a
    message naming the settings that differ."""
    resume = run_status(run_dir) in ("finished", "unfinished")
    try:
        return train(config, run_dir, resume=resume, progress=progress)
    except RunDirectoryError as e:
        raise SystemExit(f"{e}\n(the sweep's protocol changed since this run was made: move "
                         "the runs folder aside or use --fresh)") from None


def read_json(path, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)
