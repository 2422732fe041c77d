"""Cluster machinery shared by the cluster samplers (Swendsen–Wang, Wolff): the SPIN form and
edge lists of a model, Fortuin–Kasteleyn bonds, static plans of a graph (a periodic grid
recognised once, or padded neighbour tables), and connected-component labelling by its three
paths — the compiled union-find (:mod:`isingattn._kernels.union_find`, an XLA custom call),
hooking and pointer jumping in JAX, or scipy on the host — chosen by :func:`resolve_components`
(the policy of ``isingattn._kernels.ffi.resolve_backend``). Every path gives the same labels
(each node's root is the smallest index of its cluster), hence the same chains for the same
key."""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._kernels import ffi, union_find
from ..models import SparseIsingModel, Vartype


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


def bond_probability(J, beta):
    """``1 - exp(-2 beta |J|)``: the probability that a satisfied edge of coupling ``J`` is
    bonded (also what the compiled Swendsen–Wang kernel is given)."""
    return -jnp.expm1(-2 * beta * jnp.abs(J))


def bonds_from_uniforms(J, s_u, s_v, u01, beta):
    """Fortuin–Kasteleyn bonds from uniforms ``u01`` in [0, 1): an edge of coupling ``J`` between
    SPIN values ``s_u``, ``s_v`` is bonded with probability :func:`bond_probability` when
    satisfied (``J s_u s_v > 0``), never otherwise. Broadcasting bool; the one statement of
    the bond rule (every cluster sampler draws its uniforms its own way)."""
    return (J * s_u * s_v > 0) & (u01 < bond_probability(J, beta))


def fk_bonds(key, s, u, v, J, beta):
    """:func:`bonds_from_uniforms` of the edges ``(u, v)`` of one state ``s`` ``(n,)``, with
    uniforms from ``key``. Returns bool ``(E,)``."""
    return bonds_from_uniforms(J, s[u], s[v], jax.random.uniform(key, J.shape, J.dtype), beta)


def _get(a, i):
    return a.at[i].get(mode="promise_in_bounds")


def _jump2(l):
    # Two pointer jumps l <- l[l]. A fori_loop keeps each gather a separate kernel: unrolled (or
    # as a length-1 loop, which JAX inlines) XLA fuses l[l][l[l]] into one kernel that recomputes
    # the inner gathers.
    return jax.lax.fori_loop(0, 2, lambda _, a: _get(a, a), l)


def _label(pull, total):
    """Connected components of a graph on ``total`` nodes given ``pull(l)``: for every node
    ``i``, the minimum of ``l_i`` and ``l_j`` over its bonded neighbours ``j``.

    Parent pointers ``l`` (int32 ``(total,)``) keep ``l_i <= i`` inside the component of ``i``.
    A round computes ``m = pull(l)``, hooks every node's parent onto it (``l[l_i] <- min(l[l_i],
    m_i)``, a scatter-min; hooking as in FastSV, Zhang, Azad & Hu 2020, without its stochastic
    variant), then jumps pointers twice. Values only decrease and stay inside components.
    When a round changes nothing, ``l_i`` was not lowered by the jumps, so ``l_i`` is a root
    that nothing hooked: ``m_j >= l_i`` for every ``j`` pointing to it, ``i`` included, so every
    bonded neighbour ``k`` of ``i`` has ``l_k >= l_i`` (and, the same way, ``l_i >= l_k``): the
    labels are the components and the root is each component's smallest node. (FastSV also
    hooks the node itself, ``l_i <- min(l_i, m_i)``; the fixed point does not need it, and
    without it a round is cheaper in the same number of rounds: XLA recomputes ``m`` inside
    each of its consumers, and that one is the costliest.) Every round, the first included,
    runs inside the loop: there the bond masks that ``pull`` reads are loop inputs,
    materialized once (outside the loop XLA would fuse the bond computation into the pull).

    The labels are int16 while ``total`` fits (``total < 2^15``: a group of chains, see
    :func:`_label_chains`), half the memory traffic of int32 in every gather and scatter.
    ``pull`` keeps the labels' dtype. Returns int32 labels."""
    dtype = _label_dtype(total)
    l0 = jnp.arange(total, dtype=dtype)

    def round_(c):
        l, _ = c
        m = pull(l)
        # nodes with m_i = l_i would write l[l_i] <- min(l[l_i], l_i), a no-op (l[l_i] <= l_i);
        # dropping them (index out of range) spares the scatter that work
        target = jnp.where(m < l, l, jnp.asarray(total, dtype))
        l2 = _jump2(l.at[target].min(m, mode="drop"))
        return l2, jnp.any(l2 != l)

    return jax.lax.while_loop(lambda c: c[1], round_, (l0, jnp.array(True)))[0].astype(jnp.int32)


