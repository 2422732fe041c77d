"""Bracket matching: does Boltzmann attention beat softmax, does the gap grow with length, and do
learned couplings carry it? The four-way coupling ablation and the length sweep.

Every point is a training run of ``isingattn.experiments`` (task ``bracket``, variant
``match``): a small causal transformer labels every closing bracket with the type of the bracket
it closes. Variants (same model, optimizer, steps, data and seeds): ``softmax``; ``none``
(Boltzmann attention with J = 0: normalized sigmoid attention with a learned chemical
potential); ``fixed``, ``random`` and ``learned`` couplings, each with two structures:
``banded`` (range r, exact by the transfer matrix) and ``relative`` (``J_jk = w(|j - k|)`` up to
the sequence length, mean-field inference).

Phases, run in this order, each point a run directory under ``--runs`` (an interrupted point
resumes from its checkpoint; a finished one is read back):

1. ``tune``: the same small grid per variant at the tuning length and a tuning seed that the
   sweep does not use; the best validation accuracy picks each variant's settings.
2. ``sweep``: every variant at every length, over the seeds (more at the headline length).
3. ``extra``: a larger banded range (r = 8) at some lengths, and the position schemes ``rope`` and
   ``none`` (no position embeddings: banded couplings are then the only positional signal besides
   the causal mask), evaluated also at 2L and 4L (length generalization).

``<out>/bracket_matching.csv`` holds one row per point (test accuracy, whole-sequence accuracy,
accuracy per pair-distance group, steps/s, ...); ``--report`` (run after every phase, or alone)
writes ``summary.json``, ``summary.md`` (the tables of the results page) and the plots. The
protocol (every size above) is the ``PRESETS`` table below and is written next to the CSV:
resuming under another protocol stops with the settings that differ.

Run (the committed results; resumable, spread over sessions)::

    .venv/bin/python analysis/bracket_matching.py --out docs/results/bracket-matching

and ``--quick`` (under a minute) to check the pipeline.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import sys
import time

import numpy as np
from _training import (
    ablation_differences,
    jsonable,
    open_sweep,
    read_json,
    run_point,
    sweep_parser,
    write_json,
)

from isingattn.experiments import TrainConfig, TrainingDiverged
from isingattn.experiments._stats import mean_interval
from isingattn.experiments._train import run_status

from _results import ResultsTable  # analysis/_results.py (the script's folder)

#: Variants: name -> (attention, structure), in the order a sweep runs them.
VARIANTS = {
    "softmax": ("softmax", "banded"),
    "none": ("none", "banded"),
    "banded-learned": ("learned", "banded"),
    "relative-learned": ("learned", "relative"),
    "banded-fixed": ("fixed", "banded"),
    "banded-random": ("random", "banded"),
    "relative-fixed": ("fixed", "relative"),
    "relative-random": ("random", "relative"),
}

PRESETS = {
    "full": {
        "regime": "long", "bracket_types": 4, "variants": list(VARIANTS),
        "banded_method": "transfer", "relative_method": "mean_field",
        "lengths": [16, 32, 64, 128, 256],
        "tokens_per_step": 2048, "steps": 1500, "warmup": 100,
        "layers": 2, "d_model": 64, "heads": 2, "bandwidth": 4,
        "seeds": [0, 1, 2], "headline_length": 64, "headline_seeds": [0, 1, 2, 3, 4],
        "eval_every": 250, "eval_examples": 512, "test_examples": 2048,
        "tune_length": 64, "tune_seed": 100,
        # the same number of trials (4) for every variant
        "tune_softmax": [{"lr": lr} for lr in (5e-4, 1e-3, 2e-3, 4e-3)],
        "tune_boltzmann": [{"lr": lr, "chemical_potential": b}
                           for lr in (1e-3, 3e-3) for b in (0.0, -2.0)],
        "extra_bandwidth": 8, "extra_bandwidth_lengths": [64, 256],
        "positional_length": 64, "positional_variants": ["softmax", "none", "banded-learned"],
        "positional_schemes": ["rope", "none"], "generalize": [2, 4],
    },
    "quick": {
        "regime": "long", "bracket_types": 4,
        "variants": ["softmax", "none", "banded-learned", "relative-learned"],
        "banded_method": "exact", "relative_method": "mean_field",
        "lengths": [8, 12],
        "tokens_per_step": 96, "steps": 6, "warmup": 2,
        "layers": 1, "d_model": 16, "heads": 2, "bandwidth": 2,
        "seeds": [0], "headline_length": 8, "headline_seeds": [0, 1],
        "eval_every": 3, "eval_examples": 16, "test_examples": 16,
        "tune_length": 8, "tune_seed": 100,
        "tune_softmax": [{"lr": 3e-3}],
        "tune_boltzmann": [{"lr": 3e-3, "chemical_potential": 0.0}],
        "extra_bandwidth": 3, "extra_bandwidth_lengths": [8],
        "positional_length": 8, "positional_variants": ["banded-learned"],
        "positional_schemes": ["none"], "generalize": [2],
    },
}

#: The inference check (phase ``check``): the relative-learned models of the sweep, trained with
#: mean field, evaluated on the first ``examples`` test sequences with exact enumeration (short
#: lengths) and with Gibbs sampling, against mean field on the same sequences. Its own table
#: (``inference_check.csv``), so that it can be added to a sweep without touching its protocol.
#: Run directories are not committed: a run that is not in ``--runs`` is trained again from its
#: sweep point (same configuration and seed) and the row records that run's test accuracy beside
#: the sweep table's (equal where the machine computes the same numbers).
CHECKS = {
    "full": {"exact_lengths": [16], "gibbs_lengths": [16, 64], "examples": 256,
             "gibbs": {"num_samples": 128, "backend_options": {"num_burnin": 50}}},
    "quick": {"exact_lengths": [12], "gibbs_lengths": [12], "examples": 8,
              "gibbs": {"num_samples": 8, "backend_options": {"num_burnin": 5}}},
}
CHECK_FIELDS = ["variant", "length", "seed", "method", "examples", "accuracy", "loss",
                "mean_field_accuracy", "mean_field_loss", "retrained", "run_test_accuracy",
                "sweep_test_accuracy"]

FIELDS = ["phase", "variant", "attention", "structure", "length", "seed", "positional",
          "bandwidth", "method", "lr", "chemical_potential", "beta", "test_accuracy",
          "test_seq_accuracy", "test_loss", "valid_accuracy", "acc_d1-3", "acc_d4-15",
          "acc_d16-63", "acc_d64-255", "acc_d256+", "gen", "parameters", "steps_per_second",
          "compile_seconds", "wall_seconds"]


@dataclasses.dataclass(frozen=True)
class Point:
    phase: str
    variant: str
    length: int
    seed: int
    lr: float
    chemical_potential: float = 0.0
    beta: float = 1.0
    bandwidth: int = 4
    positional: str = "learned"

    @property
    def key(self):
        return (self.phase, self.variant, self.length, self.seed, self.positional,
                self.bandwidth, self.lr, self.chemical_potential)

    @property
    def name(self):
        return (f"{self.phase}_{self.variant}_r{self.bandwidth}_{self.positional}_L{self.length}"
                f"_s{self.seed}_lr{self.lr:g}_b{self.chemical_potential:g}")


def config_of(p: Point, P: dict) -> TrainConfig:
    attention, structure = VARIANTS[p.variant]
    return TrainConfig(
        task="bracket", bracket_variant="match", regime=P["regime"],
        bracket_types=P["bracket_types"], length=p.length, attention=attention,
        structure=structure, method=P[f"{structure}_method"] if attention != "softmax" else None,
        bandwidth=p.bandwidth, beta=p.beta,
        chemical_potential=p.chemical_potential, positional=p.positional,
        layers=P["layers"], d_model=P["d_model"], heads=P["heads"], steps=P["steps"],
        batch=max(1, P["tokens_per_step"] // p.length), lr=p.lr, warmup=P["warmup"],
        seed=p.seed, eval_every=P["eval_every"], eval_examples=P["eval_examples"],
        test_examples=P["test_examples"], checkpoint_every=max(P["eval_every"], 250))


def tune_points(P):
    for v in P["variants"]:
        grid = P["tune_softmax"] if v == "softmax" else P["tune_boltzmann"]
        for g in grid:
            yield Point("tune", v, P["tune_length"], P["tune_seed"], g["lr"],
                        g.get("chemical_potential", 0.0), bandwidth=P["bandwidth"])


def tuned_settings(rows, P):
    """Per variant: the grid entry with the best validation accuracy (first on ties); None until
    the variant's grid is complete."""
    out = {}
    for v in P["variants"]:
        grid = P["tune_softmax"] if v == "softmax" else P["tune_boltzmann"]
        got = {(r["lr"], r["chemical_potential"]): r["valid_accuracy"] for r in rows
               if r["phase"] == "tune" and r["variant"] == v}
        keys = [(g["lr"], g.get("chemical_potential", 0.0)) for g in grid]
        if not all(k in got for k in keys):
            out[v] = None
            continue
        best = max(keys, key=lambda k: (got[k], -keys.index(k)))
        out[v] = {"lr": best[0], "chemical_potential": best[1],
                  "valid_accuracy": {f"lr={k[0]:g},b={k[1]:g}": got[k] for k in keys}}
    return out


