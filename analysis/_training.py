"""Shared by the training experiments (bracket matching, character-level LM, annealer
training): run one point of a sweep as a resumable training run, and the persistent compilation
cache that lets repeated seeds of one shape compile once."""

from __future__ import annotations

import json
import os

from isingattn.experiments import RunDirectoryError, train
from isingattn.experiments._train import run_status


def enable_compilation_cache(path):
    """Keep compiled programs in ``path`` across runs and processes (seeds and variants of one
    shape share them)."""
    import jax

    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def run_point(config, run_dir, *, progress=False):
    """Train ``config`` into ``run_dir``, continuing an interrupted run there; returns
    ``final.json``'s contents. A run directory from another protocol stops the sweep with a
    message naming the settings that differ."""
    resume = run_status(run_dir) in ("finished", "unfinished")
    try:
        return train(config, run_dir, resume=resume, progress=progress)
    except RunDirectoryError as e:
        raise SystemExit(f"{e}\n(the sweep's protocol changed since this run was made: move "
                         "the runs folder aside or use --fresh)") from None


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


def read_json(path, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)
