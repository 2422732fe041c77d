"""Swendsen–Wang cluster updates (Fortuin–Kasteleyn bonds), for couplings of any sign and fields.

One step is one full Swendsen–Wang update of the SPIN form of the model:

1. every *satisfied* edge (``J_ij x_i x_j > 0``) is bonded with probability
   ``p_ij = 1 - exp(-2 beta |J_ij|)``; unsatisfied edges never are;
2. the bonded edges split the variables into clusters (connected components);
3. each cluster ``C`` is flipped (every ``x_i -> -x_i``, ``i in C``) by a heat-bath choice between
   its two allowed configurations, ``P(flip) = 1 / (1 + exp(2 beta H_C))`` with
   ``H_C = sum_{i in C} h_i x_i`` — the cluster's field energy. With ``h = 0`` this is the classic
   fair coin.

Why this samples ``exp(-beta E)``: in the Edwards–Sokal joint distribution each edge factor is
``exp(beta J x_i x_j) ∝ (1 - p_ij) + p_ij [J x_i x_j > 0]``; given the bonds, ``x`` is uniform
over the configurations that keep every bond satisfied, reweighted by the field term, and each
cluster then has exactly two such configurations (the current one and its flip). Any sign of
``J_ij`` works; frustration only makes clusters smaller.

Masked variables have no active couplings, so they are never bonded, and they are never flipped.
BINARY models are sampled in their SPIN form (``x = 2 s - 1``) and returned as BINARY. Dense
models use every pair ``i < j`` as an edge (pairs with ``J_ij = 0`` are never bonded).

Connected components: ``components="jax"`` (default) labels clusters in JAX by hooking roots onto
the smaller root of every bonded edge followed by pointer jumping, until no bonded edge joins two
labels (Shiloach–Vishkin style; a few rounds on lattices). ``components="scipy"`` calls
``scipy.sparse.csgraph.connected_components`` on the host through ``jax.pure_callback`` (one call
per step for all chains at once). On a 64x64 lattice at beta_c the JAX path is faster on CPU
(see ``docs/guide/cluster.md`` for the measurement), hence the default.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..models import SparseIsingModel, Vartype
from ._mcmc import MCMCSampler

COMPONENTS = ("jax", "scipy")


class SwendsenWangState(NamedTuple):
    """State of one chain: ``x`` (n,) in the model's vartype."""

    x: jax.Array


# ----------------------------------------------------------------------------- shared helpers
def spin_form(model):
    """The SPIN form of ``model`` (itself when already SPIN)."""
    return model if model.vartype is Vartype.SPIN else model.to_vartype(Vartype.SPIN)


def to_spin(x, vartype):
    return x if vartype is Vartype.SPIN else 2 * x - 1


def from_spin(s, vartype):
    return s if vartype is Vartype.SPIN else (s + 1) / 2


def edge_list(model):
    """``(u, v, J)`` of an unbatched model: static int arrays ``(E,)`` and active couplings
    ``(E,)`` (zero on edges touching a masked variable). Dense models: every pair ``i < j``."""
    if isinstance(model, SparseIsingModel):
        e = model.graph.edges
        return e[:, 0], e[:, 1], model.active_J
    u, v = np.triu_indices(model.n, 1)
    return u.astype(np.int32), v.astype(np.int32), model.active_J[u, v]


def fk_bonds(key, s, u, v, J, beta):
    """Fortuin–Kasteleyn bonds: edge ``e`` is bonded with probability ``1 - exp(-2 beta |J_e|)``
    when satisfied (``J_e s_u s_v > 0``), never otherwise. Returns bool ``(E,)``."""
    sat = J * s[u] * s[v] > 0
    p = -jnp.expm1(-2 * beta * jnp.abs(J))
    return sat & (jax.random.uniform(key, J.shape, J.dtype) < p)


def components_jax(n, u, v, bond):
    """Connected components of the graph on ``n`` nodes with edges ``(u_e, v_e)`` where
    ``bond_e``: returns ``root`` (n,) int32, the smallest node index of each node's component.

    Parent pointers ``l`` keep ``l[i] <= i`` inside the component of ``i``. A round hooks, for
    every bonded edge, the larger of the two current roots onto the smaller (scatter-min), then
    jumps pointers (``l <- l[l]``) until every tree is a star; rounds repeat until no bonded edge
    joins two different roots (then nothing changes and the labels are the components)."""
    idx = jnp.arange(n, dtype=jnp.int32)
    if len(u) == 0 or n == 0:
        return idx
    u = jnp.asarray(u, jnp.int32)
    v = jnp.asarray(v, jnp.int32)

    def jump(l):
        def body(c):
            l, _ = c
            l2 = l[l]
            return l2, jnp.any(l2 != l)

        return jax.lax.while_loop(lambda c: c[1], body, (l, jnp.array(True)))[0]

    def round_(c):
        l, _ = c
        lu, lv = l[u], l[v]
        hi = jnp.where(bond & (lu != lv), jnp.maximum(lu, lv), n)  # n: dropped
        l2 = jump(l.at[hi].min(jnp.minimum(lu, lv), mode="drop"))
        return l2, jnp.any(l2 != l)

    return jax.lax.while_loop(lambda c: c[1], round_, (idx, jnp.array(True)))[0]


