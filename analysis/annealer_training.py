"""Annealer training: is training Boltzmann attention on samples from a (simulated) diabatic
quantum annealer competitive with exact Boltzmann statistics?

Every point is a training run of ``isingattn.experiments`` with one *gradient source*; the model,
optimizer, steps, data and seeds are the same for every source, only the method that computes the
layer's statistics (and so its gradients) changes:

- ``exact``: enumeration (the reference);
- ``sampled-exact``: ``M`` exact draws per query (``sampled:exact``): Monte-Carlo noise alone;
- ``gibbs``: ``M`` draws of one Gibbs chain per query (``sampled:gibbs``, burn-in and thinning
  below);
- ``diabatic-t<t_a>``: the state-vector anneal (``sampled:diabatic``, schedule ``dwave_like``)
  at anneal times spanning the short-anneal regime (``t_a`` = 0.1 ns: ``beta_h`` = 0.05, nearly
  uniform draws) and beyond (2 ns: ``beta_h`` = 8), each uncalibrated and with measured
  calibration (``-cal``: scales re-estimated every ``calibrate_every`` steps);
- ``qpu-offline``: the tiled QPU path on dwave-system's ``MockDWaveSampler`` with its
  simulated-annealing emulator (``auto_scale`` off), uncalibrated and calibrated.

Every source runs at the headline ``M``, those of ``m_sweep`` at every ``M`` of the preset. Every sampled run measures its
sampler's effective temperatures ``(gamma_h, gamma_J)`` on probe models every
``calibrate_every`` steps (uncalibrated runs only measure). Each finished run is evaluated on
the test split with its training sampler (the run's final metrics) and with exact inference.

Files under ``--out``: ``annealer_training.csv`` (one row per point: task, source, M, seed,
test accuracy with the training sampler and with exact inference, the effective temperatures
and scales at the first and last measurement, seconds per step), ``curves.json`` (validation
curves and calibration records per point), ``summary.json``, ``summary.md`` and the plots.
An interrupted sweep resumes: finished points are read back, an unfinished run continues from
its checkpoint. A point whose sampler refuses the model its run has trained (the QPU path with
``auto_scale`` off, once the trained fields or couplings leave the hardware's ``h_range`` /
``J_range``, as a real QPU would) is an outcome, not a fault: it is recorded in ``stopped.csv``
(the step it reached, its last validation accuracy, the refusal) and not run again on resume
(delete its row to retry it). Any other point that raises is reported with its traceback and
left out of the table (tried again on the next resume); the others go on, and the script then
exits non-zero. The protocol (the ``PRESETS`` table) is written next to the CSV; resuming under
another protocol stops with the settings that differ.

Run (resumable, spread over sessions)::

    .venv/bin/python analysis/annealer_training.py --out docs/results/annealer-training

and ``--quick`` (under a minute) to check the pipeline.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import sys
import time
import traceback

import numpy as np
from _training import jsonable, open_sweep, read_json, run_point, sweep_parser, write_json

from isingattn.attention._calibration import _MAX_STEP, is_measured
from isingattn.experiments import TrainConfig
from isingattn.experiments._stats import mean_interval, paired_difference

PRESETS = {
    "full": {
        "tasks": {"pair-copy": 8, "bracket": 8},
        "anneal_times": [0.1, 0.5, 2.0],
        "num_samples": [64, 16, 256],  # the first is the headline M (every source)
        # the sources also run at the other M
        "m_sweep": ["sampled-exact", "gibbs", "diabatic-t0.5", "diabatic-t0.5-cal",
                    "qpu-offline-cal"],
        "seeds": [0, 1, 2],
        "qpu": {"topology_shape": [6], "auto_scale": False},
        "gibbs": {"num_burnin": 50, "thinning": 2},
        "only": None,  # every source
        "layers": 2, "d_model": 32, "heads": 2, "bandwidth": 2, "bracket_types": 4,
        "steps": 300, "batch": 32, "lr": 3e-3, "warmup": 20, "beta": 1.0,
        "eval_every": 25, "eval_examples": 128, "test_examples": 512,
        "calibrate_every": 25, "calibrate_probes": 8, "calibrate_samples": 512,
    },
    "quick": {
        "tasks": {"pair-copy": 6},
        "anneal_times": [0.5],
        "num_samples": [8],
        "m_sweep": [],
        "seeds": [0],
        "qpu": None,
        "gibbs": None,
        "only": ["exact", "sampled-exact"],
        "layers": 1, "d_model": 8, "heads": 1, "bandwidth": 2, "bracket_types": 2,
        "steps": 2, "batch": 4, "lr": 3e-3, "warmup": 1, "beta": 1.0,
        "eval_every": 2, "eval_examples": 8, "test_examples": 8,
        "calibrate_every": 2, "calibrate_probes": 2, "calibrate_samples": 64,
    },
}

FIELDS = ["task", "length", "source", "method", "annealing_time", "calibrate", "num_samples",
          "seed", "test_accuracy", "test_loss", "exact_test_accuracy", "exact_test_loss",
          "valid_accuracy", "gamma_h_first", "gamma_J_first", "gamma_h_last", "gamma_J_last",
          "c_h_last", "c_J_last", "seconds_per_step", "calibration_seconds",
          "compile_seconds", "wall_seconds"]
FLOATS = FIELDS[8:]


@dataclasses.dataclass(frozen=True)
class Source:
    """A gradient source: the training method, its backend options and calibration."""

    name: str
    method: str
    options: tuple = ()
    calibrate: str | None = None
    annealing_time: float | None = None

    @property
    def sampled(self):
        return self.method.startswith("sampled:")


def sources(P) -> list[Source]:
    out = [Source("exact", "exact"), Source("sampled-exact", "sampled:exact")]
    if P["gibbs"] is not None:
        out.append(Source("gibbs", "sampled:gibbs", tuple(sorted(P["gibbs"].items()))))
    for t in P["anneal_times"]:
        opts = (("annealing_time", t),)
        out.append(Source(f"diabatic-t{t:g}", "sampled:diabatic", opts, None, t))
        out.append(Source(f"diabatic-t{t:g}-cal", "sampled:diabatic", opts, "measured", t))
    if P["qpu"] is not None:
        opts = tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                            for k, v in P["qpu"].items()))
        out.append(Source("qpu-offline", "sampled:qpu_offline", opts))
        out.append(Source("qpu-offline-cal", "sampled:qpu_offline", opts, "measured"))
    if P.get("only") is not None:
        out = [s for s in out if s.name in P["only"]]
    return out


@dataclasses.dataclass(frozen=True)
class Point:
    task: str
    length: int
    source: Source
    num_samples: int  # 0 for exact
    seed: int

    @property
    def key(self):
        return (self.task, self.source.name, self.num_samples, self.seed)

    @property
    def name(self):
        m = f"_M{self.num_samples}" if self.num_samples else ""
        return f"{self.task}_L{self.length}_{self.source.name}{m}_s{self.seed}"


def _slow(src: Source, P) -> bool:
    """Sources that cost the most per step: the offline QPU, and those whose simulation needs
    many integration steps: the longest anneal, and the calibrated shortest one (its scales, and
    so its fields, are large). The integrator's step count grows with ``t_a`` and the largest
    field sum (64 steps at t_a = 0.5 ns and field sum 1, 256 at 20; 576 at t_a = 2 ns and field
    sum 5)."""
    if src.method == "sampled:qpu_offline":
        return True  # about 16 s per step (pilot): the host's embedding and unembedding
    t = src.annealing_time
    if t is None or len(P["anneal_times"]) < 2:
        return False
    return t == max(P["anneal_times"]) or (t == min(P["anneal_times"]) and bool(src.calibrate))


def _simulated(src: Source) -> bool:
    """Sources that run an annealer (the state-vector simulator or the offline QPU): seconds to
    tens of seconds per training step on this machine, against well under one for the others."""
    return src.method in ("sampled:diabatic", "sampled:qpu_offline")


def points(P) -> list[Point]:
    """The points of the controls first (``exact``, ``sampled-exact``, ``gibbs``: every M, seed
    and task), then the annealer sources: headline M first, source by source (those of
    ``m_sweep`` first, in its order; each source's tasks and seeds complete before the next),
    then the other M for the sources of ``m_sweep``, the slow sources' points
    (:func:`_slow`) after all others — so that a sweep spread over sessions has its cheaper
    comparisons complete first (the order only: the set of points is the declared one)."""
    srcs = sources(P)
    out, slow = [], []
    for i, M in enumerate(P["num_samples"]):
        for task, L in P["tasks"].items():
            for s in P["seeds"]:
                for src in srcs:
                    if not src.sampled:
                        if i == 0:
                            out.append(Point(task, L, src, 0, s))
                    elif (i == 0 or src.name in P["m_sweep"]) and _slow(src, P):
                        slow.append(Point(task, L, src, M, s))
                    elif i == 0 or src.name in P["m_sweep"]:
                        out.append(Point(task, L, src, M, s))
    controls = [p for p in out if not _simulated(p.source)]
    # annealer points: headline M first; within it, source by source (the sources of the M
    # sweep first, in their order), each complete over tasks and seeds before the next, so
    # that a comparison is decided as early as possible; stable sort keeps tasks and seeds
    rank = {name: i for i, name in enumerate(P["m_sweep"])}
    headline = P["num_samples"][0]
    annealer = sorted((p for p in out if _simulated(p.source)),
                      key=lambda p: (p.num_samples != headline,
                                     rank.get(p.source.name, len(rank)),
                                     srcs.index(p.source)))
    return controls + annealer + slow


def config_of(p: Point, P) -> TrainConfig:
    src = p.source
    opts = {k: (list(v) if isinstance(v, tuple) else v) for k, v in src.options}
    extra = {}
    if src.sampled:
        extra = {"num_samples": p.num_samples, "backend_options": opts,
                 "calibrate": src.calibrate, "calibrate_every": P["calibrate_every"],
                 "calibrate_probes": P["calibrate_probes"],
                 "calibrate_samples": P["calibrate_samples"]}
    task = {"task": p.task}
    if p.task == "bracket":
        task.update(bracket_variant="match", bracket_types=P["bracket_types"])
    return TrainConfig(
        **task, length=p.length, attention="learned", structure="banded",
        method=src.method, bandwidth=P["bandwidth"], beta=P["beta"], layers=P["layers"],
        d_model=P["d_model"], heads=P["heads"], steps=P["steps"], batch=P["batch"],
        lr=P["lr"], warmup=P["warmup"], seed=p.seed, eval_every=P["eval_every"],
        eval_examples=P["eval_examples"], test_examples=P["test_examples"],
        # a checkpoint at every evaluation: the slowest points take hours per 25 steps, and the
        # interval changes no number of a run (TrainConfig.RESUMABLE_CHANGES)
        checkpoint_every=P["eval_every"], **extra)


def _read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _head_mean(records, step, name):
    """Mean over layers and heads of ``name`` in the first round of the measurement at ``step``
    (the sampler as it was programmed during the steps before), for ``gamma_h`` / ``gamma_J``
    over the heads where it counts as measured (``is_measured``, the rule calibration acts by;
    learned couplings start at 0, so gamma_J is unidentified early in training)."""
    sel = [r for r in records if int(r["step"]) == step and int(r["round"]) == 0]
    vals = []
    for r in sel:
        if r[name] in ("", "nan"):
            continue
        v = float(r[name])
        se = {"gamma_h": "se_h", "gamma_J": "se_J"}.get(name)
        if se is not None:
            e = float(r[se]) if r[se] not in ("", "nan") else math.nan
            if not is_measured(v, e, float(r["beta"])):
                continue
        if math.isfinite(v):
            vals.append(v)
    return float(np.mean(vals)) if vals else math.nan


def _scales_after(records, step, name):
    """Mean over layers and heads of the scale ``name`` after the last round at ``step``."""
    sel = [r for r in records if int(r["step"]) == step]
    if not sel:
        return math.nan
    last = max(int(r["round"]) for r in sel)
    return float(np.mean([float(r[name]) for r in sel if int(r["round"]) == last]))


def measure(p: Point, P, runs_dir, curves_path):
    from isingattn.experiments import evaluate_run

    config = config_of(p, P)
    run_dir = os.path.join(runs_dir, p.name)
    final = run_point(config, run_dir)
    exact = final["test"]
    if p.source.sampled:
        exact = evaluate_run(run_dir, overrides={"method": "exact", "calibrate": None,
                                                 "calibrate_every": None})["metrics"]
    curves = [r for r in _read_csv(os.path.join(run_dir, "metrics.csv"))]
    cal = _read_csv(os.path.join(run_dir, "calibration.csv"))
    steps = sorted({int(r["step"]) for r in cal})
    first, last = (steps[0], steps[-1]) if steps else (None, None)
    store = read_json(curves_path, {})
    store[p.name] = {"metrics": curves, "calibration": cal}
    write_json(curves_path, store)
    sps = final["steps_per_second"]
    return {
        "task": p.task, "length": p.length, "source": p.source.name,
        "method": p.source.method, "annealing_time": p.source.annealing_time or "",
        "calibrate": p.source.calibrate or "", "num_samples": p.num_samples, "seed": p.seed,
        "test_accuracy": final["test"]["metric"], "test_loss": final["test"]["loss"],
        "exact_test_accuracy": exact["metric"], "exact_test_loss": exact["loss"],
        "valid_accuracy": final["valid"]["metric"],
        "gamma_h_first": _head_mean(cal, first, "gamma_h"),
        "gamma_J_first": _head_mean(cal, first, "gamma_J"),
        "gamma_h_last": _head_mean(cal, last, "gamma_h"),
        "gamma_J_last": _head_mean(cal, last, "gamma_J"),
        "c_h_last": _scales_after(cal, last, "new_c_h"),
        "c_J_last": _scales_after(cal, last, "new_c_J"),
        "seconds_per_step": 1.0 / sps if sps else math.nan,
        "calibration_seconds": final.get("calibration_seconds", 0.0),
        "compile_seconds": final["compile_seconds"] or math.nan,
        "wall_seconds": final["wall_seconds"]}


def parse_row(r):
    out = dict(r)
    for k in ("length", "num_samples", "seed"):
        out[k] = int(r[k])
    for k in FLOATS:
        out[k] = float(r[k]) if r[k] not in ("", "nan") else math.nan
    return out


def row_key(r):
    return (r["task"], r["source"], int(r["num_samples"]), int(r["seed"]))


STOPPED_FIELDS = ["task", "source", "num_samples", "seed", "last_step", "valid_accuracy",
                  "reason"]
# the QPU path's refusal of a model outside the hardware's ranges (samplers/_qpu.py); it reaches
# the training loop wrapped in the host callback's error, so it is recognised by its text
_REFUSAL = "must lie in the QPU's"


def refusal(exc: BaseException) -> str | None:
    """The hardware-range refusal carried by ``exc`` (its message line), or None if ``exc`` is
    any other error."""
    lines = [ln.strip() for ln in str(exc).splitlines() if _REFUSAL in ln]
    if not lines:
        return None
    line = lines[-1]
    return line.split(": ", 1)[1] if line.startswith("ValueError: ") else line


def stopped_table(out):
    """``stopped.csv`` under ``out`` as a :class:`ResultsTable` keyed like the results (its
    appends flushed at once, a torn last line dropped, a point another process wrote meanwhile
    not written twice)."""
    from _results import ResultsTable

    return ResultsTable(os.path.join(out, "stopped.csv"), STOPPED_FIELDS, row_key)


def read_stopped(out) -> dict:
    """``stopped.csv`` under ``out`` as {point key: row}."""
    return {row_key(r): r for r in stopped_table(out).rows}


def record_stopped(p: Point, run_dir, reason, stopped) -> dict:
    """Append the stopped point ``p`` to the table ``stopped``: the last step its run logged,
    the validation accuracy there, the refusal."""
    valid = [r for r in _read_csv(os.path.join(run_dir, "metrics.csv")) if r["split"] == "valid"]
    last = valid[-1] if valid else {"step": 0, "metric": "nan"}
    row = {"task": p.task, "source": p.source.name, "num_samples": p.num_samples,
           "seed": p.seed, "last_step": int(last["step"]), "valid_accuracy": last["metric"],
           "reason": reason}
    stopped.append(row)
    return row


def run_points(todo_all, table, P, args):
    stopped = stopped_table(args.out)
    done = table.done | stopped.done  # each a set built from the table's rows
    todo = [p for p in todo_all if p.key not in done]
    if args.task:
        todo = [p for p in todo if p.task in args.task]
    if args.source:
        todo = [p for p in todo if p.source.name in args.source]
    if args.seed:
        todo = [p for p in todo if p.seed in args.seed]
    if not todo:
        return
    print(f"{len(todo)} of {len(todo_all)} points to run"
          + (f" on {', '.join(args.task)}" if args.task else "")
          + (f" from {', '.join(args.source)}" if args.source else "")
          + (f" with seed {', '.join(map(str, args.seed))}" if args.seed else "")
          + (f" (this session: {args.max_points})" if args.max_points else ""), file=sys.stderr)
    todo = todo[: args.max_points]
    curves_path = os.path.join(args.out, "curves.json")
    failed = []
    for i, p in enumerate(todo, 1):
        if p.key in table.refresh().done | stopped.refresh().done:  # by another process
            print(f"[{i}/{len(todo)}] {p.name}: in the table already", file=sys.stderr)
            continue
        t0 = time.perf_counter()
        try:
            row = measure(p, P, args.runs, curves_path)
        except Exception as e:  # noqa: BLE001 (one point's failure does not stop the others)
            reason = refusal(e)
            if reason is not None:
                row = record_stopped(p, os.path.join(args.runs, p.name), reason, stopped)
                print(f"[{i}/{len(todo)}] {p.name}: STOPPED after step {row['last_step']} "
                      f"(the sampler refuses the trained model: {reason}); recorded in "
                      "stopped.csv", file=sys.stderr, flush=True)
                continue
            traceback.print_exc()
            last = (str(e).strip().splitlines() or [""])[-1]
            print(f"[{i}/{len(todo)}] {p.name}: FAILED after {time.perf_counter() - t0:.0f} s "
                  f"({type(e).__name__}: {last}); not in the table, tried again on the next "
                  "resume", file=sys.stderr, flush=True)
            failed.append(p.name)
            continue
        table.append(row, digits=6)
        print(f"[{i}/{len(todo)}] {p.task:9s} {p.source.name:18s} M={p.num_samples:<4d} "
              f"seed={p.seed}: test acc {row['test_accuracy']:.4f} (exact inference "
              f"{row['exact_test_accuracy']:.4f}) {row['seconds_per_step']:.3f} s/step "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return failed


# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------


#: the declared rule ("What counts" on the results page): competitive if the paired gap's 95%
#: interval lies above -COMPETITIVE_MARGIN, not competitive if it lies below 0
COMPETITIVE_MARGIN = 0.05


def verdict(gap, seeds: int, stopped: int = 0) -> str:
    """The declared rule applied to a paired ``gap`` (an Interval over seeds) of a cell that
    should have ``seeds`` runs, ``stopped`` of them stopped by their sampler. Where the interval
    lies within the margin and below 0, both conditions hold, and the verdict says both."""
    if stopped:
        return "not competitive (a run stopped)"
    if gap is None or gap.n < seeds:
        return f"pending ({0 if gap is None else gap.n} of {seeds} seeds)"
    if gap.low > -COMPETITIVE_MARGIN:
        # both conditions can hold (a loss under the margin, yet below 0); the page reports both
        return "competitive (a loss: below 0)" if gap.high < 0 else "competitive"
    if gap.high < 0:
        return "not competitive"
    return "not decided"


def summarize(rows, P, stopped=()):
    """Accuracy per (task, source, M) over seeds, paired gaps to ``exact``, effective
    temperatures, seconds per step; ``stopped`` (rows of ``stopped.csv``) listed apart."""
    out = {}
    order = [s.name for s in sources(P)]
    for task in P["tasks"]:
        ref = {r["seed"]: r["test_accuracy"] for r in rows
               if r["task"] == task and r["source"] == "exact"}
        cells = []
        for name in order:
            stops = [r for r in stopped if r["task"] == task and r["source"] == name]
            for M in sorted({r["num_samples"] for r in rows if r["source"] == name}
                            | {int(r["num_samples"]) for r in stops}):
                sel = [r for r in rows if r["task"] == task and r["source"] == name
                       and r["num_samples"] == M]
                nstop = sum(1 for r in stops if int(r["num_samples"]) == M)
                if not sel and not nstop:
                    continue
                acc = {r["seed"]: r["test_accuracy"] for r in sel}
                eacc = {r["seed"]: r["exact_test_accuracy"] for r in sel}
                gap = paired_difference(acc, ref) if name != "exact" else None
                exact_gap = paired_difference(eacc, ref) if name != "exact" else None
                cells.append({
                    "source": name, "num_samples": M, "seeds": sorted(acc),
                    "accuracy": mean_interval(list(acc.values())),
                    "exact_accuracy": mean_interval(list(eacc.values())),
                    "gap": gap, "exact_gap": exact_gap,
                    "verdict": verdict(gap, len(P["seeds"]), nstop) if gap is not None else None,
                    "exact_verdict": verdict(exact_gap, len(P["seeds"]), nstop)
                    if exact_gap is not None else None,
                    "gamma_h_first": float(np.nanmean([r["gamma_h_first"] for r in sel]))
                    if any(np.isfinite(r["gamma_h_first"]) for r in sel) else math.nan,
                    "gamma_J_last": _nanmean([r["gamma_J_last"] for r in sel]),
                    "gamma_h_last": _nanmean([r["gamma_h_last"] for r in sel]),
                    "seconds_per_step": float(np.median([r["seconds_per_step"] for r in sel]))
                    if sel else math.nan})
        out[task] = cells
    return {"tasks": out, "points": len(rows), "stopped": [dict(r) for r in stopped]}


def reprobes(curves, P, rows=None) -> dict:
    """Saturated scales probed again, per ``"task source"`` of the calibrated sources (the
    finished points of ``rows``; every point in ``curves`` if None). A measurement starts
    without the previous one's slope, so its first round may move a saturated scale by the
    rule's largest factor (:data:`_MAX_STEP`) again, and its second round return it; such a
    measurement (per layer, head and component) is a *re-probe*. For each source: the
    ``reprobes`` among the ``measurements``, the ``points`` with one, the largest ``gamma`` the
    re-probes measured at the probed scale per component (``gamma_h``, ``gamma_J``; NaN: none),
    ``alternations``: measurements whose scale in force (their first round's) is that of two
    measurements before after a move by the largest factor (a scale oscillating in training),
    and ``noise_rises``: measurements whose first round measured ``gamma <= 0`` and kept the
    scale and whose second raised it by the largest factor, the scale in force after them (the
    ratchet the calibration's second fix removed)."""
    calibrated = {s.name for s in sources(P) if s.calibrate}
    names = None if rows is None else {
        Point(r["task"], r["length"], Source(r["source"], r["method"]), r["num_samples"],
              r["seed"]).name for r in rows}

    def far(x, y):
        lo, hi = sorted((x, y))
        return hi >= 0.99 * _MAX_STEP * lo

    out = {}
    for name, curve in sorted(curves.items()):
        task, _, src = name.split("_")[:3]
        if src not in calibrated or (names is not None and name not in names):
            continue
        cell = out.setdefault(f"{task} {src}", {
            "reprobes": 0, "measurements": 0, "points": 0, "gamma_h": math.nan,
            "gamma_J": math.nan, "alternations": 0, "noise_rises": 0})
        rounds = {}  # (layer, head) -> step -> round -> record
        for r in curve.get("calibration") or []:
            rounds.setdefault((r["layer"], r["head"]), {}).setdefault(
                int(r["step"]), {})[int(r["round"])] = r
        found = 0
        for by_step in rounds.values():
            steps = sorted(by_step)
            for c_name, g_name in (("c_h", "gamma_h"), ("c_J", "gamma_J")):
                in_force = [float(by_step[t][0][c_name]) for t in steps if 0 in by_step[t]]
                cell["alternations"] += sum(
                    in_force[i] == in_force[i - 2] and far(in_force[i], in_force[i - 1])
                    for i in range(2, len(in_force)))
                for t in steps:
                    if 0 not in by_step[t] or 1 not in by_step[t]:
                        continue
                    first, second = by_step[t][0], by_step[t][1]
                    cell["measurements"] += 1
                    c0, c1 = float(first[c_name]), float(second[c_name])
                    g0 = float(first[g_name])
                    back = float(second["new_" + c_name])
                    if (c1 == c0 and back > c0 and far(c0, back)
                            and not (math.isfinite(g0) and g0 > 0)):
                        cell["noise_rises"] += 1
                    if back == c0 and far(c0, c1):
                        found += 1
                        g = float(second[g_name])
                        if math.isfinite(g):
                            cell[g_name] = float(np.nanmax([cell[g_name], g]))
        cell["reprobes"] += found
        cell["points"] += found > 0
    return out


def _nanmean(x):
    x = np.asarray(x, float)
    return float(np.mean(x[np.isfinite(x)])) if np.any(np.isfinite(x)) else math.nan


def _iv(i, digits=3):
    if i is None or not np.isfinite(i.mean):
        return "–"
    if not np.isfinite(i.low):
        return f"{i.mean:.{digits}f} (n={i.n})"
    return f"{i.mean:.{digits}f} ± {i.half_width:.{digits}f}"


def _f(x, d=3):
    return "–" if not np.isfinite(x) else f"{x:.{d}f}"


def markdown(S, P):
    lines = []
    for task, cells in S["tasks"].items():
        lines += [(f"### {task} (L = {P['tasks'][task]}): test accuracy, mean ± 95% t-interval "
                   "over seeds"), "",
                  ("| source | M | seeds | acc (training sampler) | acc (exact inference) | "
                   "gap to exact (sampler) | gap to exact (exact inf.) | γ_h first | γ_h last | "
                   "γ_J last | s/step | verdict (sampler) | verdict (exact inf.) |"),
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for c in cells:
            lines.append(
                f"| {c['source']} | {c['num_samples'] or '–'} | {len(c['seeds'])} | "
                f"{_iv(c['accuracy'])} | {_iv(c['exact_accuracy'])} | {_iv(c['gap'])} | "
                f"{_iv(c['exact_gap'])} | {_f(c['gamma_h_first'])} | {_f(c['gamma_h_last'])} | "
                f"{_f(c['gamma_J_last'])} | {_f(c['seconds_per_step'])} | "
                f"{c['verdict'] or '–'} | {c['exact_verdict'] or '–'} |")
        lines.append("")
    if S.get("stopped"):
        lines += ["### Stopped runs (the sampler refused the trained model; no test accuracy)",
                  "", "| task | source | M | seed | last step | valid acc there | refusal |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['task']} | {r['source']} | {r['num_samples']} | {r['seed']} | "
                  f"{r['last_step']} | {_f(float(r['valid_accuracy']))} | {r['reason']} |"
                  for r in S["stopped"]]
        lines.append("")
    if S.get("reprobes"):
        lines += [("### Saturated calibration scales probed again (the first round of a "
                   "measurement moved a scale by the largest factor, the second returned it)"),
                  "",
                  ("| task source | re-probes / measurements | points with one | largest γ_h "
                   "at the probed scale | largest γ_J there | scales oscillating in training | "
                   "rises on noise |"),
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {k} | {c['reprobes']} / {c['measurements']} | {c['points']} | "
                  f"{_f(c['gamma_h'])} | {_f(c['gamma_J'])} | {c['alternations']} | "
                  f"{c['noise_rises']} |"
                  for k, c in S["reprobes"].items()]
        lines.append("")
    return "\n".join(lines)


def plot(S, rows, curves, P, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(S["tasks"])
    if not rows:
        return
    # gap to exact against M, one line per source
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        by = {}
        for c in S["tasks"][task]:
            if c["gap"] is not None and np.isfinite(c["gap"].mean):
                by.setdefault(c["source"], []).append((c["num_samples"], c["gap"]))
        for i, (name, pts) in enumerate(by.items()):
            pts.sort()
            xs = [m for m, _ in pts]
            ys = [g.mean for _, g in pts]
            hw = [g.half_width if np.isfinite(g.half_width) else 0 for _, g in pts]
            ax.errorbar(xs, ys, yerr=hw, marker="o", capsize=3, label=name, color=f"C{i % 10}",
                        ls="--" if name.endswith("-cal") else "-")
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("draws per query M")
        ax.set_ylabel("test accuracy − exact (paired, 95%)")
        ax.set_title(task)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "gap_vs_samples.png"), dpi=110)
    plt.close(fig)

    # learning curves at the headline M (validation accuracy, mean over seeds)
    M0 = P["num_samples"][0]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        for i, src in enumerate(sources(P)):
            runs = [p for p in points(P) if p.task == task and p.source == src
                    and p.num_samples in (0, M0) and p.name in curves]
            series = {}
            for p in runs:
                for r in curves[p.name]["metrics"]:
                    if r["split"] == "valid":
                        series.setdefault(int(r["step"]), []).append(float(r["metric"]))
            if series:
                xs = sorted(series)
                ax.plot(xs, [np.mean(series[x]) for x in xs], color=f"C{i % 10}",
                        ls="--" if src.name.endswith("-cal") else "-", label=src.name,
                        lw=2.2 if src.name == "exact" else 1.2)
        ax.set_xlabel("step")
        ax.set_ylabel(f"validation accuracy (mean over seeds, M = {M0})")
        ax.set_title(task)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "learning_curves.png"), dpi=110)
    plt.close(fig)

    # effective temperatures along training (diabatic and QPU sources, headline M)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, src in enumerate(s for s in sources(P) if s.sampled):
        for j, name in enumerate(("gamma_h", "gamma_J")):
            series = {}
            for p in points(P):
                if p.source != src or p.num_samples != M0 or p.name not in curves:
                    continue
                cal = curves[p.name]["calibration"]
                for step in sorted({int(r["step"]) for r in cal}):
                    v = _head_mean(cal, step, name)
                    if math.isfinite(v):
                        series.setdefault(step, []).append(v)
            if series:
                xs = sorted(series)
                axes[j].plot(xs, [np.mean(series[x]) for x in xs], color=f"C{i % 10}",
                             ls="--" if src.name.endswith("-cal") else "-", label=src.name)
    for j, name in enumerate(("γ_h", "γ_J")):
        axes[j].axhline(P["beta"], color="gray", lw=0.8)
        axes[j].set_yscale("log")
        axes[j].set_xlabel("step")
        axes[j].set_ylabel(f"measured {name} (mean over heads, seeds, tasks)")
        axes[j].grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "effective_temperatures.png"), dpi=110)
    plt.close(fig)


