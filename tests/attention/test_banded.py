"""The banded transfer kernel behind ``method='transfer'``: exact against enumeration.

Deterministic checks (no sampling): marginals, log Z and the hand-written vector-Jacobian
product against :mod:`isingattn.exact` on the same chains, the causal packing of the layer, and
the float32 range of the probability-space arithmetic against a float64 run.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import exact
from isingattn.attention import Couplings, boltzmann_attention
from isingattn.attention._banded import (
    BLOCK,
    TILE_QUERIES,
    _causal_packing,
    _pack,
    _skew_pack,
    _skew_unpack,
    _unpack,
    banded_chain_log_partition,
    banded_chain_marginals,
)
from isingattn.models import IsingModel


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _dense(c, S):
    """``(N, S, S)`` couplings ``J_jk = c[|j - k| - 1]`` for ``1 <= |j - k| <= r``."""
    r = c.shape[-1]
    idx = jnp.arange(S)
    d = jnp.abs(idx[:, None] - idx[None, :])
    return jnp.where((d >= 1) & (d <= r), c[:, jnp.clip(d - 1, 0, r - 1)], 0.0)


def _chains(Q, N, S, r, seed, field_scale=1.5, coupling_scale=1.0):
    k = jax.random.split(jax.random.key(seed), 3)
    a = field_scale * jax.random.normal(k[0], (Q, N, S))
    c = coupling_scale * jax.random.normal(k[1], (N, r))
    mask = jax.random.bernoulli(k[2], 0.8, (Q, N, S))
    return a, c, mask


def _exact_loss(a, J, mask, w, wz):
    model = IsingModel(h=a, J=J[None], vartype="BINARY", mask=mask)
    m = jnp.where(mask, exact.marginals(model), 0.0)
    return jnp.sum(w * m) + jnp.sum(wz * exact.log_partition(model))


def _banded_loss(a, c, mask, w, wz):
    x = jnp.where(mask, a, -jnp.inf)
    m = jnp.where(mask, banded_chain_marginals(x, c), 0.0)
    return jnp.sum(w * m) + jnp.sum(wz * banded_chain_log_partition(x, c))


_grad_banded = jax.jit(jax.grad(_banded_loss, argnums=(0, 1)))
# the reference differentiates enumeration with respect to the dense couplings (one compiled
# program per (queries, heads, keys), whatever the range), then maps that gradient to the
# range's couplings through the VJP of _dense
_grad_exact_dense = jax.jit(jax.grad(_exact_loss, argnums=(0, 1)))


def _grad_exact(a, c, mask, w, wz):
    J, to_c = jax.vjp(lambda c: _dense(c, a.shape[-1]), c)
    da, dJ = _grad_exact_dense(a, J, mask, w, wz)
    return da, to_c(dJ)[0]


# (queries, heads, keys, range): one block, keys not a multiple of the block, range 1; blocks
# are min(BLOCK, r) keys (a block's marginals are read from the window after it), so also
# r = BLOCK and r > BLOCK
@pytest.mark.parametrize("Q, N, S, r", [(3, 2, 7, 3), (2, 2, 2 * BLOCK + 3, 1),
                                        (2, 1, BLOCK + 5, 4), (2, 1, BLOCK + 5, BLOCK),
                                        (2, 1, BLOCK + 6, BLOCK + 2)])
def test_marginals_and_log_partition_match_enumeration(Q, N, S, r):
    a, c, mask = _chains(Q, N, S, r, seed=S + r)
    x = jnp.where(mask, a, -jnp.inf)
    model = IsingModel(h=a, J=_dense(c, S)[None], vartype="BINARY", mask=mask)
    m = banded_chain_marginals(x, c)
    np.testing.assert_allclose(jnp.where(mask, m, 0.0), exact.marginals(model), atol=1e-13)
    assert np.all(np.asarray(m)[~np.asarray(mask)] == 0.0)
    np.testing.assert_allclose(banded_chain_log_partition(x, c), exact.log_partition(model),
                               rtol=1e-13)


def test_gradients_match_enumeration():
    """The hand-written vector-Jacobian product (fields and couplings, through masks, two
    blocks and two tiles of queries) against autodiff of exact enumeration."""
    a, c, mask = _chains(TILE_QUERIES + 8, 2, BLOCK + 5, 3, seed=2)
    kw, kz = jax.random.split(jax.random.key(7))
    w, wz = jax.random.normal(kw, a.shape), jax.random.normal(kz, a.shape[:-1])
    for g, e in zip(_grad_banded(a, c, mask, w, wz), _grad_exact(a, c, mask, w, wz)):
        np.testing.assert_allclose(g, e, atol=1e-12)


def test_gradients_match_enumeration_range_beyond_a_block():
    """Blocks of BLOCK keys with a longer range (r > BLOCK): the VJP's pair statistics and the
    readout of a block inside a wider window."""
    # (the shapes of the test above but the range: the reference is compiled once)
    a, c, mask = _chains(TILE_QUERIES + 8, 2, BLOCK + 5, BLOCK + 1, seed=5, coupling_scale=0.5)
    kw, kz = jax.random.split(jax.random.key(8))
    w, wz = jax.random.normal(kw, a.shape), jax.random.normal(kz, a.shape[:-1])
    for g, e in zip(_grad_banded(a, c, mask, w, wz), _grad_exact(a, c, mask, w, wz)):
        np.testing.assert_allclose(g, e, atol=1e-12)


def test_frozen_couplings_gradient_is_the_field_part_of_the_full_one():
    """coupling_grad=False (frozen couplings): the same field gradient without the pair
    statistics (a separate backward sweep), and no gradient for the couplings."""
    a, c, mask = _chains(TILE_QUERIES + 8, 2, 2 * BLOCK + 5, BLOCK, seed=6, coupling_scale=0.4)
    w = jax.random.normal(jax.random.key(9), a.shape)

    def loss(a, c, coupling_grad):
        x = jnp.where(mask, a, -jnp.inf)
        m = banded_chain_marginals(x, c, coupling_grad=coupling_grad)
        return jnp.sum(w * jnp.where(mask, m, 0.0))

    full = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)
    da, dc = full(a, c, True)
    da_frozen, dc_frozen = full(a, c, False)
    np.testing.assert_allclose(da_frozen, da, atol=1e-12)
    assert np.abs(np.asarray(dc)).max() > 1e-3  # the full gradient does reach the couplings
    np.testing.assert_array_equal(dc_frozen, 0.0)


def test_one_chain_per_head_with_as_many_heads_as_keys():
    """Shapes where a per-chain output (one query, N = S heads) looks like a per-key one."""
    a, c, _ = _chains(1, BLOCK, BLOCK, 2, seed=4)
    model = IsingModel(h=a, J=_dense(c, BLOCK)[None], vartype="BINARY")
    np.testing.assert_allclose(banded_chain_log_partition(a, c), exact.log_partition(model),
                               rtol=1e-13)


def test_log_partition_gradient_is_the_marginals():
    a, c, mask = _chains(4, 2, 11, 3, seed=1)
    x = jnp.where(mask, a, -jnp.inf)
    g = jax.grad(lambda a: jnp.sum(banded_chain_log_partition(jnp.where(mask, a, -jnp.inf), c)))(a)
    np.testing.assert_allclose(g, jnp.where(mask, banded_chain_marginals(x, c), 0.0), atol=1e-13)


def _layer_loss(q, kk, v, p, c, method):
    o = boltzmann_attention(q, kk, v, is_causal=True, couplings=c.replace(p), beta=1.2,
                            chemical_potential=-0.3, method=method)
    return jnp.sum(jnp.sin(o)), o


@pytest.mark.parametrize("T, S", [(5, 5), (6, 6), (4, 7), (7, 4)])
def test_causal_packing_gives_the_exact_layer(T, S):
    """Rows packed in pairs (odd T: the middle row alone; T > S: rows longer than S, by the
    index tables) give the outputs of enumeration; the gradients are checked where the packing
    is skewed (T <= S) and square."""
    k = jax.random.split(jax.random.key(T * 10 + S), 4)
    q = jax.random.normal(k[0], (2, T, 2, 4))
    kk, v = jax.random.normal(k[1], (2, S, 2, 4)), jax.random.normal(k[2], (2, S, 2, 4))
    c = Couplings.learned(2, "banded", bandwidth=3, key=k[3], strength=1.0)
    if T > S:
        np.testing.assert_allclose(_layer_loss(q, kk, v, c.params, c, "transfer")[1],
                                   _layer_loss(q, kk, v, c.params, c, "exact")[1], atol=1e-13)
        return
    # T < S: the keys' and values' gradients too (every key of the skewed rows)
    argnums = (0, 3) if T == S else (0, 1, 2, 3)
    grad = jax.value_and_grad(_layer_loss, argnums=argnums, has_aux=True)
    (_, oe), ge = grad(q, kk, v, c.params, c, "exact")
    (_, ot), gt = grad(q, kk, v, c.params, c, "transfer")
    np.testing.assert_allclose(ot, oe, atol=1e-13)
    for a, b in zip(gt, ge):
        np.testing.assert_allclose(a, b, atol=1e-12)


@pytest.mark.parametrize("T, S, r", [(2, 2, 1), (5, 5, 2), (6, 6, 3), (4, 7, 2), (3, 9, 8),
                                     (64, 64, 8)])
def test_skewed_packing_is_the_tables_packing_and_its_own_transpose(T, S, r):
    """The reshape-based packing (T <= S) builds the chains of the index tables bit for bit,
    unpacking returns every allowed key and 0 elsewhere, and each one's VJP is the other's
    linear transpose (their custom VJPs against ``jax.linear_transpose`` of the plain maps)."""
    rng = np.random.default_rng(T * 100 + S)
    allowed = np.tril(np.ones((T, S), bool))
    a = np.where(allowed, rng.normal(size=(2, 3, T, S)), -np.inf)
    src, _ = _causal_packing(T, S, r)
    tables = np.where(src >= 0, a.reshape(2, 3, T * S)[..., src.clip(0)], -np.inf)
    packed = np.asarray(_skew_pack(jnp.asarray(a), r))
    np.testing.assert_array_equal(packed, tables)
    back = _skew_unpack(jnp.asarray(np.where(np.isfinite(packed), packed, 0.0)), S, r)
    np.testing.assert_array_equal(back, np.where(allowed, a, 0.0))

    dense = jnp.asarray(rng.normal(size=(2, 3, T, S)))
    chains = jnp.asarray(rng.normal(size=packed.shape))
    # the plain maps (linear: packing with 0 at the held keys), transposed by JAX
    pack = jax.linear_transpose(lambda x: _pack(x, r, 0.0), dense)
    unpack = jax.linear_transpose(lambda y: _unpack(y, S, r), chains)
    np.testing.assert_array_equal(jax.vjp(lambda x: _skew_pack(x, r), dense)[1](chains)[0],
                                  pack(chains)[0])
    np.testing.assert_array_equal(jax.vjp(lambda y: _skew_unpack(y, S, r), chains)[1](dense)[0],
                                  unpack(dense)[0])


def test_causal_packing_tables_cover_every_allowed_key_once():
    T, S, r = 7, 5, 2
    src, dst = _causal_packing(T, S, r)
    assert src.shape[0] == (T + 1) // 2
    allowed = np.tril(np.ones((T, S), bool))
    # every allowed (t, k) has one packed position, and that position reads it back
    flat_src = src.reshape(-1)
    for t in range(T):
        for k in range(S):
            pos = dst[t, k]
            assert (pos >= 0) == allowed[t, k]
            if allowed[t, k]:
                assert flat_src[pos] == t * S + k
    # two rows in one chain are separated by at least r held keys
    for row in src:
        rows = [i // S if i >= 0 else -1 for i in row]
        change = [j for j in range(1, len(rows)) if rows[j] >= 0 and rows[j - 1] < 0]
        for j in change:
            assert all(x < 0 for x in row[j - r: j])


# compiled once per shape and dtype, shared by the float32-range tests below
_marginals = jax.jit(banded_chain_marginals)
_weighted_vjp = jax.jit(jax.grad(
    lambda a, c, g: jnp.sum(g * banded_chain_marginals(a, c)), argnums=(0, 1)))
_weighted_vjp_frozen = jax.jit(jax.grad(
    lambda a, c, g: jnp.sum(g * banded_chain_marginals(a, c, coupling_grad=False))))


def test_float32_matches_float64_for_strong_couplings():
    """Float32 agrees with float64 to about 1e-6, with fields up to |a| ~ 100, on both sides of
    the fast path's limit (sum_d |c_d| <= 20: 8 keys per renormalization; beyond 20 the
    log-domain path)."""
    a, c, _ = _chains(32, 2, 60, 8, seed=3, field_scale=30.0)
    g = jax.random.normal(jax.random.key(4), a.shape)
    g32 = g.astype("float32")
    for total in (9.9, 19.9, 25.0):
        ct = c / jnp.sum(jnp.abs(c), axis=-1, keepdims=True) * total
        a32, c32 = a.astype("float32"), ct.astype("float32")
        np.testing.assert_allclose(_marginals(a32, c32), _marginals(a, ct), atol=1e-5)
        for x32, x64 in zip(_weighted_vjp(a32, c32, g32), _weighted_vjp(a, ct, g)):
            assert float(jnp.max(jnp.abs(x32 - x64)) / jnp.max(jnp.abs(x64))) < 1e-4, total


@pytest.mark.parametrize("total", [17.9, 19.9])
def test_float32_gradient_when_every_block_drifts_to_the_edge_of_its_range(total):
    """The worst case of the unnormalized stretches: positive couplings at the top of a range
    and strong positive fields put the weight on the all-ones window, so the messages grow by
    the full bound, exp(total / 2) per key, in every block, forward and backward. 17.9: the top
    of the hand-written VJP's float32 range (``_grad_limit``, 18); a block's start is kept
    unnormalized (its normalization is applied in the next step), so its product with the
    backward message must be formed after that scale (formed before, it reached
    exp(2 * 8 * total / 2) and made every gradient NaN). 19.9: the top of the forward pass's
    range (20), where the VJP's derivative messages leave float32's range (NaN from 19.3 on, with
    g normalized) and the gradient comes from the log-domain path. The chains are nearly
    deterministic here, so the gradients are close to 0 and the check is absolute: float32
    rounding of covariances of terms of the size of ``G = sum_k g_k s_k``, bounded to first
    order by one rounding per key of a length-S recursion, ``S u`` (u the unit roundoff) times
    the sum of ``|g|`` that an entry's covariances draw on (per query and head for ``da``, over
    the queries of a head for ``dc``). The error itself depends on the summation order the
    compiler picks for the machine (the compiled VJP's ``dc`` error here: 0.06 with AVX2, 0.10
    with AVX-512, where the bound is 0.94; ``da``'s is at most 0.003, its bound at least
    0.098)."""
    S = 6 * BLOCK + 1
    k = jax.random.split(jax.random.key(11), 3)
    a = 30.0 + jax.random.normal(k[0], (8, 2, S))
    c = jax.random.uniform(k[1], (2, 8), minval=0.5, maxval=1.0)
    c = c / jnp.sum(c, axis=-1, keepdims=True) * total
    g = 1e3 * jax.random.normal(k[2], a.shape)  # the range does not depend on g's scale
    a32, c32, g32 = a.astype("float32"), c.astype("float32"), g.astype("float32")
    np.testing.assert_allclose(_marginals(a32, c32), _marginals(a, c), atol=1e-6)
    u = np.finfo(np.float32).eps / 2  # the unit roundoff
    bound = S * u * jnp.sum(jnp.abs(g), axis=-1)  # (Q, N)
    (da32, dc32), (da64, dc64) = _weighted_vjp(a32, c32, g32), _weighted_vjp(a, c, g)
    for x32, x64, tol in [(da32, da64, bound[..., None]), (dc32, dc64, bound.sum(0)[:, None]),
                          (_weighted_vjp_frozen(a32, c32, g32), _weighted_vjp_frozen(a, c, g),
                           bound[..., None])]:
        assert bool(jnp.all(jnp.isfinite(x32)))
        assert bool(jnp.all(jnp.abs(x32 - x64) <= tol)), float(jnp.max(jnp.abs(x32 - x64) / tol))


def test_couplings_beyond_the_fast_range_are_finite_and_match_float64():
    """Heads beyond the probability-space range (float32: 20) take the log-domain path: finite,
    and float32 agrees with float64 (which still takes the fast path at 31) to the rounding of
    terms of the size of the couplings."""
    a, c, _ = _chains(4, 2, 20, 8, seed=5)
    c = c / jnp.sum(jnp.abs(c), axis=-1, keepdims=True) * 31.0
    a32, c32 = a.astype("float32"), c.astype("float32")
    m32 = banded_chain_marginals(a32, c32)
    assert bool(jnp.all(jnp.isfinite(m32)))
    np.testing.assert_allclose(m32, banded_chain_marginals(a, c), atol=1e-5)
    lz32 = banded_chain_log_partition(a32, c32)
    np.testing.assert_allclose(lz32, banded_chain_log_partition(a, c), rtol=1e-6)
