"""Models from short text specs (``lattice:L=8,beta=0.4``) or files (``.json`` / ``.npz``)."""

from __future__ import annotations

import json
import os
import zipfile

import jax
import numpy as np

from ._dense import IsingModel
from ._generators import chain, random_dense, sherrington_kirkpatrick, square_lattice
from ._sparse import SparseIsingModel


def _bool(v):
    if v.lower() in ("1", "true", "yes", "on"):
        return True
    if v.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected a boolean (true/false); got {v!r}")


_COMMON = {"beta": (float, 1.0), "vartype": (str, "SPIN")}
#: name -> (builder, {parameter: (parser, default)}, description)
GENERATORS = {
    "chain": (
        lambda p: chain(p["n"], p["J"], p["h"], periodic=p["periodic"], beta=p["beta"],
                        vartype=p["vartype"]),
        {"n": (int, 10), "J": (float, 1.0), "h": (float, 0.0), "periodic": (_bool, False)},
        "1D chain, uniform J and h",
    ),
    "lattice": (
        lambda p: square_lattice(p["L"], p["J"], p["h"], periodic=p["periodic"], beta=p["beta"],
                                 vartype=p["vartype"]),
        {"L": (int, 4), "J": (float, 1.0), "h": (float, 0.0), "periodic": (_bool, True)},
        "L x L square lattice, uniform J and h",
    ),
    "sk": (
        lambda p: sherrington_kirkpatrick(jax.random.key(p["seed"]), p["n"], J0=p["J0"],
                                          sigma=p["sigma"], h_sigma=p["h_sigma"],
                                          beta=p["beta"], vartype=p["vartype"]),
        {"n": (int, 10), "seed": (int, 0), "J0": (float, 0.0), "sigma": (float, 1.0),
         "h_sigma": (float, 0.0)},
        "Sherrington-Kirkpatrick spin glass",
    ),
    "random": (
        lambda p: random_dense(jax.random.key(p["seed"]), p["n"], J_scale=p["J_scale"],
                               h_scale=p["h_scale"], beta=p["beta"], vartype=p["vartype"]),
        {"n": (int, 10), "seed": (int, 0), "J_scale": (float, 1.0), "h_scale": (float, 1.0)},
        "dense Gaussian couplings and fields",
    ),
}


def spec_help() -> str:
    """What :func:`model_from_spec` accepts, as text for a command line's ``--help``: one line
    per generator of :data:`GENERATORS` (``NAME:key=default, ...`` and what it builds, the
    parameters every generator takes included), then a line on model files (``.json`` /
    ``.npz``). Lines are indented by two spaces and joined by newlines, with no trailing newline.
    """
    lines = []
    for name, (_, params, desc) in GENERATORS.items():
        keys = ", ".join(f"{k}={d}" for k, (_, d) in {**params, **_COMMON}.items())
        lines.append(f"  {name}:{keys}   ({desc})")
    lines.append("  PATH.json / PATH.npz   (arrays h and J, or h, edges and J; optional beta, "
                 "vartype, offset, mask; leading batch dimensions allowed)")
    return "\n".join(lines)


#: What a model file may be (named in every error about one).
FILE_FORMATS = ("PATH.json (a JSON object of arrays h and J, or h, edges and J) or PATH.npz "
                "(numpy.savez of the same arrays); optional beta, vartype, offset, mask")


def _from_arrays(data, source):
    if not isinstance(data, dict):
        raise TypeError(f"model file {source!r} must hold a JSON object with arrays 'h' and 'J'; "
                         f"it holds a {type(data).__name__}")
    if "h" not in data or "J" not in data:
        raise ValueError(f"model file {source!r} must contain arrays 'h' and 'J' (and 'edges' "
                         f"for sparse); it has {sorted(data) or 'none'}")
    try:
        kw = {}
        for k in ("beta", "offset"):
            if k in data:
                kw[k] = np.asarray(data[k], float)
        if "vartype" in data:
            kw["vartype"] = str(np.asarray(data["vartype"]))
        if "mask" in data:
            kw["mask"] = np.asarray(data["mask"], bool)
        h = np.asarray(data["h"], float)
        J = np.asarray(data["J"], float)
        if "edges" in data:
            return SparseIsingModel(h=h, edges=np.asarray(data["edges"], np.int64), J=J, **kw)
        return IsingModel(h=h, J=J, **kw)
    except (ValueError, TypeError) as e:
        raise type(e)(f"model file {source!r}: {e}") from None


