"""The compiled forward pass of ``method='transfer'`` (``isingattn._kernels.transfer``) against
the JAX kernel it replaces on the CPU: marginals to float precision for every range ``r`` that
changes the block layout, held keys, both dtypes, heads beyond the probability-space range (the
log-domain path, per head, in both), the threaded path, ``jax.vmap``, and its errors; and the
compiled gradient (``transfer_vjp``) against the JAX one it replaces, with and without the
couplings' gradient, for heads within the probability-space gradient's range (the others are
handed to the JAX VJP: compared bit for bit); and the kernels' two-key passes and folded block
readout against the single steps and direct sums they stand for. ``tests/attention/test_banded.py``
compares the default path (this one on the CPU) with exact enumeration. No statistical
assertions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn._kernels import ffi, transfer
from isingattn.attention._banded import (
    _compiled_bwd,
    _fast_limit,
    _grad_limit,
    _tiled_bwd,
    banded_chain_marginals,
)

pytestmark = pytest.mark.skipif(not ffi.available(),
                                reason="numba not installed or JAX not on the CPU")


def _chains(Q, N, S, r, seed, dtype=jnp.float32, field_scale=2.0, coupling_scale=0.5):
    k = jax.random.split(jax.random.key(seed), 3)
    a = field_scale * jax.random.normal(k[0], (Q, N, S), dtype)
    a = jnp.where(jax.random.bernoulli(k[2], 0.85, a.shape), a, -jnp.inf)  # held keys
    c = coupling_scale * jax.random.normal(k[1], (N, r), dtype)
    return a, c


def _both(a, c, **kw):
    f = jax.jit(lambda a, c, b: banded_chain_marginals(a, c, backend=b, **kw),
                static_argnums=2)
    return np.asarray(f(a, c, "numba")), np.asarray(f(a, c, "jax"))


@pytest.mark.parametrize("Q,N,S,r", [(37, 3, 21, 4), (70, 2, 30, 8), (20, 2, 13, 3),
                                     (16, 1, 9, 10), (65, 2, 40, 1), (3, 4, 8, 8),
                                     (300, 1, 17, 5)])
def test_marginals_match_the_jax_kernel(Q, N, S, r):
    a, c = _chains(Q, N, S, r, seed=Q + S + r)
    m, ref = _both(a, c)
    np.testing.assert_allclose(m, ref, atol=2e-6)
    assert np.all(m[np.isneginf(np.asarray(a))] == 0)  # held keys are 0


def test_float64():
    with jax.enable_x64(True):
        a, c = _chains(30, 2, 25, 6, seed=1, dtype=jnp.float64)
        m, ref = _both(a, c)
        assert m.dtype == np.float64
        np.testing.assert_allclose(m, ref, atol=1e-12)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_strong_heads_take_the_log_domain_path_in_both(dtype):
    """Heads beyond the fast range (here 2x and 10x it, next to a weak head) run the log-domain
    path of each kernel: the same finite marginals, and the weak head's are the fast path's."""
    with jax.enable_x64(dtype == jnp.float64):
        fast = _fast_limit(dtype)
        a, c = _chains(70, 3, 30, 8, seed=2, dtype=dtype, field_scale=20.0)
        c = c / jnp.sum(jnp.abs(c), axis=1, keepdims=True) * jnp.array([[1.0], [2 * fast],
                                                                         [10 * fast]], dtype)
        m, ref = _both(a, c)
        assert np.all(np.isfinite(m))
        np.testing.assert_allclose(m, ref, atol=1e-5 if dtype == jnp.float32 else 1e-12)
        weak, _ = _both(a[:, :1], c[:1])
        np.testing.assert_array_equal(m[:, :1], weak)
        assert np.all(m[np.isneginf(np.asarray(a))] == 0)


def test_lanes_cover_the_queries_in_the_fewest_even_groups():
    # a unit's queries: at most LANES, a multiple of 8, in the fewest groups that hold Q, with
    # fewer than 8 spare lanes a group (a few queries do not pay for a row of LANES)
    for Q in range(1, 4 * transfer.LANES + 3):
        L = transfer.lanes(Q)
        G = transfer.groups(Q)
        assert G == -(-Q // L), (Q, L, G)
        assert L % 8 == 0 and 8 <= L <= transfer.LANES, (Q, L)
        assert G == -(-Q // transfer.LANES), (Q, L)
        assert G * L - Q < 8 * G, (Q, L)
    assert transfer.lanes(1) == 8 and transfer.lanes(130) == 72
    assert transfer.lanes(4096) == transfer.LANES


def test_threaded_call_matches():
    # above THREADED_WORK state updates the units are shared among threads
    Q, N, S, r = 512, 2, 64, 8
    assert Q * N * S << r >= transfer.THREADED_WORK
    a, c = _chains(Q, N, S, r, seed=3)
    m, ref = _both(a, c)
    np.testing.assert_allclose(m, ref, atol=2e-6)
    c = c.at[1].multiply(20.0)  # one head in the log-domain path (range 52)
    m, ref = _both(a, c)
    np.testing.assert_allclose(m, ref, atol=1e-5)


def test_vmap_and_leading_axes():
    a, c = _chains(24, 2, 17, 5, seed=4)
    a = a.reshape(2, 3, 4, 2, 17)
    direct = np.asarray(banded_chain_marginals(a, c, backend="numba"))
    mapped = np.asarray(jax.vmap(lambda x: banded_chain_marginals(x, c, backend="numba"))(a))
    ref = np.asarray(banded_chain_marginals(a, c, backend="jax"))
    np.testing.assert_allclose(direct, ref, atol=2e-6)
    np.testing.assert_array_equal(mapped, direct)


@pytest.mark.parametrize("coupling_grad", [True, False])
def test_gradient_is_the_jax_one(coupling_grad):
    a, c = _chains(40, 2, 30, 5, seed=5)
    w = jax.random.normal(jax.random.key(6), a.shape)

    def loss(a, c, backend):
        m = banded_chain_marginals(a, c, backend=backend, coupling_grad=coupling_grad)
        return jnp.sum(jnp.where(jnp.isneginf(a), 0.0, w * m))

    g = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)
    (ga, gc), (ra, rc) = g(a, c, "numba"), g(a, c, "jax")
    np.testing.assert_allclose(np.asarray(ga), np.asarray(ra), atol=1e-5)
    np.testing.assert_allclose(np.asarray(gc), np.asarray(rc), atol=1e-4)


def _vjps(a, c, g, pairs):
    r = c.shape[1]
    f = jax.jit(lambda a, c, g, which: which(r, pairs, a, c, g), static_argnums=3)
    new, ref = f(a, c, g, _compiled_bwd), f(a, c, g, _tiled_bwd)
    return [np.asarray(x) for x in new], [np.asarray(x) for x in ref]


@pytest.mark.parametrize("pairs", [True, False])
@pytest.mark.parametrize("Q,N,S,r", [(5, 2, 7, 1), (9, 2, 11, 2), (70, 3, 20, 3),
                                     (130, 2, 33, 4), (10, 2, 40, 8), (10, 1, 50, 9)])
def test_compiled_vjp_matches_the_jax_vjp(Q, N, S, r, pairs):
    # every block layout (r < 8: blocks of r keys; r >= 8: of 8), partial groups of queries
    # (Q not a multiple of the kernel's 64), held keys and an upstream g of any scale
    a, c = _chains(Q, N, S, r, seed=Q + S + r)
    g = 3.0 * jax.random.normal(jax.random.key(r), a.shape)
    (da, dc), (ra, rc) = _vjps(a, c, g, pairs)
    # float32: the two sum the same terms in another order (relative 1e-6 of the largest)
    np.testing.assert_allclose(da, ra, atol=2e-5 * np.abs(ra).max())
    np.testing.assert_allclose(dc, rc, atol=2e-5 * max(np.abs(rc).max(), 1.0))
    if not pairs:
        assert np.all(dc == 0)


def test_compiled_vjp_float64():
    with jax.enable_x64(True):
        a, c = _chains(40, 2, 30, 6, seed=8, dtype=jnp.float64)
        g = jax.random.normal(jax.random.key(9), a.shape, jnp.float64)
        for pairs in (True, False):
            (da, dc), (ra, rc) = _vjps(a, c, g, pairs)
            assert da.dtype == np.float64
            np.testing.assert_allclose(da, ra, atol=1e-12)
            np.testing.assert_allclose(dc, rc, atol=1e-11)


def test_compiled_vjp_hands_other_heads_to_the_jax_one():
    # one head within the gradient's range, one between it and the fast limit (probability
    # space forward, log-domain gradient), one beyond the fast limit (log domain throughout);
    # above the kernel's threading threshold
    Q, N, S, r = 256, 3, 64, 8
    assert Q * N * S << r >= transfer.THREADED_WORK // 4
    a, c = _chains(Q, N, S, r, seed=10, field_scale=5.0)
    lim = _grad_limit(jnp.float32)
    c = c / jnp.sum(jnp.abs(c), axis=1, keepdims=True) * jnp.array(
        [[1.0], [0.5 * (lim + _fast_limit(jnp.float32))], [3 * _fast_limit(jnp.float32)]])
    g = jax.random.normal(jax.random.key(11), a.shape)
    (da, dc), (ra, rc) = _vjps(a, c, g, True)
    np.testing.assert_array_equal(da[:, 1:], ra[:, 1:])
    np.testing.assert_array_equal(dc[1:], rc[1:])
    # the weak head against the float64 VJP: the couplings' gradient sums 16384 (query, key)
    # terms of both signs in float32, so both float32 paths are off by ~1e-5 of its largest
    # entry (this one by 2.5e-5, the JAX one by 8e-6, in other orders of summation)
    with jax.enable_x64(True):
        x64 = [jnp.asarray(np.asarray(x)[:, :1] if x.ndim == 3 else np.asarray(x)[:1],
                           jnp.float64) for x in (a, c, g)]
        fa, fc = (np.asarray(x) for x in jax.jit(
            lambda a, c, g: _tiled_bwd(r, True, a, c, g))(*x64))
    np.testing.assert_allclose(da[:, :1], fa, atol=1e-4 * np.abs(fa).max())
    np.testing.assert_allclose(dc[:1], fc, atol=1e-4 * np.abs(fc).max())


def test_errors():
    a, c = _chains(4, 2, 6, 3, seed=7)
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'numba', 'jax'"):
        banded_chain_marginals(a, c, backend="cuda")
    with pytest.raises(ValueError, match="backend='numba' runs float32 and float64; got float16"):
        banded_chain_marginals(a.astype(jnp.float16), c, backend="numba")
    with pytest.raises(ValueError, match=r"same N; got a \(4, 2, 6\), c \(3, 3\)"):
        transfer.transfer_marginals(a, jnp.zeros((3, 3)), 20.0)
    with pytest.raises(ValueError, match=r"at least one distance \(r >= 1\); got c \(2, 0\)"):
        transfer.transfer_marginals(a, jnp.zeros((2, 0)), 20.0)
    # the handler refuses buffers it does not expect (int32 fields) with its own message
    transfer._register()
    call = jax.ffi.ffi_call(transfer.TARGET, jax.ShapeDtypeStruct((4, 2, 6), jnp.int32))
    with pytest.raises(Exception, match="do not have the layout this isingattn version reads"):
        jax.block_until_ready(jax.jit(call)(jnp.zeros((4, 2, 6), jnp.int32),
                                            jnp.zeros((2, 3), jnp.int32),
                                            jnp.zeros((1,), jnp.int32)))
    # and so does the VJP's (float16 fields)
    transfer.transfer_vjp(a, c, a, jnp.zeros(2, bool), True)  # registers it
    call = jax.ffi.ffi_call(transfer.VJP_TARGET, (jax.ShapeDtypeStruct((4, 2, 6), jnp.float16),
                                                  jax.ShapeDtypeStruct((2, 1, 3), jnp.float16)))
    with pytest.raises(Exception, match="do not have the layout this isingattn version reads"):
        x = jnp.zeros((4, 2, 6), jnp.float16)
        jax.block_until_ready(jax.jit(call)(x, jnp.zeros((2, 3), jnp.float16), x,
                                            jnp.zeros(2, bool), jnp.ones(1, jnp.int32)))


def test_empty():
    assert transfer.transfer_marginals(jnp.zeros((0, 2, 5)), jnp.zeros((2, 3)), 20.0).shape \
        == (0, 2, 5)
    da, dc = transfer.transfer_vjp(jnp.zeros((0, 2, 5)), jnp.zeros((2, 3)),
                                   jnp.zeros((0, 2, 5)), jnp.zeros(2, bool), True)
    assert da.shape == (0, 2, 5) and dc.shape == (2, 3)


@pytest.mark.parametrize("r", [2, 3, 8])
def test_gradient_steps_and_two_key_passes(r):
    # every fused pass of the kernels against the single steps it stands for, in float64 on
    # random messages (the end-to-end tests above exercise them only through whole chains)
    rng = np.random.default_rng(r)
    R, H, L = 1 << r, 1 << (r - 1), transfer.LANES

    def rows(n):
        return rng.uniform(0.1, 1.0, (n, L))

    C, C_lo, C_hi = rng.uniform(0.2, 2.0, R), rng.uniform(0.2, 2.0, H), rng.uniform(0.2, 2.0, H)
    f0, f1, g0, g1 = rows(4)
    gk, gk1 = rng.uniform(-1.0, 1.0, (2, L))
    al, Ad, be, Bd = rows(R), rng.uniform(-1, 1, (R, L)), rows(R), rng.uniform(-1, 1, (R, L))

    def steps(step, x, *factors):
        t, out = np.empty_like(x), np.empty_like(x)
        step(x, t, *factors[0])
        step(t, out, *factors[1])
        return out

    out = np.empty_like(al)
    transfer._forward_pair(al, out, C, f0, f1, g0, g1)
    np.testing.assert_allclose(out, steps(transfer._forward_step, al, (C, f0, f1), (C, g0, g1)),
                               rtol=1e-13)
    transfer._backward_pair(be, out, C_lo, C_hi, f0, f1, g0, g1)
    np.testing.assert_allclose(
        out, steps(transfer._backward_step, be, (C_lo, C_hi, f0, f1), (C_lo, C_hi, g0, g1)),
        rtol=1e-13)

    # the gradient's single steps: (message, derivative) through a key with factors f and
    # upstream gradient gk; the derivative is the step of the derivative plus the step's
    # derivative along the key's field, the step with the s = 1 factor g f1 and no s = 0 term
    zero = np.zeros(L)
    for step, vjp_step, x, X, consts in (
            (transfer._forward_step, transfer._vjp_forward_step, al, Ad, (C,)),
            (transfer._backward_step, transfer._vjp_back_step, be, Bd, (C_lo, C_hi))):
        t, T, want, term = (np.empty_like(x) for _ in range(4))
        vjp_step(x, X, t, T, *consts, f0, f1, gk)
        step(x, want, *consts, f0, f1)
        np.testing.assert_allclose(t, want, rtol=1e-13)
        step(X, want, *consts, f0, f1)
        step(x, term, *consts, zero, gk * f1)
        np.testing.assert_allclose(T, want + term, rtol=1e-12, atol=1e-13)

    # and their pairs (keys with factors f then g, upstream gradients gk then gk1)
    def vjp_steps(step, x, X, *consts, first, second):
        t, T, o, O = (np.empty_like(x) for _ in range(4))
        step(x, X, t, T, *consts, *first)
        step(t, T, o, O, *consts, *second)
        return o, O

    msg = np.stack([al, Ad, np.empty_like(al), np.empty_like(al)])
    assert transfer._vjp_forward_pair(msg, 0, C, f0, f1, g0, g1, gk, gk1) == 2
    want = vjp_steps(transfer._vjp_forward_step, al, Ad, C, first=(f0, f1, gk),
                     second=(g0, g1, gk1))
    np.testing.assert_allclose(msg[2], want[0], rtol=1e-13)
    np.testing.assert_allclose(msg[3], want[1], rtol=1e-12, atol=1e-13)
    msg = np.stack([be, Bd, np.empty_like(be), np.empty_like(be)])
    assert transfer._vjp_back_pair(msg, 0, C_lo, C_hi, f0, f1, g0, g1, gk, gk1) == 2
    want = vjp_steps(transfer._vjp_back_step, be, Bd, C_lo, C_hi, first=(f0, f1, gk),
                     second=(g0, g1, gk1))
    np.testing.assert_allclose(msg[2], want[0], rtol=1e-13)
    np.testing.assert_allclose(msg[3], want[1], rtol=1e-12, atol=1e-13)

    # the block readout by folding: per-bit sums of end * beta(bit-reversed) over the top K bits
    K = min(8, r)
    rev = np.array([int(format(w, f"0{r}b")[::-1], 2) for w in range(R)])
    acc, tb = np.empty((K + 1, L)), np.empty((H, L))
    transfer._readout(al, be, rev, acc, tb, K)
    t = al * be[rev]
    bits = (np.arange(R)[:, None] >> (r - K + np.arange(K))) & 1  # (R, K): key i of the block
    np.testing.assert_allclose(acc[:K], bits.T @ t, rtol=1e-13)
    np.testing.assert_allclose(acc[K], t.sum(0), rtol=1e-13)
