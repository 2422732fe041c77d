"""Helpers shared by CLI subcommands: model specs, output files checked before any work,
atomic .npz writes, argument types (JSON and atomic writes: isingattn._io)."""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np

from .._io import atomic_write
from ..models import model_from_spec, spec_help

MODEL_HELP = ("model: a generator spec NAME[:key=value,...] or a model file (.json / .npz, "
              "read by content). Generators:\n")


def add_model_argument(parser):
    parser.add_argument("model", help=MODEL_HELP + spec_help())


def load_model(spec):
    return model_from_spec(spec)


def _int_at_least(text, least):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= {least}; got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be an integer >= {least}; got {value}")
    return value


def positive_int(text):
    """argparse type: an integer >= 1 (argparse turns the ArgumentTypeError into a one-line
    error)."""
    return _int_at_least(text, 1)


def nonnegative_int(text):
    """argparse type: an integer >= 0."""
    return _int_at_least(text, 0)


def _check_writable_dir(folder, what):
    """Create ``folder`` if needed and prove it writable by creating (and removing) a file."""
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".isingattn-check-"):
            pass
    except OSError as e:
        reason = e.strerror or str(e)
        raise OSError(f"cannot write {what}: folder {folder!r} is not writable ({reason})") \
            from None


def check_output_file(path, force=False, flag="--out", example="out.json"):
    """Before any computation: ``path`` is not a folder, is not an existing file unless
    ``force``, and its folder can be written (created if missing)."""
    if os.path.isdir(path):
        raise ValueError(f"{flag} {path!r} is a folder; give a file name inside it, e.g. "
                         f"{os.path.join(path, example)}")
    if os.path.lexists(path) and not force:
        raise ValueError(f"{flag} {path!r} exists; use --force to replace it, or another {flag}")
    _check_writable_dir(os.path.dirname(os.path.abspath(path)), f"{flag} {path!r}")


def check_output_dir(path, flag="--out"):
    """Before any computation: ``path`` is a folder (created if missing) that can be written."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise ValueError(f"{flag} {path!r} is a file, not a folder; give a folder (it holds "
                         "several files), or another name")
    _check_writable_dir(os.path.abspath(path), f"into {flag} {path!r}")


def write_npz(path, **arrays):
    """``numpy.savez`` to ``path``, atomically."""

    def write(tmp):
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    atomic_write(path, write)
