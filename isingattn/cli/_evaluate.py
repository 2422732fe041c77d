"""``isingattn evaluate RUN_DIR``: evaluate the newest checkpoint of a training run.

Prints the loss, the task's metric and its extra columns on a split (default test) at a
sequence length (default the training length; other lengths need positions that generalize:
--positional rope or none), and writes RUN_DIR/eval_<split>_L<length>.json.
"""

from __future__ import annotations

import argparse


def add_parser(sub):
    p = sub.add_parser("evaluate", help="evaluate a training run's checkpoint",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=__doc__.split("\n\n", 1)[1])
    p.add_argument("run_dir", help="the run directory (written by isingattn train)")
    p.add_argument("--length", type=int, default=None,
                   help="sequence length (default: the training length)")
    p.add_argument("--split", choices=("valid", "test"), default="test",
                   help="evaluation split (default: %(default)s)")
    p.add_argument("--examples", type=int, default=None,
                   help="examples (default: the run's test_examples / eval_examples; char-lm: "
                   "the whole split)")
    p.add_argument("--step", type=int, default=None,
                   help="checkpoint step (default: the newest)")
    p.set_defaults(run=run)


def run(args):
    from ..experiments import evaluate_run

    if args.length is not None and args.length < 2:
        raise ValueError(f"--length must be >= 2; got {args.length}")
    if args.examples is not None and args.examples < 1:
        raise ValueError(f"--examples must be >= 1; got {args.examples}")
    res = evaluate_run(args.run_dir, length=args.length, split=args.split,
                       num_examples=args.examples, step=args.step)
    m = res["metrics"]
    examples = ("the whole split" if res["examples"] is None
                else f"{res['examples']} examples")
    print(f"{args.run_dir}: {res['split']} at length {res['length']} ({examples}, checkpoint "
          f"step {res['step']})")
    for k, v in m.items():
        print(f"  {k:16s} {v:.4f}" if isinstance(v, float) else f"  {k:16s} {v}")
    return 0