def sweep_points(P, tuned):
    """Cheapest first, so that the seeds of the short lengths are in before the long runs: every
    variant and seed at the lengths up to the headline length (length by length, the headline
    length's extra seeds with it), then the longer lengths for the baselines and the banded
    structure, then the longer lengths for the relative structure (mean field, by far the
    slowest: ~40 min a point at L = 128 on this machine). The order decides only when a point
    runs, never which points there are."""
    H = P["headline_length"]
    plan = []
    for L in P["lengths"]:
        seeds = P["headline_seeds"] if L == H else P["seeds"]
        for s in seeds:
            for v in P["variants"]:
                slow = L > H and VARIANTS[v][1] == "relative"
                plan.append((slow, L > H, L, s, v))
    for *_, L, s, v in sorted(plan, key=lambda t: t[:3]):
        t = tuned[v]
        yield Point("sweep", v, L, s, t["lr"], t["chemical_potential"],
                    bandwidth=P["bandwidth"])


def extra_points(P, tuned):
    t = tuned["banded-learned"]
    for L in P["extra_bandwidth_lengths"]:
        for s in P["seeds"]:
            yield Point("extra", "banded-learned", L, s, t["lr"], t["chemical_potential"],
                        bandwidth=P["extra_bandwidth"])
    L = P["positional_length"]
    for scheme, v, s in itertools.product(P["positional_schemes"], P["positional_variants"],
                                          P["seeds"]):
        t = tuned[v]
        yield Point("extra", v, L, s, t["lr"], t["chemical_potential"],
                    bandwidth=P["bandwidth"], positional=scheme)


