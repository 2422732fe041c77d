"""Boltzmann attention vs softmax attention: forward + backward time and memory, CPU.

One run measures the anchor (``jax.nn.dot_product_attention``) and every method side by side on
the same inputs: ``jit`` of ``grad`` of a scalar loss with respect to query, key, value,
couplings and chemical potential. Compile time is reported separately; times are medians of
``--repeats`` runs after one warm-up. Memory is XLA's plan for the compiled program
(``memory_analysis()``: temporaries + outputs), the same number on a quiet or a busy machine.

Workloads (float32):
  A: B=8, T=S=128, N=4, H=32: softmax readout, transfer (banded r=8), mean_field (banded r=8),
     mean_field (full couplings), sampled(Gibbs, 16 draws, banded r=8)
  B: B=8, T=S=512, N=4, H=32: transfer (r=8; learned, and the same J frozen; the forward pass
     in the compiled kernel, the default on the CPU, and in JAX), mean_field (r=8)
  C: B=8, T=S=16, N=4, H=32: exact enumeration (the only size it serves), transfer, mean_field

Run::

    .venv/bin/python benchmarks/bench_attention.py            # all workloads
    .venv/bin/python benchmarks/bench_attention.py --only A,C  # a subset
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import jax
import jax.numpy as jnp

from isingattn.attention import Couplings, MeanField, Transfer, boltzmann_attention, sampled

R = 8


def _inputs(B, T, N, H, seed=0):
    k = jax.random.split(jax.random.key(seed), 5)
    q = jax.random.normal(k[0], (B, T, N, H))
    kk = jax.random.normal(k[1], (B, T, N, H))
    v = jax.random.normal(k[2], (B, T, N, H))
    w = jax.random.normal(k[3], (B, T, N, H))
    return q, kk, v, w


def _loss_grad(kind, couplings, N):
    if kind == "anchor":
        def loss(q, k, v, w, p, b):
            return jnp.sum(w * jax.nn.dot_product_attention(q, k, v, is_causal=True))
    else:
        method, readout = kind

        def loss(q, k, v, w, p, b):
            c = None if couplings is None else couplings.replace(p)
            rng = jax.random.key(1) if getattr(method, "stochastic", False) else None
            o = boltzmann_attention(q, k, v, is_causal=True, couplings=c, method=method,
                                    readout=readout, chemical_potential=b, rng=rng)
            return jnp.sum(w * o)

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 4, 5)))


def _measure(fn, args, repeats):
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    mem_bytes = None
    if mem is not None:
        mem_bytes = mem.temp_size_in_bytes + mem.output_size_in_bytes
    jax.block_until_ready(compiled(*args))  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), compile_s, mem_bytes


def _mb(x):
    return "n/a" if x is None else f"{x / 2**20:8.1f} MiB"


def run_workload(name, B, T, N, H, entries, repeats):
    print(f"\n== workload {name}: B={B}, T=S={T}, N={N}, H={H}, causal, float32; "
          f"fwd+bwd (grad wrt q, k, v, couplings, b); median of {repeats} ==")
    q, k, v, w = _inputs(B, T, N, H)
    b = jnp.full((N,), -1.0)
    anchor = _loss_grad("anchor", None, N)
    p0 = jnp.zeros((N, R))
    t_a, c_a, m_a = _measure(anchor, (q, k, v, w, p0, b), repeats)
    print(f"  {'softmax anchor (jax.nn.dot_product_attention)':52s} {t_a * 1e3:9.1f} ms  "
          f"compile {c_a:6.1f} s  mem {_mb(m_a)}")
    bound = B * N * T * T * (1 << R) * 4
    for label, method, readout, couplings in entries:
        fn = _loss_grad((method, readout), couplings, N)
        p = jnp.zeros((N, R)) if couplings is None else couplings.params
        try:
            t, c, m = _measure(fn, (q, k, v, w, p, b), repeats)
        except (ValueError, RuntimeError, MemoryError) as e:  # one failure is a figure too
            print(f"  {label:52s} FAILED: {type(e).__name__}: {str(e)[:120]}")
            continue
        ratio_m = "" if (m is None or m_a is None) else f" mem ratio {m / m_a:6.1f}x"
        if label.startswith("exact"):  # enumeration's natural unit: the 2^S pattern table
            within = "" if m is None else f"; mem / (B N T 2^S x 4 B) = {m / (B * N * T * (1 << T) * 4):.2f}"
        else:
            within = "" if m is None else f"; mem / (B N T S 2^r x 4 B) = {m / bound:.3f}"
        print(f"  {label:52s} {t * 1e3:9.1f} ms  compile {c:6.1f} s  mem {_mb(m)}   "
              f"ours/softmax = {t / t_a:6.1f}x on {B * N * T} queries of S={T}"
              f"{ratio_m}{within}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="A,B,C")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, {platform.processor() or ''} "
          f"cpu count {__import__('os').cpu_count()}")
    N = 4
    band = Couplings.learned(N, "banded", bandwidth=R).replace(
        0.3 * jax.random.normal(jax.random.key(2), (N, R)))
    from isingattn.samplers import GibbsSampler

    todo = args.only.split(",")
    if "A" in todo:
        full = Couplings.learned(N, "full", max_length=128).replace(
            0.05 * jax.random.normal(jax.random.key(3), (N, 128, 128)))
        # the same banded J held as a dense (full) matrix: dense products instead of shifts
        band_dense = Couplings.learned(N, "full", max_length=128).replace(band.matrix(128))
        run_workload("A", 8, 128, N, 32, [
            ("ours, softmax readout", "exact", "softmax", None),
            ("ours, J=0 (closed-form sigmoid)", "exact", "marginal", None),
            (f"transfer, banded r={R}", "transfer", "marginal", band),
            (f"mean_field, banded r={R} (implicit diff)", MeanField(), "marginal", band),
            (f"mean_field, banded r={R} held dense (implicit diff)", MeanField(), "marginal",
             band_dense),
            ("mean_field, full couplings std 0.05 (implicit diff)", MeanField(), "marginal",
             full),
            (f"sampled(Gibbs, 16 draws), banded r={R}",
             sampled(GibbsSampler(), 16, num_burnin=16), "marginal", band),
        ], args.repeats)
    if "B" in todo:
        frozen = Couplings.fixed(band.params, "banded")  # same J, no coupling gradient
        run_workload("B", 8, 512, N, 32, [
            (f"transfer, banded r={R}", "transfer", "marginal", band),
            (f"transfer, banded r={R}, fixed (frozen) couplings", "transfer", "marginal",
             frozen),
            (f"transfer, banded r={R}, forward in JAX", Transfer(backend="jax"), "marginal",
             band),
            (f"transfer, banded r={R}, frozen, forward in JAX", Transfer(backend="jax"),
             "marginal", frozen),
            (f"mean_field, banded r={R} (implicit diff)", MeanField(), "marginal", band),
        ], args.repeats)
    if "C" in todo:
        run_workload("C", 8, 16, N, 32, [
            (f"exact enumeration, banded r={R}", "exact", "marginal", band),
            (f"transfer, banded r={R}", "transfer", "marginal", band),
            (f"mean_field, banded r={R}", MeanField(), "marginal", band),
        ], args.repeats)


if __name__ == "__main__":
    main()
