"""Compile time and step time of a deep transformer's gradient, blocks unrolled against
``scan_layers=True`` (one ``nnx.scan`` over stacked blocks), side by side in one run.

Workload: ``TransformerLM`` with ``--layers`` blocks, width 32, 2 heads, learned banded couplings
(r = 4, exact by ``transfer``), batch 4 x L = 64 tokens, the gradient of a sum of squared logits
under ``jax.jit``. Compile time is ``lower`` plus ``compile`` (tracing included; the persistent
compilation cache off); step times are medians of ``--repeats`` calls after a warm-up call.

Run::

    .venv/bin/python benchmarks/bench_scan_layers.py --layers 8
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
from flax import nnx

from isingattn.attention import CouplingSpec, TransformerLM


def measure(layers, scan, repeats):
    att = {"couplings": CouplingSpec("learned", "banded", bandwidth=4), "method": "transfer"}
    lm = TransformerLM(11, d_model=32, num_heads=2, num_layers=layers, max_length=64,
                       attention=att, scan_layers=scan, rngs=nnx.Rngs(0))
    graph, state = nnx.split(lm)
    tokens = jnp.zeros((4, 64), jnp.int32)

    def loss(st):
        return jnp.sum(nnx.merge(graph, st)(tokens) ** 2)

    t = time.perf_counter()
    step = jax.jit(jax.grad(loss)).lower(state).compile()
    compile_s = time.perf_counter() - t
    jax.block_until_ready(step(state))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(step(state))
        times.append(time.perf_counter() - t)
    return compile_s, statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=8, help="blocks (default %(default)s)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls (default %(default)s)")
    args = ap.parse_args(argv)
    if args.layers < 1 or args.repeats < 1:
        ap.error(f"--layers and --repeats must be >= 1; got {args.layers}, {args.repeats}")
    jax.config.update("jax_enable_compilation_cache", False)
    print(f"TransformerLM, {args.layers} blocks, width 32, learned banded r = 4 (transfer), "
          f"B = 4, L = 64; gradient under jit, median of {args.repeats} steps")
    res = {scan: measure(args.layers, scan, args.repeats) for scan in (False, True)}
    for scan, (c, s) in res.items():
        print(f"  scan_layers={scan!s:5}  compile {c:6.1f} s  step {s * 1e3:7.1f} ms")
    (c0, s0), (c1, s1) = res[False], res[True]
    print(f"  scanned / unrolled: compile {c1 / c0:.2f}x, step {s1 / s0:.2f}x")


if __name__ == "__main__":
    main()
