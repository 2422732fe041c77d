"""Files written whole or not at all, and JSON of the library's values.

Every file the library or its analysis scripts write as a result (run configs, checkpoints,
tables, plots, caches) goes through :func:`atomic_write`: the content goes to a temporary file
in the same folder, is flushed to disk, then renamed over the target, so an interrupted run
never leaves a half-written file where a finished one is expected.
"""

from __future__ import annotations

import json
import math
import os
import tempfile

import numpy as np


def atomic_write(path, data) -> None:
    """Write ``data`` to ``path`` atomically: ``str`` (UTF-8 text), ``bytes``, or a function
    ``write(tmp_path)`` that writes the file itself (e.g. ``numpy.savez``, ``Figure.savefig``;
    the temporary name ends in ``.tmp``, so give such writers the format explicitly). The
    folder is created if missing; on any failure the target is unchanged and the temporary
    file removed.

    Raises ``TypeError`` for other ``data`` and whatever the write raises (``OSError``)."""
    if not (isinstance(data, (str, bytes)) or callable(data)):
        raise TypeError(f"data must be str, bytes or a function write(path); got "
                        f"{type(data).__name__}")
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        if callable(data):
            os.close(fd)
            data(tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(data.encode() if isinstance(data, str) else data)
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def to_jsonable(obj, *, nonfinite: str = "keep"):
    """``obj`` as plain JSON values: dict keys as strings, named tuples as dicts, tuples as
    lists, NumPy/JAX arrays as nested lists, NumPy scalars as Python numbers. Non-finite floats:
    ``nonfinite="keep"`` leaves them (Python's ``json`` writes and reads ``NaN``/``Infinity``),
    ``"null"`` writes None (strict JSON)."""
    if nonfinite not in ("keep", "null"):
        raise ValueError(f"nonfinite must be 'keep' or 'null'; got {nonfinite!r}")

    def conv(x):
        if isinstance(x, dict):
            return {str(k): conv(v) for k, v in x.items()}
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return {k: conv(v) for k, v in zip(x._fields, x)}
        if isinstance(x, (list, tuple)):
            return [conv(v) for v in x]
        if isinstance(x, np.generic) or hasattr(x, "shape"):
            return conv(np.asarray(x).tolist())
        if nonfinite == "null" and isinstance(x, float) and not math.isfinite(x):
            return None
        return x

    return conv(obj)


def write_json(path, data, *, indent: int = 2, nonfinite: str = "keep") -> None:
    """``data`` (through :func:`to_jsonable`, ``nonfinite`` as there) as JSON to ``path``,
    atomically."""
    atomic_write(path, json.dumps(to_jsonable(data, nonfinite=nonfinite), indent=indent) + "\n")
