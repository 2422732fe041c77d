"""Helpers shared by CLI subcommands: model specs, output files, JSON encoding."""

from __future__ import annotations

import json
import os

import numpy as np

from ..models import model_from_spec
from ..models._spec import spec_help

MODEL_HELP = "model: a generator spec NAME[:key=value,...] or a .json/.npz file. Generators:\n"


def add_model_argument(parser):
    parser.add_argument("model", help=MODEL_HELP + spec_help())


def load_model(spec):
    return model_from_spec(spec)


def to_jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if hasattr(obj, "shape") or isinstance(obj, (np.generic,)):
        arr = np.asarray(obj)
        return arr.tolist()
    return obj


def write_json(path, data):
    """Write atomically: a partial file never replaces a finished one."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(to_jsonable(data), f, indent=2)
    os.replace(tmp, path)
