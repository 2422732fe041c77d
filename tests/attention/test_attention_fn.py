"""boltzmann_attention_fn as the attention_fn of Flax's own modules: equal to a direct
boltzmann_attention call on the projected queries, keys and values; equal to Flax's attention
with the softmax readout (dropout included, bit for bit the same keep mask); masks, bias,
leading batch dimensions, dtype, precision, PRNG keys, jit, grad and errors."""

import warnings

import flax.linen as nn
import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from flax.linen import attention as linen_attention

from isingattn.attention import (
    BoltzmannAttentionFn,
    Couplings,
    boltzmann_attention,
    boltzmann_attention_fn,
    sampled,
)
from isingattn.samplers import ExactSampler

B, T, N, H, F = 2, 4, 2, 4, 8
J = Couplings.fixed(jnp.array([[0.7, -0.3], [0.4, 0.2]]), "banded")  # per head, range 2
TOL = {"rtol": 2e-5, "atol": 2e-6}


def _qkv(seed=0, batch=(B,), T=T, S=T, K=N):
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    return (jax.random.normal(kq, batch + (T, N, H)), jax.random.normal(kk, batch + (S, K, H)),
            jax.random.normal(kv, batch + (S, K, H)))


def _x(seed=1):
    return jax.random.normal(jax.random.key(seed), (B, T, F))


def _nnx_layer(attention_fn, **kw):
    return nnx.MultiHeadAttention(num_heads=N, in_features=F, decode=False,
                                  attention_fn=attention_fn, rngs=nnx.Rngs(0), **kw)


def _nnx_projections(layer, x):
    return layer.query(x), layer.key(x), layer.value(x)


@pytest.mark.parametrize("method", ["exact", "transfer"])
def test_nnx_multi_head_attention_equals_direct_call_on_projections(method):
    fn = boltzmann_attention_fn(J, method=method, beta=1.3, chemical_potential=-0.5)
    layer = _nnx_layer(fn)
    x = _x()
    mask = nnx.make_causal_mask(x[..., 0])  # float32 (B, 1, T, T), 1 = attend
    q, k, v = _nnx_projections(layer, x)
    for m, causal in ((None, False), (mask, False), (None, True)):
        got = layer(x, mask=m, is_causal=causal)
        direct = boltzmann_attention(q, k, v, mask=None if m is None else m.astype(bool),
                                     is_causal=causal, couplings=J, method=method, beta=1.3,
                                     chemical_potential=-0.5)
        np.testing.assert_allclose(got, layer.out(direct), **TOL)
    # the causal mask matters (not a vacuous comparison)
    assert not np.allclose(layer(x, mask=mask), layer(x))


