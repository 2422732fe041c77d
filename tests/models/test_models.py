"""Ising models: energies, conversions (vartype, dimod, networkx), sparse form, masks, pytrees,
generators and validation errors. Deterministic checks against closed forms and full enumeration."""

from __future__ import annotations

import dimod
import jax
import jax.numpy as jnp
import networkx as nx
import numpy as np
import pytest

from isingattn import exact
from isingattn.models import (
    IsingModel,
    SparseIsingModel,
    chain,
    from_attention,
    from_bqm,
    from_networkx,
    model_from_spec,
    random_dense,
    sherrington_kirkpatrick,
    square_lattice,
)


def all_states(n, vartype="SPIN"):
    return np.asarray(exact.enumerate_states(n, vartype), float)


def test_energy_of_small_model_by_hand():
    J = np.array([[0.0, 1.5, 0.0], [1.5, 0.0, -2.0], [0.0, -2.0, 0.0]])
    m = IsingModel(h=[0.5, -1.0, 0.25], J=J, offset=0.75)
    x = np.array([1.0, -1.0, -1.0])
    expected = -(0.5 * 1 + -1.0 * -1 + 0.25 * -1) - (1.5 * 1 * -1 + -2.0 * -1 * -1) - 0.75
    assert float(m.energy(x)) == pytest.approx(expected)
    f = np.asarray(m.local_fields(x))
    np.testing.assert_allclose(f, [0.5 - 1.5, -1.0 + 1.5 + 2.0, 0.25 + 2.0])


@pytest.mark.parametrize("vartype", ["SPIN", "BINARY"])
def test_local_fields_give_flip_energy_changes(vartype):
    m = random_dense(jax.random.key(0), 6, vartype=vartype)
    X = all_states(6, vartype)
    f = np.asarray(m.local_fields(X))
    E = np.asarray(m.energy(X))
    for i in range(6):
        Y = X.copy()
        Y[:, i] = 1 - X[:, i] if vartype == "BINARY" else -X[:, i]
        dE = np.asarray(m.energy(Y)) - E
        if vartype == "SPIN":
            np.testing.assert_allclose(dE, 2 * X[:, i] * f[:, i], atol=1e-4)
        else:
            np.testing.assert_allclose(dE, -(Y[:, i] - X[:, i]) * f[:, i], atol=1e-4)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("start", ["SPIN", "BINARY"])
def test_vartype_conversion_keeps_every_energy(seed, start):
    k1, k2 = jax.random.split(jax.random.key(seed))
    m = random_dense(k1, 7, batch_shape=(2,), vartype=start).replace(
        offset=jnp.array([0.3, -1.2]), mask=jax.random.bernoulli(k2, 0.8, (2, 7))
    )
    other = "BINARY" if start == "SPIN" else "SPIN"
    conv = m.to_vartype(other)
    X = all_states(7, start)
    Y = (X + 1) / 2 if start == "SPIN" else 2 * X - 1
    np.testing.assert_allclose(m.energy(X[None]), conv.energy(Y[None]), atol=1e-4)
    back = conv.to_vartype(start)
    np.testing.assert_allclose(m.energy(X[None]), back.energy(X[None]), atol=1e-4)
    sp = m.to_sparse().to_vartype(other)
    np.testing.assert_allclose(sp.energy(Y[None]), conv.energy(Y[None]), atol=1e-4)


@pytest.mark.parametrize("vartype", ["SPIN", "BINARY"])
@pytest.mark.parametrize("seed", range(3))
def test_dimod_round_trip_keeps_every_energy_and_labels(vartype, seed):
    m = random_dense(jax.random.key(seed), 6, vartype=vartype).replace(
        offset=0.7, labels=["a", "b", "c", ("d", 1), 5, "f"]
    )
    bqm = m.to_bqm()
    assert bqm.vartype is getattr(dimod, vartype)
    assert list(bqm.variables) == list(m.labels)
    X = all_states(6, vartype)
    np.testing.assert_allclose(bqm.energies((X, list(m.labels))), m.energy(X), atol=1e-5)
    # dimod's sign is the opposite of ours
    assert bqm.get_linear("a") == pytest.approx(-float(m.h[0]))
    assert bqm.get_quadratic("a", "b") == pytest.approx(-float(m.J[0, 1]))
    back = from_bqm(bqm)
    assert back.labels == m.labels
    np.testing.assert_allclose(back.energy(X), m.energy(X), atol=1e-5)
    sparse_back = from_bqm(bqm, sparse=True)
    np.testing.assert_allclose(sparse_back.energy(X), m.energy(X), atol=1e-5)


