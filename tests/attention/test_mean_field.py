"""Mean field: the accelerated solver and the causal query tiles against the plain iteration and
exact enumeration, implicit gradients, iteration diagnostics and options.

float64 throughout. A solve stopped at ``max |m_new - m| <= tol`` is within about ``tol /
(damping (1 - rho))`` of the fixed point (``rho`` the contraction), hence the tolerances.
Compilation dominates the run time: the tests share shapes and method objects where they can.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.attention import Couplings, MeanField, boltzmann_attention

TOL = 1e-12
SEEN = []
#: One method object with a monitor, shared by the gradient tests (one compilation).
MONITORED = MeanField(tol=1e-10, monitor=lambda stage, it, res: SEEN.append(
    (stage, int(it), float(res))))


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _qkv(B=1, T=40, N=2, H=4, S=None, seed=0):
    S = T if S is None else S
    k = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(k[0], (B, T, N, H))
    kk = jax.random.normal(k[1], (B, S, N, H))
    v = jax.random.normal(k[2], (B, S, N, H))
    return q, kk, v


def _relative(N=2, D=40, strength=0.08, seed=3, sign=None):
    w = strength * jax.random.normal(jax.random.key(seed), (N, D))
    if sign is not None:
        w = sign * jnp.abs(w)
    return Couplings.learned(N, "relative", max_distance=D).replace(w)


def _info(method, q, k, v, c, **kw):
    kw.setdefault("chemical_potential", -0.5)
    return boltzmann_attention(q, k, v, couplings=c, method=method, return_weights=True, **kw)[1]


CASES = {  # couplings, TAP, causal (causal: T = 40 keys in two query tiles)
    "relative": (lambda: _relative(), False, True),
    "relative_negative_tap": (lambda: _relative(strength=0.25, sign=-1.0), True, False),
    "banded": (lambda: Couplings.learned(2, "banded", bandwidth=2).replace(
        0.5 * jax.random.normal(jax.random.key(4), (2, 2))), False, True),
    "full": (lambda: Couplings.learned(2, "full", max_length=40).replace(
        0.08 * jax.random.normal(jax.random.key(5), (2, 40, 40))), False, False),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_accelerated_reaches_the_plain_fixed_point(name):
    """SQUAREM and the plain damped iteration stop at the same fixed point, SQUAREM in fewer
    evaluations; its marginals satisfy the fixed-point equation to the tolerance."""
    make, tap, causal = CASES[name]
    q, k, v = _qkv()
    c = make()
    fast = _info(MeanField(tol=TOL, tap=tap), q, k, v, c, is_causal=causal)
    plain = _info(MeanField(tol=TOL, tap=tap, accelerate=False), q, k, v, c, is_causal=causal)
    np.testing.assert_allclose(fast.marginals, plain.marginals, atol=1e-9)
    np.testing.assert_allclose(fast.weights, plain.weights, atol=1e-9)
    assert int(fast.extra["iterations"]) < int(plain.extra["iterations"])
    assert float(jnp.max(fast.extra["residual"])) < 1e-9
    assert fast.extra["residual"].shape == (1, 2, 40)


def test_causal_tiles_equal_one_masked_square():
    """is_causal=True (query tiles holding only the keys they may attend to: here keys [0, 32)
    for queries [0, 32), all 36 for the rest) gives the marginals of the same mask passed
    explicitly (one tile holding every key)."""
    q, k, v = _qkv(S=36)
    c = _relative()
    tiles = _info(MeanField(tol=TOL), q, k, v, c, is_causal=True)
    square = _info(MeanField(tol=TOL), q, k, v, c,
                   mask=jnp.tril(jnp.ones((40, 36), bool))[None, None])
    np.testing.assert_allclose(tiles.marginals, square.marginals, atol=1e-9)
    np.testing.assert_allclose(tiles.weights, square.weights, atol=1e-9)


def test_causal_tiles_with_padding_give_the_gradient_of_one_masked_square():
    """With the first three keys padded out as well (so query 0..2 attend to nothing: rows of
    zeros), the tiles' weights and their gradient with respect to queries, keys and couplings
    equal those of the combined mask passed explicitly as one square."""
    q, k, v = _qkv()
    c = _relative()
    pad = (jnp.arange(40) >= 3)[None, None, None, :]
    causal = jnp.tril(jnp.ones((40, 40), bool))[None, None]
    g = jax.random.normal(jax.random.key(7), (1, 2, 40, 40))
    method = MeanField(tol=TOL)

    def loss(q, k, w, tiled):
        kw = {"mask": pad, "is_causal": True} if tiled else {"mask": pad & causal}
        info = _info(method, q, k, v, c.replace(w), **kw)
        return jnp.sum(info.weights * g), info.weights

    grads = {}
    for tiled in (True, False):
        (_, weights), grads[tiled] = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(
            q, k, c.params, tiled)
        np.testing.assert_array_equal(weights[0, :, :3], 0.0)
        np.testing.assert_allclose(jnp.sum(weights[0, :, 3:], -1), 1.0, atol=1e-12)
    for a, b in zip(grads[True], grads[False]):
        assert float(jnp.max(jnp.abs(b))) > 1e-3
        np.testing.assert_allclose(a, b, atol=1e-8)


def test_products_give_the_same_marginals():
    q, k, v = _qkv()
    c = _relative(D=6, strength=0.3)
    ref = _info(MeanField(tol=TOL, product="dense", tap=True), q, k, v, c, is_causal=True)
    for product in ("shifts", "fft"):
        got = _info(MeanField(tol=TOL, product=product, tap=True), q, k, v, c, is_causal=True)
        np.testing.assert_allclose(got.marginals, ref.marginals, atol=1e-10)


def test_close_to_exact_enumeration_for_weak_couplings():
    """Weak couplings: accelerated mean field within O(J^2) of the exact marginals."""
    q, k, v = _qkv(T=10)
    c = _relative(D=10, strength=0.02)
    ex = _info("exact", q, k, v, c, is_causal=True)
    mf = _info(MeanField(tol=TOL), q, k, v, c, is_causal=True)
    assert float(jnp.max(jnp.abs(mf.marginals - ex.marginals))) < 5e-4


def test_iterations_reported_and_bounded():
    q, k, v = _qkv()
    info = _info(MeanField(max_iters=3), q, k, v, _relative(strength=0.2), is_causal=True)
    assert int(info.extra["iterations"]) == 3
    assert float(jnp.max(info.extra["residual"])) > 1e-6  # not converged in 3
    zero = _info(MeanField(max_iters=3), q, k, v,
                 Couplings.learned(2, "relative", max_distance=40), is_causal=True)
    assert int(zero.extra["iterations"]) == 1  # J = 0 (learned zeros): the start is the answer


def _scaled_loss(q, k, v, c):
    def loss(p, scale):
        o = boltzmann_attention(q, k, v, couplings=c.replace(p), method=MONITORED,
                                is_causal=True)
        return scale * jnp.sum(o ** 2)

    return jax.jit(jax.grad(loss))


def test_monitor_sees_forward_and_adjoint_solves():
    q, k, v = _qkv()
    c = _relative()
    SEEN.clear()
    _scaled_loss(q, k, v, c)(c.params, 1.0)
    jax.effects_barrier()
    assert [s for s, _, _ in SEEN] == ["forward", "adjoint"]
    assert all(1 < it < 30 and res <= 1e-10 for _, it, res in SEEN)


def test_gradient_accuracy_does_not_depend_on_the_loss_scale():
    """The adjoint solve stops relative to the incoming gradient: a loss scaled by 1e-12 gets
    the gradient scaled by 1e-12 (an absolute rule would stop after one step there)."""
    q, k, v = _qkv()
    c = _relative()
    grad = _scaled_loss(q, k, v, c)
    np.testing.assert_allclose(grad(c.params, 1e-12) / 1e-12, grad(c.params, 1.0), rtol=1e-8)


def _loss(method, q, k, v, c, **kw):
    w_out = jax.random.normal(jax.random.key(21), q.shape)

    def loss(q, p, b, beta):
        o = boltzmann_attention(q, k, v, couplings=c.replace(p), chemical_potential=b,
                                beta=beta, method=method, **kw)
        return jnp.sum(w_out * jnp.tanh(o))

    return loss


def test_implicit_gradient_equals_unrolled_over_tiles():
    """The accelerated adjoint (TAP, causal query tiles, relative couplings) against JAX
    differentiating 600 unrolled plain steps."""
    q, k, v = _qkv()
    c = _relative()
    args = (q, c.params, jnp.array([-0.3, 0.2]), 1.1)
    grads = [jax.jit(jax.grad(_loss(meth, q, k, v, c, is_causal=True), argnums=(0, 1, 2, 3)))(
        *args) for meth in (MeanField(tol=1e-13, tap=True),
                            MeanField(implicit=False, max_iters=600, tap=True))]
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-11)


def test_gradient_matches_finite_differences_fft_product():
    q, k, v = _qkv(T=8)
    c = _relative(D=8, strength=0.2)
    loss = jax.jit(_loss(MeanField(tol=1e-14, product="fft", max_iters=500), q, k, v, c,
                         is_causal=True))
    args = (q, c.params, jnp.array([-0.3, 0.2]), 1.1)
    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(*args)
    for i, (a, g) in enumerate(zip(args, grads)):
        d = jax.random.normal(jax.random.key(100 + i), jnp.shape(a))
        plus, minus = list(args), list(args)
        plus[i], minus[i] = a + 1e-6 * d, a - 1e-6 * d
        fd = (loss(*plus) - loss(*minus)) / 2e-6
        np.testing.assert_allclose(jnp.sum(g * d), fd, rtol=1e-6, atol=1e-9)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="product"):
        MeanField(product="sparse")
    with pytest.raises(TypeError, match="monitor"):
        MeanField(monitor=3)
    q, k, v = _qkv(T=8)
    full = Couplings.learned(2, "full", max_length=8).replace(jnp.ones((2, 8, 8)))
    with pytest.raises(ValueError, match="relative or banded"):
        boltzmann_attention(q, k, v, couplings=full, method=MeanField(product="fft"))
