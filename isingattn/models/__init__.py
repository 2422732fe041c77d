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
from ._spec import GENERATORS, model_from_spec, spec_help
from ._vartype import Vartype, as_vartype

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
