"""Flax NNX module and transformer: parameters, gradients, the one-argument attention switch,
and importing the function without flax."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from isingattn.attention import (
    BoltzmannMultiHeadAttention,
    CouplingSpec,
    TransformerLM,
    sampled,
)
from isingattn.attention._function import dropout_weights
from isingattn.attention._nnx import FrozenCouplings
from isingattn.samplers import ExactSampler


def test_function_import_does_not_import_flax():
    code = (
        "import sys\n"
        "from isingattn.attention import boltzmann_attention, Couplings, sampled\n"
        "assert 'flax' not in sys.modules, 'flax imported'\n"
        "from isingattn.attention import BoltzmannMultiHeadAttention\n"
        "assert 'flax' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _nonzero(tree):
    return all(float(jnp.max(jnp.abs(x))) > 0 for x in jax.tree_util.tree_leaves(tree))


@pytest.mark.parametrize("method", ["exact", "mean_field"])
def test_gradients_reach_couplings_chemical_potential_and_projections(method):
    layer = BoltzmannMultiHeadAttention(
        2, 8, couplings=CouplingSpec("learned", "banded", bandwidth=2, init=0.3),
        method=method, num_kv_heads=1, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (2, 5, 8))
    grads = nnx.grad(lambda m: jnp.sum(jnp.sin(m(x, is_causal=True))))(layer)
    g = nnx.state(grads, nnx.Param)
    assert _nonzero(g["couplings"]) and _nonzero(g["chemical_potential"])
    for proj in ("query", "key", "value", "out"):
        assert _nonzero(g[proj]), proj


def test_sampled_module_trains_couplings_under_jit():
    layer = BoltzmannMultiHeadAttention(
        2, 8, couplings=CouplingSpec("learned", "banded", bandwidth=2, init=0.3),
        method=sampled(ExactSampler(), 16), rngs=nnx.Rngs(0, attention=5))
    x = jax.random.normal(jax.random.key(1), (2, 5, 8))

    @nnx.jit
    def grad(m):
        return nnx.grad(lambda m: jnp.sum(jnp.sin(m(x))))(m)

    g = nnx.state(grad(layer), nnx.Param)
    assert _nonzero(g["couplings"]) and _nonzero(g["query"])


def test_frozen_couplings_are_not_params():
    layer = BoltzmannMultiHeadAttention(
        2, 8, couplings=CouplingSpec("random", "relative", max_distance=3), rngs=nnx.Rngs(0))
    assert isinstance(layer.couplings, FrozenCouplings)
    assert "couplings" not in nnx.state(layer, nnx.Param)
    assert layer.coupling_object().kind == "random"


def test_softmax_module_is_projected_dot_product_attention():
    layer = BoltzmannMultiHeadAttention(2, 8, readout="softmax", rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (2, 5, 8))
    q = layer.query(x).reshape(2, 5, 2, 4)
    k = layer.key(x).reshape(2, 5, 2, 4)
    v = layer.value(x).reshape(2, 5, 2, 4)
    ref = layer.out(jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(2, 5, 8))
    np.testing.assert_allclose(layer(x, is_causal=True), ref, rtol=1e-5, atol=1e-6)
    assert "chemical_potential" not in nnx.state(layer, nnx.Param)


def test_transformer_attention_is_one_argument():
    tokens = jax.random.randint(jax.random.key(0), (2, 6), 0, 7)
    spec = {"couplings": CouplingSpec("learned", "banded", bandwidth=2), "method": "mean_field"}
    for attention in ("softmax", "boltzmann", spec):
        lm = TransformerLM(7, d_model=8, num_heads=2, num_layers=1, max_length=6,
                           attention=attention, rngs=nnx.Rngs(0))
        assert lm(tokens).shape == (2, 6, 7)
        assert lm.blocks[0].attn.readout == ("softmax" if attention == "softmax" else "marginal")
    g = nnx.state(nnx.grad(lambda m: jnp.mean(m(tokens) ** 2))(lm), nnx.Param)
    assert _nonzero(g["blocks"][0]["attn"]["couplings"])


def test_transformer_is_causal():
    lm = TransformerLM(7, d_model=8, num_heads=2, num_layers=1, max_length=6,
                       attention={"couplings": CouplingSpec("random", bandwidth=2)},
                       rngs=nnx.Rngs(0))
    t1 = jnp.array([[1, 2, 3, 4, 5, 6]])
    t2 = t1.at[0, 4].set(0)
    np.testing.assert_allclose(lm(t1)[0, :4], lm(t2)[0, :4], rtol=1e-6)


def test_module_bad_input():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        BoltzmannMultiHeadAttention(3, 8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        BoltzmannMultiHeadAttention(4, 8, num_kv_heads=3, rngs=nnx.Rngs(0))
    layer = BoltzmannMultiHeadAttention(2, 8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"got \(2, 5, 8\), \(3, 5, 8\) and \(3, 5, 8\)"):
        layer(jnp.ones((2, 5, 8)), jnp.ones((3, 5, 8)))
    with pytest.raises(ValueError, match=r"inputs_q must be \(\.\.\., T, 8\)"):
        layer(jnp.ones((2, 5, 6)))
    with pytest.raises(ValueError, match="inputs_v needs inputs_k"):
        layer(jnp.ones((2, 5, 8)), inputs_v=jnp.ones((2, 5, 8)))
    with pytest.raises(ValueError, match=r"dropout_rate must be in \[0, 1\)"):
        BoltzmannMultiHeadAttention(2, 8, dropout_rate=1.0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="dropout_rate=0.5 needs deterministic"):
        BoltzmannMultiHeadAttention(2, 8, dropout_rate=0.5, rngs=nnx.Rngs(0))(jnp.ones((1, 3, 8)))
    lm = TransformerLM(5, d_model=8, num_heads=2, num_layers=1, max_length=4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="max_length = 4"):
        lm(jnp.zeros((1, 6), jnp.int32))
    with pytest.raises(ValueError, match="attention must be"):
        TransformerLM(5, d_model=8, num_heads=2, attention="linear", rngs=nnx.Rngs(0))


# --------------------------------------------------------------------------------------------
# nnx.MultiHeadAttention's constructor and call


def _copy_projections(ours, theirs, N, H):
    """Our flat Linear projections from nnx.MultiHeadAttention's LinearGeneral ones."""
    for name in ("query", "key", "value"):
        src, dst = getattr(theirs, name), getattr(ours, name)
        dst.kernel[...] = src.kernel[...].reshape(dst.kernel.shape)
        if src.bias is not None:
            dst.bias[...] = src.bias[...].reshape(dst.bias.shape)
    ours.out.kernel[...] = theirs.out.kernel[...].reshape(ours.out.kernel.shape)
    if theirs.out.bias is not None:
        ours.out.bias[...] = theirs.out.bias[...]


