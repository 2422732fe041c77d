"""Ising models: dense and sparse forms, vartypes, generators and conversions.

Energy, physics sign: ``E(x) = -sum_i h_i x_i - sum_{i<j} J_ij x_i x_j - offset``;
``p(x) = exp(-beta E(x)) / Z``. See ``docs/conventions.md``.
"""

from ._base import ModelBase
from ._convert import from_bqm, from_networkx, to_bqm, to_networkx
from ._dense import IsingModel
from ._generators import (
    chain,
    from_attention,
    lattice_edges,
    random_dense,
    sherrington_kirkpatrick,
    square_lattice,
)
from ._sparse import Graph, SparseIsingModel
from ._spec import GENERATORS, model_from_spec
from ._spec import spec_help as _spec_help
from ._vartype import Vartype, as_vartype


def spec_help() -> str:
    """What :func:`model_from_spec` accepts, as text for a command line's ``--help``: one line
    per generator of :data:`GENERATORS` (``NAME:key=default, ...`` and what it builds, the
    parameters every generator takes included), then a line on model files (``.json`` /
    ``.npz``). Lines are indented by two spaces and joined by newlines, with no trailing newline.
    """
    return _spec_help()

__all__ = [
    "GENERATORS",
    "Graph",
    "IsingModel",
    "ModelBase",
    "SparseIsingModel",
    "Vartype",
    "as_vartype",
    "chain",
    "from_attention",
    "from_bqm",
    "from_networkx",
    "lattice_edges",
    "model_from_spec",
    "random_dense",
    "sherrington_kirkpatrick",
    "spec_help",
    "square_lattice",
    "to_bqm",
    "to_networkx",
]
