"""A small standard pre-norm transformer whose attention is one argument: softmax, or Boltzmann
attention with any couplings and inference method."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from .._validation import check_choice, check_positive_int, shape_str
from ._nnx import BoltzmannMultiHeadAttention
from ._sampled import Sampled

#: Position schemes of :class:`TransformerLM`: learned absolute embeddings (up to
#: ``max_length``), rotary embeddings in every attention layer, or none (the model then sees
#: positions only through causal masking and, with Boltzmann attention, through couplings that
#: depend on ``|j - k|``).
POSITIONAL = ("learned", "rope", "none")


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
    """``x + attn(LN(x))`` then ``x + MLP(LN(x))`` (GELU MLP of width ``mlp_ratio * d``), with
    dropout of rate ``dropout`` on both residual branches."""

    def __init__(self, d_model: int, num_heads: int, *, mlp_ratio: int = 4, attention="softmax",
                 causal: bool = True, rope: bool = False, dropout: float = 0.0,
                 attention_dropout: float = 0.0, rngs: nnx.Rngs):
        self.ln1 = nnx.LayerNorm(d_model, rngs=rngs)
        kw = _attention_kwargs(attention)
        kw.setdefault("is_causal", causal)
        if attention_dropout:
            kw.setdefault("dropout_rate", attention_dropout)
        kw.setdefault("use_bias", False)  # projections without biases, as the blocks were built
        if rope:
            kw["rope"] = True
        self.attn = BoltzmannMultiHeadAttention(num_heads, d_model, rngs=rngs, **kw)
        self.ln2 = nnx.LayerNorm(d_model, rngs=rngs)
        self.fc1 = nnx.Linear(d_model, mlp_ratio * d_model, rngs=rngs)
        self.fc2 = nnx.Linear(mlp_ratio * d_model, d_model, rngs=rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs) if dropout else nnx.data(None)

    def _drop(self, x, deterministic):
        if self.dropout is None:
            return x
        return self.dropout(x, deterministic=deterministic)

    def __call__(self, x, *, mask=None, rng=None, deterministic: bool | None = None,
                 decode: bool = False):
        # dropout is active unless deterministic=True (as nnx.Dropout's default here)
        a = self.attn(self.ln1(x), mask=mask, rng=rng, deterministic=bool(deterministic),
                      decode=decode)
        x = x + self._drop(a, deterministic)
        return x + self._drop(self.fc2(jax.nn.gelu(self.fc1(self.ln2(x)))), deterministic)


class TransformerLM(nnx.Module):
    """Pre-norm transformer: token embeddings (plus position embeddings when
    ``positional="learned"``), ``num_layers`` :class:`TransformerBlock`, final LayerNorm, a linear
    head to ``num_outputs`` logits per position.

    Args:
      vocab_size: input tokens ``0 .. vocab_size - 1``.
      d_model, num_heads, num_layers, mlp_ratio: sizes.
      max_length: the longest sequence (``positional="learned"``: the number of position
        embeddings; the other schemes accept any length).
      attention: ``"softmax"`` (baseline), ``"boltzmann"`` (J = 0, exact) or a dict of
        :class:`BoltzmannMultiHeadAttention` options (``couplings``, ``method``, ``readout``,
        ``beta``, ``chemical_potential``, ...), the same for every block.
      positional: one of :data:`POSITIONAL`: ``"learned"`` absolute embeddings, ``"rope"``
        (rotary embeddings of queries and keys in every layer) or ``"none"``.
      num_outputs: logits per position (default ``vocab_size``: a language model; a number of
        classes for sequence labelling).
      causal: position ``t`` attends to ``0 .. t`` (default) or to every position.
      dropout: rate of dropout on the embeddings and on every residual branch (active unless
        the call passes ``deterministic=True``; it draws from the ``dropout`` stream of
        ``rngs``).
      tie_embeddings: the head reuses the token embedding matrix (``num_outputs`` must equal
        ``vocab_size``); the head keeps its own bias.
      attention_dropout: rate of dropout on the attention weights of every block (as Flax's
        attention dropout; the same switch as ``dropout``).
      scan_layers: the blocks' parameters stacked on a leading axis and the blocks applied by
        one ``nnx.scan``: one block is traced and compiled instead of ``num_layers`` (compile
        time flat in depth), the same numbers. Not with ``sampled`` methods.
      rngs: ``nnx.Rngs`` (``params``; ``dropout`` and ``attention`` streams when used).

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
                 attention="softmax", positional: str = "learned",
                 num_outputs: int | None = None, causal: bool = True, dropout: float = 0.0,
                 tie_embeddings: bool = False, attention_dropout: float = 0.0,
                 scan_layers: bool = False, rngs: nnx.Rngs):
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.max_length = check_positive_int("max_length", max_length)
        check_positive_int("num_layers", num_layers)
        check_choice("positional", positional, POSITIONAL)
        for name, rate in (("dropout", dropout), ("attention_dropout", attention_dropout)):
            if not 0.0 <= rate < 1.0:
                raise ValueError(f"{name} must be in [0, 1); got {name}={rate}")
        num_outputs = vocab_size if num_outputs is None else check_positive_int(
            "num_outputs", num_outputs)
        if tie_embeddings and num_outputs != vocab_size:
            raise ValueError(
                f"tie_embeddings=True needs num_outputs == vocab_size ({vocab_size}); got "
                f"num_outputs={num_outputs}"
            )
        self.positional, self.num_outputs = positional, num_outputs
        self.tie_embeddings = bool(tie_embeddings)
        self.embed = nnx.Embed(vocab_size, d_model, rngs=rngs)
        self.pos = (nnx.Embed(max_length, d_model, rngs=rngs) if positional == "learned"
                    else nnx.data(None))
        block = functools.partial(
            TransformerBlock, d_model, num_heads, mlp_ratio=mlp_ratio, attention=attention,
            causal=causal, rope=positional == "rope", dropout=dropout,
            attention_dropout=attention_dropout)
        self.scan_layers = bool(scan_layers)
        if self.scan_layers:
            if isinstance(_attention_kwargs(attention).get("method"), Sampled):
                raise ValueError(
                    "scan_layers=True does not take sampled methods (their calibration records "
                    "each layer's module); use scan_layers=False"
                )

            @nnx.split_rngs(splits=num_layers)
            @nnx.vmap(in_axes=(0,), out_axes=0)
            def stacked(r):
                return block(rngs=r)

            self.blocks = stacked(rngs)
        else:
            self.blocks = nnx.List([block(rngs=rngs) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.cache_index = nnx.data(None)
        self.ln_f = nnx.LayerNorm(d_model, rngs=rngs)
        self.dropout = nnx.Dropout(dropout, rngs=rngs) if dropout else nnx.data(None)
        if self.tie_embeddings:
            self.head = nnx.data(None)
            self.head_bias = nnx.Param(jnp.zeros((vocab_size,), jnp.float32))
        else:
            self.head = nnx.Linear(d_model, num_outputs, rngs=rngs)
            self.head_bias = nnx.data(None)

    def init_cache(self, batch_size: int, max_length: int | None = None):
        """Start autoregressive decoding: empty key/value caches of ``max_length`` positions
        (default, and at most, ``max_length`` of the model with ``positional="learned"``) for
        ``batch_size`` sequences in every block; calls with ``decode=True`` then take one token
        per sequence at a time. Not with ``scan_layers``."""
        batch_size = check_positive_int("batch_size", batch_size)
        length = self.max_length if max_length is None else check_positive_int(
            "max_length", max_length)
        if self.pos is not None and length > self.max_length:
            raise ValueError(f"max_length must be <= the model's max_length = {self.max_length} "
                             f"(positional='learned'); got {length}")
        if self.scan_layers:
            raise ValueError("decoding with a cache is not offered with scan_layers=True")
        for block in self.blocks:
            block.attn.init_cache((batch_size, length, self.embed.features))
        self.cache_index = nnx.Cache(jnp.array(0, jnp.int32))

    def __call__(self, tokens, *, mask=None, rng=None, deterministic: bool | None = None,
                 decode: bool = False):
        """``tokens (B, T)`` int -> logits ``(B, T, num_outputs)``; ``rng`` feeds stochastic
        attention (split per block); ``deterministic=True`` turns dropout off; ``decode=True``
        takes one token per sequence (``T = 1``) at the next position of the caches of
        :meth:`init_cache`: the logits of the causal pass at that position."""
        if decode:
            if self.cache_index is None:
                raise ValueError("decode=True needs init_cache(batch_size) first")
            if tokens.ndim != 2 or tokens.shape[1] != 1:
                raise ValueError(f"decode=True takes tokens (B, 1); got {shape_str(tokens.shape)}")
            t = self.cache_index[...]
            self.cache_index[...] = t + 1
            x = self.embed(tokens)
            if self.pos is not None:
                x = x + self.pos(t[None])[None]
            return self._layers(x, mask, rng, deterministic, decode=True)
        if tokens.ndim != 2 or (self.pos is not None and tokens.shape[1] > self.max_length):
            limit = (f" with T <= max_length = {self.max_length} (positional='learned')"
                     if self.pos is not None else "")
            raise ValueError(f"tokens must be (B, T){limit}; got {shape_str(tokens.shape)}")
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos(jnp.arange(tokens.shape[1]))[None]
        return self._layers(x, mask, rng, deterministic)

    def _layers(self, x, mask, rng, deterministic, decode=False):
        if self.dropout is not None:
            x = self.dropout(x, deterministic=deterministic)
        if self.scan_layers:
            def layer(x, block, key):  # key: a placeholder when rng is None
                return block(x, mask=mask, rng=None if rng is None else key,
                             deterministic=deterministic)

            keys = (jnp.zeros((self.num_layers,)) if rng is None
                    else jax.random.split(rng, self.num_layers))
            x = nnx.scan(layer, in_axes=(nnx.Carry, 0, 0), out_axes=nnx.Carry)(
                x, self.blocks, keys)
        else:
            keys = [None] * self.num_layers if rng is None else list(
                jax.random.split(rng, self.num_layers))
            for block, k in zip(self.blocks, keys):
                x = block(x, mask=mask, rng=k, deterministic=deterministic, decode=decode)
        x = self.ln_f(x)
        if self.head is None:
            return self.embed.attend(x) + self.head_bias[...]
        return self.head(x)
