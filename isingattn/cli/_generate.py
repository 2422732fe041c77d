"""``isingattn generate RUN_DIR``: continue a prompt with a character-level language model.

RUN_DIR is a run of isingattn train --task char-lm; its newest checkpoint (or --step's) and
config.json are read, not the corpus. Each new character is sampled from the model's next-
character distribution with the logits divided by --temperature (0: the most probable one),
optionally among the --top-k most probable. There is no key/value cache yet: every character recomputes the forward
pass over the last L characters (L the training context). Prints the prompt and its
continuation; the same run, prompt, settings and --seed print the same text.
"""

from __future__ import annotations

import argparse


def add_parser(sub):
    p = sub.add_parser("generate", help="sample text from a character-level LM run",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description=__doc__.split("\n\n", 1)[1])
    p.add_argument("run_dir", help="the run directory (isingattn train --task char-lm)")
    p.add_argument("--prompt", required=True,
                   help="text to continue, in the corpus's vocabulary (text8/builtin: a-z, space)")
    p.add_argument("--length", type=int, default=200,
                   help="characters to generate (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature, 0 = greedy (default: %(default)s)")
    p.add_argument("--top-k", type=int, default=None,
                   help="sample among the k most probable characters (default: all)")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed (default: %(default)s)")
    p.add_argument("--step", type=int, default=None,
                   help="checkpoint step (default: the newest)")
    p.set_defaults(run=run)


def run(args):
    from ..experiments import generate_text

    text = generate_text(args.run_dir, args.prompt, args.length, temperature=args.temperature,
                         seed=args.seed, top_k=args.top_k, step=args.step)
    print(args.prompt + text)
    return 0
