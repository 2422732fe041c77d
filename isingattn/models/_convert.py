"""Conversions between the model classes, and to and from dimod's BinaryQuadraticModel and
networkx graphs. The one module that imports both model classes: their conversion methods
(``to_dense``, ``to_sparse``, ``to_bqm``, ``to_networkx``) call in here, so ``_dense`` and
``_sparse`` need not import each other.

dimod's energy is ``sum_i a_i x_i + sum_{i<j} b_ij x_i x_j + c``: the opposite sign of ours, so
``a = -h``, ``b = -J``, ``c = -offset`` and every state has the same energy on both sides.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ._base import ModelBase
from ._dense import IsingModel
from ._sparse import SparseIsingModel
from ._vartype import as_vartype


def dense_to_sparse(model: IsingModel, tol: float = 0.0) -> SparseIsingModel:
    """``model`` as a :class:`SparseIsingModel` whose edges are the pairs with ``|J_ij| > tol``
    in any model of the batch (see :meth:`IsingModel.to_sparse`)."""
    J = np.asarray(model.J)
    nz = np.any(np.abs(J.reshape((-1, model.n, model.n))) > tol, axis=0)
    u, v = np.nonzero(np.triu(nz, 1))
    edges = np.stack([u, v], axis=1)
    return SparseIsingModel(
        h=model.h, edges=edges, J=model.J[..., u, v], beta=model.beta, vartype=model.vartype,
        offset=model.offset, mask=model.mask, labels=model.labels,
    )


def sparse_to_dense(model: SparseIsingModel) -> IsingModel:
    """``model`` as a dense :class:`IsingModel` (``O(n^2)`` memory; see
    :meth:`SparseIsingModel.to_dense`)."""
    n = model.n
    J = jnp.zeros(model.J.shape[:-1] + (n, n), model.dtype)
    if model.num_edges:
        u, v = model.edges[:, 0], model.edges[:, 1]
        J = J.at[..., u, v].set(model.J).at[..., v, u].set(model.J)
    return IsingModel(
        h=model.h, J=J, beta=model.beta, vartype=model.vartype, offset=model.offset,
        mask=model.mask, labels=model.labels, validate=False,
    )


def _single(model: ModelBase, what: str):
    if model.batch_shape:
        raise ValueError(
            f"{what} takes one model; this one has batch_shape {model.batch_shape}: "
            "index it first, e.g. model[0]"
        )


def _active_terms(model: ModelBase):
    """(active indices, h, list of (i, j, J_ij)) of one model, with nonzero couplings only."""
    mask = np.asarray(model.mask)
    h = np.asarray(model.h, dtype=float)
    active = np.nonzero(mask)[0]
    if isinstance(model, SparseIsingModel):
        J = np.asarray(model.active_J, dtype=float).reshape(-1)
        pairs = [(int(u), int(v), J[e]) for e, (u, v) in enumerate(model.edges) if J[e] != 0]
    else:
        J = np.asarray(model.active_J, dtype=float)
        iu, ju = np.nonzero(np.triu(J, 1))
        pairs = [(int(i), int(j), J[i, j]) for i, j in zip(iu, ju)]
    return active, h, pairs


def to_bqm(model: ModelBase):
    """One model as a ``dimod.BinaryQuadraticModel`` (dimod sign; masked variables left out)."""
    import dimod

    _single(model, "to_bqm")
    labels = model.variable_labels
    active, h, pairs = _active_terms(model)
    bqm = dimod.BinaryQuadraticModel(model.vartype.value)
    bqm.add_linear_from((labels[i], -float(h[i])) for i in active)
    bqm.add_quadratic_from((labels[i], labels[j], -float(Jij)) for i, j, Jij in pairs)
    bqm.offset = -float(np.asarray(model.offset))
    return bqm


def from_bqm(bqm, *, beta=1.0, sparse=False, variable_order=None, dtype=None):
    """An Ising model from a ``dimod.BinaryQuadraticModel`` (signs converted to ours; labels
    kept as ``model.labels`` in ``variable_order``, default ``bqm.variables``)."""
    if len(bqm.variables) == 0:
        raise ValueError(
            "the bqm has no variables; an Ising model needs n >= 1 (an empty problem has one "
            "state, the empty one, with energy bqm.offset)"
        )
    labels = list(bqm.variables) if variable_order is None else list(variable_order)
    if set(labels) != set(bqm.variables) or len(labels) != len(bqm.variables):
        raise ValueError("variable_order must list every variable of the bqm exactly once")
    index = {v: i for i, v in enumerate(labels)}
    h = np.array([-bqm.get_linear(v) for v in labels], dtype=dtype or float)
    edges, J = [], []
    for u, v, bias in bqm.iter_quadratic():
        edges.append((index[u], index[v]))
        J.append(-bias)
    vartype = as_vartype(bqm.vartype)
    edges = np.array(edges, np.int32).reshape(-1, 2)
    model = SparseIsingModel(
        h=h, edges=edges, J=np.array(J, dtype=h.dtype), beta=beta, vartype=vartype,
        offset=-bqm.offset, labels=labels,
    )
    return model if sparse else model.to_dense()


def to_networkx(model: ModelBase):
    """One model as a ``networkx.Graph``: node attribute ``h``, edge attribute ``J`` (physics
    sign), graph attributes ``beta``, ``offset`` and ``vartype``. Masked variables left out."""
    import networkx as nx

    _single(model, "to_networkx")
    labels = model.variable_labels
    active, h, pairs = _active_terms(model)
    G = nx.Graph(
        beta=float(np.asarray(model.beta)), offset=float(np.asarray(model.offset)),
        vartype=model.vartype.value,
    )
    G.add_nodes_from((labels[i], {"h": float(h[i])}) for i in active)
    G.add_edges_from((labels[i], labels[j], {"J": float(Jij)}) for i, j, Jij in pairs)
    return G


def from_networkx(G, *, beta=None, vartype=None, default_J=None, default_h=0.0, sparse=False):
    """An Ising model from a ``networkx.Graph`` with node attribute ``h`` (default
    ``default_h``) and edge attribute ``J`` (an edge without one is an error unless
    ``default_J`` is given). ``beta``/``vartype`` default to the graph's attributes, else
    1.0 / SPIN. Labels are the node names in ``G.nodes`` order."""
    labels = list(G.nodes)
    index = {v: i for i, v in enumerate(labels)}
    h = np.array([G.nodes[v].get("h", default_h) for v in labels], dtype=float)
    edges, J = [], []
    for u, v, data in G.edges(data=True):
        if "J" not in data and default_J is None:
            raise ValueError(
                f"edge ({u!r}, {v!r}) has no 'J' attribute; set it or pass default_J"
            )
        edges.append((index[u], index[v]))
        J.append(data.get("J", default_J))
    beta = G.graph.get("beta", 1.0) if beta is None else beta
    vartype = G.graph.get("vartype", "SPIN") if vartype is None else vartype
    model = SparseIsingModel(
        h=h, edges=np.array(edges, np.int32).reshape(-1, 2), J=np.array(J, dtype=float),
        beta=beta, vartype=vartype, offset=G.graph.get("offset", 0.0), labels=labels,
    )
    return model if sparse else model.to_dense()