@pytest.mark.parametrize("normalize_qk", [False, True])
def test_softmax_module_equals_nnx_multi_head_attention(normalize_qk):
    """Same constructor arguments (qkv_features positional, biases, cross attention with other
    key/value features, leading batch axes, a mask, normalize_qk, dropout with the same
    stream) and the same weights: the outputs and sown weights of the softmax readout equal
    Flax's."""
    N, F, Fkv, qkv = 2, 6, 5, 8
    kw = {"in_kv_features": Fkv, "dropout_rate": 0.25, "broadcast_dropout": False,
          "normalize_qk": normalize_qk}
    theirs = nnx.MultiHeadAttention(N, F, qkv, 7, rngs=nnx.Rngs(0), decode=False, **kw)
    ours = BoltzmannMultiHeadAttention(N, F, qkv, 7, readout="softmax", rngs=nnx.Rngs(0), **kw)
    _copy_projections(ours, theirs, N, qkv // N)
    xq = jax.random.normal(jax.random.key(1), (3, 2, 4, F))
    xk = jax.random.normal(jax.random.key(2), (3, 2, 5, Fkv))
    xv = jax.random.normal(jax.random.key(3), (3, 2, 5, Fkv))
    mask = jax.random.bernoulli(jax.random.key(4), 0.8, (3, 2, 1, 4, 5)).at[..., 0].set(True)
    if normalize_qk:  # Flax's float 0/1 masks too
        mask = mask.astype(jnp.float32)
    for det in (True, False):
        want, w_theirs = nnx.capture(
            lambda m, det=det: m(xq, xk, xv, mask=mask, deterministic=det,
                                 rngs=nnx.Rngs(dropout=5), sow_weights=True),
            nnx.Intermediate)(theirs)
        got, w_ours = nnx.capture(
            lambda m, det=det: m(xq, xk, xv, mask=mask, deterministic=det,
                                 rngs=nnx.Rngs(dropout=5), sow_weights=True),
            nnx.Intermediate)(ours)
        assert got.shape == (3, 2, 4, 7)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(w_ours["attention_weights"][0],
                                   w_theirs["attention_weights"][0], rtol=2e-5, atol=2e-6)


def test_module_flax_options_reach_parameters_and_dropout():
    layer = BoltzmannMultiHeadAttention(
        2, 8, couplings=CouplingSpec("learned", "banded", bandwidth=2),
        param_dtype=jnp.float16, kernel_init=nnx.initializers.ones_init(),
        out_bias_init=nnx.initializers.constant(0.5), dropout_rate=0.5, deterministic=True,
        rngs=nnx.Rngs(0))
    assert layer.query.bias is not None  # use_bias defaults to True, as in Flax
    assert layer.query.kernel.dtype == jnp.float16
    np.testing.assert_array_equal(layer.key.kernel[...], 1)
    np.testing.assert_array_equal(layer.out.bias[...], 0.5)
    np.testing.assert_array_equal(layer.query.bias[...], 0)
    x = jax.random.normal(jax.random.key(0), (2, 5, 8))
    quiet = layer(x)  # deterministic=True from the constructor: no dropout
    np.testing.assert_array_equal(quiet, layer(x, deterministic=True))
    noisy = layer(x, deterministic=False)
    assert not np.allclose(noisy, quiet)
    again = layer(x, deterministic=False)  # the module's dropout stream moves on
    assert not np.allclose(again, noisy)
    # the dropout mask is the function's, from the stream's key
    key = nnx.Rngs(dropout=3)["dropout"]()
    _, info = layer(x, return_weights=True)
    want = layer(x, deterministic=False, rngs=nnx.Rngs(dropout=3))
    o = jnp.einsum("bnts,bsnh->btnh",
                   dropout_weights(info.weights.astype(jnp.float32), 0.5, key, True),
                   layer.value(x).reshape(2, 5, 2, 4))
    np.testing.assert_allclose(want, layer.out(o.reshape(2, 5, 8)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attention", [
    "softmax",
    {"couplings": CouplingSpec("learned", "banded", bandwidth=2), "method": "transfer",
     "chemical_potential": -1.0},
])
def test_scanned_layers_equal_unrolled_layers_with_the_same_parameters(attention):
    """scan_layers stacks the blocks: with the unrolled model's parameters stacked into it,
    outputs and gradients are the unrolled model's; attention and residual dropout draw per
    layer and turn off with deterministic=True."""
    kw = {"d_model": 8, "num_heads": 2, "num_layers": 3, "max_length": 6, "attention": attention}
    unrolled = TransformerLM(7, rngs=nnx.Rngs(0), **kw)
    scanned = TransformerLM(7, scan_layers=True, rngs=nnx.Rngs(1), **kw)
    per_layer = [nnx.state(b, nnx.Param) for b in unrolled.blocks]
    nnx.update(scanned.blocks, jax.tree.map(lambda *xs: jnp.stack(xs), *per_layer))
    for name in ("embed", "pos", "ln_f", "head"):
        nnx.update(getattr(scanned, name), nnx.state(getattr(unrolled, name), nnx.Param))
    tokens = jnp.array([[1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1]])
    np.testing.assert_allclose(scanned(tokens), unrolled(tokens), rtol=1e-5, atol=1e-6)

    def loss(m):
        return jnp.sum(m(tokens) ** 2)

    g_un = nnx.grad(loss)(unrolled)
    g_sc = nnx.grad(loss)(scanned)
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[g_un["blocks"][i] for i in range(3)])
    leaves_sc = jax.tree.leaves(g_sc["blocks"])
    assert len(leaves_sc) == len(jax.tree.leaves(stacked)) > 0
    for a, b in zip(jax.tree.leaves(stacked), leaves_sc):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    drop = TransformerLM(7, scan_layers=True, dropout=0.2, attention_dropout=0.3,
                         rngs=nnx.Rngs(0), **kw)
    quiet = drop(tokens, deterministic=True)
    np.testing.assert_array_equal(quiet, drop(tokens, deterministic=True))
    assert not np.allclose(drop(tokens), quiet)
    with pytest.raises(ValueError, match="scan_layers=True does not take sampled"):
        TransformerLM(7, scan_layers=True, rngs=nnx.Rngs(0),
                      **{**kw, "attention": {"method": sampled(ExactSampler(), 4)}})


