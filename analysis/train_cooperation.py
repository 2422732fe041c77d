"""Can learned couplings learn cooperation? A tiny training run on the "pair copy" task.

Task. A sequence of ``T`` tokens: random symbols ``0..V-1``, one ``MARKER`` at a random
position ``p`` preceded by a ``BLANK`` (position ``p - 1``), and a ``QUERY`` token at the end. The
target at the query is the symbol right after the marker, ``x_{p+1}``. In a one-layer model the
query can find the marker by content, but the key at ``p + 1`` does not know it follows the
marker: attending to it requires attending to the PAIR ``(p, p+1)`` jointly. Positive banded
couplings ``J_{j,j+1}`` do exactly that (the marker's attention switches on its neighbours; the
blank on the other side can be suppressed by its field), so learned couplings should solve the
task while ``J = 0`` (normalized sigmoid attention) and softmax attention cannot locate
``p + 1``. They are not at ``1 / V`` either: the target is one of the ~7 symbols in the sequence,
so guessing from the bag of symbols (e.g. the most frequent one) already reaches about 0.4.

Models: one-block pre-norm :class:`~isingattn.attention.TransformerLM`, attention chosen by one
argument: softmax, and Boltzmann attention (exact enumeration, ``S = T`` keys) with couplings
``none``, ``fixed`` (``w(1) = 2``, ``w(2) = 0``: a hand-chosen prior that suits this task),
``random`` (frozen draw) and ``learned`` (banded, ``r = 2``, initialized at 0).

Writes ``<out>/train_cooperation.csv`` (step, model, loss, accuracy on a held-out batch; a
model's rows are appended when its training ends, so an interrupted run keeps the models it
finished and a re-run with the same settings trains only the others; ``--fresh`` starts over)
and ``<out>/train_cooperation.png``. Run::

    .venv/bin/python analysis/train_cooperation.py --steps 400 --out analysis/results
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from isingattn.attention import CouplingSpec, TransformerLM

from _results import ResultsTable  # analysis/_results.py (the script's folder)


def make_batch(key, batch: int, T: int, V: int):
    """Tokens ``(batch, T)`` and targets ``(batch,)`` of the pair-copy task (vocab ``V + 3``:
    symbols, BLANK = V, MARKER = V + 1, QUERY = V + 2)."""
    k1, k2 = jax.random.split(key)
    tokens = jax.random.randint(k1, (batch, T), 0, V)
    p = jax.random.randint(k2, (batch,), 1, T - 2)  # marker position: 1 .. T-3
    rows = jnp.arange(batch)
    tokens = tokens.at[rows, p - 1].set(V).at[rows, p].set(V + 1).at[:, T - 1].set(V + 2)
    return tokens, tokens[rows, p + 1]


def attention_configs(seed: int):
    r = 2
    return {
        "softmax": "softmax",
        "none": {"couplings": None},
        "fixed": {"couplings": CouplingSpec("fixed", "banded", bandwidth=r,
                                             values=np.array([[2.0, 0.0]]))},
        "random": {"couplings": CouplingSpec("random", "banded", bandwidth=r, strength=1.0)},
        "learned": {"couplings": CouplingSpec("learned", "banded", bandwidth=r)},
    }


def train(attention, *, steps=400, T=10, V=6, batch=128, d_model=32, lr=3e-3, seed=0,
          eval_every=25, log=None):
    """Train one model; returns a list of (step, loss, accuracy) on a fixed held-out batch."""
    model = TransformerLM(V + 3, d_model=d_model, num_heads=1, num_layers=1, max_length=T,
                          attention=attention, rngs=nnx.Rngs(seed))
    opt = nnx.Optimizer(model, optax.adam(lr), wrt=nnx.Param)

    def loss_fn(m, tokens, target):
        logits = m(tokens)[:, -1]
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, target).mean()
        return loss, jnp.mean(jnp.argmax(logits, -1) == target)

    @nnx.jit
    def step(m, o, tokens, target):
        (loss, acc), g = nnx.value_and_grad(loss_fn, has_aux=True)(m, tokens, target)
        o.update(m, g)
        return loss, acc

    @nnx.jit
    def evaluate(m, tokens, target):
        return loss_fn(m, tokens, target)

    test_tokens, test_target = make_batch(jax.random.key(10_000 + seed), 1024, T, V)
    history = []
    key = jax.random.key(seed)
    for i in range(steps + 1):
        if i % eval_every == 0 or i == steps:  # the last step too: its numbers are the final ones
            loss, acc = evaluate(model, test_tokens, test_target)
            history.append((i, float(loss), float(acc)))
            if log:
                log(f"  step {i:4d}  loss {float(loss):.3f}  acc {float(acc):.3f}")
        if i < steps:
            key, sub = jax.random.split(key)
            step(model, opt, *make_batch(sub, batch, T, V))
    return history, model


FIELDS = ["step", "model", "loss", "accuracy"]


def parse_row(r):
    return {"step": int(r["step"]), "model": r["model"], "loss": float(r["loss"]),
            "accuracy": float(r["accuracy"])}


def plot(table_rows, png_path, V=6):
    """Held-out loss and accuracy per step of every model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(r["step"], r["model"], r["loss"], r["accuracy"]) for r in table_rows]
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.5))
    for name in dict.fromkeys(r[1] for r in rows):
        h = np.array([(s, lo, ac) for s, n, lo, ac in rows if n == name])
        ax[0].plot(h[:, 0], h[:, 1], label=name)
        ax[1].plot(h[:, 0], h[:, 2], label=name)
    ax[0].set(xlabel="step", ylabel="held-out loss")
    ax[1].set(xlabel="step", ylabel="held-out accuracy")
    ax[1].axhline(1 / V, color="gray", ls=":", label="1/V")
    ax[1].legend()
    fig.suptitle(f"pair copy (T=10, V={V}): one-layer transformer, attention by one argument")
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--steps", type=int, default=400,
                    help="optimizer steps per model; held-out loss and accuracy every 25 steps "
                    "and after the last (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0,
                    help="seed of the initialization, the training batches and the held-out "
                    "batch (default: 0)")
    ap.add_argument("--out", default="analysis/results",
                    help="folder for train_cooperation.csv/.png (default: %(default)s)")
    ap.add_argument("--models", default="softmax,none,fixed,random,learned",
                    help="comma-separated attention variants to train (default: %(default)s)")
    ap.add_argument("--plot-only", action="store_true",
                    help="train nothing: redraw the PNG from the CSV")
    ap.add_argument("--fresh", action="store_true", help="retrain models already in the CSV")
    args = ap.parse_args(argv)
    if args.steps < 1:
        ap.error(f"--steps must be >= 1; got {args.steps}")
    os.makedirs(args.out, exist_ok=True)
    configs = attention_configs(args.seed)
    names = args.models.split(",")
    unknown = [n for n in names if n not in configs]
    if unknown:
        raise SystemExit(f"--models: unknown {', '.join(map(repr, unknown))}; choose from "
                         f"{', '.join(configs)}")
    path = os.path.join(args.out, "train_cooperation.csv")
    table = ResultsTable(path, FIELDS, lambda r: r["model"], parse=parse_row,
                         settings=None if args.plot_only else {"steps": args.steps,
                                                               "seed": args.seed},
                         fresh=args.fresh and not args.plot_only)
    png = os.path.join(args.out, "train_cooperation.png")
    if args.plot_only:
        plot(table.rows, png)
        return
    done = table.done
    for name in names:
        if name in done:
            print(f"{name}: in {path} already (--fresh to retrain)")
            continue
        t0 = time.perf_counter()
        print(f"{name}:")
        hist, model = train(configs[name], steps=args.steps, seed=args.seed, log=print)
        dt = time.perf_counter() - t0
        table.append([{"step": s, "model": name, "loss": lo, "accuracy": ac}
                      for s, lo, ac in hist])
        extra = ""
        attn = model.blocks[0].attn
        if getattr(attn, "couplings", None) is not None:
            extra = f"  J band w(1..r) = {np.round(np.asarray(attn.couplings[...])[0], 2)}"
        if getattr(attn, "chemical_potential", None) is not None:
            extra += f"  b = {np.round(np.asarray(attn.chemical_potential[...]), 2)}"
        print(f"  done in {dt:.1f}s{extra}")
    rows = [r for r in table.rows if r["model"] in names]
    plot(rows, png)
    print("held-out (loss, accuracy) after the last step:")
    for name in names:
        last = max((r for r in rows if r["model"] == name), key=lambda r: r["step"])
        print(f"  {name:8s} loss {last['loss']:.3f}  accuracy {last['accuracy']:.3f}  "
              f"(step {last['step']})")
    print(f"wrote {path} and {png}")


if __name__ == "__main__":
    main()
