"""``method='transfer'`` at any coupling strength: exact and finite against ``method='exact'``.

Heads with ``beta sum_d |w(d)|`` beyond the probability-space path's range (float32: 20,
float64: 160) take the log-domain path of ``isingattn.attention._banded``, chosen per head. The
layer is compared with enumeration at ``w`` = 20, 50 and 200 (mixed signs, fields up to about
``|beta h| = 40``), with chemical potentials down to -1000 (rows in the closed-form softmax limit,
and rows whose marginals underflow float32 while their ratios, the weights, do not), causal,
and with keys held inside the chains (a padding-style mask with holes), learned and frozen
couplings; ``log Z`` and its gradient; and one strong head next
to a weak one, whose results do not change (and a gradient through the layer stays finite).

Tolerances. The reference is always float64 enumeration of the same inputs. Float64 runs agree
to 1e-9 (relative to the largest entry). Float32 runs carry rounding of the log-weights of the
order ``eps * (|beta h| + beta sum_d |w(d)|)`` (about 6e-8 * 700 = 4e-5 here; float32
enumeration rounds the same terms), which moves outputs, marginals and weights by about that
much and ``log Z`` by that relative to its size; gradients are checked relative to the largest
entry of each at 2e-3 (they are differences of such numbers, up to ``beta |w|`` larger).
No sampling.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import exact
from isingattn.attention import Couplings, boltzmann_attention
from isingattn.attention._banded import banded_chain_log_partition
from isingattn.models import IsingModel

# four heads, r = 3: w(d) scales with mixed signs, and a chemical potential per head
SCALES = np.array([20.0, 50.0, 200.0, 200.0])
SIGNS = np.array([[1.0, -1.0, 0.5], [-1.0, 1.0, -1.0], [1.0, -1.0, 1.0], [1.0, 0.5, -1.0]])
# head 2: every marginal about exp(-250) (underflows float32; the weights must not);
# head 3: every row in the closed-form b -> -inf limit
POTENTIALS = np.array([0.0, -60.0, -250.0, -1000.0])


def _inputs(causal, T=9, B=2, N=4, H=4):
    k = jax.random.split(jax.random.key(3 + causal), 5)
    q = 6.0 * jax.random.normal(k[0], (B, T, N, H))  # fields up to |beta h| ~ 40
    kk = jax.random.normal(k[1], (B, T, N, H))
    v = jax.random.normal(k[2], (B, T, N, H))
    w = jax.random.normal(k[3], (B, T, N, H))
    return q, kk, v, w


def _mask(causal, T=9, B=2, N=4):
    """Causal: none (the layer's own). Else keys held inside the chains (couplings reach across
    them), a different set per (batch, head, query), every row keeping its diagonal key."""
    if causal:
        return None
    holes = jax.random.bernoulli(jax.random.key(11), 0.3, (B, N, T, T))
    return ~holes | jnp.eye(T, dtype=bool)


@functools.cache
def _run(method, kind, causal, dtype):
    """Outputs, weights, marginals, log Z and the gradient of a loss of all four with respect
    to queries, keys, couplings (zero when frozen) and the chemical potential, in ``dtype``
    (the references, float64 enumeration, are shared by the tests)."""
    q, kk, v, w = _inputs(causal)
    mask = _mask(causal)
    p = jnp.asarray(SCALES[:, None] * SIGNS)
    b = jnp.asarray(POTENTIALS)

    def loss(q, kk, p, b):
        c = Couplings.learned(4, bandwidth=3) if kind == "learned" else Couplings.fixed(p)
        o, info = boltzmann_attention(q, kk, v.astype(dtype), mask=mask, is_causal=causal,
                                      couplings=c.replace(p), beta=1.0, chemical_potential=b,
                                      method=method, return_weights=True)
        lz = jax.lax.stop_gradient(info.log_partition)  # its gradient: a test of its own
        total = (jnp.sum(w.astype(dtype) * o) + jnp.sum(jnp.sin(3.0 * info.weights))
                 + jnp.sum(jnp.cos(3.0 * info.marginals)))
        return total, (o, info.weights, info.marginals, lz)

    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True))
    g, out = grad(*(x.astype(dtype) for x in (q, kk, p, b)))
    return [np.asarray(x, np.float64) for x in (*out, *g)]


NAMES = ["output", "weights", "marginals", "log Z", "d query", "d key", "d couplings",
         "d chemical potential"]


def _compare(got, ref, dtype, frozen=False):
    for name, x, y in zip(NAMES, got, ref):
        assert np.all(np.isfinite(x)), name
        if frozen and name == "d couplings":
            np.testing.assert_array_equal(x, 0.0)
            continue
        scale = max(np.abs(y).max(), 1e-30)
        if dtype == jnp.float64:
            tol = 1e-9 * scale
        elif name.startswith("d "):
            tol = 2e-3 * scale
        elif name == "log Z":
            tol = 4e-5 * scale
        else:
            tol = 1e-4
        np.testing.assert_allclose(x, y, atol=tol, rtol=0, err_msg=name)


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


# (each dtype and each mask once: float32 causal, float64 with keys held inside the chains)
@pytest.mark.parametrize("dtype, causal", [(jnp.float32, True), (jnp.float64, False)])
def test_learned_couplings_match_enumeration(dtype, causal):
    ref = _run("exact", "learned", causal, jnp.float64)
    got = _run("transfer", "learned", causal, dtype)
    _compare(got, ref, dtype)
    # the underflowing head still has O(1) weights that sum to one over allowed keys, and none
    # on held ones
    assert np.allclose(got[1][:, 2].sum(-1), 1.0, atol=1e-5)
    mask = _mask(causal)
    if mask is not None:
        assert np.all(got[1][~np.asarray(mask)] == 0) and np.all(got[2][~np.asarray(mask)] == 0)


def test_frozen_couplings_match_enumeration():
    """Fixed couplings at a concrete beta: the gradient skips the couplings (coupling_grad=False
    in the kernel) on both paths. The reference is the learned run's (the same numbers, and
    the same gradients but for the couplings')."""
    ref = _run("exact", "learned", True, jnp.float64)
    got = _run("transfer", "fixed", True, jnp.float32)
    _compare(got, ref, jnp.float32, frozen=True)