# --------------------------------------------------------------------------------------------
# autoregressive decoding with the key/value cache


@pytest.mark.parametrize("readout,method,rope", [
    ("softmax", None, False),
    ("marginal", "exact", True),
    ("marginal", "transfer", False),
    ("marginal", "mean_field", False),
    ("marginal", "tap", True),
])
def test_decoding_token_by_token_equals_the_causal_forward_pass(readout, method, rope):
    """Row t of the causal pass is the Ising model of query t over keys 0..t: decoding with the
    cache (grouped heads, two batch axes, RoPE at the cache position) gives it to float
    precision, and the cache holds the projected keys."""
    kw = {} if readout == "softmax" else {
        "method": method, "chemical_potential": -0.5,
        "couplings": CouplingSpec("learned", "banded", bandwidth=2, init=0.4)}
    layer = BoltzmannMultiHeadAttention(4, 8, num_kv_heads=2, readout=readout, is_causal=True,
                                        rope=rope, rngs=nnx.Rngs(0), **kw)
    x = jax.random.normal(jax.random.key(1), (2, 3, 6, 8))
    full = layer(x)
    layer.init_cache(x.shape)
    steps = [layer(x[..., t:t + 1, :], decode=True) for t in range(6)]
    np.testing.assert_allclose(jnp.concatenate(steps, axis=-2), full, rtol=2e-5, atol=2e-6)
    assert int(layer.cache_index[...]) == 6
    k = layer.key(x.reshape(6, 6, 8)).reshape(6, 6, 2, 2)
    if not rope:
        np.testing.assert_allclose(layer.cached_key[...], k, rtol=1e-6, atol=1e-6)
    # under nnx.jit the cache is state: one compiled step serves every position
    layer.init_cache(x.shape)
    step = nnx.jit(lambda m, xt: m(xt, decode=True))
    jitted = [step(layer, x[..., t:t + 1, :]) for t in range(6)]
    np.testing.assert_allclose(jnp.concatenate(jitted, axis=-2), full, rtol=2e-5, atol=2e-6)