def parse_row(r):
    out = dict(r)
    for k in ("length", "seed", "bandwidth", "parameters"):
        out[k] = int(r[k])
    for k in ("lr", "chemical_potential", "beta", "test_accuracy", "test_seq_accuracy",
              "test_loss", "valid_accuracy", "acc_d1-3", "acc_d4-15", "acc_d16-63",
              "acc_d64-255", "acc_d256+", "steps_per_second", "compile_seconds",
              "wall_seconds"):
        out[k] = float(r[k]) if r[k] not in ("", "nan") else math.nan
    out["gen"] = json.loads(r["gen"]) if r["gen"] else {}
    return out


def row_key(r):
    return (r["phase"], r["variant"], r["length"], r["seed"], r["positional"], r["bandwidth"],
            r["lr"], r["chemical_potential"])


def diverged_final(p: Point, run_dir, error, out):
    """The rule for a run that stops with non-finite values (declared before any such point was
    counted): it is neither rerun nor re-tuned; its model is the last checkpoint the trainer kept,
    evaluated like any finished run, and it counts in the means and paired differences like any
    other seed (leaving it out would flatter its variant). ``<out>/diverged.json`` records the
    point, the checkpoint's step and the trainer's message, and the report marks the point."""
    from isingattn.experiments import evaluate_run, load_run
    from isingattn.experiments._train import attention_summary

    test = evaluate_run(run_dir, split="test")
    valid = evaluate_run(run_dir, split="valid")
    trainer = load_run(run_dir)
    path = os.path.join(out, "diverged.json")
    store = read_json(path, {})
    store[p.name] = {"checkpoint_step": test["step"], "message": str(error)}
    write_json(path, store)
    return {"test": test["metrics"], "valid": valid["metrics"],
            "attention": attention_summary(trainer.model()), "parameters": trainer.num_params,
            "steps_per_second": None, "compile_seconds": math.nan, "wall_seconds": math.nan}


