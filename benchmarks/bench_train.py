"""Training step of every attention variant against softmax, side by side in one run.

The model and data of the bracket-matching experiment (``analysis/bracket_matching.py``): a
causal 2-layer transformer, width 64, 2 heads (``--heads``), bracket sequences of the ``long``
regime, 2048 tokens per step (batch = 2048 / L), AdamW. One optimizer step of
``isingattn.experiments.Trainer`` (forward, backward through the whole model, update) per
variant: softmax (the anchor), Boltzmann attention with J = 0 (``none``), banded couplings
(r = 4; fixed, random, learned; exact by ``transfer``), learned banded r = 8, and relative
couplings up to the length (fixed, random, learned; ``mean_field``).

Compile time (the first step, compilation included) is reported apart. Step times are medians
over ``--repeats`` rounds; in each round every variant runs ``--steps`` steps, so the variants
share the machine's state (other load, clock) round by round.

Target (bracket-matching issue): learned r = 4 within 3x softmax per step at L = 256, compile
under 10 s.

Run::

    .venv/bin/python benchmarks/bench_train.py                 # L = 64 and 256
    .venv/bin/python benchmarks/bench_train.py --lengths 256 --only softmax,banded-learned
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import jax
import numpy as np

from isingattn.experiments import BracketTask, TrainConfig, Trainer, batch_rng

VARIANTS = {
    "softmax": {"attention": "softmax"},
    "none": {"attention": "none"},
    "banded-fixed": {"attention": "fixed", "structure": "banded", "bandwidth": 4},
    "banded-random": {"attention": "random", "structure": "banded", "bandwidth": 4},
    "banded-learned": {"attention": "learned", "structure": "banded", "bandwidth": 4},
    "banded-learned-r8": {"attention": "learned", "structure": "banded", "bandwidth": 8},
    "relative-fixed": {"attention": "fixed", "structure": "relative"},
    "relative-random": {"attention": "random", "structure": "relative"},
    "relative-learned": {"attention": "learned", "structure": "relative"},
}


def build(variant, L, args):
    cfg = TrainConfig(task="bracket", regime="long", length=L, layers=2, d_model=64,
                      heads=args.heads, batch=max(1, args.tokens // L), steps=1000, lr=1e-3,
                      **VARIANTS[variant])
    trainer = Trainer(cfg, BracketTask(regime="long"))
    batch = trainer.task.train_batch(batch_rng(0, 0), cfg.batch, L)
    t = time.perf_counter()
    jax.block_until_ready(trainer.step(batch))
    return trainer, batch, time.perf_counter() - t


def run_steps(trainer, batch, n):
    t = time.perf_counter()
    for _ in range(n):
        out = trainer.step(batch)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="64,256", help="sequence lengths (default %(default)s)")
    ap.add_argument("--only", default=None, help="comma-separated variants (softmax is always "
                    f"included); default all: {', '.join(VARIANTS)}")
    ap.add_argument("--repeats", type=int, default=5, help="rounds (default %(default)s)")
    ap.add_argument("--steps", type=int, default=3, help="steps per variant per round")
    ap.add_argument("--tokens", type=int, default=2048, help="tokens per step")
    ap.add_argument("--heads", type=int, default=2, help="attention heads")
    args = ap.parse_args(argv)
    names = list(VARIANTS) if args.only is None else ["softmax"] + [
        v for v in args.only.split(",") if v != "softmax"]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"--only: unknown {unknown}; valid: {', '.join(VARIANTS)}")
    print(f"# {platform.processor() or platform.machine()}, {jax.device_count()} device(s) "
          f"{jax.devices()[0].platform}, jax {jax.__version__}")
    print(f"# workload: bracket matching (long regime), 2 layers, d_model 64, {args.heads} heads,"
          f" {args.tokens} tokens/step; medians of {args.repeats} rounds x {args.steps} steps")
    for L in map(int, args.lengths.split(",")):
        trainers, compile_s = {}, {}
        for v in names:
            tr, b, c = build(v, L, args)
            trainers[v], compile_s[v] = (tr, b), c
        times = {v: [] for v in names}
        for _ in range(args.repeats):
            for v in names:
                times[v].append(run_steps(*trainers[v], args.steps))
        base = statistics.median(times["softmax"])
        print(f"\nL = {L}, batch = {max(1, args.tokens // L)}")
        print(f"{'variant':20s} {'ms/step':>9s} {'spread':>15s} {'x softmax':>10s} "
              f"{'compile s':>10s}")
        for v in names:
            med = statistics.median(times[v])
            lo, hi = min(times[v]), max(times[v])
            print(f"{v:20s} {1e3 * med:9.1f} {f'{1e3 * lo:.0f}-{1e3 * hi:.0f}':>15s} "
                  f"{med / base:10.2f} {compile_s[v]:10.1f}")
        ratio = statistics.median(times.get("banded-learned", [np.nan])) / base
        if "banded-learned" in names:
            print(f"banded-learned (r=4) / softmax at L = {L}: {ratio:.2f}x "
                  f"(target at L = 256: <= 3x); compile {compile_s['banded-learned']:.1f} s "
                  "(target < 10 s)")


if __name__ == "__main__":
    main()
