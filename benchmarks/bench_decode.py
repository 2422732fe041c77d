"""Autoregressive decoding with the key/value cache against recomputing the causal pass, side by
side in one run.

Workload: one ``BoltzmannMultiHeadAttention`` layer (width ``--width``, 4 heads, learned banded
couplings r = 4 by ``transfer``; and the softmax readout as the anchor), batch 1, a context of
``--length`` positions (S = 512 by default). *With the cache*: ``init_cache`` then one jitted
call per token (``decode=True``: the new query over the cached keys, O(S 2^r) by ``transfer``).
*Recomputing*: one jitted causal pass over the whole padded context per token, its row ``t``
kept (what a layer without a cache must do with static shapes). Tokens/s are over ``--tokens``
tokens after a warm-up token; compile time is reported apart.

Run::

    .venv/bin/python benchmarks/bench_decode.py
"""

from __future__ import annotations

import argparse
import time

import jax
from flax import nnx

from isingattn.attention import BoltzmannMultiHeadAttention, CouplingSpec


def layer_for(readout, width):
    kw = {} if readout == "softmax" else {
        "method": "transfer", "couplings": CouplingSpec("learned", "banded", bandwidth=4, init=0.3)}
    return BoltzmannMultiHeadAttention(4, width, readout=readout, is_causal=True,
                                       rngs=nnx.Rngs(0), **kw)


def measure(readout, width, length, tokens):
    x = jax.random.normal(jax.random.key(0), (1, length, width))
    layer = layer_for(readout, width)
    layer.init_cache(x.shape)
    step = nnx.jit(lambda m, xt: m(xt, decode=True))
    t0 = time.perf_counter()
    jax.block_until_ready(step(layer, x[:, :1]))
    compile_cached = time.perf_counter() - t0
    t0 = time.perf_counter()
    for t in range(1, tokens + 1):
        out = step(layer, x[:, t:t + 1])
    jax.block_until_ready(out)
    cached = tokens / (time.perf_counter() - t0)

    full = nnx.jit(lambda m, xs, t: jax.lax.dynamic_slice_in_dim(m(xs), t, 1, axis=1))
    t0 = time.perf_counter()
    jax.block_until_ready(full(layer, x, 0))
    compile_full = time.perf_counter() - t0
    t0 = time.perf_counter()
    for t in range(1, tokens + 1):
        out = full(layer, x, t)
    jax.block_until_ready(out)
    recomputed = tokens / (time.perf_counter() - t0)
    return compile_cached, cached, compile_full, recomputed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=int, default=512, help="context S (default %(default)s)")
    ap.add_argument("--tokens", type=int, default=32, help="timed tokens (default %(default)s)")
    ap.add_argument("--width", type=int, default=64, help="features (default %(default)s)")
    args = ap.parse_args(argv)
    if min(args.length, args.tokens, args.width) < 1 or args.tokens >= args.length:
        ap.error("--length, --tokens and --width must be >= 1, with --tokens < --length")
    print(f"one layer, 4 heads, width {args.width}, batch 1, context S = {args.length}; "
          f"tokens/s over {args.tokens} tokens")
    for readout in ("softmax", "marginal"):
        cc, c, cf, f = measure(readout, args.width, args.length, args.tokens)
        name = "softmax" if readout == "softmax" else "learned banded r=4 (transfer)"
        print(f"  {name:30s} cache {c:8.1f} tok/s (compile {cc:.1f} s) | recompute "
              f"{f:8.1f} tok/s (compile {cf:.1f} s) | cache / recompute {c / f:.1f}x")


if __name__ == "__main__":
    main()
