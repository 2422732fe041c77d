"""Swendsen–Wang internals beyond the shared suite: the grid recognition, both labelling paths
(grid shifts and neighbour tables) against scipy, the batched kernel against one-chain steps, and
exactness on the paths the shared suite does not reach (a periodic grid with mixed-sign
couplings, fields and a mask; a sparse graph that is not a grid; BINARY on a grid; a batch
mixing a field-free model with one that has fields).

False-failure rates: the statistical assertions are chi^2 tests at level ALPHA = 1e-4 each (5 of
them), so a correct implementation fails this file with probability below 5e-4. Keys are fixed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.models import SparseIsingModel, chain, square_lattice
from isingattn.samplers import SwendsenWangSampler
from isingattn.samplers._clusters import (
    _grid_pull,
    _label,
    _label_dtype,
    _sparse_plan,
    _table_pull,
    grid_layout,
)

from .._stats import ALPHA, assert_chi2_matches, ess
from ._components import scipy_roots


# --------------------------------------------------------------------------- grid recognition
def test_grid_layout_of_lattices():
    for shape, periodic in (((5, 7), True), ((4, 6), False), ((3, 3), True)):
        m = square_lattice(shape, periodic=periodic)
        Lx, Ly, slots = grid_layout(m.graph)
        assert (Lx, Ly) == shape
        e = m.edges
        idx = np.arange(Lx * Ly).reshape(Lx, Ly)
        nbrs = (np.roll(idx, -1, 1), np.roll(idx, -1, 0))
        for d in range(2):
            has = slots[d] < len(e)
            # every slot holding an edge holds the edge joining its two grid sites
            got = np.sort(e[slots[d][has]], axis=1)
            want = np.sort(np.stack([idx[has], nbrs[d][has]], 1), axis=1)
            np.testing.assert_array_equal(got, want)
        assert np.sum(slots < len(e)) == len(e)  # every edge has exactly one slot


def test_grid_layout_any_edge_order_and_non_grids():
    m = square_lattice((4, 5))
    perm = np.random.default_rng(0).permutation(m.num_edges)
    shuffled = SparseIsingModel(h=np.zeros(m.n), edges=m.edges[perm][:, ::-1], J=np.ones(len(perm)))
    Lx, Ly, slots = grid_layout(shuffled.graph)
    assert (Lx, Ly) == (4, 5)
    e = shuffled.edges
    assert set(map(tuple, np.sort(e[slots[slots < len(e)]], axis=1))) == set(
        map(tuple, np.sort(e, axis=1)))
    assert grid_layout(chain(6).graph)[:2] == (1, 6)
    # a triangle plus a chord is no grid in any layout
    tri = SparseIsingModel(h=np.zeros(5), edges=[(0, 1), (1, 2), (0, 2), (2, 3), (1, 4)],
                           J=np.ones(5))
    assert grid_layout(tri.graph) is None


# --------------------------------------------------------------------------- labelling paths
@pytest.fixture(params=["int16", "int32"])
def label_dtype(request, monkeypatch):
    # small graphs get int16 labels; the int32 path (2^15 nodes or more) is forced here
    import isingattn.samplers._clusters as swm

    if request.param == "int32":
        monkeypatch.setattr(swm, "_label_dtype", lambda total: jnp.int32)
    return request.param


def test_label_dtype_switches_at_int16_range():
    assert _label_dtype(1) == jnp.int16 and _label_dtype((1 << 15) - 1) == jnp.int16
    assert _label_dtype(1 << 15) == jnp.int32


def test_grid_labelling_matches_scipy(label_dtype):
    m = square_lattice((12, 10))
    *_, slots = grid_layout(m.graph)
    u, v = m.edges[:, 0], m.edges[:, 1]
    C = 3
    label = jax.jit(lambda b: _label(_grid_pull(b, C * m.n), C * m.n))
    for p in (0.2, 0.5, 0.7):  # below, near and above the bond-percolation threshold
        bond = np.asarray(jax.random.bernoulli(jax.random.key(int(p * 10)), p, (C, m.num_edges)))
        grid = np.concatenate([bond, np.zeros((C, 1), bool)], 1)[:, slots]  # (C, 2, Lx, Ly)
        roots = np.asarray(label(grid)).reshape(C, m.n) - (np.arange(C) * m.n)[:, None]
        for c in range(C):
            np.testing.assert_array_equal(roots[c], scipy_roots(m.n, u, v, bond[c]))


def test_table_labelling_matches_scipy(label_dtype):
    # a random sparse graph that is not a grid: neighbour-table path
    rng = np.random.default_rng(1)
    n = 40
    pairs = {tuple(sorted(rng.choice(n, 2, replace=False))) for _ in range(70)}
    edges = np.array(sorted(pairs))
    m = SparseIsingModel(h=np.zeros(n), edges=edges, J=np.ones(len(edges)))
    plan = _sparse_plan(m.graph)
    assert plan.grid is None
    C = 4
    total = C * n

    def label(bond):
        bonded = jnp.concatenate([bond, jnp.zeros((C, 1), bool)], 1)[:, plan.nbr_e]
        off = (jnp.arange(C, dtype=jnp.int32) * n)[:, None, None]
        nbr = (jnp.asarray(plan.nbr)[None] + off).reshape(total, -1)
        return _label(_table_pull(nbr, bonded.reshape(total, -1), total), total)

    label = jax.jit(label)
    for p in (0.3, 0.6, 0.9):
        bond = np.asarray(jax.random.bernoulli(jax.random.key(int(p * 10)), p, (C, len(edges))))
        roots = np.asarray(label(bond)).reshape(C, n) - (np.arange(C) * n)[:, None]
        for c in range(C):
            np.testing.assert_array_equal(roots[c], scipy_roots(n, edges[:, 0], edges[:, 1],
                                                                 bond[c]))


# --------------------------------------------------------------------------- kernel
@pytest.mark.parametrize("components,group", [("numba", None), ("jax", None), ("jax", 2)])
def test_step_chains_equals_one_chain_steps(components, group, monkeypatch):
    # the driver calls step_chains (all chains labelled at once, or in the in-JAX labelling in
    # groups of `group` chains: 5 chains = 2 + 2 + 1 and a padding chain); it must equal
    # vmap(step)
    import isingattn.samplers._clusters as swm

    for m in (square_lattice((4, 5), J=0.9, h=0.2, beta=0.5),
              chain(7, J=-0.7, h=0.1, beta=0.9).to_dense()):
        if group is not None:
            monkeypatch.setattr(swm, "LABEL_GROUP_NODES", group * m.n)
        sw = SwendsenWangSampler(components=components)
        keys = jax.random.split(jax.random.key(3), 5)
        x0 = jnp.where(jax.random.bernoulli(jax.random.key(4), 0.5, (5, m.n)), 1.0, -1.0)
        states = jax.vmap(sw.init, in_axes=(None, 0, 0))(m, keys, x0)
        step_keys = jax.random.split(jax.random.key(5), 5)
        a, ia = jax.jit(sw.step_chains)(m, states, step_keys, m.beta)
        b, ib = jax.jit(jax.vmap(sw.step, in_axes=(None, 0, 0, None)))(m, states, step_keys,
                                                                        m.beta)
        for x, y in zip(jax.tree_util.tree_leaves((a, ia)), jax.tree_util.tree_leaves((b, ib))):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        assert not np.array_equal(np.asarray(a.x), np.asarray(x0))  # it moved


def _check_exact(model, key, num_samples=2000, num_chains=4):
    s = SwendsenWangSampler().sample(model, jax.random.key(key), num_samples,
                                     num_chains=num_chains, num_burnin=20)
    x = np.asarray(s.spins, float)
    assert np.all(x[..., ~np.asarray(model.mask)] == model.vartype.low)
    e = np.asarray(s.energy)
    assert_chi2_matches(x, model.to_dense(), alpha=ALPHA,
                        effective_fraction=min(1.0, ess(e) / e.size))


def test_periodic_grid_mixed_couplings_fields_and_mask_match_exact():
    # 3x3 torus (grid path, every slot filled), couplings of both signs, fields, one masked site
    m = square_lattice((3, 3), beta=0.8,
                       J=jax.random.uniform(jax.random.key(6), (18,), minval=-1.0, maxval=1.0),
                       h=jax.random.normal(jax.random.key(7), (9,)) * 0.4)
    m = m.replace(mask=jnp.arange(9) != 4)
    assert _sparse_plan(m.graph).grid is not None
    _check_exact(m, 8)


def test_sparse_non_grid_graph_matches_exact():
    edges = [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (1, 4), (4, 5), (5, 6), (0, 6)]
    J = jnp.array([0.9, -0.6, 0.5, 1.1, -0.8, 0.7, 0.6, -1.0, 0.4])
    m = SparseIsingModel(h=jnp.linspace(-0.3, 0.3, 7), edges=edges, J=J, beta=0.9)
    assert _sparse_plan(m.graph).grid is None
    _check_exact(m, 9)


def test_binary_grid_matches_exact():
    m = square_lattice((2, 4), J=0.8, h=-0.3, periodic=False, beta=1.0, vartype="BINARY")
    _check_exact(m, 10)


def test_batch_with_and_without_fields_matches_exact():
    # one compiled program for both: the h = 0 shortcut must not leak between batch members
    h = jnp.stack([jnp.zeros(9), jnp.linspace(-0.5, 0.5, 9)])
    m = square_lattice((3, 3), J=0.7, h=h, beta=0.7)
    s = SwendsenWangSampler().sample(m, jax.random.key(11), 2000, num_chains=4, num_burnin=20)
    for k in range(2):
        e = np.asarray(s.energy[k])
        assert_chi2_matches(np.asarray(s.spins[k], float), m[k].to_dense(), alpha=ALPHA,
                            effective_fraction=min(1.0, ess(e) / e.size))
