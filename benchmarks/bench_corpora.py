"""Corpus loading benchmark (issue: character-level corpora).

Writes synthetic corpora of the standard size in a temporary directory: text8 format (100 MB of
uniform random ' a-z'), enwik8 format ('<mediawiki ' and 100 MB of bytes from a Zipf law over
205 values), each raw and zipped (deflate level 1). Then, each case in a fresh process (so that
memory high-water marks are its own), prints one line per step:

  open     load_corpus: the size check and one chunked pass over the file (alphabet check and
           SHA-256).
  <split>  corpus.split(which) (median of 3 after the measured first call), then one pass over
           the returned tokens (tokens.max()), the way a consumer touches them.

Memory, for the first call of each step: the growth of the process's peak resident set size
over its resident size before the step (Linux VmHWM, reset through /proc/self/clear_refs; it
counts the pages of a memory-mapped file once touched; getrusage's ru_maxrss cannot be reset and
in a child starts at the parent's size) and the tracemalloc peak (heap allocations by Python and
numpy: no file pages). The page cache is warm
(the files were just written). Finally the built-in corpus: built from scratch in an empty cache,
then loaded again from the cache.

Run: .venv/bin/python benchmarks/bench_corpora.py [--quick]   (--quick: 10 MB files)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile

import numpy as np

CASE = textwrap.dedent("""
    import json, statistics, sys, time, tracemalloc
    import numpy as np
    from isingattn.experiments._corpora import load_corpus

    name, path, which, any_size = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    opts = {"any_size": True} if any_size else {}

    def rss():  # peak RSS (MiB) since the last reset (Linux: VmHWM, reset through clear_refs)
        status = open("/proc/self/status").read()
        return int(status.split("VmHWM:")[1].split()[0]) / 1024

    def reset():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return rss()

    out = {}
    base = reset()
    tracemalloc.start()
    t = time.perf_counter()
    corpus = load_corpus(name, path, **opts)
    out["open_s"] = time.perf_counter() - t
    out["open_rss"], out["open_heap"] = rss() - base, tracemalloc.get_traced_memory()[1] / 2**20
    if which != "open":
        tracemalloc.reset_peak()
        base = reset()
        t = time.perf_counter()
        tokens = corpus.split(which)
        mid = time.perf_counter()
        tokens.max()  # touches every token without a copy
        out["pass_s"] = time.perf_counter() - mid
        out["rss"], out["heap"] = rss() - base, tracemalloc.get_traced_memory()[1] / 2**20
        out["tokens"], out["memmap"] = len(tokens), isinstance(tokens, np.memmap)
        del tokens
        tracemalloc.stop()
        times = [mid - t]
        for _ in range(3):
            t = time.perf_counter()
            tokens = corpus.split(which)
            times.append(time.perf_counter() - t)
            del tokens
        out["split_first_s"], out["split_s"] = times[0], statistics.median(times[1:])
    print(json.dumps(out))
""")


def run_case(name, path, which, any_size):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", CASE, name, path, which, str(int(any_size))],
                          capture_output=True, text=True, check=True, env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_files(folder, n):
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    alphabet = np.frombuffer(b" abcdefghijklmnopqrstuvwxyz", np.uint8)
    text8 = os.path.join(folder, "text8")
    alphabet[rng.integers(0, 27, n, dtype=np.uint8)].tofile(text8)
    values = rng.permutation(256)[:205].astype(np.uint8)
    p = 1.0 / np.arange(1, 206)
    enwik8 = os.path.join(folder, "enwik8")
    with open(enwik8, "wb") as f:
        f.write(b"<mediawiki ")
        values[rng.choice(205, n - 11, p=p / p.sum())].tofile(f)
    zips = {}
    for path in (text8, enwik8):
        zips[path] = path + ".zip"
        with zipfile.ZipFile(zips[path], "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            zf.write(path, os.path.basename(path))
    sizes = ", ".join(f"{os.path.basename(p)} {os.path.getsize(p) / 1e6:.0f} MB"
                      for p in (text8, zips[text8], enwik8, zips[enwik8]))
    print(f"wrote {sizes} in {time.perf_counter() - t:.1f} s")
    return [("text8", "raw", text8), ("text8", "zip", zips[text8]),
            ("enwik8", "raw", enwik8), ("enwik8", "zip", zips[enwik8])]


def builtin(folder):
    code = textwrap.dedent(f"""
        import json, time
        from isingattn.experiments._corpora import load_corpus
        t = time.perf_counter(); c = load_corpus("builtin", cache_dir={folder!r})
        build = time.perf_counter() - t
        t = time.perf_counter(); load_corpus("builtin", cache_dir={folder!r})
        print(json.dumps({{"build": build, "reuse": time.perf_counter() - t, "info": c.info}}))
    """)
    out = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout)
    info = out["info"]
    sources = ", ".join(f"{s['name']} {s['version']} ({s['files']} files, "
                        f"{s['characters'] / 1e6:.1f} M chars)" for s in info["sources"])
    print(f"builtin: built in {out['build']:.1f} s (first use, empty cache), "
          f"{info['size']:,} characters, sha256 {info['sha256'][:12]}..; reloaded from the cache "
          f"in {out['reuse'] * 1e3:.0f} ms; sources: {sources}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="10 MB files (any_size=True)")
    a = p.parse_args()
    n = 10_000_000 if a.quick else 100_000_000
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, cpus {os.cpu_count()}")
    with tempfile.TemporaryDirectory() as folder:
        cases = write_files(folder, n)
        for name, fmt, path in cases:
            for which in ("open", "train", "valid", "test"):
                r = run_case(name, path, which, a.quick)
                head = f"{name:6s} {fmt:3s} {which:5s}"
                if which == "open":
                    print(f"{head} load_corpus {r['open_s']:6.2f} s"
                          f"{'':37s}peak RSS +{r['open_rss']:4.0f} MiB, "
                          f"heap peak {r['open_heap']:4.0f} MiB")
                else:
                    kind = "memmap" if r["memmap"] else "array"
                    print(f"{head} split() {r['split_s']:6.2f} s (first {r['split_first_s']:.2f}),"
                          f" one pass {r['pass_s']:.2f} s, {r['tokens']:>10,} ({kind}) "
                          f"peak RSS +{r['rss']:4.0f} MiB, heap peak {r['heap']:4.0f} MiB")
        builtin(os.path.join(folder, "cache"))


if __name__ == "__main__":
    main()
