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

Connected components, by ``components``:

* ``"numba"``: a union-find compiled with numba, called inside the XLA program as a typed FFI
  custom call (:mod:`._native`): one raster scan over a grid's bonds (or one pass over the
  neighbour tables), no rounds. Same labels as the other paths, hence the same chains.
* ``"jax"``: labels clusters in JAX (node hooking onto parents with a scatter-min, two pointer
  jumps per round, until nothing changes; about 6 rounds on a 64x64 lattice at beta_c), with
  the chains of a step labelled in groups of chains, each group one block-diagonal graph. Runs
  on any backend.
* ``"scipy"``: ``scipy.sparse.csgraph.connected_components`` on the host through
  ``jax.pure_callback`` (one call per step for all chains at once).
* ``"auto"`` (default): ``"numba"`` where it can run (JAX on the CPU), else
  ``"jax"``.

On the CPU the compiled union-find makes the fastest step, then the in-JAX labelling, then
scipy (timings in ``docs/guide/cluster.md``).

Speed (why the step looks the way it does; timings and the variants tried and dropped are in
``docs/guide/cluster.md``, Implementation notes):

* the chains of one step share one flat label array (a batched gather or scatter costs more
  than a flat one on CPU);
* graphs that are (subsets of) a periodic ``Lx x Ly`` grid in row-major order — every
  :func:`~isingattn.models.square_lattice`, periodic or open — are recognised once per graph and
  their neighbour gathers become shifts of ``(chain, Lx, Ly)`` arrays; other graphs use padded
  neighbour tables;
* random bits come from xoshiro128** generators carried in the state, re-keyed from the step
  key when one is given (``key=None`` continues the stream, as the driver does at a fixed beta;
  as in the single-site samplers): threefry for the ~3 words per site of a step would cost
  more than everything in the step but the labelling;
* labels are int16 in groups of up to 2^13 nodes (half the memory traffic of int32);
* each cluster's flip is decided once, at its root (the smallest index), and read by its members
  with one gather; the cluster field sums ``H_C`` (a scatter-add) are skipped when ``h = 0``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .. import _ffi
from .._validation import check_choice
from ..models import SparseIsingModel, Vartype
from . import _native
from ._mcmc import MCMCSampler, bits_to_uniform, xoshiro_mix, xoshiro_next, xoshiro_seed

COMPONENTS = ("auto", "numba", "jax", "scipy")


class SwendsenWangState(NamedTuple):
    """State of one chain: ``x`` (n,) in the model's vartype and the xoshiro128** generator
    state ``rng`` (4 uint32 arrays of shape ``(lanes,)``, see :func:`xoshiro_seed`)."""

    x: jax.Array
    rng: tuple


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
    :mod:`._native`, all chains in one custom call (XLA runs two custom calls one after the
    other, so splitting the chains between calls gains nothing)."""
    if plan.grid is not None:
        return _native.grid_roots(links)
    return _native.table_roots(links, plan.nbr)


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
    not (``isingattn._ffi.resolve_backend``): ``"auto"`` is ``"numba"`` where the compiled
    union-find can run (JAX on the CPU, its kernel registered with XLA:
    :func:`._native.usable`), else ``"jax"``; ``"numba"`` off the CPU is a ``ValueError``;
    ``"jax"`` and ``"scipy"`` stand for themselves."""
    if components == "scipy":
        return components
    target = _native.GRID_TARGET if grid else _native.TABLE_TARGET
    return _ffi.resolve_backend(components, parameter="components",
                                usable=lambda: _native.usable(target))


