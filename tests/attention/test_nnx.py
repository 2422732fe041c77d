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
    with pytest.raises(ValueError, match=r"\(2, 5, 8\) and \(3, 5, 8\)"):
        layer(jnp.ones((2, 5, 8)), jnp.ones((3, 5, 8)))
    lm = TransformerLM(5, d_model=8, num_heads=2, num_layers=1, max_length=4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="max_length = 4"):
        lm(jnp.zeros((1, 6), jnp.int32))
    with pytest.raises(ValueError, match="attention must be"):
        TransformerLM(5, d_model=8, num_heads=2, attention="linear", rngs=nnx.Rngs(0))
