"""Strong scaling of the attention gradient over host devices: workload B of
``bench_attention.py`` on 1 and on 2 devices, side by side in one run.

Workload (float32): B = 8, T = S = 512, N = 4 heads, H = 32, learned banded couplings r = 8 by
``transfer``; ``jit`` of ``grad`` of a scalar loss with respect to query, key, value and the
couplings. With ``D`` devices the batch is sharded over an ``Auto`` mesh axis (the transfer
kernel and its gradient are partitioned per device, no all-gather). Each device count runs in its own process
(``--xla_force_host_platform_device_count=D``; on this machine the "devices" share the same
cores, so the ratio measures the overhead of partitioning, not a speed-up). Reported: compile
time, the median of ``--repeats`` steps, the ratio to one device, XLA's planned memory per
device (temporaries + outputs of the compiled program) and the number of all-gathers in the
compiled program.

Run::

    .venv/bin/python benchmarks/bench_scaling.py --devices 1,2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CHILD = r'''
import json, os, statistics, sys, time
D = int(sys.argv[1]); repeats = int(sys.argv[2])
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={D}"
import jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P
from isingattn.attention import Couplings, boltzmann_attention
B, T, N, H, R = 8, 512, 4, 32, 8
k = jax.random.split(jax.random.key(0), 4)
q, kk, v = (jax.random.normal(k[i], (B, T, N, H)) for i in range(3))
w = 0.1 * jax.random.normal(k[3], (N, R))
def loss(q, kk, v, w):
    c = Couplings.learned(N, "banded", bandwidth=R).replace(w)
    return jnp.sum(boltzmann_attention(q, kk, v, couplings=c, method="transfer",
                                       is_causal=True) ** 2)
mesh = jax.make_mesh((D,), ("data",), axis_types=(jax.sharding.AxisType.Auto,))
put = lambda x: jax.device_put(x, NamedSharding(mesh, P("data")))
args = (put(q), put(kk), put(v), w)
f = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
t = time.perf_counter(); c = f.lower(*args).compile(); compile_s = time.perf_counter() - t
mem = c.memory_analysis()
per_device = (mem.temp_size_in_bytes + mem.output_size_in_bytes) if mem is not None else None
jax.block_until_ready(c(*args))
times = []
for _ in range(repeats):
    t = time.perf_counter(); jax.block_until_ready(c(*args)); times.append(time.perf_counter() - t)
print(json.dumps({"devices": D, "compile_s": compile_s, "step_s": statistics.median(times),
                  "bytes_per_device": per_device,
                  "gathers": c.as_text().count("all-gather")}))
'''


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--devices", default="1,2", help="device counts (default %(default)s)")
    ap.add_argument("--repeats", type=int, default=3, help="timed steps (default %(default)s)")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.devices.split(",")]
    if any(d < 1 or 8 % d for d in counts) or args.repeats < 1:
        ap.error("--devices must be positive counts dividing the batch of 8; --repeats >= 1")
    print("workload B: B=8 T=S=512 N=4 H=32, learned banded r=8 (transfer), grad under jit, "
          f"median of {args.repeats} steps")
    rows = []
    for d in counts:
        out = subprocess.run([sys.executable, "-c", CHILD, str(d), str(args.repeats)],
                             capture_output=True, text=True, check=True,
                             env={**os.environ, "JAX_PLATFORMS": "cpu"})
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    base = rows[0]["step_s"]
    for r in rows:
        mem = r["bytes_per_device"]
        print(f"  {r['devices']} device(s): step {r['step_s']:.2f} s ({r['step_s'] / base:.2f}x "
              f"of {rows[0]['devices']}), compile {r['compile_s']:.1f} s, planned memory "
              f"{'-' if mem is None else f'{mem / 2**20:.0f} MiB'} per device, all-gathers "
              f"{r['gathers']}")


if __name__ == "__main__":
    main()
