"""``isingattn train``: train a small transformer with softmax or Boltzmann attention on a task.

A run is a directory (--out): config.json, metrics.csv (step, split, loss, metric and the task's
extra columns, appended as it goes), checkpoints/ and final.json (test metrics, parameter count,
steps/s, compile and wall time, final couplings, versions). An interrupted run continues from
its last checkpoint with --resume (the same numbers as an uninterrupted run); a directory that
holds a run is refused unless --resume or --force.

Tasks: pair-copy (copy the symbol after a marker), bracket (bracket matching: label each closing
bracket with the type it closes; --bracket-variant balance: classify balanced vs one bracket
changed), file (sequence labelling from a JSONL file, --data), char-lm (character-level
language modelling on --corpus builtin, or text8 / enwik8 / ptb read from --data; the metric is
bits per character, the final valid and test numbers over the whole splits in windows of
--length characters every --eval-stride; sample text with isingattn generate).

Attention: softmax, or Boltzmann attention with couplings none (J = 0: sigmoid attention), fixed,
random or learned, structure banded (range --bandwidth, exact by transfer) or relative (up to
--max-distance, mean field).

Sampled attention: --method sampled:<backend> (exact, gibbs, diabatic, qpu_offline, qpu, ...;
see isingattn.samplers.BACKENDS) with --num-samples draws per query, backend options as
--backend-opt KEY=VALUE (repeatable; VALUE read as JSON where it parses, e.g.
--backend-opt annealing_time=0.2 --backend-opt schedule=dwave_like), and --calibrate formula or
measured (the sampler's effective temperatures, recorded in calibration.csv every
--calibrate-every steps). A backend option the backend does not take, a context beyond the
backend's limit (the diabatic simulator: 22 keys per query) or a QPU without a token stops the
run before it starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

from ..experiments import (
    ATTENTIONS,
    CALIBRATIONS,
    CORPORA,
    EXPERIMENT_STRUCTURES,
    METHODS,
    SCHEDULES,
    TASKS,
    TrainConfig,
)

#: (config field, help, choices) of every option; the default comes from TrainConfig.
OPTIONS = [
    ("task", "the task", TASKS),
    ("data", ("JSONL file of --task file: {\"input\": [...] or \"string\", \"labels\": [int or "
             "null, ...], \"split\": optional}; char-lm: the text8 / enwik8 file or zip, or "
             "the ptb directory"), None),
    ("length", "sequence length (file: default the longest example; char-lm: the context)",
     None),
    ("bracket_variant", ("bracket: 'match' labels every closing bracket, 'balance' classifies "
                        "whole sequences"), ("match", "balance")),
    ("bracket_types", "bracket: number of bracket types k", None),
    ("max_depth", "bracket: nesting depth bound (default 8 for walk, the length for long)", None),
    ("regime", "bracket: pair distances, 'walk' (mostly short) or 'long' (far-apart pairs)",
     ("walk", "long")),
    ("num_symbols", "pair-copy: number of symbols", None),
    ("data_seed", "seed of the synthetic valid/test sets", None),
    ("corpus", "char-lm: the corpus (builtin: docstrings of the installed packages)", CORPORA),
    ("eval_stride", "char-lm: characters between evaluation windows (default length // 2)",
     None),
    ("attention", "softmax, or Boltzmann attention with couplings of this kind", ATTENTIONS),
    ("structure", "coupling structure J_jk = w(|j-k|): banded (|j-k| <= bandwidth) or relative",
     EXPERIMENT_STRUCTURES),
    ("method", (f"inference method: {', '.join(METHODS)} or sampled:<backend> (default: "
                "transfer for banded, mean_field for relative)"), None),
    ("num_samples", "sampled methods: draws per query", None),
    ("calibrate", ("sampled methods: calibrate the backend's effective temperatures to beta "
                   "('formula': the backend's law; 'measured': on probe models, re-estimated)"),
     CALIBRATIONS),
    ("calibrate_every", ("sampled methods: steps between measurements of the sampler's effective "
                         "temperatures (default 50 with --calibrate measured, else none)"), None),
    ("calibrate_probes", "sampled methods: probe models per head of a measurement", None),
    ("calibrate_samples", "sampled methods: draws per probe model", None),
    ("bandwidth", "banded coupling range r", None),
    ("max_distance", ("relative couplings: largest distance with its own weight (default "
                     "length - 1)"), None),
    ("coupling_scale", ("scale kappa of fixed (w = kappa/D) and random (std "
                       "kappa/sqrt(D)) couplings"), None),
    ("beta", "inverse temperature of the attention's Ising models", None),
    ("chemical_potential", "initial chemical potential b (learned per head)", None),
    ("positional", "positions: learned absolute embeddings, rope, or none",
     ("learned", "rope", "none")),
    ("layers", "transformer blocks", None),
    ("d_model", "model width", None),
    ("heads", "attention heads", None),
    ("mlp_ratio", "MLP width / d_model", None),
    ("dropout", "dropout rate (embeddings and residual branches)", None),
    ("tie_embeddings", "char-lm: the output layer reuses the token embeddings", None),
    ("steps", "optimizer steps", None),
    ("batch", "sequences per step", None),
    ("lr", "peak learning rate (AdamW)", None),
    ("warmup", "linear warm-up steps", None),
    ("schedule", "learning-rate schedule after the warm-up", SCHEDULES),
    ("weight_decay", "AdamW weight decay", None),
    ("clip", "clip the global gradient norm (0: off)", None),
    ("seed", "seed of the initialization, random couplings and training batches", None),
    ("eval_every", "steps between validation passes", None),
    ("eval_examples", ("validation examples (char-lm: windows at the start of the valid split, "
                      "during training; the final numbers cover whole splits)"), None),
    ("test_examples", "test examples (char-lm: unused, the whole test split)", None),
    ("checkpoint_every", "steps between checkpoints", None),
    ("keep_checkpoints", "checkpoints kept", None),
]


def _field_type(name):
    f = {f.name: f for f in dataclasses.fields(TrainConfig)}[name]
    t = str(f.type)
    if t == "bool":
        return bool
    if "int" in t:
        return int
    if "float" in t:
        return float
    return str


def add_parser(sub):
    p = sub.add_parser("train", help="train a model with softmax or Boltzmann attention",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=__doc__.split("\n\n", 1)[1])
    defaults = TrainConfig()
    for name, help_, choices in OPTIONS:
        default = getattr(defaults, name)
        shown = "" if default is None else f" (default: {default})"
        if _field_type(name) is bool:  # --name / --no-name
            p.add_argument("--" + name.replace("_", "-"), dest=name, default=None,
                           action=argparse.BooleanOptionalAction, help=help_ + shown)
            continue
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=_field_type(name),
                       choices=choices, default=None, help=help_ + shown)
    p.add_argument("--backend-opt", dest="backend_opt", action="append", default=[],
                   metavar="KEY=VALUE",
                   help=("an option of a sampled method's backend (repeatable); VALUE is read as "
                         "JSON where it parses (0.2, true, [6]), else as a string"))
    p.add_argument("--out", default=None,
                   help="run directory (default: runs/TASK_ATTENTION_STRUCTURE_L<length>_seed<seed>)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--force", action="store_true",
                   help="delete the run in --out (its own files only) and start over")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    g = p.add_argument_group(
        "data-parallel and multi-process training",
        "The state is replicated and every batch split over the devices (--batch a multiple of "
        "their number); one step equals the one-device step to float rounding. Several "
        "processes (one per host, or several on one machine) each run this command with the "
        "same options and an --out every process sees; process 0 writes the run.")
    g.add_argument("--data-parallel", action="store_true",
                   help="train on every device of every process")
    g.add_argument("--distributed", action="store_true",
                   help=("join JAX's distributed runtime with the cluster detected from the "
                         "environment (SLURM, Open MPI, Cloud TPU); implies --data-parallel"))
    g.add_argument("--coordinator-address", default=None, metavar="HOST:PORT",
                   help="address of process 0 (with --num-processes and --process-id)")
    g.add_argument("--num-processes", type=int, default=None, help="processes in the run")
    g.add_argument("--process-id", type=int, default=None,
                   help="this process's index, 0 .. num-processes - 1")
    p.set_defaults(run=run)


def parse_backend_options(items) -> dict:
    """``["KEY=VALUE", ...]`` -> dict; VALUE as JSON where it parses, else the string."""
    import json

    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--backend-opt takes KEY=VALUE; got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def config_from_args(args) -> TrainConfig:
    given = {name: getattr(args, name) for name, _, _ in OPTIONS
             if getattr(args, name) is not None}
    opts = parse_backend_options(getattr(args, "backend_opt", None))
    if opts:
        given["backend_options"] = opts
    if given.get("task") == "file" and "length" not in given:
        given["length"] = None
    return TrainConfig(**given)


def default_out(config: TrainConfig) -> str:
    return (f"runs/{config.task}_{config.attention}_{config.structure}_L{config.length}_"
            f"seed{config.seed}")


def run(args):
    from ..experiments import TrainingDiverged, train

    if args.resume and args.force:
        raise ValueError("--resume and --force exclude each other")
    explicit = (args.coordinator_address, args.num_processes, args.process_id)
    if args.distributed or any(v is not None for v in explicit):
        from ..experiments import initialize_distributed

        if args.distributed and any(v is not None for v in explicit):
            raise ValueError("--distributed detects the cluster; it excludes "
                             "--coordinator-address, --num-processes and --process-id")
        initialize_distributed(*explicit)  # before anything runs on a device
    config = config_from_args(args)
    out = args.out or default_out(config)
    import jax

    main = jax.process_index() == 0
    if main:
        print(f"run directory: {out}", file=sys.stderr)
    try:
        final = train(config, out, resume=args.resume, force=args.force,
                      progress=not args.quiet, data_parallel=True if args.data_parallel else None)
    except TrainingDiverged as e:
        print(f"isingattn train: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"isingattn train: interrupted; continue with --resume --out {out}",
              file=sys.stderr)
        return 130
    if not main:
        return 0
    test = final["test"]
    extras = "  ".join(f"{k} {v:.4f}" for k, v in test.items()
                       if k not in ("loss", "metric") and isinstance(v, float) and math.isfinite(v))
    print(f"test: loss {test['loss']:.4f}  metric {test['metric']:.4f}  {extras}")
    sps = final.get("steps_per_second")
    print(f"parameters {final['parameters']}  steps/s {sps:.2f}  compile "
          f"{final['compile_seconds']:.1f} s  wall {final['wall_seconds']:.1f} s"
          if sps else f"parameters {final['parameters']}")
    print(f"wrote {out}/final.json")
    return 0