def test_linen_multi_head_dot_product_attention_equals_direct_call_on_projections():
    fn = boltzmann_attention_fn(J, method="exact")
    layer = nn.MultiHeadDotProductAttention(num_heads=N, qkv_features=F, attention_fn=fn)
    x = _x()
    mask = nn.make_causal_mask(x[..., 0])
    params = layer.init(jax.random.key(0), x)["params"]
    got = jax.jit(lambda p, x, m: layer.apply({"params": p}, x, mask=m))(params, x, mask)

    def dense(name, x, features, axis=-1):
        return nn.DenseGeneral(features, axis=axis).apply({"params": params[name]}, x)

    q, k, v = (dense(n, x, (N, F // N)) for n in ("query", "key", "value"))
    direct = boltzmann_attention(q, k, v, mask=mask != 0, couplings=J, method="exact")
    np.testing.assert_allclose(got, dense("out", direct, F, axis=(-2, -1)), **TOL)


def test_softmax_readout_equals_flax_dot_product_attention_bias_mask_dropout():
    q, k, v = _qkv()
    bias = jax.random.normal(jax.random.key(3), (1, N, T, T))
    mask = jax.random.bernoulli(jax.random.key(4), 0.7, (B, 1, T, T)).at[..., 0].set(True)
    fn = boltzmann_attention_fn(readout="softmax")
    drop = {"dropout_rng": jax.random.key(5), "dropout_rate": 0.4, "deterministic": False}
    for kw in ({}, drop, dict(drop, broadcast_dropout=False)):
        got = fn(q, k, v, bias, mask, **kw)
        for flax_fn in (nnx.dot_product_attention, linen_attention.dot_product_attention):
            np.testing.assert_allclose(got, flax_fn(q, k, v, bias, mask, **kw), **TOL)


def test_softmax_readout_in_nnx_module_equals_flax_default_with_dropout():
    x = _x()
    ours = _nnx_layer(boltzmann_attention_fn(readout="softmax"), dropout_rate=0.3)
    flax = _nnx_layer(nnx.dot_product_attention, dropout_rate=0.3)  # same seeds: same params
    for deterministic in (True, False):
        np.testing.assert_allclose(ours(x, deterministic=deterministic),
                                   flax(x, deterministic=deterministic), **TOL)


def test_leading_batch_dims_bias_and_mask_broadcast_like_flax():
    batch = (2, 3)
    q, k, v = _qkv(batch=batch)
    mask = nnx.make_causal_mask(jnp.ones(batch + (T,)))  # (2, 3, 1, T, T)
    bias = jax.random.normal(jax.random.key(6), (3, 1, T, T))  # broadcasts over the first axis
    fn = boltzmann_attention_fn(J, method="exact")
    got = fn(q, k, v, bias, mask)
    assert got.shape == q.shape
    one = jax.jit(lambda q, k, v, b, m: boltzmann_attention(q, k, v, b, m != 0, couplings=J))
    for i in range(batch[0]):
        for j in range(batch[1]):
            want = one(q[i, j], k[i, j], v[i, j], bias[j], mask[i, j])
            np.testing.assert_allclose(got[i, j], want, **TOL)
    # no batch dimension at all, as Flax allows
    np.testing.assert_allclose(fn(q[0, 0], k[0, 0], v[0, 0]),
                               boltzmann_attention(q[0, 0], k[0, 0], v[0, 0], couplings=J), **TOL)


def _identity_values(batch, S=T, K=N):
    # v[..., s, n, :] = e_s, so that out[..., t, n, s] is the (dropped) weight a_ts of head n
    return jnp.broadcast_to(jnp.eye(S, H)[:, None, :], batch + (S, K, H))


@pytest.mark.parametrize("broadcast_dropout", [True, False])
@pytest.mark.parametrize("K", [N, 1])
def test_dropout_zeroes_flax_keep_mask_and_rescales(broadcast_dropout, K):
    q, k, _ = _qkv(K=K)
    v = _identity_values((B,), K=K)
    fn = boltzmann_attention_fn(J, method="exact")
    rate, rng = 0.5, jax.random.key(7)
    plain = fn(q, k, v)
    np.testing.assert_array_equal(
        fn(q, k, v, dropout_rng=rng, dropout_rate=rate, deterministic=True), plain)
    got = fn(q, k, v, dropout_rng=rng, dropout_rate=rate, deterministic=False,
             broadcast_dropout=broadcast_dropout)
    _, info = boltzmann_attention(q, k, v, couplings=J, method="exact", return_weights=True)
    shape = (1, 1, T, T) if broadcast_dropout else (B, N, T, T)
    keep = jax.random.bernoulli(rng, 1 - rate, shape)  # what Flax draws from the same key
    weights = jnp.moveaxis(got[..., :T], 1, 2)  # (B, N, T, S)
    assert np.all(np.asarray(info.weights) > 0)  # so every zero below is dropout's
    np.testing.assert_array_equal(weights == 0, jnp.broadcast_to(~keep, weights.shape))
    np.testing.assert_allclose(weights, info.weights * keep / (1 - rate), **TOL)


def test_dtype_promotes_inputs_and_sets_output_dtype():
    q, k, v = _qkv()
    fn = boltzmann_attention_fn(J, method="exact")
    got = fn(q, k, v, dtype=jnp.bfloat16)
    assert got.dtype == jnp.bfloat16
    want = boltzmann_attention(*(x.astype(jnp.bfloat16) for x in (q, k, v)), couplings=J)
    np.testing.assert_array_equal(got.astype(jnp.float32), want.astype(jnp.float32))
    assert fn(q, k, v).dtype == jnp.float32


def _dot_precisions(fn, *args, **kw):
    jaxpr = jax.make_jaxpr(lambda *a: fn(*a, **kw))(*args)
    found = []

    def walk(jx):
        for eqn in jx.eqns:
            if eqn.primitive.name == "dot_general":
                found.append(eqn.params["precision"])
            for sub in jax.extend.core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jaxpr.jaxpr)
    return found


@pytest.mark.parametrize("precision", ["highest", jax.lax.Precision.HIGHEST,
                                       (jax.lax.Precision.HIGHEST,) * 2])
def test_precision_reaches_every_matmul(precision):
    q, k, v = _qkv()
    fn = boltzmann_attention_fn(J, method="exact")
    found = _dot_precisions(fn, q, k, v, precision=precision, dropout_rng=jax.random.key(0),
                            dropout_rate=0.1)
    assert found and all(p == (jax.lax.Precision.HIGHEST,) * 2 for p in found), found
    assert all(p is None for p in _dot_precisions(fn, q, k, v))
    np.testing.assert_allclose(fn(q, k, v, precision=precision), fn(q, k, v), **TOL)


def test_sampled_method_keys():
    q, k, v = _qkv()
    method = sampled(ExactSampler(), 8)
    key = jax.random.key(11)
    direct = boltzmann_attention(q, k, v, couplings=J, method=method, rng=key)
    # a fixed key: the same draws as the function with that key, on every call
    fixed = boltzmann_attention_fn(J, method=method, rng=key)
    np.testing.assert_array_equal(fixed(q, k, v), direct)
    np.testing.assert_array_equal(fixed(q, k, v), direct)
    # a key of the call wins
    np.testing.assert_array_equal(boltzmann_attention_fn(J, method=method)(q, k, v, rng=key),
                                  direct)
    # no key anywhere: the error names the ways to give one
    with pytest.raises(ValueError, match=r"stochastic.*rngs=nnx\.Rngs.*rng=jax\.random\.key"):
        boltzmann_attention_fn(J, method=method)(q, k, v)
    # from dropout_rng: independent of the dropout mask, reproducible
    fn = boltzmann_attention_fn(J, method=method)
    a = fn(q, k, v, dropout_rng=jax.random.key(1), dropout_rate=0.1)
    np.testing.assert_array_equal(a, fn(q, k, v, dropout_rng=jax.random.key(1), dropout_rate=0.1))
    assert not np.array_equal(a, fn(q, k, v, dropout_rng=jax.random.key(2), dropout_rate=0.1))


def test_sampled_method_in_nnx_module_under_jit_fresh_keys_from_rngs():
    x = _x()

    def build():
        fn = boltzmann_attention_fn(J, method=sampled(ExactSampler(), 8), readout="sample",
                                    rngs=nnx.Rngs(attention=3))
        return _nnx_layer(fn)

    step = nnx.jit(lambda m, x: m(x))
    layer = build()
    first, second = step(layer, x), step(layer, x)
    assert not np.array_equal(first, second)  # the stream advanced inside nnx.jit
    np.testing.assert_array_equal(step(build(), x), first)  # same seed, same draws
    # linen: the key comes from the module's rngs when Flax passes the module
    lin = nn.MultiHeadDotProductAttention(
        num_heads=N, qkv_features=F,
        attention_fn=boltzmann_attention_fn(J, method=sampled(ExactSampler(), 8)))
    rngs = {"params": jax.random.key(0), "attention": jax.random.key(1)}
    params = lin.init(rngs, x, sow_weights=True)["params"]
    out, _ = lin.apply({"params": params}, x, sow_weights=True,
                       rngs={"attention": jax.random.key(2)}, mutable=["intermediates"])
    again, _ = lin.apply({"params": params}, x, sow_weights=True,
                         rngs={"attention": jax.random.key(2)}, mutable=["intermediates"])
    assert out.shape == x.shape and np.all(np.isfinite(out))
    np.testing.assert_array_equal(out, again)


def test_sow_weights_records_boltzmann_weights():
    fn = boltzmann_attention_fn(J, method="exact")
    layer = _nnx_layer(fn)
    x = _x()
    _, captured = nnx.capture(lambda m, x: m(x, sow_weights=True), nnx.Intermediate)(layer, x)
    sown = captured["attention_weights"][0]
    _, info = boltzmann_attention(*_nnx_projections(layer, x), couplings=J, return_weights=True)
    np.testing.assert_allclose(sown, info.weights, **TOL)


def test_jit_and_grad_through_nnx_module_equal_direct_composition():
    fn = boltzmann_attention_fn(J, method="exact")
    layer = _nnx_layer(fn)
    x = _x()
    mask = nnx.make_causal_mask(x[..., 0])

    @nnx.jit
    def loss(layer, x):
        return jnp.sum(jnp.sin(layer(x, mask=mask)))

    def loss_direct(layer, x):
        q, k, v = _nnx_projections(layer, x)
        o = boltzmann_attention(q, k, v, mask=mask.astype(bool), couplings=J, method="exact")
        return jnp.sum(jnp.sin(layer.out(o)))

    np.testing.assert_allclose(loss(layer, x), loss_direct(layer, x), **TOL)
    g = nnx.jit(nnx.grad(loss))(layer, x)
    g_direct = nnx.grad(loss_direct)(layer, x)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_direct), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert any(float(jnp.max(jnp.abs(a))) > 0 for a in jax.tree.leaves(g))
    gx = jax.jit(jax.grad(lambda x: jnp.sum(fn(x, x, x, mask=mask))))(_qkv()[0])
    assert np.all(np.isfinite(gx)) and float(jnp.max(jnp.abs(gx))) > 0


def test_errors_name_parameter_value_and_valid_choices():
    q, k, v = _qkv()
    fn = boltzmann_attention_fn(J)
    with pytest.raises(ValueError, match="qk_attn_weights_einsum cannot be honoured"):
        fn(q, k, v, qk_attn_weights_einsum=jnp.einsum)
    with pytest.raises(ValueError, match=r"dropout_rate must be in \[0, 1\); got dropout_rate=1"):
        fn(q, k, v, dropout_rate=1.0, dropout_rng=jax.random.key(0))
    with pytest.raises(ValueError, match="needs dropout_rng"):
        fn(q, k, v, dropout_rate=0.1)
    with pytest.raises(ValueError, match="precision must be one precision"):
        fn(q, k, v, precision=(jax.lax.Precision.HIGHEST, jax.lax.Precision.DEFAULT))
    with pytest.raises(ValueError, match="precision must be None.*'highest'.*got precision='hi'"):
        fn(q, k, v, precision="hi")
    with pytest.raises(ValueError, match=r"same batch dimensions.*\(3, 4, 2, 4\)"):
        fn(q, k[:1].repeat(3, 0), v[:1].repeat(3, 0))
    with pytest.raises(ValueError, match=r"mask must broadcast to \(batch..., N, T, S\)"):
        fn(q, k, v, mask=jnp.ones((3, 1, T, T), bool))
    with pytest.raises(TypeError, match="couplings must be a Couplings"):
        boltzmann_attention_fn(jnp.zeros((2, 2)))
    with pytest.raises(ValueError, match="readout must be one of"):
        boltzmann_attention_fn(readout="sigmoid")
    with pytest.raises(ValueError, match="readout='sample'"):
        boltzmann_attention_fn(readout="sample", method="exact")
    with pytest.raises(ValueError, match="either rng"):
        boltzmann_attention_fn(rng=jax.random.key(0), rngs=nnx.Rngs(0))
    with pytest.warns(UserWarning, match="will not train them.*BoltzmannMultiHeadAttention"):
        boltzmann_attention_fn(Couplings.learned(N, "banded", bandwidth=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(boltzmann_attention_fn(J), BoltzmannAttentionFn)
