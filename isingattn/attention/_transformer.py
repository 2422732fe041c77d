"""A small standard pre-norm transformer language model whose attention is one argument:
softmax, or Boltzmann attention with any couplings and inference method."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from .._validation import check_positive_int, shape_str
from ._nnx import BoltzmannMultiHeadAttention


def _attention_kwargs(attention) -> dict:
    if attention == "softmax":
        return {"readout": "softmax"}
    if attention == "boltzmann":
        return {}
    if isinstance(attention, dict):
        return dict(attention)
    raise ValueError(
        "attention must be 'softmax', 'boltzmann' or a dict of BoltzmannMultiHeadAttention "
        "options, e.g. dict(couplings=CouplingSpec('learned', 'banded', bandwidth=4), "
        f"method='transfer'); got {attention!r}"
    )


class TransformerBlock(nnx.Module):
    """``x + attn(LN(x))`` then ``x + MLP(LN(x))`` (GELU MLP of width ``mlp_ratio * d``)."""

    def __init__(self, d_model: int, num_heads: int, *, mlp_ratio: int = 4, attention="softmax",
                 rngs: nnx.Rngs):
        self.ln1 = nnx.LayerNorm(d_model, rngs=rngs)
        self.attn = BoltzmannMultiHeadAttention(num_heads, d_model, is_causal=True, rngs=rngs,
                                                **_attention_kwargs(attention))
        self.ln2 = nnx.LayerNorm(d_model, rngs=rngs)
        self.fc1 = nnx.Linear(d_model, mlp_ratio * d_model, rngs=rngs)
        self.fc2 = nnx.Linear(mlp_ratio * d_model, d_model, rngs=rngs)

    def __call__(self, x, *, mask=None, rng=None):
        x = x + self.attn(self.ln1(x), mask=mask, rng=rng)
        return x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x))))


class TransformerLM(nnx.Module):
    """Causal pre-norm transformer: token + learned position embeddings, ``num_layers``
    :class:`TransformerBlock`, final LayerNorm, linear LM head.

    ``attention``: ``"softmax"`` (baseline), ``"boltzmann"`` (J = 0, exact) or a dict of
    :class:`BoltzmannMultiHeadAttention` options (``couplings``, ``method``, ``readout``,
    ``beta``, ``chemical_potential``, ...), the same for every block.

    Example:
      >>> from flax import nnx
      >>> import jax.numpy as jnp
      >>> from isingattn.attention import TransformerLM, CouplingSpec
      >>> lm = TransformerLM(11, d_model=16, num_heads=2, num_layers=1, max_length=8,
      ...                    attention=dict(couplings=CouplingSpec("learned", bandwidth=2)),
      ...                    rngs=nnx.Rngs(0))
      >>> lm(jnp.zeros((2, 8), jnp.int32)).shape
      (2, 8, 11)
    """

    def __init__(self, vocab_size: int, *, d_model: int = 64, num_heads: int = 4,
                 num_layers: int = 2, max_length: int = 128, mlp_ratio: int = 4,
                 attention="softmax", rngs: nnx.Rngs):
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.max_length = check_positive_int("max_length", max_length)
        check_positive_int("num_layers", num_layers)
        self.embed = nnx.Embed(vocab_size, d_model, rngs=rngs)
        self.pos = nnx.Embed(max_length, d_model, rngs=rngs)
        self.blocks = nnx.List([
            TransformerBlock(d_model, num_heads, mlp_ratio=mlp_ratio, attention=attention,
                             rngs=rngs)
            for _ in range(num_layers)
        ])
        self.ln_f = nnx.LayerNorm(d_model, rngs=rngs)
        self.head = nnx.Linear(d_model, vocab_size, rngs=rngs)

    def __call__(self, tokens, *, mask=None, rng=None):
        """``tokens (B, T)`` int -> logits ``(B, T, vocab_size)``; ``rng`` feeds stochastic
        attention (split per block)."""
        if tokens.ndim != 2 or tokens.shape[1] > self.max_length:
            raise ValueError(
                f"tokens must be (B, T) with T <= max_length = {self.max_length}; got "
                f"{shape_str(tokens.shape)}"
            )
        x = self.embed(tokens) + self.pos(jnp.arange(tokens.shape[1]))[None]
        keys = [None] * len(self.blocks) if rng is None else list(
            jax.random.split(rng, len(self.blocks)))
        for block, k in zip(self.blocks, keys):
            x = block(x, mask=mask, rng=k)
        return self.head(self.ln_f(x))
