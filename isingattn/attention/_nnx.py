"""Flax NNX module: multi-head Boltzmann attention with projections, per-head chemical
potential and couplings (an ``nnx.Param`` when learned, a frozen variable otherwise)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx
from flax.nnx.nn.linear import default_bias_init, default_kernel_init

from .._validation import check_choice, check_positive_int, shape_str
from ._couplings import Couplings, CouplingSpec
from ._function import READOUTS, boltzmann_attention
from ._inference import resolve_method
from ._rope import apply_rope
from ._sampled import Sampled


class FrozenCouplings(nnx.Variable):
    """Coupling values that are part of the module state but not trained (kinds ``fixed`` and
    ``random``): optimizers filtering on ``nnx.Param`` leave them alone."""


class SamplerScales(nnx.Variable):
    """Calibration scales ``(N, 2)`` = ``(c_h, c_J)`` per head of a calibrated
    :func:`~isingattn.attention.sampled` method: the backend is programmed with the SPIN fields
    times ``c_h`` and couplings times ``c_J``. State, not a parameter (saved and restored with
    checkpoints, never trained); :func:`isingattn.attention._calibration.calibrate_model`
    re-estimates them."""


class BoltzmannMultiHeadAttention(nnx.Module):
    """Multi-head Boltzmann attention (see :func:`boltzmann_attention`) with query/key/value and
    output projections; constructor and call follow ``flax.nnx.MultiHeadAttention`` (the
    differences are listed in docs/guide/flax.md).

    Args:
      num_heads: query heads ``N``.
      in_features: features of the query inputs.
      qkv_features: total query features ``N * H`` (default ``in_features``).
      out_features: output features (default ``in_features``).
      num_kv_heads: key/value heads ``K`` (grouped heads; ``N`` a multiple of ``K``; default ``N``).
      in_kv_features: features of the key/value inputs (default ``in_features``).
      couplings: a :class:`CouplingSpec` (built here, with a key from ``rngs.params`` for
        ``random``), a ready :class:`Couplings` (its kind decides learned vs frozen), or None
        (``J = 0``). Learned couplings are an ``nnx.Param``; fixed/random ones a
        :class:`FrozenCouplings` variable.
      method: inference method (``"exact"``, ``"transfer"``, ``"mean_field"``, ``"tap"``, a
        :class:`MeanField` or :func:`sampled`), fixed configuration.
      readout: ``"marginal"``, ``"sample"`` or ``"softmax"`` (ordinary softmax attention: no
        couplings, no chemical potential parameter).
      beta: inverse temperature.
      chemical_potential: initial per-head ``b``; trained when ``learn_chemical_potential``.
      is_causal: default causal flag of calls.
      dtype, param_dtype, precision, kernel_init, bias_init: of the projections, as in Flax
        (``out_kernel_init``, ``out_bias_init``: of the output projection, default the same).
      use_bias: biases in the projections (default True, as in Flax).
      dropout_rate, broadcast_dropout, deterministic: dropout on the attention weights, as in
        Flax (``deterministic`` of the call takes precedence; with ``dropout_rate > 0`` one of
        the two must say).
      normalize_qk: LayerNorm (no bias) on each head's queries and keys before the fields.
      decode: default of the call's ``decode`` (autoregressive decoding from the key/value
        cache of :meth:`init_cache`).
      rope: rotate queries and keys by their positions (rotary embeddings,
        :func:`apply_rope`), so the fields ``h_ij`` depend on ``i - j``: the positional signal
        of a model without position embeddings. Needs an even head dimension.
      rope_base: the RoPE frequency base.
      rngs: ``nnx.Rngs``; ``params`` initializes, the ``attention`` stream (falling back to
        ``default``) keys stochastic methods when no ``rng`` is passed to the call, the
        ``dropout`` stream the dropout.

    Raises:
      ValueError: sizes that do not divide (``qkv_features`` by ``num_heads``, ``num_heads``
        by ``num_kv_heads``), an unknown ``readout``, an odd head dimension with ``rope``, a
        ``dropout_rate`` outside ``[0, 1)``.

    Example:
      >>> from flax import nnx
      >>> import jax.numpy as jnp
      >>> from isingattn.attention import BoltzmannMultiHeadAttention, CouplingSpec
      >>> layer = BoltzmannMultiHeadAttention(
      ...     2, 16, couplings=CouplingSpec("learned", "banded", bandwidth=2), rngs=nnx.Rngs(0))
      >>> layer(jnp.ones((3, 5, 16))).shape
      (3, 5, 16)
    """

    def __init__(self, num_heads: int, in_features: int, qkv_features: int | None = None,
                 out_features: int | None = None, num_kv_heads: int | None = None,
                 in_kv_features: int | None = None, *,
                 couplings: CouplingSpec | Couplings | None = None, method="exact",
                 readout: str = "marginal", beta: float = 1.0, chemical_potential: float = 0.0,
                 learn_chemical_potential: bool = True, is_causal: bool = False,
                 dtype=None, param_dtype=jnp.float32, precision=None,
                 kernel_init=default_kernel_init, out_kernel_init=None,
                 bias_init=default_bias_init, out_bias_init=None,
                 use_bias: bool = True, broadcast_dropout: bool = True,
                 dropout_rate: float = 0.0, deterministic: bool | None = None,
                 normalize_qk: bool = False, decode: bool | None = None, rope: bool = False,
                 rope_base: float = 10000.0, rngs: nnx.Rngs):
        num_heads = check_positive_int("num_heads", num_heads)
        in_features = check_positive_int("in_features", in_features)
        qkv_features = in_features if qkv_features is None else qkv_features
        out_features = in_features if out_features is None else out_features
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        in_kv_features = in_features if in_kv_features is None else in_kv_features
        if qkv_features % num_heads:
            raise ValueError(
                f"qkv_features ({qkv_features}) must be divisible by num_heads ({num_heads})"
            )
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
            )
        check_choice("readout", readout, READOUTS)
        if rope and (qkv_features // num_heads) % 2:
            raise ValueError(
                f"rope=True needs an even head dimension; qkv_features / num_heads = "
                f"{qkv_features} / {num_heads} = {qkv_features // num_heads}"
            )
        if not 0.0 <= float(dropout_rate) < 1.0:
            raise ValueError(f"dropout_rate must be in [0, 1); got dropout_rate={dropout_rate!r}")
        self.rope, self.rope_base = bool(rope), float(rope_base)
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.in_features, self.in_kv_features = in_features, in_kv_features
        self.head_dim = qkv_features // num_heads
        self.readout, self.beta, self.is_causal = readout, float(beta), bool(is_causal)
        self.method = resolve_method(method) if readout != "softmax" else None
        lin = {"use_bias": use_bias, "dtype": dtype, "param_dtype": param_dtype,
               "precision": precision, "rngs": rngs}
        init = {"kernel_init": kernel_init, "bias_init": bias_init}
        out_init = {"kernel_init": out_kernel_init or kernel_init,
                    "bias_init": out_bias_init or bias_init}
        self.query = nnx.Linear(in_features, num_heads * self.head_dim, **lin, **init)
        self.key = nnx.Linear(in_kv_features, num_kv_heads * self.head_dim, **lin, **init)
        self.value = nnx.Linear(in_kv_features, num_kv_heads * self.head_dim, **lin, **init)
        self.out = nnx.Linear(num_heads * self.head_dim, out_features, **lin, **out_init)

        c = Couplings.none()
        if readout != "softmax" and couplings is not None:
            if isinstance(couplings, CouplingSpec):
                c = couplings.build(num_heads, key=rngs.params() if couplings.kind == "random"
                                    else None)
            elif isinstance(couplings, Couplings):
                c = couplings
            else:
                raise TypeError(
                    "couplings must be a CouplingSpec, a Couplings or None; got "
                    f"{type(couplings).__name__}"
                )
            if c.num_heads not in (None, num_heads):
                raise ValueError(f"couplings have {c.num_heads} heads; the layer has {num_heads}")
        self._coupling_meta = (c.kind, c.structure, c.max_length, c.max_distance, c.bandwidth)
        if c.is_zero:
            self.couplings = nnx.data(None)
        elif c.kind == "learned":
            self.couplings = nnx.Param(c.params)
        else:
            self.couplings = FrozenCouplings(c.params)
        if readout == "softmax":
            self.chemical_potential = nnx.data(None)
        elif learn_chemical_potential:
            self.chemical_potential = nnx.Param(jnp.full((num_heads,), chemical_potential,
                                                         jnp.float32))
        else:
            self.chemical_potential = nnx.data(jnp.full((num_heads,), chemical_potential,
                                                        jnp.float32))
        stochastic = readout != "softmax" and (self.method.stochastic or readout == "sample")
        self.rngs = rngs["attention"].fork() if stochastic else nnx.data(None)
        if isinstance(self.method, Sampled) and self.method.calibration is not None:
            from ._calibration import initial_scales

            c = jnp.asarray(initial_scales(self.method, self.beta), jnp.float32)
            self.sampler_scales = SamplerScales(jnp.tile(c, (num_heads, 1)))
        else:
            self.sampler_scales = nnx.data(None)
        self.dropout_rate, self.broadcast_dropout = float(dropout_rate), bool(broadcast_dropout)
        self.deterministic = deterministic
        self.dropout_rngs = (rngs["dropout"].fork() if self.dropout_rate > 0
                             else nnx.data(None))
        self.normalize_qk = bool(normalize_qk)
        ln = {"use_bias": False, "dtype": dtype, "param_dtype": param_dtype, "rngs": rngs}
        self.query_ln = nnx.LayerNorm(self.head_dim, **ln) if normalize_qk else nnx.data(None)
        self.key_ln = nnx.LayerNorm(self.head_dim, **ln) if normalize_qk else nnx.data(None)
        self.decode = decode
        self.cached_key = self.cached_value = self.cache_index = nnx.data(None)

    def init_cache(self, input_shape, dtype=jnp.float32):
        """Start autoregressive decoding: an empty key/value cache for key inputs of shape
        ``input_shape = (batch..., max_length, in_kv_features)`` (as
        ``nnx.MultiHeadAttention.init_cache``), in ``dtype``. Calls with ``decode=True`` then
        take one token at a time; the query at cache position ``t`` attends to the cached keys
        ``0 .. t`` (the row ``t`` of the causal forward pass), and each key's projection is
        computed once."""
        if len(input_shape) < 3:
            raise ValueError("input_shape must be (batch..., max_length, in_kv_features); got "
                             f"{tuple(input_shape)}")
        *batch, length, _ = input_shape
        shape = (math.prod(batch), length, self.num_kv_heads, self.head_dim)
        self.cached_key = nnx.Cache(jnp.zeros(shape, dtype))
        self.cached_value = nnx.Cache(jnp.zeros(shape, dtype))
        self.cache_index = nnx.Cache(jnp.array(0, jnp.int32))

    def _decode_step(self, q, k, v):
        """Write the new token's key and value at the cache index and advance it; returns the
        query, all cached keys and values, and the mask of the keys up to the new one."""
        if self.cache_index is None:
            raise ValueError("decode=True needs the key/value cache: call "
                             "init_cache((batch..., max_length, in_kv_features)) first")
        B, length = self.cached_key.shape[:2]
        if q.shape[:2] != (B, 1) or k.shape[:2] != (B, 1):
            raise ValueError(
                f"decode=True takes one token at a time for the cache's batch of {B}: inputs "
                f"(batch..., 1, features); got query {shape_str(q.shape[:2])} and key "
                f"{shape_str(k.shape[:2])} (batch flattened, length)"
            )
        t = self.cache_index[...]
        if self.rope:
            q = apply_rope(q, t[None], base=self.rope_base)
            k = apply_rope(k, t[None], base=self.rope_base)
        dtype = self.cached_key.dtype
        k = jax.lax.dynamic_update_slice(self.cached_key[...], k.astype(dtype), (0, t, 0, 0))
        v = jax.lax.dynamic_update_slice(self.cached_value[...], v.astype(dtype), (0, t, 0, 0))
        self.cached_key[...] = k
        self.cached_value[...] = v
        self.cache_index[...] = t + 1
        return q, k, v, (jnp.arange(length) <= t)[None, None, None, :]

    def coupling_object(self) -> Couplings:
        """The current couplings as a :class:`Couplings` (values from the module state)."""
        kind, structure, L, D, r = self._coupling_meta
        if self.couplings is None:
            return Couplings.none()
        return Couplings(kind, structure, self.couplings[...], max_length=L, max_distance=D,
                         bandwidth=r)

    def __call__(self, inputs_q, inputs_k=None, inputs_v=None, *, mask=None,
                 deterministic: bool | None = None, rngs=None, sow_weights: bool = False,
                 decode: bool | None = None, is_causal: bool | None = None, rng=None,
                 return_weights: bool = False):
        """Attention of ``inputs_q (..., T, in_features)`` over ``inputs_k`` and ``inputs_v``
        ``(..., S, in_kv_features)`` (the same leading batch axes; ``inputs_k`` defaults to
        ``inputs_q``, ``inputs_v`` to ``inputs_k``).

        Args:
          mask: broadcastable to ``(..., N, T, S)``; False (or 0: Flax's float masks) removes a
            key.
          deterministic: no dropout (default: the constructor's).
          rngs: ``nnx.Rngs`` (its ``dropout`` and ``attention`` streams) or an
            ``nnx.RngStream`` (dropout) for this call, instead of the module's.
          sow_weights: store the attention weights ``(..., N, T, S)`` (before dropout) as
            ``nnx.Intermediate`` ``attention_weights``.
          decode: one token (``T = S = 1``) appended to the cache of :meth:`init_cache` and
            attending to every cached key up to it (default: the constructor's ``decode``);
            ``is_causal`` is then implied.
          is_causal: default the constructor's.
          rng: PRNG key of a stochastic method for this call.
          return_weights: also return the :class:`AttentionInfo` (batch axes flattened).

        Returns:
          ``(..., T, out_features)``, and the :class:`AttentionInfo` with ``return_weights``.
        """
        if inputs_k is None:
            if inputs_v is not None:
                raise ValueError("inputs_v needs inputs_k (pass the same array as inputs_k and "
                                 "leave inputs_v None for keys equal to values)")
            inputs_k = inputs_q
        inputs_v = inputs_k if inputs_v is None else inputs_v
        batch = inputs_q.shape[:-2]
        if (inputs_q.ndim < 3 or inputs_k.shape[:-2] != batch or inputs_v.shape != inputs_k.shape
                or inputs_q.shape[-1] != self.in_features
                or inputs_k.shape[-1] != self.in_kv_features):
            raise ValueError(
                f"inputs_q must be (..., T, {self.in_features}) and inputs_k, inputs_v "
                f"(..., S, {self.in_kv_features}) with the same batch axes (at least one); got "
                f"{shape_str(inputs_q.shape)}, {shape_str(inputs_k.shape)} and "
                f"{shape_str(inputs_v.shape)}"
            )
        T, S = inputs_q.shape[-2], inputs_k.shape[-2]
        B = math.prod(batch)
        q = self.query(inputs_q.reshape(B, T, -1)).reshape(B, T, self.num_heads, self.head_dim)
        k = self.key(inputs_k.reshape(B, S, -1)).reshape(B, S, self.num_kv_heads, self.head_dim)
        v = self.value(inputs_v.reshape(B, S, -1)).reshape(B, S, self.num_kv_heads,
                                                            self.head_dim)
        if self.normalize_qk:
            q, k = self.query_ln(q), self.key_ln(k)
        if mask is not None:  # Flax's masks may be float 0/1 (nnx.make_causal_mask)
            mask = jnp.asarray(mask)
            mask = mask if mask.dtype == jnp.bool_ else mask != 0
        decode = self.decode if decode is None else decode
        if decode:
            q, k, v, allowed = self._decode_step(q, k, v)
            mask = allowed if mask is None else mask & allowed
            S = k.shape[1]
        elif self.rope:
            q = apply_rope(q, jnp.arange(T), base=self.rope_base)
            k = apply_rope(k, jnp.arange(S), base=self.rope_base)
        if mask is not None:
            mask = jnp.broadcast_to(mask, jnp.broadcast_shapes(
                mask.shape, batch + (1, 1, 1))).reshape((B,) + mask.shape[-3:]) \
                if mask.ndim > 3 else mask
        causal = False if decode else self.is_causal if is_causal is None else is_causal
        dropout_rng = None
        if self.dropout_rate > 0:
            deterministic = self.deterministic if deterministic is None else deterministic
            if deterministic is None:
                raise ValueError(
                    f"dropout_rate={self.dropout_rate} needs deterministic (True: no dropout) "
                    "in the call or the constructor"
                )
            if not deterministic:
                stream = (rngs["dropout"] if isinstance(rngs, nnx.Rngs)
                          else rngs if rngs is not None else self.dropout_rngs)
                dropout_rng = stream()
        kw = {}
        if self.readout != "softmax":
            if rng is None and isinstance(rngs, nnx.Rngs) and self.rngs is not None:
                rng = rngs["attention"]()
            if rng is None and self.rngs is not None:
                rng = self.rngs()
            b = self.chemical_potential
            method = self.method
            if self.sampler_scales is not None:
                method = method.with_scales(self.sampler_scales[...])
            if isinstance(method, Sampled):
                from ._calibration import note_module

                note_module(self)
            kw = {"couplings": self.coupling_object(), "beta": self.beta,
                      "chemical_potential": b[...] if isinstance(b, nnx.Variable) else b,
                      "method": method, "rng": rng}
        if dropout_rng is not None:
            kw.update(dropout_rate=self.dropout_rate, dropout_rng=dropout_rng,
                      broadcast_dropout=self.broadcast_dropout)
        need = return_weights or sow_weights
        res = boltzmann_attention(q, k, v, mask=mask, is_causal=causal, readout=self.readout,
                                  return_weights=need, **kw)
        o, info = res if need else (res, None)
        if sow_weights:
            self.sow(nnx.Intermediate, "attention_weights",
                     info.weights.reshape(batch + info.weights.shape[1:]))
        out = self.out(o.reshape(B, T, self.num_heads * self.head_dim))
        out = out.reshape(batch + out.shape[1:])
        return (out, info) if return_weights else out
