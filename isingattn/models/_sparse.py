"""Sparse Ising model: couplings on an edge list (lattices, hardware graphs), memory O(edges)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_finite, shape_str
from ._base import ModelBase, align, float_dtype


class Graph:
    """Static, hashable graph structure: ``n`` nodes and an ``(E, 2)`` edge list.

    Holds padded neighbour tables for gathers: ``neighbors[i]`` lists the neighbours of ``i``
    (padded with ``n``) and ``neighbor_edges[i]`` the matching edge indices (padded with ``E``),
    so that a value array extended by one zero entry can be gathered without branches.
    """

    def __init__(self, n: int, edges):
        edges = np.asarray(edges)
        if edges.size == 0:
            edges = np.zeros((0, 2), np.int32)
        if edges.ndim != 2 or edges.shape[1] != 2:
            raise ValueError(f"edges must have shape (E, 2); got {shape_str(edges.shape)}")
        if not np.issubdtype(edges.dtype, np.integer):
            raise TypeError(f"edges must hold integer variable indices; got dtype {edges.dtype}")
        if edges.size and (edges.min() < 0 or edges.max() >= n):
            raise ValueError(f"edges must index variables 0..{n - 1}; found {edges.min()}..{edges.max()}")
        if np.any(edges[:, 0] == edges[:, 1]):
            e = int(np.nonzero(edges[:, 0] == edges[:, 1])[0][0])
            raise ValueError(f"edges must not be self-loops; edge {e} is {tuple(edges[e])}")
        key = np.sort(edges, axis=1)
        uniq, counts = np.unique(key, axis=0, return_counts=True)
        if np.any(counts > 1):
            raise ValueError(f"edges must be unique; {tuple(uniq[np.argmax(counts)])} appears twice")
        self.n = int(n)
        self.edges = edges.astype(np.int32)
        self.edges.setflags(write=False)
        self._hash = hash((self.n, self.edges.tobytes()))

    @property
    def num_edges(self) -> int:
        return self.edges.shape[0]

    @functools.cached_property
    def _tables(self):
        n, E = self.n, self.num_edges
        deg = np.bincount(self.edges.ravel(), minlength=n) if E else np.zeros(n, int)
        dmax = int(deg.max()) if n else 0
        nbr = np.full((n, dmax), n, np.int32)
        nbr_e = np.full((n, dmax), E, np.int32)
        fill = np.zeros(n, int)
        for e, (u, v) in enumerate(self.edges):
            nbr[u, fill[u]], nbr_e[u, fill[u]] = v, e
            fill[u] += 1
            nbr[v, fill[v]], nbr_e[v, fill[v]] = u, e
            fill[v] += 1
        return nbr, nbr_e, deg

    @property
    def neighbors(self) -> np.ndarray:
        return self._tables[0]

    @property
    def neighbor_edges(self) -> np.ndarray:
        return self._tables[1]

    @property
    def degrees(self) -> np.ndarray:
        return self._tables[2]

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return (
            isinstance(other, Graph)
            and self.n == other.n
            and np.array_equal(self.edges, other.edges)
        )

    def __repr__(self):
        return f"Graph(n={self.n}, num_edges={self.num_edges})"


@jax.tree_util.register_pytree_node_class
class SparseIsingModel(ModelBase):
    """A (batch of) Ising model(s) with couplings on an edge list.

    Same energy, sign convention, masks and methods as :class:`IsingModel`, with
    ``E(x) = -sum_i h_i x_i - sum_e J_e x_{u_e} x_{v_e} - offset``.

    Args:
      h: fields, shape ``batch + (n,)``, ``n >= 1``.
      edges: ``(E, 2)`` integer pairs ``(u, v)``, unique, no self-loops. The structure is static
        (shared by the whole batch, part of the compiled program's identity).
      J: coupling per edge, shape ``(..., E)`` (a scalar is broadcast to every edge).
      beta, vartype, offset, mask, labels, validate: as for :class:`IsingModel`.
    """

    _static_fields = ("graph", "vartype", "labels")

    def __init__(
        self, h, edges, J, beta=1.0, vartype="SPIN", offset=0.0, mask=None, labels=None, *,
        validate=True,
    ):
        h, J = jnp.asarray(h), jnp.asarray(J)
        dtype = float_dtype(h, J)
        self._init_common(h, beta, offset, mask, vartype, labels, dtype)
        graph = edges if isinstance(edges, Graph) else Graph(self.n, edges)
        if graph.n != self.n:
            raise ValueError(f"graph has {graph.n} nodes but h has n = {self.n}")
        self.graph = graph
        J = jnp.asarray(J, dtype)
        if J.ndim == 0:
            J = jnp.full((graph.num_edges,), J)
        if J.shape[-1] != graph.num_edges:
            raise ValueError(
                f"J must have shape (..., E) = (..., {graph.num_edges}) with one coupling per "
                f"edge; got {shape_str(J.shape)}"
            )
        self.J = J
        if validate:
            self._validate_common()
            check_finite("J", self.J)

    @property
    def edges(self) -> np.ndarray:
        return self.graph.edges

    @property
    def num_edges(self) -> int:
        return self.graph.num_edges

    # ------------------------------------------------------------------ representation hooks
    def _constructor_kwargs(self):
        return {
            "h": self.h, "edges": self.graph, "J": self.J, "beta": self.beta,
            "vartype": self.vartype,
            "offset": self.offset, "mask": self.mask, "labels": self.labels,
        }

    def _set_fields(self, fields):
        fields = dict(fields)
        self.graph = fields.pop("edges")
        for k, v in fields.items():
            setattr(self, k, v)

    def tree_flatten(self):
        kwargs = self._constructor_kwargs()
        names = ("h", "J", "beta", "offset", "mask")
        static = (("edges", self.graph), ("vartype", self.vartype), ("labels", self.labels))
        return tuple(kwargs[k] for k in names), (names, static)

    def _batched_fields(self):
        return [("h", 1), ("J", 1), ("beta", 0), ("offset", 0), ("mask", 1)]

    def _coupling_batch_shape(self):
        return self.J.shape[:-1]

    @property
    def active_J(self) -> jax.Array:
        """Edge couplings with every edge touching a masked variable set to zero."""
        if self.num_edges == 0:
            return self.J
        u, v = self.edges[:, 0], self.edges[:, 1]
        return jnp.where(self.mask[..., u] & self.mask[..., v], self.J, 0)

    def _coupling_field(self, xm, k, s):
        E = self.num_edges
        if E == 0:
            return jnp.zeros_like(xm)
        J = align(self.J, 1, k, s)
        Jpad = jnp.concatenate([J, jnp.zeros(J.shape[:-1] + (1,), J.dtype)], axis=-1)
        xpad = jnp.concatenate([xm, jnp.zeros(xm.shape[:-1] + (1,), xm.dtype)], axis=-1)
        nbr, nbr_e = self.graph.neighbors, self.graph.neighbor_edges
        return jnp.sum(xpad[..., nbr] * Jpad[..., nbr_e], axis=-1)

    def _coupling_row_sums(self):
        Ja = self.active_J
        if self.num_edges == 0:
            return jnp.zeros(Ja.shape[:-1] + (self.n,), self.dtype)
        Jpad = jnp.concatenate([Ja, jnp.zeros(Ja.shape[:-1] + (1,), Ja.dtype)], axis=-1)
        return jnp.sum(Jpad[..., self.graph.neighbor_edges], axis=-1)

    def _coupling_total(self):
        return jnp.sum(self.active_J, axis=-1)

    def _scaled_couplings(self, factor):
        return {"J": self.active_J * factor}

    # ------------------------------------------------------------------ other forms
    def to_dense(self):
        """The same model as a dense :class:`IsingModel` (``O(n^2)`` memory)."""
        from ._convert import sparse_to_dense

        return sparse_to_dense(self)

    def to_sparse(self):
        return self