def measure(p: Point, P, runs_dir, couplings_path):
    from isingattn.experiments import evaluate_run

    config = config_of(p, P)
    run_dir = os.path.join(runs_dir, p.name)
    try:
        final = run_point(config, run_dir)
    except TrainingDiverged as e:
        final = diverged_final(p, run_dir, e, os.path.dirname(couplings_path))
    test, valid = final["test"], final["valid"]
    gen = {}
    if p.positional != "learned":
        for f in P["generalize"]:
            res = evaluate_run(run_dir, length=f * p.length, split="test")
            gen[str(f * p.length)] = res["metrics"]["metric"]
    store = read_json(couplings_path, {})
    store[p.name] = final["attention"]
    write_json(couplings_path, store)
    attention, structure = VARIANTS[p.variant]
    return {
        "phase": p.phase, "variant": p.variant, "attention": attention, "structure": structure,
        "length": p.length, "seed": p.seed, "positional": p.positional,
        "bandwidth": p.bandwidth, "method": config.resolved_method, "lr": p.lr,
        "chemical_potential": p.chemical_potential, "beta": p.beta,
        "test_accuracy": test["metric"], "test_seq_accuracy": test["seq_accuracy"],
        "test_loss": test["loss"], "valid_accuracy": valid["metric"],
        **{k: test[k] for k in ("acc_d1-3", "acc_d4-15", "acc_d16-63", "acc_d64-255",
                                "acc_d256+")},
        "gen": json.dumps(gen) if gen else "", "parameters": final["parameters"],
        "steps_per_second": final["steps_per_second"] or math.nan,
        "compile_seconds": final["compile_seconds"], "wall_seconds": final["wall_seconds"]}


