"""Couplings: structure, symmetry, band operators, frozen kinds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.attention import Couplings, CouplingSpec
from isingattn.attention._couplings import FFT_MIN_KEYS


def _all_structures():
    k = jax.random.key(0)
    return [
        Couplings.random(k, 3, "full", max_length=7),
        Couplings.random(k, 3, "relative", max_distance=3),
        Couplings.random(k, 3, "banded", bandwidth=2),
        Couplings.learned(3, "banded", bandwidth=2, init=0.1, key=k, strength=0.3),
    ]


@pytest.mark.parametrize("c", _all_structures(), ids=repr)
def test_symmetric_zero_diagonal(c):
    J = np.asarray(c.matrix(6))
    assert J.shape == (3, 6, 6)
    np.testing.assert_array_equal(J, np.swapaxes(J, -1, -2))
    np.testing.assert_array_equal(np.diagonal(J, axis1=-2, axis2=-1), 0)


def test_relative_and_banded_follow_distance():
    w = jnp.array([[1.0, 2.0, 3.0]])
    rel = Couplings.fixed(w, "relative").matrix(6)[0]
    band = Couplings.fixed(w[:, :2], "banded").matrix(6)[0]
    d = np.abs(np.subtract.outer(np.arange(6), np.arange(6)))
    np.testing.assert_array_equal(rel, np.where(d == 0, 0, np.array([0, 1, 2, 3, 3, 3])[d]))
    np.testing.assert_array_equal(band, np.where((d >= 1) & (d <= 2), np.array([0, 1, 2, 0, 0, 0])[d], 0))
    assert Couplings.fixed(w[:, :2], "banded").band_width(6) == 2
    assert Couplings.fixed(w, "relative").band_width(6) is None


def test_full_crops_and_symmetrizes():
    P = jax.random.normal(jax.random.key(1), (2, 5, 5))
    J = Couplings.fixed(P, "full").matrix(3)
    expected = 0.5 * (P[:, :3, :3] + np.swapaxes(P[:, :3, :3], -1, -2)) * (1 - np.eye(3))
    np.testing.assert_allclose(J, expected, rtol=1e-6)


@pytest.mark.parametrize("c", _all_structures(), ids=repr)
@pytest.mark.parametrize("squared", [False, True])
def test_matvec_equals_dense_product(c, squared):
    m = jax.random.uniform(jax.random.key(2), (2, 3, 4, 6))
    J = c.matrix(6)
    J = J * J if squared else J
    ref = jnp.einsum("bnts,nsk->bntk", m, J)
    products = ["auto", "dense"] + ([] if c.structure == "full" else ["shifts", "fft"])
    for product in products:
        np.testing.assert_allclose(c.matvec(m, squared=squared, product=product), ref,
                                   rtol=1e-5, atol=1e-6)
        heads_first = c.matvec(jnp.swapaxes(m, 0, 1), squared=squared, product=product,
                               head_axis=0)
        np.testing.assert_allclose(jnp.swapaxes(heads_first, 0, 1), ref, rtol=1e-5, atol=1e-6)
    for dense in (None, True, False):  # the earlier spelling
        np.testing.assert_allclose(c.matvec(m, squared=squared, dense=dense), ref,
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("D", [1, 3, 9, 40])
def test_relative_products_around_max_distance(D):
    """Relative couplings as shifted sums (a constant w(D) beyond max_distance) and by FFT,
    with max_distance shorter than, equal to and longer than the sequence, in float64."""
    with jax.enable_x64(True):
        c = Couplings.random(jax.random.key(7), 2, "relative", max_distance=D,
                             dtype=jnp.float64)
        m = jax.random.uniform(jax.random.key(8), (3, 2, 5, 9), jnp.float64)
        for squared in (False, True):
            J = c.matrix(9)
            J = J * J if squared else J
            ref = jnp.einsum("bnts,nsk->bntk", m, J)
            for product in ("shifts", "fft"):
                np.testing.assert_allclose(c.matvec(m, squared=squared, product=product), ref,
                                           rtol=1e-12, atol=1e-13)


def test_toeplitz_row_and_automatic_products():
    c = Couplings.fixed(jnp.array([[1.0, 2.0, 3.0]]), "relative")
    np.testing.assert_array_equal(c.toeplitz(6), [[0, 1, 2, 3, 3, 3]])
    np.testing.assert_array_equal(Couplings.fixed(jnp.array([[1.0, 2.0]]), "banded").toeplitz(4),
                                  [[0, 1, 2, 0]])
    assert c.product_for(64) == "shifts"  # range 2 (a constant beyond): 2 shifted sums
    long = Couplings.learned(1, "relative", max_distance=4096)
    assert long.product_for(256) == "dense"
    assert long.product_for(FFT_MIN_KEYS) == "fft"
    assert Couplings.learned(1, "banded", bandwidth=4).product_for(256) == "shifts"
    assert Couplings.learned(1, "full", max_length=64).product_for(64) == "dense"
    with pytest.raises(ValueError, match="not Toeplitz"):
        Couplings.learned(1, "full", max_length=4).toeplitz(4)
    with pytest.raises(ValueError, match="product must be one of"):
        c.matvec(jnp.ones((1, 2, 6)), product="sparse")
    with pytest.raises(ValueError, match="head_axis"):
        c.matvec(jnp.ones((1, 2, 6)), head_axis=-2)


def test_frozen_kinds_get_no_gradient_learned_do():
    def f(c, p):
        return jnp.sum(c.replace(p).matrix(5) ** 2)
    for c in (Couplings.random(jax.random.key(0), 2, "banded", bandwidth=2),
              Couplings.fixed(jnp.ones((2, 2)), "banded")):
        np.testing.assert_array_equal(jax.grad(f, argnums=1)(c, c.params), 0)
    c = Couplings.learned(2, "banded", bandwidth=2, init=0.5)
    assert np.all(np.asarray(jax.grad(f, argnums=1)(c, c.params)) != 0)


def test_random_same_key_same_couplings():
    a = Couplings.random(jax.random.key(3), 2, "relative", max_distance=4)
    b = Couplings.random(jax.random.key(3), 2, "relative", max_distance=4)
    d = Couplings.random(jax.random.key(4), 2, "relative", max_distance=4)
    np.testing.assert_array_equal(a.params, b.params)
    assert not np.allclose(a.params, d.params)


def test_none_is_zero_and_pytree_roundtrip():
    c = Couplings.none()
    assert c.is_zero and c.band_width(10) == 0
    np.testing.assert_array_equal(c.matrix(4), 0)
    r = Couplings.random(jax.random.key(0), 2, "banded", bandwidth=3)
    leaves, tree = jax.tree_util.tree_flatten(r)
    assert len(leaves) == 1
    back = jax.tree_util.tree_unflatten(tree, leaves)
    assert back.kind == "random" and back.bandwidth == 3


def test_bad_coupling_configurations():
    with pytest.raises(ValueError, match="kind must be one of"):
        CouplingSpec(kind="trained")
    with pytest.raises(ValueError, match="structure must be one of"):
        Couplings.learned(2, "dense", bandwidth=2)
    with pytest.raises(ValueError, match="needs max_length"):
        Couplings.learned(2, "full")
    with pytest.raises(ValueError, match="needs bandwidth"):
        Couplings.learned(2, "banded")
    with pytest.raises(ValueError, match=r"\(num_heads, bandwidth\).*\(3,\)"):
        Couplings.fixed(jnp.ones(3), "banded")
    with pytest.raises(ValueError, match="max_length=4.*9 keys"):
        Couplings.learned(2, "full", max_length=4).matrix(9)
    with pytest.raises(ValueError, match="needs a key"):
        CouplingSpec("random", bandwidth=2).build(2)


def test_one_head_of_couplings_serves_every_head():
    m = jax.random.uniform(jax.random.key(5), (1, 3, 2, 5))
    for c in (Couplings.fixed(jnp.array([[0.5, -0.2]]), "banded"),
              Couplings.fixed(jnp.ones((1, 5, 5)), "full")):
        J = jnp.broadcast_to(c.matrix(5), (3, 5, 5))
        np.testing.assert_allclose(c.matvec(m), jnp.einsum("bnts,nsk->bntk", m, J), rtol=1e-6)