def _label_dtype(total):
    """Label dtype of :func:`_label` for ``total`` nodes: int16 while ``total`` itself (the
    out-of-range index of dropped hooks) fits, else int32."""
    return jnp.int16 if total < (1 << 15) else jnp.int32


def _table_pull(nbr_global, bonded, big):
    """``pull`` for padded neighbour tables: ``nbr_global`` (total, d) global indices (padding =
    the node itself), ``bonded`` (total, d) bool, ``big`` (an int) the label of no neighbour, in
    the labels' dtype."""

    def pull(l):
        if nbr_global.shape[1] == 0:
            return l
        none = jnp.asarray(big, l.dtype)
        return jnp.minimum(l, jnp.min(jnp.where(bonded, _get(l, nbr_global), none), axis=1))

    return pull


def _roll(a, shift, axis):
    # jnp.roll by a static shift: two slices and a concatenation (fuses into its consumer)
    n = a.shape[axis]
    shift %= n
    if shift == 0:
        return a
    return jnp.concatenate(
        [jax.lax.slice_in_dim(a, n - shift, n, axis=axis),
         jax.lax.slice_in_dim(a, 0, n - shift, axis=axis)], axis=axis)


def _grid_pull(bond, big):
    """``pull`` on a periodic grid: ``bond`` (C, 2, Lx, Ly) bool, slot 0 the edge
    ``(r, c)-(r, c+1)``, slot 1 ``(r, c)-(r+1, c)`` (indices modulo the grid); ``big`` (an
    int) the label of no neighbour, in the labels' dtype."""
    C, _, Lx, Ly = bond.shape
    right, down = bond[:, 0], bond[:, 1]
    left, up = _roll(right, 1, 2), _roll(down, 1, 1)

    def pull(l):
        g = l.reshape(C, Lx, Ly)
        none = jnp.asarray(big, l.dtype)
        # XLA fuses this into each consumer of the result (the scatter's indices and
        # updates), whether written as a stacked reduction or as a tree of minimums
        return jnp.min(jnp.stack([
            g,
            jnp.where(right, _roll(g, -1, 2), none), jnp.where(left, _roll(g, 1, 2), none),
            jnp.where(down, _roll(g, -1, 1), none), jnp.where(up, _roll(g, 1, 1), none),
        ]), axis=0).reshape(-1)

    return pull