def run_phase(name, points, table, P, args):
    todo = [p for p in points if p.key not in table.done]
    if not todo:
        return
    print(f"{name}: {len(todo)} of {len(points)} points to run", file=sys.stderr)
    couplings_path = os.path.join(args.out, "couplings.json")
    for i, p in enumerate(todo, 1):
        if p.key in table.refresh().done:  # run meanwhile by another process
            print(f"[{name} {i}/{len(todo)}] {p.name}: in the table already", file=sys.stderr)
            continue
        t0 = time.perf_counter()
        row = measure(p, P, args.runs, couplings_path)
        table.append(row, digits=6)
        print(f"[{name} {i}/{len(todo)}] {p.variant:16s} L={p.length:<4d} seed={p.seed} "
              f"{p.positional:7s} r={p.bandwidth} lr={p.lr:g} b0={p.chemical_potential:g}: "
              f"test acc {row['test_accuracy']:.4f} (seq {row['test_seq_accuracy']:.3f}) "
              f"{time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)


def run_checks(table, check_table, P, C, args):
    """Evaluate the finished relative-learned sweep runs with exact / Gibbs inference."""
    from isingattn.experiments import evaluate_run

    todo = []
    for r in table.rows:
        if r["phase"] != "sweep" or r["variant"] != "relative-learned":
            continue
        methods = (["exact"] if r["length"] in C["exact_lengths"] else []) + (
            ["sampled:gibbs"] if r["length"] in C["gibbs_lengths"] else [])
        for m in methods:
            if (r["length"], r["seed"], m) not in check_table.done:
                todo.append((r, m))
    if todo:
        print(f"check: {len(todo)} evaluations to run", file=sys.stderr)
    for r, m in todo:
        p = Point("sweep", r["variant"], r["length"], r["seed"], r["lr"],
                  r["chemical_potential"], bandwidth=r["bandwidth"])
        run_dir = os.path.join(args.runs, p.name)
        retrained = run_status(run_dir) != "finished"
        final = run_point(config_of(p, P), run_dir)  # trains it again where it is missing
        n = C["examples"]
        ref = evaluate_run(run_dir, num_examples=n, overrides={"method": "mean_field"})
        over = {"method": m}
        if m.startswith("sampled:"):
            over.update(C["gibbs"])
        got = evaluate_run(run_dir, num_examples=n, overrides=over)
        row = {"variant": r["variant"], "length": r["length"], "seed": r["seed"], "method": m,
               "examples": n, "accuracy": got["metrics"]["metric"],
               "loss": got["metrics"]["loss"],
               "mean_field_accuracy": ref["metrics"]["metric"],
               "mean_field_loss": ref["metrics"]["loss"], "retrained": int(retrained),
               "run_test_accuracy": final["test"]["metric"],
               "sweep_test_accuracy": r["test_accuracy"]}
        check_table.append(row, digits=6)
        print(f"[check] L={r['length']} seed={r['seed']} {m}: accuracy {row['accuracy']:.4f} "
              f"vs mean field {row['mean_field_accuracy']:.4f}", file=sys.stderr, flush=True)


def parse_check(r):
    out = dict(r)
    for k in ("length", "seed", "examples", "retrained"):
        out[k] = int(r[k])
    for k in ("accuracy", "loss", "mean_field_accuracy", "mean_field_loss", "run_test_accuracy",
              "sweep_test_accuracy"):
        out[k] = float(r[k])
    return out


# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------


def summarize(rows, P, tuned):
    """The numbers of the results page: accuracy per variant and length, paired differences
    and their trend with length, steps/s."""
    sweep = [r for r in rows if r["phase"] == "sweep"]
    lengths = sorted({r["length"] for r in sweep})
    acc, far = {}, {}
    for v in VARIANTS:
        for L in lengths:
            sel = [r for r in sweep if r["variant"] == v and r["length"] == L]
            if sel:
                acc.setdefault(v, {})[L] = mean_interval([r["test_accuracy"] for r in sel])
                far_key = "acc_d64-255" if L >= 128 else "acc_d16-63" if L >= 32 else None
                if far_key:
                    far.setdefault(v, {})[L] = mean_interval([r[far_key] for r in sel])
    diffs, trends = ablation_differences(sweep, "length", "test_accuracy")
    speed = {}
    for v in VARIANTS:
        for L in lengths:
            sel = [r["steps_per_second"] for r in sweep if r["variant"] == v and r["length"] == L]
            if sel:
                speed.setdefault(v, {})[L] = float(np.nanmedian(sel))  # nan: a diverged run
    extra = [r for r in rows if r["phase"] == "extra"]
    return {"lengths": lengths, "accuracy": acc, "far_accuracy": far, "differences": diffs,
            "trends": trends, "steps_per_second": speed, "tuned": tuned,
            "extra": extra, "points": len(rows)}


def _iv(i, digits=3):
    if i is None or not np.isfinite(i.mean):
        return "–"
    if not np.isfinite(i.low):
        return f"{i.mean:.{digits}f} (n={i.n})"
    return f"{i.mean:.{digits}f} ± {i.half_width:.{digits}f}"


def _short_message(message):
    """The trainer's stop message for a table: its first two clauses, a list of parameters
    counted instead of spelled out."""
    parts = [p.strip() for p in message.split(";")]
    if len(parts) > 1 and parts[1].startswith("non-finite gradients of "):
        count = len(parts[1][len("non-finite gradients of "):].split(","))
        parts[1] = f"non-finite gradients of {count} parameters"
    return "; ".join(parts[:2])


def markdown(S):
    L = S["lengths"]
    lines = ["### Test accuracy (per closing bracket; mean ± 95% t-interval over seeds)", "",
             "| variant | " + " | ".join(f"L={x}" for x in L) + " |",
             "|---|" + "---|" * len(L)]
    for v in VARIANTS:
        cells = [_iv(S["accuracy"].get(v, {}).get(x)) for x in L]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    lines += ["", "### Accuracy on far pairs (distance 16-63 at L = 32, 64; 64-255 at L >= 128)",
              "", "| variant | " + " | ".join(f"L={x}" for x in L if x >= 32) + " |",
              "|---|" + "---|" * len([x for x in L if x >= 32])]
    for v in VARIANTS:
        cells = [_iv(S["far_accuracy"].get(v, {}).get(x)) for x in L if x >= 32]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    lines += ["", "### Paired differences of test accuracy (same seeds; mean ± 95% interval)", "",
              "| difference | " + " | ".join(f"L={x}" for x in L) + " | slope per doubling of L |",
              "|---|" + "---|" * (len(L) + 1)]
    for name, d in S["differences"].items():
        cells = [_iv(d.get(x), 4) for x in L]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_iv(S['trends'].get(name), 4)} |")
    lines += ["", "### Training steps per second (median over seeds; 2 cores)", "",
              "| variant | " + " | ".join(f"L={x}" for x in L) + " |",
              "|---|" + "---|" * len(L)]
    for v in VARIANTS:
        cells = [f"{S['steps_per_second'].get(v, {}).get(x, math.nan):.1f}" for x in L]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    lines += ["", "### Tuning (validation accuracy of each grid entry; the best is used)", "",
              "| variant | chosen | grid |", "|---|---|---|"]
    for v, t in S["tuned"].items():
        if t:
            grid = ", ".join(f"{k}: {a:.3f}" for k, a in t["valid_accuracy"].items())
            lines.append(f"| {v} | lr={t['lr']:g}, b0={t['chemical_potential']:g} | {grid} |")
    if S.get("checks"):
        lines += ["", ("### Inference check: relative-learned models (trained with mean field) "
                  "evaluated with another method on the same test sequences"), "",
                  ("| L | seed | method | accuracy | mean-field accuracy | loss | mean-field loss "
                   "| run's test accuracy (sweep table's) |"),
                  "|---|---|---|---|---|---|---|---|"]
        for c in sorted(S["checks"], key=lambda c: (c["length"], c["method"], c["seed"])):
            run = (f"{c['run_test_accuracy']:.4f} ({c['sweep_test_accuracy']:.4f}"
                   + (", trained again)" if c["retrained"] else ")"))
            lines.append(f"| {c['length']} | {c['seed']} | {c['method']} | {c['accuracy']:.4f} "
                         f"| {c['mean_field_accuracy']:.4f} | {c['loss']:.4f} | "
                         f"{c['mean_field_loss']:.4f} | {run} |")
    if S.get("diverged"):
        lines += ["", ("### Runs stopped by non-finite values (counted from their last kept "
                       "checkpoint, as the protocol says)"), "",
                  "| point | checkpoint step | trainer's message |", "|---|---|---|"]
        for name, d in sorted(S["diverged"].items()):
            lines.append(f"| {name} | {d['checkpoint_step']} | {_short_message(d['message'])} |")
    extra = S["extra"]
    if extra:
        lines += ["", "### Extra points (test accuracy; mean over seeds)", "",
                  "| variant | positions | r | L | accuracy | at 2L | at 4L |",
                  "|---|---|---|---|---|---|---|"]
        groups = {}
        for r in extra:
            groups.setdefault((r["variant"], r["positional"], r["bandwidth"], r["length"]),
                              []).append(r)
        for (v, pos, bw, length), rs in sorted(groups.items()):
            g2 = [r["gen"].get(str(2 * length), math.nan) for r in rs]
            g4 = [r["gen"].get(str(4 * length), math.nan) for r in rs]
            lines.append(f"| {v} | {pos} | {bw} | {length} | "
                         f"{_iv(mean_interval([r['test_accuracy'] for r in rs]))} | "
                         f"{_iv(mean_interval(g2))} | {_iv(mean_interval(g4))} |")
    return "\n".join(lines) + "\n"


