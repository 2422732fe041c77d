"""Models from short text specs (``lattice:L=8,beta=0.4``) or files (``.json`` / ``.npz``)."""

from __future__ import annotations

import json
import os

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
    lines = []
    for name, (_, params, desc) in GENERATORS.items():
        keys = ", ".join(f"{k}={d}" for k, (_, d) in {**params, **_COMMON}.items())
        lines.append(f"  {name}:{keys}   ({desc})")
    lines.append("  PATH.json / PATH.npz   (arrays h and J, or h, edges and J; optional beta, "
                 "vartype, offset, mask)")
    return "\n".join(lines)


def _from_arrays(data, source):
    if "h" not in data or "J" not in data:
        raise ValueError(f"{source} must contain arrays 'h' and 'J' (and 'edges' for sparse)")
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


def model_from_spec(spec: str):
    """Build a model from ``NAME[:key=value,...]`` (see :data:`GENERATORS`) or from a
    ``.json``/``.npz`` file holding ``h`` and ``J`` (dense) or ``h``, ``edges``, ``J`` (sparse)."""
    if spec.endswith((".json", ".npz")) or os.path.sep in spec:
        if not os.path.exists(spec):
            raise FileNotFoundError(f"model file {spec!r} does not exist")
        if spec.endswith(".json"):
            with open(spec) as f:
                return _from_arrays(json.load(f), spec)
        with np.load(spec) as f:
            return _from_arrays(dict(f), spec)
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