def test_bqm_with_other_variable_order():
    bqm = dimod.BinaryQuadraticModel({"x": 1.0, "y": -0.5}, {("x", "y"): 2.0}, 0.5, "SPIN")
    m = from_bqm(bqm, variable_order=["y", "x"])
    assert m.labels == ("y", "x")
    X = all_states(2)
    np.testing.assert_allclose(m.energy(X), bqm.energies((X, ["y", "x"])))
    with pytest.raises(ValueError, match="variable_order"):
        from_bqm(bqm, variable_order=["x"])


@pytest.mark.parametrize("seed", range(3))
def test_networkx_round_trip_keeps_every_energy_and_labels(seed):
    m = random_dense(jax.random.key(seed), 6, beta=0.7).replace(labels=list("uvwxyz"))
    G = m.to_networkx()
    assert set(G.nodes) == set("uvwxyz")
    assert G.nodes["u"]["h"] == pytest.approx(float(m.h[0]))
    assert G.edges["u", "v"]["J"] == pytest.approx(float(m.J[0, 1]))
    back = from_networkx(G)
    assert float(back.beta) == pytest.approx(0.7)
    X = all_states(6)
    order = [back.labels.index(v) for v in m.labels]
    np.testing.assert_allclose(back.energy(X[:, np.argsort(order)]), m.energy(X), atol=1e-5)


def test_from_networkx_requires_J_or_default():
    G = nx.grid_2d_graph(3, 3)
    with pytest.raises(ValueError, match="no 'J' attribute"):
        from_networkx(G)
    m = from_networkx(G, default_J=1.0, sparse=True)
    assert m.num_edges == 12 and float(m.energy(np.ones(9))) == -12.0