def plot(S, rows, couplings, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    L = S["lengths"]
    if not L:
        return
    styles = {"softmax": ("k", "o", "-"), "none": ("0.5", "s", "-"),
              "fixed": ("tab:blue", "^", "--"), "random": ("tab:orange", "v", "--"),
              "learned": ("tab:red", "D", "-")}
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True)
    for col, structure in enumerate(("banded", "relative")):
        for row, (key, label) in enumerate((("accuracy", "test accuracy (closing brackets)"),
                                            ("far_accuracy", "accuracy on far pairs"))):
            ax = axes[row, col]
            for v in ["softmax", "none"] + [f"{structure}-{k}" for k in
                                            ("fixed", "random", "learned")]:
                d = S[key].get(v, {})
                xs = [x for x in L if x in d]
                if not xs:
                    continue
                m = np.array([d[x].mean for x in xs])
                h = np.array([d[x].half_width if np.isfinite(d[x].half_width) else 0 for x in xs])
                c, mk, ls = styles[v.split("-")[-1]]
                ax.errorbar(xs, m, yerr=h, color=c, marker=mk, ls=ls, capsize=3, label=v)
            ax.set_xscale("log", base=2)
            ax.set_ylabel(label)
            ax.set_title(f"{structure} couplings" + (" (far: 16-63 below L=128, 64-255 from "
                                                     "L=128)" if row else ""))
            ax.grid(alpha=0.3)
            if row == 1:
                ax.set_xlabel("sequence length L")
            ax.legend(fontsize=8)
    fig.suptitle("Bracket matching: accuracy vs length (mean ± 95% interval over seeds)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "accuracy_vs_length.png"), dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for col, structure in enumerate(("banded", "relative")):
        for base, c in (("softmax", "k"), ("none", "0.5"), (f"{structure}-fixed", "tab:blue"),
                        (f"{structure}-random", "tab:orange")):
            d = S["differences"].get(f"{structure}-learned - {base}", {})
            xs = [x for x in L if x in d]
            if not xs:
                continue
            m = np.array([d[x].mean for x in xs])
            h = np.array([d[x].half_width if np.isfinite(d[x].half_width) else 0 for x in xs])
            ax[col].errorbar(xs, m, yerr=h, color=c, marker="o", capsize=3,
                             label=f"learned − {base.split('-')[-1]}")
        ax[col].axhline(0, color="gray", lw=0.8)
        ax[col].set_xscale("log", base=2)
        ax[col].set_xlabel("sequence length L")
        ax[col].set_title(f"{structure}: paired differences of test accuracy")
        ax[col].legend(fontsize=8)
        ax[col].grid(alpha=0.3)
    ax[0].set_ylabel("difference (95% paired interval)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "differences_vs_length.png"), dpi=110)
    plt.close(fig)

    learned = sorted((r for r in rows if r["phase"] == "sweep" and r["variant"] ==
                      "banded-learned" and r["seed"] == 0), key=lambda r: r["length"])
    if learned:
        fig, axes = plt.subplots(1, len(learned), figsize=(3.2 * len(learned), 3.2),
                                 sharey=True, squeeze=False)
        for ax, r in zip(axes[0], learned):
            name = Point("sweep", "banded-learned", r["length"], 0, r["lr"],
                         r["chemical_potential"], bandwidth=r["bandwidth"]).name
            layers = couplings.get(name) or []
            for li, layer in enumerate(layers):
                w = np.asarray(layer["couplings"])
                for h in range(w.shape[0]):
                    ax.plot(np.arange(1, w.shape[1] + 1), w[h], marker="o", ms=3,
                            color=f"C{h}", ls="-" if li == 0 else "--",
                            label=f"layer {li} head {h}" if r is learned[0] else None)
            ax.axhline(0, color="gray", lw=0.8)
            ax.set_title(f"L = {r['length']}")
            ax.set_xlabel("distance d")
        axes[0][0].set_ylabel("learned w(d) (seed 0)")
        axes[0][0].legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "learned_couplings.png"), dpi=110)
        plt.close(fig)