# ----------------------------------------------------------------------------- the sampler
@dataclasses.dataclass(frozen=True)
class SwendsenWangSampler(MCMCSampler):
    """Swendsen–Wang cluster sampler (module docstring: algorithm, correctness and speed).

    Works on dense and sparse models, any coupling signs, with fields, masks, SPIN or BINARY.
    One step (the driver's "sweep") is one full cluster update: every variable can change.

    Args:
      components: how clusters are labelled: ``"auto"`` (default: ``"numba"`` where it can
        run, JAX on the CPU, else ``"jax"``), ``"numba"`` (a compiled
        union-find called as an XLA custom call; compiled by numba on first use in a
        process), ``"jax"`` (in-JAX parent hooking + pointer jumping, any backend) or
        ``"scipy"`` (``scipy.sparse.csgraph.connected_components`` on the host via
        ``jax.pure_callback``). All give the same labels, hence the same chains for the same
        key.

    ``info`` (means over kept steps, per chain): ``num_clusters``, ``mean_cluster_size``
    (active variables / clusters), ``largest_cluster``.

    Randomness: one 32-bit word per edge (per grid slot on lattices) for the bonds and one per
    variable for the flips (the word at a cluster's root decides that cluster), from xoshiro128**
    generators seeded from the chain's key at ``init`` and re-keyed from every step's key
    (``key=None`` continues the stream, as the driver does at a fixed ``beta``), so the same
    keys give the same chain.

    Example:
      >>> import jax
      >>> from isingattn.models import square_lattice
      >>> from isingattn.samplers import SwendsenWangSampler
      >>> m = square_lattice(8, beta=0.44)
      >>> s = SwendsenWangSampler().sample(m, jax.random.key(0), 100, num_chains=2)
      >>> s.spins.shape
      (2, 100, 64)
    """

    components: str = "auto"
    default_burnin = 50
    carries_stream = True

    def __post_init__(self):
        check_choice("components", self.components, COMPONENTS)

    def init(self, model, key, x0):
        plan = _plan(model)
        return SwendsenWangState(x=jnp.asarray(x0, model.dtype),
                                 rng=xoshiro_seed(key, (plan.lanes,)))

    def step(self, model, state, key, beta):
        """One Swendsen–Wang update of one chain (the one-chain case of :meth:`step_chains`)."""
        states = jax.tree_util.tree_map(lambda a: a[None], state)
        new, info = self.step_chains(model, states, None if key is None else key[None], beta)
        return (jax.tree_util.tree_map(lambda a: a[0], new),
                {k: a[0] for k, a in info.items()})

    def step_chains(self, model, states, keys, beta):
        """One update of every chain of one model (leading chain axis ``C``), all chains
        labelled at once as one graph of ``C * n`` nodes."""
        spin = spin_form(model)
        plan = _plan(spin)
        n, E = plan.n, plan.E
        C = states.x.shape[0]
        total = C * n
        dtype = spin.dtype
        s = to_spin(states.x, model.vartype).astype(dtype)  # (C, n)

        rng = states.rng if keys is None else jax.vmap(xoshiro_mix)(states.rng, keys)
        # a scan, not a Python loop: its outputs are materialized once, where unrolled draws
        # would be fused (and recomputed) into every consumer, the flip gather included
        rng, words = jax.lax.scan(lambda r, _: xoshiro_next(r), rng, None, length=plan.draws)
        if plan.grid is not None:  # lanes = n: draws 0, 1 = right, down bonds; 2 = flips
            w_bond, w_flip = words[:2], words[2]
        else:
            words = jnp.moveaxis(words, 0, 1).reshape(C, -1)  # (C, draws * lanes)
            w_bond, w_flip = words[:, :E], words[:, E:E + n]

        J = spin.active_J if isinstance(spin, SparseIsingModel) else spin.active_J[plan.u, plan.v]
        if plan.grid is not None:
            Lx, Ly, slots = plan.grid
            Jpad = jnp.concatenate([J, jnp.zeros((1,), dtype)])
            Jg = Jpad[slots]  # (2, Lx, Ly)
            g = s.reshape(C, Lx, Ly)
            other = jnp.stack([_roll(g, -1, 2), _roll(g, -1, 1)], axis=1)  # (C, 2, Lx, Ly)
            p = -jnp.expm1(-2 * beta * jnp.abs(Jg))
            u01 = bits_to_uniform(jnp.moveaxis(w_bond, 0, 1).reshape(C, 2, Lx, Ly)).astype(dtype)
            bond = (Jg * g[:, None] * other > 0) & (u01 < p)
            links = bond  # (C, 2, Lx, Ly)
        else:
            sat = J * s[:, plan.u] * s[:, plan.v] > 0
            p = -jnp.expm1(-2 * beta * jnp.abs(J))
            bond = sat & (bits_to_uniform(w_bond).astype(dtype) < p)  # (C, E)
            links = _slot_bonds(plan, bond)  # (C, n, d)

        offsets = (jnp.arange(C, dtype=jnp.int32) * n)[:, None]
        components = resolve_components(self.components, plan.grid is not None)
        if components == "numba":
            root = (_native_roots(plan, links) + offsets).reshape(-1)
        elif components == "jax":
            root = _label_chains(plan, links)  # (C * n,) global indices
        else:
            if plan.grid is not None:  # back to edge order for the host
                flat_slots = plan.grid[2].reshape(-1)
                edge_slot = np.empty(E, np.int64)
                edge_slot[flat_slots[flat_slots < E]] = np.nonzero(flat_slots < E)[0]
                bond = bond.reshape(C, -1)[:, edge_slot]
            root = (components_scipy(n, plan.u, plan.v, bond) + offsets).reshape(-1)

        mask = spin.mask
        h = spin.active_h
        s_flat = s.reshape(-1)

        def field_sums():
            return jax.ops.segment_sum(jnp.tile(h, C) * s_flat, root, num_segments=total)

        # H_C at each root; with h = 0 every P(flip) is 1/2 and the scatter-add is skipped
        H = jax.lax.cond(jnp.any(h != 0), field_sums, lambda: jnp.zeros((total,), dtype))
        p_flip = jax.nn.sigmoid(-2 * beta * H)
        decide = bits_to_uniform(w_flip).astype(dtype).reshape(-1) < p_flip  # used at roots
        mask_flat = jnp.tile(mask, C)
        flip = _get(decide, root) & mask_flat
        s_new = jnp.where(flip, -s_flat, s_flat).reshape(C, n)

        # cluster statistics: roots are the nodes labelled by themselves
        idx = jnp.arange(total, dtype=jnp.int32)
        num = jnp.sum(((root == idx) & mask_flat).reshape(C, n), axis=1)
        sizes = jnp.zeros((total,), jnp.int32).at[root].add(
            mask_flat.astype(jnp.int32), mode="promise_in_bounds")
        active = jnp.sum(mask)
        info = {
            "num_clusters": num.astype(jnp.float32),
            "mean_cluster_size": (active / jnp.maximum(num, 1)).astype(jnp.float32),
            "largest_cluster": jnp.max(sizes.reshape(C, n), axis=1, initial=0).astype(jnp.float32),
        }
        x = from_spin(s_new, model.vartype).astype(states.x.dtype)
        return SwendsenWangState(x=x, rng=rng), info


__all__ = ["SwendsenWangSampler", "SwendsenWangState", "components_jax", "components_scipy"]
