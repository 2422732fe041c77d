"""Mean field with long-range relative couplings: training step against softmax, iteration
counts, coupling products.

Three parts, from one run (``--only`` picks some):

``step``
  One training step (forward, backward, Adam update) of a causal 2-layer transformer LM
  (``isingattn.attention.TransformerLM``: d = 64, 4 heads, vocabulary 8), B = 32, L = 64 and
  256 (``--lengths``): softmax attention (the anchor) and Boltzmann attention with learned
  relative couplings up to the length (``max_distance = L``) by ``mean_field``, accelerated
  (the default) and plain (``MeanField(accelerate=False)``). Every model first trains
  ``--pretrain`` steps from the same initialization on the same data (at initialization the
  learned couplings are 0 and the fixed point is the start), then the next steps are timed
  (one warm-up round, then medians over ``--repeats`` rounds; in each round every variant runs
  one step, so the variants share the machine's load round by round). Compile time is reported
  apart; so are the forward and adjoint iteration counts of each layer in the last step.
``train``
  The iteration counts along a training run: ``--train-steps`` steps at L =
  ``--train-length``, accelerated and plain side by side (same data), every 10th step: loss,
  forward and adjoint evaluations per layer, largest ``|w(d)|``.
``products``
  ``J m`` for relative couplings (4 heads, 8192 rows per head) inside a loop of damped
  mean-field steps (allocation amortized): the dense product against the FFT at S = 64 .. 1024
  keys, ms per step; what ``FFT_MIN_KEYS`` is chosen from.

The data: random tokens in which every odd position repeats the token before it; next-token
prediction.

Run::

    .venv/bin/python benchmarks/bench_mean_field.py                    # all three
    .venv/bin/python benchmarks/bench_mean_field.py --only step --lengths 256 --repeats 7
    .venv/bin/python benchmarks/bench_mean_field.py --only train --train-length 256
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp

B, D_MODEL, HEADS, LAYERS, VOCAB = 32, 64, 4, 2, 8


class Counts:
    """Monitor of a MeanField: the evaluations of every solve, in call order."""

    def __init__(self):
        self.log = collections.defaultdict(list)

    def __call__(self, stage, iterations, residual):
        self.log[stage].append(int(iterations))

    def take(self):
        jax.effects_barrier()
        out = {k: list(v) for k, v in self.log.items()}
        self.log.clear()
        return out


def batch(key, L):
    x = jax.random.randint(key, (B, L + 1), 0, VOCAB)
    return x.at[:, 1::2].set(x[:, 0:-1:2])


def build(variant, L, counts):
    import optax
    from flax import nnx

    from isingattn.attention import CouplingSpec, MeanField, TransformerLM

    if variant == "softmax":
        attention = "softmax"
    else:
        method = MeanField(accelerate=variant == "accelerated", monitor=counts)
        attention = {"couplings": CouplingSpec("learned", "relative", max_distance=L),
                     "method": method}
    model = TransformerLM(VOCAB, d_model=D_MODEL, num_heads=HEADS, num_layers=LAYERS,
                          max_length=L, attention=attention, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    graph, state = nnx.split((model, opt))

    def step(state, x):
        model, opt = nnx.merge(graph, state)

        def loss_fn(model):
            logits = model(x[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, x[:, 1:]).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        opt.update(model, grads)
        return loss, nnx.state((model, opt))

    def couplings_max(state):
        model, _ = nnx.merge(graph, state)
        return [float(jnp.max(jnp.abs(b.attn.couplings[...]))) for b in model.blocks]

    return jax.jit(step, donate_argnums=0), state, couplings_max


def per_layer(counts, stage):
    c = counts.get(stage, [])
    return "/".join(str(i) for i in c[-LAYERS:]) if c else "-"


def run_step(lengths, repeats, pretrain):
    print(f"\n== training step, B={B}, d={D_MODEL}, {HEADS} heads, {LAYERS} layers, causal; "
          f"state after {pretrain} training steps; median of {repeats} rounds ==")
    for L in lengths:
        variants = {}
        for name in ("softmax", "accelerated", "plain"):
            counts = Counts()
            step, state, _ = build(name, L, counts)
            key = jax.random.key(0)
            x = batch(key, L)
            t = time.perf_counter()
            compiled = step.lower(state, x).compile()
            compile_s = time.perf_counter() - t
            for _ in range(pretrain):
                key, sub = jax.random.split(key)
                _, state = compiled(state, batch(sub, L))
            jax.block_until_ready(state)
            counts.take()
            variants[name] = [compiled, state, x, compile_s, [], counts, None]
        for _ in range(repeats + 1):  # the first round warms up
            for v in variants.values():
                compiled, state, x = v[0], v[1], v[2]
                t = time.perf_counter()
                loss, state = compiled(state, x)
                jax.block_until_ready(loss)
                v[4].append(time.perf_counter() - t)
                v[1] = state
                v[6] = v[5].take()
        soft = variants["softmax"][4][1:]
        anchor = statistics.median(soft)
        for name, v in variants.items():
            ts = v[4][1:]
            med = statistics.median(ts)
            # the ratio within each round as well: the variants of a round run back to back, so
            # it is not moved by the machine's speed drifting between rounds
            per_round = "" if name == "softmax" else (
                f" (per round: median {statistics.median(t / a for t, a in zip(ts, soft)):.2f}x)")
            it = "" if name == "softmax" else (
                f"  iterations per layer: forward {per_layer(v[6], 'forward')}, "
                f"adjoint {per_layer(v[6], 'adjoint')}")
            label = "softmax" if name == "softmax" else f"mean_field, relative, {name}"
            print(f"  L={L:4d} {label:34s} {med * 1e3:8.1f} ms [{min(ts) * 1e3:.0f}-"
                  f"{max(ts) * 1e3:.0f}]  = {med / anchor:5.2f}x softmax{per_round}  compile "
                  f"{v[3]:5.1f} s{it}")


def run_train(L, steps):
    print(f"\n== iteration counts along training, L={L}, {steps} steps (same data for both); "
          "per layer: forward / adjoint evaluations ==")
    runs = {}
    for name in ("accelerated", "plain"):
        counts = Counts()
        step, state, cmax = build(name, L, counts)
        runs[name] = [step, state, counts, cmax]
    key = jax.random.key(1)
    totals = {name: [0, 0] for name in runs}
    for s in range(steps):
        key, sub = jax.random.split(key)
        x = batch(sub, L)
        row = []
        for name, r in runs.items():
            loss, r[1] = r[0](r[1], x)
            c = r[2].take()
            totals[name][0] += sum(c.get("forward", []))
            totals[name][1] += sum(c.get("adjoint", []))
            if s % 10 == 0 or s == steps - 1:
                w = "/".join(f"{v:.3f}" for v in r[3](r[1]))
                row.append(f"{name}: loss {float(loss):.3f} forward {per_layer(c, 'forward')}"
                           f" adjoint {per_layer(c, 'adjoint')} max|w| {w}")
        if row:
            print(f"  step {s:4d}  " + " | ".join(row), flush=True)
    for name, (f, a) in totals.items():
        print(f"  {name}: evaluations per layer and step, mean over the run: forward "
              f"{f / (steps * LAYERS):.1f}, adjoint {a / (steps * LAYERS):.1f}")


def run_products(sizes, repeats):
    from isingattn.attention import Couplings

    rows, N, K = 8192, 4, 8
    print(f"\n== J m, relative couplings up to S, {N} heads x {rows} rows, inside {K} damped "
          f"mean-field steps; ms per step, median of {repeats} ==")
    for S in sizes:
        a = jax.random.normal(jax.random.key(0), (N, rows // S, S, S)) - 1.0
        c = Couplings.learned(N, "relative", max_distance=S).replace(
            0.05 * jax.random.normal(jax.random.key(1), (N, S)))
        fns = {}
        for product in ("dense", "fft"):
            def loop(a, c, product=product):
                def body(i, m):
                    jm = c.matvec(m, product=product, head_axis=0)
                    return 0.5 * m + 0.5 * jax.nn.sigmoid(a + jm)

                return jax.lax.fori_loop(0, K, body, jax.nn.sigmoid(a))

            fns[product] = jax.jit(loop)
            jax.block_until_ready(fns[product](a, c))
        times = {p: [] for p in fns}
        for _ in range(repeats):
            for p, f in fns.items():
                t = time.perf_counter()
                jax.block_until_ready(f(a, c))
                times[p].append((time.perf_counter() - t) / K)
        med = {p: statistics.median(t) for p, t in times.items()}
        print(f"  S={S:5d}  dense {med['dense'] * 1e3:8.1f}  fft {med['fft'] * 1e3:8.1f}  "
              f"dense/fft = {med['dense'] / med['fft']:5.2f}  (auto: "
              f"{c.product_for(S)})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="step,train,products")
    ap.add_argument("--lengths", default="64,256")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pretrain", type=int, default=10)
    ap.add_argument("--train-length", type=int, default=64)
    ap.add_argument("--train-steps", type=int, default=200)
    ap.add_argument("--sizes", default="64,128,256,384,512,1024")
    args = ap.parse_args(argv)
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, "
          f"{platform.processor() or platform.machine()}, cpu count {os.cpu_count()}, "
          f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    todo = args.only.split(",")
    if "step" in todo:
        run_step([int(s) for s in args.lengths.split(",")], args.repeats, args.pretrain)
    if "train" in todo:
        run_train(args.train_length, args.train_steps)
    if "products" in todo:
        run_products([int(s) for s in args.sizes.split(",")], args.repeats)


if __name__ == "__main__":
    main()