def report(table, P, out, checks=()):
    rows = table.rows
    tuned = tuned_settings(rows, P)
    S = summarize(rows, P, tuned)
    S["checks"] = list(checks)
    S["diverged"] = read_json(os.path.join(out, "diverged.json"), {})
    write_json(os.path.join(out, "summary.json"), jsonable(S))
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(markdown(S))
    plot(S, rows, read_json(os.path.join(out, "couplings.json"), {}), out)
    print(markdown(S))


def main(argv=None):
    phases = ("tune", "sweep", "extra", "check")
    args = sweep_parser(__doc__, "analysis/results/bracket_matching",
                        phases=phases).parse_args(argv)
    preset, P, table, phases = open_sweep(args, PRESETS, "bracket_matching.csv", FIELDS,
                                          row_key, parse_row, phases=phases)
    if not args.report:
        if "tune" in phases:
            run_phase("tune", list(tune_points(P)), table, P, args)
        tuned = tuned_settings(table.rows, P)
        missing = [v for v, t in tuned.items() if t is None]
        if missing and ({"sweep", "extra"} & set(phases)):
            raise SystemExit(f"the tuning phase is not complete (variants {missing}): run "
                             "--phases tune first")
        if "sweep" in phases:
            run_phase("sweep", list(sweep_points(P, tuned)), table, P, args)
        if "extra" in phases:
            run_phase("extra", list(extra_points(P, tuned)), table, P, args)
    C = CHECKS[preset]
    check_table = ResultsTable(os.path.join(args.out, "inference_check.csv"), CHECK_FIELDS,
                               lambda r: (r["length"], r["seed"], r["method"]),
                               settings=None if args.report else {"preset": preset, **C},
                               parse=parse_check, fresh=args.fresh)
    if not args.report and "check" in phases:
        run_checks(table, check_table, P, C, args)
    report(table, P, args.out, check_table.rows)


if __name__ == "__main__":
    main()