def test_log_partition_and_its_gradient_match_enumeration():
    """``banded_chain_log_partition`` (the layer's ``log Z``) on chains with a weak and two
    strong heads, float32, and its autodiff gradient in fields and couplings."""
    k = jax.random.split(jax.random.key(5), 3)
    S, r = 11, 3
    a = 20.0 * jax.random.normal(k[0], (3, 3, S))
    c = jnp.asarray(np.array([[1.0], [50.0], [200.0]]) * SIGNS[:3])
    mask = jax.random.bernoulli(k[2], 0.8, a.shape)
    d = np.abs(np.arange(S)[:, None] - np.arange(S)[None, :])
    band = (d >= 1) & (d <= r)

    def exact_lz(a, c):
        J = jnp.where(band, c[:, np.clip(d - 1, 0, r - 1)], 0.0)
        return exact.log_partition(IsingModel(h=a, J=J[None], vartype="BINARY", mask=mask))

    def banded_lz(a, c):
        return banded_chain_log_partition(jnp.where(mask, a, -jnp.inf), c)

    def grads(f, dtype):
        def loss(a, c):
            lz = f(a, c)
            return jnp.sum(jnp.sin(lz)), lz
        return jax.jit(jax.grad(loss, (0, 1), has_aux=True))(a.astype(dtype), c.astype(dtype))

    ((da, dc), lz), ((ea, ec), ref) = grads(banded_lz, jnp.float32), grads(exact_lz, jnp.float64)
    np.testing.assert_allclose(lz, ref, rtol=4e-5, atol=0)
    np.testing.assert_allclose(da, ea, atol=2e-3 * np.abs(ea).max())
    np.testing.assert_allclose(dc, ec, atol=2e-3 * np.abs(ec).max())


def test_a_strong_head_leaves_the_weak_one_unchanged():
    """Head 1 going from w = 0.5 to w = 200 changes nothing of head 0's outputs and gradients
    (it stays on the fast path: bit for bit), and the gradient of a loss through the function,
    strong head included, is finite (its exactness: the tests above)."""
    q, kk, v, w = (x[:, :, :2] for x in _inputs(True))
    b = jnp.asarray([-1.0, -30.0])
    weak = jnp.asarray([[0.8, -0.5, 0.3], [0.5, -0.5, 0.5]])
    strong = weak.at[1].multiply(400.0)
    q, kk, v, w = (x.astype(jnp.float32) for x in (q, kk, v, w))

    @jax.jit
    @functools.partial(jax.grad, argnums=(0, 1, 2), has_aux=True)
    def grad(q, kk, p):
        o = boltzmann_attention(q, kk, v, is_causal=True, couplings=Couplings.learned(
            2, bandwidth=3).replace(p), chemical_potential=b, method="transfer")
        return jnp.sum(w * o), o

    runs = {}
    for name, p in (("weak", weak), ("strong", strong)):
        (dq, dk, dp), o = grad(q, kk, p.astype(jnp.float32))
        runs[name] = [np.asarray(x) for x in (o[:, :, 0], dq[:, :, 0], dk[:, :, 0], dp[0])]
        assert all(np.all(np.isfinite(x)) for x in (o, dq, dk, dp))
    for x, y in zip(runs["weak"], runs["strong"]):
        np.testing.assert_array_equal(x, y)