def report(table, P, out):
    S = summarize(table.rows, P, read_stopped(out).values())
    curves = read_json(os.path.join(out, "curves.json"), {})
    S["reprobes"] = reprobes(curves, P, table.rows)
    write_json(os.path.join(out, "summary.json"), jsonable(S))
    text = markdown(S, P)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    plot(S, table.rows, curves, P, out)
    print(text)


def main(argv=None):
    ap = sweep_parser(__doc__, "analysis/results/annealer_training",
                      what="the results table, curves, summary and plots")
    ap.add_argument("--max-points", type=int, default=None,
                    help="stop after this many new points (a session's share of the sweep)")
    ap.add_argument("--task", action="append", default=None, metavar="NAME",
                    help="run only this task's points (repeatable; a session's share of the "
                         "sweep: the declared set of points is unchanged)")
    ap.add_argument("--source", action="append", default=None, metavar="NAME",
                    help="run only this gradient source's points (repeatable; like --task, the "
                         "declared set of points is unchanged)")
    ap.add_argument("--seed", action="append", type=int, default=None, metavar="N",
                    help="run only this seed's points (repeatable; like --task: two processes "
                         "on different seeds share one sweep)")
    args = ap.parse_args(argv)
    if args.max_points is not None and args.max_points < 1:
        ap.error(f"--max-points must be >= 1; got {args.max_points}")
    preset = PRESETS["quick" if args.quick else "full"]
    tasks = preset["tasks"]
    unknown = sorted(set(args.task or ()) - set(tasks))
    if unknown:  # before the table is opened (--fresh would clear it)
        ap.error(f"--task {unknown[0]!r} is not a task of this sweep; valid: {', '.join(tasks)}")
    names = [s.name for s in sources(preset)]
    unknown = sorted(set(args.source or ()) - set(names))
    if unknown:
        ap.error(f"--source {unknown[0]!r} is not a source of this sweep; valid: "
                 f"{', '.join(names)}")
    seeds = preset["seeds"]
    unknown = sorted(set(args.seed or ()) - set(seeds))
    if unknown:
        ap.error(f"--seed {unknown[0]} is not a seed of this sweep; valid: "
                 f"{', '.join(map(str, seeds))}")
    _, P, table, _ = open_sweep(args, PRESETS, "annealer_training.csv", FIELDS, row_key,
                                parse_row)
    for name in ("curves.json", "stopped.csv"):  # the table itself is cleared by open_sweep
        if args.fresh and os.path.exists(os.path.join(args.out, name)):
            os.remove(os.path.join(args.out, name))
    failed = [] if args.report else run_points(points(P), table, P, args) or []
    report(table, P, args.out)
    if failed:
        raise SystemExit(f"{len(failed)} point(s) failed (messages above): {', '.join(failed)}")


if __name__ == "__main__":
    main()