def test_sparse_matches_dense_and_stays_small():
    k = jax.random.key(1)
    lat = square_lattice(5, J=jax.random.normal(k, (50,)), h=0.3, beta=0.4)
    dense = lat.to_dense()
    X = all_states(10)
    Xfull = np.concatenate([X, np.ones((X.shape[0], 15))], axis=1)
    np.testing.assert_allclose(lat.energy(Xfull), dense.energy(Xfull), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(lat.local_fields(Xfull), dense.local_fields(Xfull), atol=1e-5)
    back = dense.to_sparse()
    np.testing.assert_allclose(back.energy(Xfull), dense.energy(Xfull), atol=1e-5)
    big = square_lattice(256)
    leaves = jax.tree_util.tree_leaves(big)
    nbytes = sum(x.nbytes for x in leaves) + big.graph.edges.nbytes
    assert nbytes < 64 * 256 * 256  # O(edges): a dense J would be 16 GiB
    assert float(big.energy(jnp.ones(256 * 256))) == -2 * 256 * 256


def test_generators():
    c = chain(5, J=2.0, h=0.5, periodic=True)
    assert c.num_edges == 5 and tuple(c.edges[-1]) == (4, 0)
    assert float(c.energy(np.ones(5))) == -(5 * 0.5 + 5 * 2.0)
    lat = square_lattice((3, 4), periodic=True)
    assert lat.n == 12 and np.all(lat.graph.degrees == 4)
    open_lat = square_lattice(4, periodic=False)
    assert open_lat.num_edges == 2 * 4 * 3
    q = jax.random.normal(jax.random.key(0), (3, 8))
    kk = jax.random.normal(jax.random.key(1), (5, 8))
    J = jnp.zeros((5, 5))
    m = from_attention(q, kk, J, bias=-1.0)
    assert m.batch_shape == (3,) and m.vartype == "BINARY"
    np.testing.assert_allclose(m.h, q @ kk.T / np.sqrt(8) - 1.0, rtol=1e-5, atol=1e-5)
    sk = sherrington_kirkpatrick(jax.random.key(2), 400)
    off = np.asarray(sk.J)[np.triu_indices(400, 1)]
    # J_ij ~ N(0, 1/n): sample variance of 79800 entries within 5 standard errors of 1/n
    assert abs(off.var() * 400 - 1) < 5 * np.sqrt(2 / off.size)


def test_masked_variables_contribute_nothing():
    m = random_dense(jax.random.key(3), 5).replace(
        mask=jnp.array([True, False, True, True, False]))
    X = all_states(5)
    Y = X.copy()
    Y[:, 1] *= -1
    Y[:, 4] *= -1
    np.testing.assert_allclose(m.energy(X), m.energy(Y))
    assert np.all(np.asarray(m.local_fields(X))[:, [1, 4]] == 0)
    sub = IsingModel(h=m.h[jnp.array([0, 2, 3])], J=m.J[jnp.ix_(jnp.array([0, 2, 3]),
                                                                 jnp.array([0, 2, 3]))])
    np.testing.assert_allclose(m.energy(X), sub.energy(X[:, [0, 2, 3]]), atol=1e-5)


def test_batching_broadcasts_shared_couplings():
    J = random_dense(jax.random.key(4), 4).J
    h = jax.random.normal(jax.random.key(5), (3, 2, 4))
    m = IsingModel(h=h, J=J, beta=jnp.array([1.0, 2.0]))
    assert m.batch_shape == (3, 2)
    x = all_states(4)[:7]
    e = m.energy(np.broadcast_to(x, (3, 2, 7, 4)))
    assert e.shape == (3, 2, 7)
    np.testing.assert_allclose(e[1, 0], IsingModel(h=h[1, 0], J=J).energy(x), atol=1e-5)
    assert m[1, 0].batch_shape == () and float(m[1, 1].beta) == 2.0
    np.testing.assert_allclose(m.energy(x[0]), m.energy(np.broadcast_to(x[0], (3, 2, 4))))


def test_pytree_jit_and_vmap():
    m = random_dense(jax.random.key(6), 5, batch_shape=(4,), beta=0.5)
    x = jnp.ones(5)
    jitted = jax.jit(lambda mm, xx: mm.energy(xx))(m, x)
    np.testing.assert_allclose(jitted, m.energy(x))
    vm = jax.vmap(lambda mm: mm.energy(x))(m.flatten_batch())
    np.testing.assert_allclose(vm, m.energy(x))
    lat = square_lattice(3)
    np.testing.assert_allclose(jax.jit(lambda mm: mm.energy(jnp.ones(9)))(lat), -18.0)
    # the mask is a boolean leaf, so differentiate with allow_int (or build the model inside)
    grads = jax.grad(lambda mm: mm.energy(x).sum(), allow_int=True)(m)
    np.testing.assert_allclose(grads.h, -np.ones((4, 5)))
    gh = jax.grad(lambda h: IsingModel(h, m.J).energy(x).sum())(m.h)
    np.testing.assert_allclose(gh, -np.ones((4, 5)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"h": np.zeros(3), "J": np.triu(np.ones((3, 3)), 1)}, "symmetric"),
        ({"h": np.zeros(2), "J": np.eye(2)}, "zero diagonal"),
        ({"h": [0.0, np.nan], "J": np.zeros((2, 2))}, "h must be finite"),
        ({"h": np.zeros(2), "J": [[0, np.inf], [np.inf, 0]]}, "J must be finite"),
        ({"h": np.zeros(3), "J": np.zeros((2, 2))}, r"\(\.\.\., 3, 3\).*got \(2, 2\)"),
        ({"h": np.zeros(2), "J": np.zeros((2, 2)), "beta": 0.0}, "beta must be finite and > 0"),
        ({"h": np.zeros(2), "J": np.zeros((2, 2)), "beta": -1.0}, "beta must be finite and > 0"),
        ({"h": np.zeros(2), "J": np.zeros((2, 2)), "beta": np.inf}, "beta must be finite and > 0"),
        ({"h": np.zeros(2), "J": np.zeros((2, 2)), "vartype": "ISING"}, "vartype must be"),
        ({"h": np.zeros(2), "J": np.zeros((2, 2)), "mask": [1, 0]}, "mask must be a boolean"),
        ({"h": np.zeros(2), "J": np.zeros((2, 2)), "mask": np.ones(3, bool)},
         r"mask must have shape"),
        ({"h": np.zeros((3, 2)), "J": np.zeros((4, 2, 2))}, "batch dimensions do not broadcast"),
        ({"h": np.zeros(2), "J": np.zeros((2, 2)), "offset": np.nan}, "offset must be finite"),
        ({"h": np.zeros(2, complex), "J": np.zeros((2, 2))}, "must be real numbers"),
        ({"h": np.zeros(2), "J": np.zeros((2, 2)), "beta": 1 + 1j}, "beta must be real"),
    ],
)
def test_dense_validation_errors(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        IsingModel(**kwargs)


@pytest.mark.parametrize(
    "edges, match",
    [
        ([[0, 1], [1, 0]], "unique"),
        ([[0, 0]], "self-loops"),
        ([[0, 3]], "index variables 0..2"),
        ([[0, 1, 2]], r"shape \(E, 2\)"),
    ],
)
def test_sparse_validation_errors(edges, match):
    with pytest.raises(ValueError, match=match):
        SparseIsingModel(h=np.zeros(3), edges=edges, J=1.0)


def test_sparse_coupling_shape_error():
    with pytest.raises(ValueError, match=r"one coupling per edge.*got \(3,\)"):
        SparseIsingModel(h=np.zeros(3), edges=[[0, 1], [1, 2]], J=np.ones(3))


def test_generator_errors():
    with pytest.raises(ValueError, match="periodic lattice needs L >= 3"):
        square_lattice(2)
    with pytest.raises(ValueError, match="one per edge"):
        chain(4, J=np.ones(5))
    with pytest.raises(ValueError, match="n must be an integer >= 2"):
        chain(1)


def test_no_variables_is_an_error_at_construction_everywhere():
    # n = 0 is refused where a model is made (not deep inside a sampler or exact method);
    # an empty batch of models and a model whose variables are all masked stay defined
    for make in (lambda: IsingModel(h=np.zeros(0), J=np.zeros((0, 0))),
                 lambda: IsingModel(h=np.zeros((3, 0)), J=np.zeros((0, 0))),
                 lambda: SparseIsingModel(h=np.zeros(0), edges=np.zeros((0, 2), int), J=1.0),
                 lambda: from_attention(np.ones(2), np.ones((0, 2)), np.zeros((0, 0)))):
        with pytest.raises(ValueError, match=r"needs n >= 1 variables; got h of shape \("):
            make()
    with pytest.raises(ValueError, match="the bqm has no variables"):
        from_bqm(dimod.BQM("SPIN"))
    empty_batch = IsingModel(h=np.zeros((0, 3)), J=np.zeros((3, 3)))
    assert exact.log_partition(empty_batch).shape == (0,)
    all_masked = IsingModel(h=np.ones(3), J=np.zeros((3, 3)), mask=np.zeros(3, bool))
    assert float(exact.log_partition(all_masked)) == 0.0


def test_energy_input_shape_error():
    m = random_dense(jax.random.key(0), 4)
    with pytest.raises(ValueError, match=r"n = 4; got \(3,\)"):
        m.energy(np.ones(3))


def test_model_from_spec():
    m = model_from_spec("lattice:L=4,beta=0.3,J=-1")
    assert m.n == 16 and float(m.beta) == pytest.approx(0.3) and float(m.J[0]) == -1.0
    assert model_from_spec("chain:n=7,periodic=true").num_edges == 7
    assert model_from_spec("random:n=5,seed=3,vartype=BINARY").vartype == "BINARY"
    with pytest.raises(ValueError, match="unknown model 'grid'; valid: chain, lattice"):
        model_from_spec("grid:L=3")
    with pytest.raises(ValueError, match="unknown parameter 'M' for model 'lattice'"):
        model_from_spec("lattice:M=3")
    with pytest.raises(ValueError, match="bad value for chain parameter n"):
        model_from_spec("chain:n=abc")
    with pytest.raises(FileNotFoundError):
        model_from_spec("missing/model.npz")


def test_model_from_files(tmp_path):
    m = random_dense(jax.random.key(0), 5, beta=0.4)
    np.savez(tmp_path / "m.npz", h=m.h, J=m.J, beta=0.4)
    loaded = model_from_spec(str(tmp_path / "m.npz"))
    X = all_states(5)
    np.testing.assert_allclose(loaded.energy(X), m.energy(X), atol=1e-6)
    import json

    lat = square_lattice(3)
    (tmp_path / "s.json").write_text(json.dumps(
        {"h": [0.0] * 9, "edges": lat.edges.tolist(), "J": [1.0] * 18, "vartype": "SPIN"}))
    s = model_from_spec(str(tmp_path / "s.json"))
    assert isinstance(s, SparseIsingModel) and float(s.energy(np.ones(9))) == -18.0