def test_decoding_bad_use():
    layer = BoltzmannMultiHeadAttention(2, 8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="needs the key/value cache: call init_cache"):
        layer(jnp.ones((1, 1, 8)), decode=True)
    layer.init_cache((1, 4, 8))
    with pytest.raises(ValueError, match="one token at a time"):
        layer(jnp.ones((1, 2, 8)), decode=True)
    with pytest.raises(ValueError, match="input_shape must be"):
        layer.init_cache((4, 8))


def test_decoding_with_a_sampled_method_draws_over_the_cached_keys():
    """A stochastic method decodes too: each token's draws cover the cached keys up to it, so
    the first token (one key, chemical potential 30: P(attend) = 1 - 1e-13) attends to that key
    in every draw, weight 1: the output is its value's projection."""
    layer = BoltzmannMultiHeadAttention(2, 4, readout="sample", is_causal=True, use_bias=False,
                                        method=sampled(ExactSampler(), 8), chemical_potential=30.0,
                                        rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(1), (2, 5, 4))
    layer.init_cache(x.shape)
    first = layer(x[:, :1], decode=True, rng=jax.random.key(0))
    want = layer.out(layer.value(x[:, :1]))
    assert first.shape == (2, 1, 4)
    np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-6)
    rest = [layer(x[:, t:t + 1], decode=True, rng=jax.random.key(t)) for t in range(1, 5)]
    assert all(np.all(np.isfinite(np.asarray(r))) for r in rest)


@pytest.mark.parametrize("positional", ["learned", "rope"])
def test_language_model_decoding_equals_the_full_pass(positional):
    """TransformerLM.init_cache + decode=True: each token's logits equal the full causal pass
    at its position (learned positions at the cache index, or RoPE in every layer)."""
    lm = TransformerLM(9, d_model=8, num_heads=2, num_layers=2, max_length=7,
                       positional=positional,
                       attention={"couplings": CouplingSpec("learned", "banded", bandwidth=2,
                                                             init=0.5), "method": "transfer"},
                       rngs=nnx.Rngs(0))
    tokens = jnp.array([[1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1]])
    full = lm(tokens)
    lm.init_cache(2)
    step = nnx.jit(lambda m, t: m(t, decode=True))
    got = jnp.concatenate([step(lm, tokens[:, t:t + 1]) for t in range(7)], axis=1)
    np.testing.assert_allclose(got, full, rtol=2e-5, atol=2e-5)
    with pytest.raises(ValueError, match="decode=True takes tokens \\(B, 1\\)"):
        lm(tokens[:, :2], decode=True)
    if positional == "learned":
        with pytest.raises(ValueError, match="max_length must be <= the model's max_length = 7"):
            lm.init_cache(2, 8)
    fresh = TransformerLM(9, d_model=8, num_heads=2, num_layers=1, max_length=7,
                          rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="needs init_cache"):
        fresh(tokens[:, :1], decode=True)