def _scipy_components_host(n, u, v):
    import scipy.sparse
    import scipy.sparse.csgraph

    def fn(bond):
        bond = np.asarray(bond)
        lead = bond.shape[:-1]
        B = int(np.prod(lead, dtype=int))
        bond = bond.reshape(B, -1)
        b, e = np.nonzero(bond)
        rows = u[e] + b * n
        cols = v[e] + b * n
        g = scipy.sparse.coo_matrix(
            (np.ones(rows.size, np.int8), (rows, cols)), shape=(B * n, B * n)
        ).tocsr()
        _, labels = scipy.sparse.csgraph.connected_components(g, directed=False)
        # root = smallest node of the component (labels need not be ordered that way)
        first = np.full(labels.max() + 1, B * n, np.int64)
        np.minimum.at(first, labels, np.arange(B * n))
        root = first[labels].reshape(B, n) - (np.arange(B) * n)[:, None]
        return root.astype(np.int32).reshape(lead + (n,))

    return fn


def components_scipy(n, u, v, bond):
    """Same result as :func:`components_jax`, computed on the host by
    ``scipy.sparse.csgraph.connected_components`` through ``jax.pure_callback`` (batched chains
    go to the host in one call)."""
    if len(u) == 0 or n == 0:
        return jnp.arange(n, dtype=jnp.int32)
    fn = _scipy_components_host(n, np.asarray(u), np.asarray(v))
    return jax.pure_callback(
        fn, jax.ShapeDtypeStruct((n,), jnp.int32), bond, vmap_method="expand_dims"
    )


def cluster_stats(root, mask):
    """Info scalars from component roots: number of clusters (unmasked variables only), mean
    cluster size (active variables / clusters) and largest cluster size."""
    n = root.shape[0]
    sizes = jax.ops.segment_sum(mask.astype(jnp.int32), root, num_segments=n)
    num = jnp.sum(sizes > 0)
    active = jnp.sum(mask)
    return {
        "num_clusters": num.astype(jnp.float32),
        "mean_cluster_size": (active / jnp.maximum(num, 1)).astype(jnp.float32),
        "largest_cluster": jnp.max(sizes, initial=0).astype(jnp.float32),
    }


# ----------------------------------------------------------------------------- the sampler
@dataclasses.dataclass(frozen=True)
class SwendsenWangSampler(MCMCSampler):
    """Swendsen–Wang cluster sampler (module docstring: algorithm and correctness).

    Works on dense and sparse models, any coupling signs, with fields, masks, SPIN or BINARY.
    One step (the driver's "sweep") is one full cluster update: every variable can change.

    Args:
      components: ``"jax"`` (default, in-JAX root hooking + pointer jumping) or ``"scipy"``
        (``scipy.sparse.csgraph.connected_components`` on the host via ``jax.pure_callback``).

    ``info`` (means over kept steps, per chain): ``num_clusters``, ``mean_cluster_size``
    (active variables / clusters), ``largest_cluster``.

    Example:
      >>> import jax
      >>> from isingattn.models import square_lattice
      >>> from isingattn.samplers import SwendsenWangSampler
      >>> m = square_lattice(8, beta=0.44)
      >>> s = SwendsenWangSampler().sample(m, jax.random.key(0), 100, num_chains=2)
      >>> s.spins.shape
      (2, 100, 64)
    """

    components: str = "jax"
    default_burnin = 50

    def __post_init__(self):
        if self.components not in COMPONENTS:
            raise ValueError(
                f"components must be one of {', '.join(map(repr, COMPONENTS))}; "
                f"got {self.components!r}"
            )

    def init(self, model, key, x0):
        return SwendsenWangState(x=jnp.asarray(x0, model.dtype))

    def step(self, model, state, key, beta):
        spin = spin_form(model)
        n = model.n
        s = to_spin(state.x, model.vartype)
        u, v, J = edge_list(spin)
        k_bond, k_flip = jax.random.split(key)
        bond = fk_bonds(k_bond, s, u, v, J, beta)
        find = components_jax if self.components == "jax" else components_scipy
        root = find(n, u, v, bond)
        H = jax.ops.segment_sum(spin.active_h * s, root, num_segments=n)
        p_flip = jax.nn.sigmoid(-2 * beta * H)
        r = jax.random.uniform(k_flip, (n,), p_flip.dtype)
        flip = (r[root] < p_flip[root]) & spin.mask
        s = jnp.where(flip, -s, s)
        info = cluster_stats(root, spin.mask)
        return SwendsenWangState(x=from_spin(s, model.vartype).astype(state.x.dtype)), info


__all__ = ["SwendsenWangSampler", "SwendsenWangState", "components_jax", "components_scipy"]