def _sniff(path) -> str:
    """What a file holds, by its first bytes: 'npz' (a zip), 'npy', 'json' or 'other'."""
    with open(path, "rb") as f:
        head = f.read(64)
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "npz"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.lstrip().startswith((b"{", b"[")):
        return "json"
    return "other"


_NAMES = {"npz": "an .npz archive", "npy": "a single .npy array", "json": "JSON text"}


def load_model_file(path):
    """A model from a ``.json`` or ``.npz`` file, with errors that name the file, say what it is
    not and which formats are accepted (never NumPy's advice to unpickle)."""
    if os.path.isdir(path):
        raise ValueError(f"model file {path!r} is a directory; give {FILE_FORMATS}")
    if not os.path.exists(path):
        raise FileNotFoundError(f"model file {path!r} does not exist")
    kind = _sniff(path)
    ext = os.path.splitext(path)[1].lower()
    expected = {".json": "json", ".npz": "npz"}.get(ext)
    if kind not in ("json", "npz") or (expected and kind != expected):
        if kind == "other":
            what = f"not {_NAMES[expected]}" if expected else "neither JSON nor an .npz archive"
        else:
            wanted = _NAMES[expected] if expected else "a model file"
            what = f"{_NAMES[kind]}, not {wanted}"
            if kind in ("json", "npz") and expected:
                what += f" (rename it to {os.path.splitext(path)[0]}.{kind})"
        raise ValueError(f"model file {path!r} is {what}; model files are {FILE_FORMATS}")
    if kind == "json":
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"model file {path!r} is not valid JSON ({e})") from None
        if isinstance(data, dict):
            data = {k: _json_array(v, k, path) for k, v in data.items()}
        return _from_arrays(data, path)
    try:
        with np.load(path, allow_pickle=False) as f:
            data = {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as e:
        # a damaged zip, a member that is not an .npy array, object arrays
        why = ("it holds pickled Python objects, which are never loaded" if "pickle" in str(e)
               else f"{type(e).__name__}: {e}")
        raise ValueError(f"model file {path!r} is not a readable .npz archive of arrays ({why}); "
                         f"model files are {FILE_FORMATS}") from None
    return _from_arrays(data, path)


def _json_array(value, name, path):
    if isinstance(value, (list, int, float, str, bool)):
        return value
    raise ValueError(f"model file {path!r}: {name!r} must be a number, string or nested list; "
                     f"got {type(value).__name__}")


def model_from_spec(spec: str):
    """Build a model from ``NAME[:key=value,...]`` (see :data:`GENERATORS`) or from a
    ``.json``/``.npz`` file holding ``h`` and ``J`` (dense) or ``h``, ``edges``, ``J`` (sparse);
    any other existing path is read as a model file too (by its content)."""
    name = spec.partition(":")[0]
    if (spec.endswith((".json", ".npz")) or os.path.sep in spec
            or (name not in GENERATORS and os.path.exists(spec))):
        return load_model_file(spec)
    name, _, rest = spec.partition(":")
    if name not in GENERATORS:
        raise ValueError(
            f"unknown model {name!r}; valid: {', '.join(GENERATORS)}, or a .json/.npz file.\n"
            + spec_help()
        )
    builder, params, _ = GENERATORS[name]
    allowed = {**params, **_COMMON}
    values = {k: d for k, (_, d) in allowed.items()}
    for item in filter(None, rest.split(",")):
        key, eq, val = item.partition("=")
        if not eq:
            raise ValueError(f"model spec item {item!r} must be key=value")
        if key not in allowed:
            raise ValueError(
                f"unknown parameter {key!r} for model {name!r}; valid: {', '.join(allowed)}"
            )
        try:
            values[key] = allowed[key][0](val)
        except ValueError as e:
            raise ValueError(f"bad value for {name} parameter {key}: {val!r} ({e})") from None
    return builder(values)