def components_jax(n, u, v, bond):
    """Connected components of the graph on ``n`` nodes with edges ``(u_e, v_e)`` where
    ``bond_e``: returns ``root`` (n,) int32, the smallest node index of each node's component.

    Same rounds as the sampler's labelling (hook parents with a scatter-min, hook nodes, two
    pointer jumps, until nothing changes), over the edge list: a round gathers the labels at
    both ends of every edge and scatters their minimum onto both ends' labels. Labels are int16
    while ``n`` fits (:func:`_label_dtype`), half the memory traffic of int32."""
    dtype = _label_dtype(n)
    idx = jnp.arange(n, dtype=dtype)
    if len(u) == 0 or n == 0:
        return idx.astype(jnp.int32)
    u = jnp.asarray(u, jnp.int32)
    v = jnp.asarray(v, jnp.int32)
    dropped = jnp.asarray(n, dtype)  # an out-of-range index: the hook is a no-op

    def round_(c):
        l, _ = c
        lu, lv = _get(l, u), _get(l, v)
        hi = jnp.where(bond & (lu != lv), jnp.maximum(lu, lv), dropped)
        l2 = _jump2(l.at[hi].min(jnp.minimum(lu, lv), mode="drop"))
        return l2, jnp.any(l2 != l)

    return jax.lax.while_loop(lambda c: c[1], round_, (idx, jnp.array(True)))[0].astype(jnp.int32)


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
    go to the host in one call; ``bond`` may have leading chain axes)."""
    if len(u) == 0 or n == 0:
        return jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), bond.shape[:-1] + (n,))
    fn = _scipy_components_host(n, np.asarray(u), np.asarray(v))
    return jax.pure_callback(
        fn, jax.ShapeDtypeStruct(bond.shape[:-1] + (n,), jnp.int32), bond,
        vmap_method="expand_dims",
    )


# ----------------------------------------------------------------------------- static plans
def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@functools.lru_cache(maxsize=64)
def grid_layout(graph):
    """``(Lx, Ly, slots)`` when every edge of ``graph`` joins grid neighbours of a periodic
    ``Lx x Ly`` grid in row-major order (site ``(r, c)`` = node ``r * Ly + c``), else ``None``.

    ``slots`` (2, Lx, Ly) int: the edge index of slot ``(0, r, c)`` = edge ``(r, c)-(r, c+1)``
    and ``(1, r, c)`` = edge ``(r, c)-(r+1, c)`` (modulo the grid), or ``E`` where the graph
    has no such edge (open boundaries, diluted lattices). Periodic and open
    :func:`~isingattn.models.square_lattice` graphs qualify; the first ``Lx`` (ascending) that
    fits is used. Cached per graph."""
    n, E = graph.n, graph.num_edges
    if n == 0 or E == 0:
        return None
    e = np.sort(graph.edges.astype(np.int64), axis=1)
    code = e[:, 0] * n + e[:, 1]
    order = np.argsort(code)
    sorted_code = code[order]
    for Lx in _divisors(n):
        Ly = n // Lx
        idx = np.arange(n).reshape(Lx, Ly)
        a = np.stack([idx, idx])
        b = np.stack([np.roll(idx, -1, 1), np.roll(idx, -1, 0)])
        lo, hi = np.minimum(a, b).ravel(), np.maximum(a, b).ravel()
        slot_code = lo * n + hi
        valid = lo != hi
        _, first = np.unique(slot_code, return_index=True)  # a pair can fill two slots if L <= 2
        once = np.zeros(slot_code.size, bool)
        once[first] = True
        valid &= once
        pos = np.minimum(np.searchsorted(sorted_code, slot_code), E - 1)
        hit = valid & (sorted_code[pos] == slot_code)
        if hit.sum() == E:
            slots = np.where(hit, order[pos], E).reshape(2, Lx, Ly).astype(np.int32)
            return Lx, Ly, slots
    return None


class _Plan(NamedTuple):
    n: int
    E: int
    u: np.ndarray  # (E,) edge ends
    v: np.ndarray
    grid: tuple | None  # (Lx, Ly, slots) or None
    nbr: np.ndarray | None  # (n, d) neighbours, padding = the node itself
    nbr_e: np.ndarray | None  # (n, d) edge indices, padding = E
    words: int  # random 32-bit words per chain and step (bonds + flips)
    lanes: int  # xoshiro lanes per chain
    draws: int  # xoshiro steps per step: draws * lanes >= words


def _make_plan(n, u, v, grid, nbr, nbr_e):
    E = len(u)
    if grid is not None:
        nbr = nbr_e = None
        words = 2 * n + n  # one word per grid slot and per site
    else:
        nbr = np.where(nbr < n, nbr, np.arange(n)[:, None]).astype(np.int32)
        nbr_e = nbr_e.astype(np.int32)
        words = E + n
    lanes = max(n, -(-words // 4), 1)  # at most 4 xoshiro steps per step
    draws = max(-(-words // lanes), 1)
    return _Plan(n, E, u, v, grid, nbr, nbr_e, words, lanes, draws)


@functools.lru_cache(maxsize=64)
def _sparse_plan(graph):
    e = graph.edges
    return _make_plan(graph.n, e[:, 0], e[:, 1], grid_layout(graph), graph.neighbors,
                      graph.neighbor_edges)


@functools.lru_cache(maxsize=64)
def _dense_plan(n):
    u, v = np.triu_indices(n, 1)
    E = len(u)
    eid = np.full((n, n), E, np.int64)
    eid[u, v] = eid[v, u] = np.arange(E)
    if n > 1:
        nbr = np.stack([np.delete(np.arange(n), i) for i in range(n)])
        nbr_e = eid[np.arange(n)[:, None], nbr]
    else:
        nbr = nbr_e = np.zeros((n, 0), np.int64)
    return _make_plan(n, u.astype(np.int32), v.astype(np.int32), None, nbr, nbr_e)


def _plan(model):
    if isinstance(model, SparseIsingModel):
        return _sparse_plan(model.graph)
    return _dense_plan(model.n)


#: Nodes labelled together: the chains of a step are labelled in groups of at most this many
#: nodes (at least one chain), one group after another (see :func:`_label_chains`).
LABEL_GROUP_NODES = 1 << 13


def _label_chains(plan, links):
    """Components of every chain of one step: ``links`` is the grid's bonds ``(C, 2, Lx, Ly)``
    or the neighbour tables' ``(C, n, d)``; returns each node's root as a global index
    ``(C * n,)``.

    Chains are labelled in groups of ``max(1, LABEL_GROUP_NODES // n)`` chains, one group after
    another (the last padded with unbonded chains, one ``lax.map`` over the groups): a group's
    label array then stays in the core's cache, where one labelling of all chains at once
    slows every gather and scatter of its rounds (timings in ``docs/guide/cluster.md``). The
    roots do not depend on the grouping, so neither do the draws."""
    C, n = links.shape[0], plan.n

    def label(b):
        c = b.shape[0]
        total = c * n
        if plan.grid is not None:
            pull = _grid_pull(b, total)
        else:
            off = (jnp.arange(c, dtype=jnp.int32) * n)[:, None, None]
            nbr_global = (jnp.asarray(plan.nbr)[None] + off).reshape(total, -1)
            pull = _table_pull(nbr_global, b.reshape(total, -1), total)
        return _label(pull, total)

    G = max(1, LABEL_GROUP_NODES // max(n, 1))
    if C <= G:
        return label(links)
    ng = -(-C // G)
    padded = jnp.concatenate([links, jnp.zeros((ng * G - C,) + links.shape[1:], bool)])
    roots = jax.lax.map(label, padded.reshape((ng, G) + links.shape[1:]))  # (ng, G * n)
    return (roots + (jnp.arange(ng, dtype=jnp.int32) * (G * n))[:, None]).reshape(-1)[:C * n]


def _native_roots(plan, links):
    """Each chain's roots ``(C, n)`` (local indices) by the compiled union-find of
    :mod:`isingattn._kernels.union_find`, all chains in one custom call (XLA runs two custom
    calls one after the other, so splitting the chains between calls gains nothing)."""
    if plan.grid is not None:
        return union_find.grid_roots(links)
    return union_find.table_roots(links, plan.nbr)


def _slot_bonds(plan, bond):
    """Per-edge bonds ``(..., E)`` laid out in the plan's grid slots ``(..., 2, Lx, Ly)`` or
    neighbour-table slots ``(..., n, d)`` (slots without an edge unbonded)."""
    pad = jnp.concatenate([bond, jnp.zeros(bond.shape[:-1] + (1,), bool)], axis=-1)
    return pad[..., plan.grid[2] if plan.grid is not None else plan.nbr_e]


def edge_bond_roots(plan, bond):
    """Component roots ``(..., n)`` (local indices) of per-edge bonds ``bond`` ``(..., E)`` in
    the plan's edge order, by the compiled union-find: the bonds are laid out in the plan's
    grid slots or neighbour-table slots first (a gather), as Swendsen–Wang's step does."""
    if plan.E == 0:
        return jnp.broadcast_to(jnp.arange(plan.n, dtype=jnp.int32), bond.shape[:-1] + (plan.n,))
    return _native_roots(plan, _slot_bonds(plan, bond))


def resolve_components(components, grid=True):
    """The labelling that ``components`` stands for on a graph that is a grid (``grid``) or
    not (``isingattn._kernels.ffi.resolve_backend``): ``"auto"`` is ``"numba"`` where the
    compiled union-find can run (JAX on the CPU, its kernel registered with XLA:
    :func:`isingattn._kernels.union_find.usable`), else ``"jax"``; ``"numba"`` off the CPU is
    a ``ValueError``; ``"jax"`` and ``"scipy"`` stand for themselves."""
    if components == "scipy":
        return components
    target = union_find.GRID_TARGET if grid else union_find.TABLE_TARGET
    return ffi.resolve_backend(components, parameter="components",
                               usable=lambda: union_find.usable(target))
