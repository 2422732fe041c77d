"""Timing helpers for the benchmark scripts: warm-up, compile time apart, medians."""

from __future__ import annotations

import statistics
import time

import jax


def timed(fn, *args, repeats=5, **kwargs):
    """Run ``fn`` once (compile + first run, reported apart), then ``repeats`` times.

    Returns ``(first_call_s, median_s, all_s, result)``; every call is blocked until ready."""
    t = time.perf_counter()
    out = jax.block_until_ready(fn(*args, **kwargs))
    first = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = jax.block_until_ready(fn(*args, **kwargs))
        times.append(time.perf_counter() - t)
    return first, statistics.median(times), times, out


def host_timed(fn, *args, repeats=3, **kwargs):
    """Median wall time of a host (non-JAX) call over ``repeats`` runs, after one warm-up."""
    fn(*args, **kwargs)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        times.append(time.perf_counter() - t)
    return statistics.median(times), times, out
