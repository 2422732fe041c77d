"""The compiled union-find (``isingattn._kernels.union_find``) that Swendsen–Wang and Wolff use on
the CPU: its two kernels against scipy's connected components (grids of every small shape,
periodic and open, neighbour tables of sparse and dense graphs, leading axes and ``jax.vmap``),
the same chains as the in-JAX labelling for both samplers, the error the XLA handler returns for
a call frame it does not expect, and the choice of path behind ``components="auto"``. No
statistical assertions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn._kernels import ffi, union_find
from isingattn.models import SparseIsingModel, chain, square_lattice
from isingattn.samplers import SwendsenWangSampler, WolffSampler
from isingattn.samplers import _clusters as swm

from ._components import scipy_roots

pytestmark = pytest.mark.skipif(not ffi.available(),
                                reason="numba not installed or JAX not on the CPU")


def _grid_edges(Lx, Ly):
    """Edge ends of the grid slots (0: right neighbour, 1: the one below), (2, Lx, Ly) each."""
    idx = np.arange(Lx * Ly).reshape(Lx, Ly)
    return (np.stack([idx, idx]),
            np.stack([np.roll(idx, -1, 1), np.roll(idx, -1, 0)]))


grid_roots = jax.jit(union_find.grid_roots)


@pytest.mark.parametrize("shape", [(12, 10), (7, 1), (1, 7), (2, 2), (2, 3), (3, 2), (1, 1)])
def test_grid_roots_match_scipy(shape):
    Lx, Ly = shape
    u, v = (a.reshape(-1) for a in _grid_edges(Lx, Ly))
    for p in (0.2, 0.5, 0.7, 1.0):  # below, near, above the percolation threshold; all bonded
        bond = np.asarray(jax.random.bernoulli(jax.random.key(int(p * 10)), p, (5, 2, Lx, Ly)))
        roots = np.asarray(grid_roots(bond))
        assert roots.shape == (5, Lx * Ly) and roots.dtype == np.int32
        for c in range(5):
            np.testing.assert_array_equal(roots[c],
                                          scipy_roots(Lx * Ly, u, v, bond[c].reshape(-1)))


def test_grid_roots_leading_axes_and_vmap():
    bond = np.asarray(jax.random.bernoulli(jax.random.key(1), 0.5, (2, 3, 2, 6, 5)))
    flat = np.asarray(grid_roots(bond.reshape(6, 2, 6, 5))).reshape(2, 3, 30)
    np.testing.assert_array_equal(np.asarray(grid_roots(bond)), flat)
    np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(union_find.grid_roots))(bond)), flat)


def _tables(n, edges):
    """Padded neighbour tables (padding = the node itself) and the edge of every slot."""
    nbrs = [[] for _ in range(n)]
    for e, (a, b) in enumerate(edges):
        nbrs[a].append((b, e))
        nbrs[b].append((a, e))
    d = max(map(len, nbrs))
    nbr = np.array([[j for j, _ in row] + [i] * (d - len(row)) for i, row in enumerate(nbrs)])
    slot = np.array([[e for _, e in row] + [len(edges)] * (d - len(row)) for row in nbrs])
    return nbr.astype(np.int32), slot


@pytest.mark.parametrize("graph", ["sparse", "dense"])
def test_table_roots_match_scipy(graph):
    rng = np.random.default_rng(3)
    n = 30 if graph == "sparse" else 9
    if graph == "sparse":
        edges = np.array(sorted({tuple(sorted(rng.choice(n, 2, replace=False)))
                                 for _ in range(45)}))
    else:
        edges = np.stack(np.triu_indices(n, 1), 1)
    nbr, slot = _tables(n, edges)
    table = jax.jit(union_find.table_roots)
    for p in (0.1, 0.3, 0.6):
        bond = rng.random((4, len(edges))) < p
        bonded = np.concatenate([bond, np.zeros((4, 1), bool)], 1)[:, slot]  # (4, n, d)
        roots = np.asarray(table(bonded, nbr))
        for c in range(4):
            np.testing.assert_array_equal(roots[c],
                                          scipy_roots(n, edges[:, 0], edges[:, 1], bond[c]))
        batched = jax.jit(jax.vmap(union_find.table_roots, in_axes=(0, None)))
        np.testing.assert_array_equal(np.asarray(batched(bonded[:, None], nbr))[:, 0], roots)


def test_empty_inputs():
    assert union_find.grid_roots(jnp.zeros((0, 2, 3, 3), bool)).shape == (0, 9)
    assert union_find.grid_roots(jnp.zeros((2, 2, 0, 3), bool)).shape == (2, 0)
    assert union_find.table_roots(jnp.zeros((2, 0, 3), bool), np.zeros((0, 3), np.int32)).shape \
        == (2, 0)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=r"bond must have shape \(\.\.\., 2, Lx, Ly\)"):
        union_find.grid_roots(jnp.zeros((4, 3, 5, 5), bool))
    with pytest.raises(ValueError, match=r"nbr must have shape \(6, 2\) to match bonded"):
        union_find.table_roots(jnp.zeros((3, 6, 2), bool), np.zeros((6, 3), np.int32))


def test_handler_reports_an_unexpected_frame():
    # an int32 array where the handler expects bonds (PRED): it must fail with its message,
    # not read the buffer as something else
    union_find._register(union_find.GRID_TARGET)
    call = jax.ffi.ffi_call(union_find.GRID_TARGET, jax.ShapeDtypeStruct((25,), jnp.int32))
    with pytest.raises(Exception, match="do not have the layout this isingattn version reads"):
        jax.block_until_ready(jax.jit(call)(jnp.zeros((2, 5, 5), jnp.int32)))


@pytest.mark.parametrize("model", [
    square_lattice((6, 5), J=0.8, h=0.2, beta=0.6),                  # grid
    square_lattice((4, 4), periodic=False, beta=0.9).replace(        # open grid, a mask
        mask=jnp.arange(16) != 5),
    SparseIsingModel(h=jnp.linspace(-0.3, 0.3, 7),                   # not a grid
                     edges=[(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (1, 4), (4, 5), (5, 6)],
                     J=jnp.array([0.9, -0.6, 0.5, 1.1, -0.8, 0.7, 0.6, -1.0]), beta=0.9),
    chain(8, J=0.8, h=0.3, beta=0.8).to_dense(),                     # dense
])
def test_same_chains_as_the_jax_labelling(model):
    key = jax.random.key(5)
    a = SwendsenWangSampler(components="numba").sample(model, key, 30, num_chains=3)
    b = SwendsenWangSampler(components="jax").sample(model, key, 30, num_chains=3)
    np.testing.assert_array_equal(np.asarray(a.spins), np.asarray(b.spins))
    for k in ("num_clusters", "mean_cluster_size", "largest_cluster"):
        np.testing.assert_array_equal(np.asarray(a.info[k]), np.asarray(b.info[k]))


@pytest.mark.parametrize("model", [
    square_lattice((6, 5), J=0.8, beta=0.6),                         # grid
    SparseIsingModel(h=jnp.zeros(6),                                 # not a grid, a mask
                     edges=[(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (1, 4), (4, 5)],
                     J=jnp.array([0.9, -0.6, 0.5, 1.1, -0.8, 0.7, 0.6]), beta=0.9).replace(
        mask=jnp.arange(6) != 3),
    chain(7, J=0.8, beta=0.8).to_dense(),                            # dense
])
def test_wolff_same_chains_as_the_jax_labelling(model):
    key = jax.random.key(7)
    a = WolffSampler(num_flips=2, components="numba").sample(model, key, 30, num_chains=3)
    b = WolffSampler(num_flips=2, components="jax").sample(model, key, 30, num_chains=3)
    np.testing.assert_array_equal(np.asarray(a.spins), np.asarray(b.spins))
    np.testing.assert_array_equal(np.asarray(a.info["cluster_size"]),
                                  np.asarray(b.info["cluster_size"]))


def test_edge_bond_roots_match_scipy():
    # the helper Wolff uses: per-edge bonds laid out in grid or table slots
    for model in (square_lattice((5, 4)), square_lattice((3, 4), periodic=False),
                  chain(6).to_dense()):
        plan = swm._plan(model)
        u, v = plan.u, plan.v
        bond = np.asarray(jax.random.bernoulli(jax.random.key(2), 0.5, (3, plan.E)))
        roots = np.asarray(jax.jit(lambda b, plan=plan: swm.edge_bond_roots(plan, b))(bond))
        for c in range(3):
            np.testing.assert_array_equal(roots[c], scipy_roots(model.n, u, v, bond[c]))


def test_same_chains_for_a_batch_of_models():
    # many models at once (the driver vmaps the step over models): batched custom calls
    J = jnp.stack([jnp.full(50, 0.9), jnp.linspace(-1, 1, 50)])
    m = square_lattice((5, 5), J=J, beta=0.7)
    key = jax.random.key(6)
    a = SwendsenWangSampler(components="numba").sample(m, key, 20, num_chains=2)
    b = SwendsenWangSampler(components="jax").sample(m, key, 20, num_chains=2)
    np.testing.assert_array_equal(np.asarray(a.spins), np.asarray(b.spins))


def test_auto_picks_numba_on_the_cpu():
    assert swm.resolve_components("auto") == "numba"
    assert swm.resolve_components("auto", grid=False) == "numba"
    assert swm.resolve_components("jax") == "jax"
    assert swm.resolve_components("scipy") == "scipy"


def test_numba_refused_off_the_cpu(monkeypatch):
    """One policy for every compiled kernel (isingattn._kernels.ffi.resolve_backend): off the CPU
    'auto' is 'jax' and 'numba' is a clear error naming the parameter."""
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    assert swm.resolve_components("auto") == "jax"
    with pytest.raises(ValueError, match="components='numba' runs compiled CPU kernels; JAX's "
                                         "default backend is 'gpu'"):
        swm.resolve_components("numba")
    assert ffi.resolve_backend("auto") == "jax"
    with pytest.raises(ValueError, match="backend='numba' runs compiled CPU kernels"):
        ffi.resolve_backend("numba")
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'numba', 'jax'; got 'c'"):
        ffi.resolve_backend("c")


def test_auto_falls_back_when_registration_fails(monkeypatch):
    def refuse(target):
        raise RuntimeError("handler's API version is incompatible")

    monkeypatch.setattr(union_find, "_register", refuse)
    union_find._warn_once.cache_clear()
    with pytest.warns(RuntimeWarning, match="could not be registered with XLA"):
        assert swm.resolve_components("auto") == "jax"
