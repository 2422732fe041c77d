"""Flax NNX module: multi-head Boltzmann attention with projections, per-head chemical
potential and couplings (an ``nnx.Param`` when learned, a frozen variable otherwise)."""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from .._validation import check_positive_int, shape_str
from ._couplings import Couplings, CouplingSpec
from ._function import READOUTS, boltzmann_attention
from ._methods import Sampled, resolve_method
from ._rope import apply_rope


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
    output projections.

    Args:
      num_heads: query heads ``N``.
      in_features: features of the inputs.
      qkv_features: total query features ``N * H`` (default ``in_features``).
      out_features: output features (default ``in_features``).
      num_kv_heads: key/value heads ``K`` (grouped heads; ``N`` a multiple of ``K``; default ``N``).
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
      use_bias: biases in the projections.
      rope: rotate queries and keys by their positions (rotary embeddings,
        :func:`apply_rope`), so the fields ``h_ij`` depend on ``i - j``: the positional signal
        of a model without position embeddings. Needs an even head dimension.
      rope_base: the RoPE frequency base.
      rngs: ``nnx.Rngs``; ``params`` initializes, the ``attention`` stream (falling back to
        ``default``) keys stochastic methods when no ``rng`` is passed to the call.

    Example:
      >>> from flax import nnx
      >>> import jax.numpy as jnp
      >>> from isingattn.attention import BoltzmannMultiHeadAttention, CouplingSpec
      >>> layer = BoltzmannMultiHeadAttention(
      ...     2, 16, couplings=CouplingSpec("learned", "banded", bandwidth=2), rngs=nnx.Rngs(0))
      >>> layer(jnp.ones((3, 5, 16))).shape
      (3, 5, 16)
    """

    def __init__(self, num_heads: int, in_features: int, *, qkv_features: int | None = None,
                 out_features: int | None = None, num_kv_heads: int | None = None,
                 couplings: CouplingSpec | Couplings | None = None, method="exact",
                 readout: str = "marginal", beta: float = 1.0, chemical_potential: float = 0.0,
                 learn_chemical_potential: bool = True, is_causal: bool = False,
                 use_bias: bool = False, rope: bool = False, rope_base: float = 10000.0,
                 rngs: nnx.Rngs):
        num_heads = check_positive_int("num_heads", num_heads)
        in_features = check_positive_int("in_features", in_features)
        qkv_features = in_features if qkv_features is None else qkv_features
        out_features = in_features if out_features is None else out_features
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if qkv_features % num_heads:
            raise ValueError(
                f"qkv_features ({qkv_features}) must be divisible by num_heads ({num_heads})"
            )
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
            )
        if readout not in READOUTS:
            raise ValueError(f"readout must be one of {READOUTS}; got {readout!r}")
        if rope and (qkv_features // num_heads) % 2:
            raise ValueError(
                f"rope=True needs an even head dimension; qkv_features / num_heads = "
                f"{qkv_features} / {num_heads} = {qkv_features // num_heads}"
            )
        self.rope, self.rope_base = bool(rope), float(rope_base)
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim = qkv_features // num_heads
        self.readout, self.beta, self.is_causal = readout, float(beta), bool(is_causal)
        self.method = resolve_method(method) if readout != "softmax" else None
        lin = {"use_bias": use_bias, "rngs": rngs}
        self.query = nnx.Linear(in_features, num_heads * self.head_dim, **lin)
        self.key = nnx.Linear(in_features, num_kv_heads * self.head_dim, **lin)
        self.value = nnx.Linear(in_features, num_kv_heads * self.head_dim, **lin)
        self.out = nnx.Linear(num_heads * self.head_dim, out_features, **lin)

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

    def coupling_object(self) -> Couplings:
        """The current couplings as a :class:`Couplings` (values from the module state)."""
        kind, structure, L, D, r = self._coupling_meta
        if self.couplings is None:
            return Couplings.none()
        return Couplings(kind, structure, self.couplings[...], max_length=L, max_distance=D,
                         bandwidth=r)

    def __call__(self, inputs_q, inputs_kv=None, *, mask=None, is_causal=None, rng=None,
                 return_weights: bool = False):
        """``inputs_q (B, T, F)``, ``inputs_kv (B, S, F)`` (default: ``inputs_q``); ``mask``
        broadcastable to ``(B, N, T, S)``. Returns ``(B, T, out_features)`` (and the
        :class:`AttentionInfo` with ``return_weights=True``)."""
        inputs_kv = inputs_q if inputs_kv is None else inputs_kv
        if inputs_q.ndim != 3 or inputs_kv.ndim != 3 or inputs_q.shape[0] != inputs_kv.shape[0]:
            raise ValueError(
                "inputs_q must be (B, T, F) and inputs_kv (B, S, F) with the same B; got "
                f"{shape_str(inputs_q.shape)} and {shape_str(inputs_kv.shape)}"
            )
        B, T, _ = inputs_q.shape
        S = inputs_kv.shape[1]
        q = self.query(inputs_q).reshape(B, T, self.num_heads, self.head_dim)
        k = self.key(inputs_kv).reshape(B, S, self.num_kv_heads, self.head_dim)
        v = self.value(inputs_kv).reshape(B, S, self.num_kv_heads, self.head_dim)
        if self.rope:
            q = apply_rope(q, jnp.arange(T), base=self.rope_base)
            k = apply_rope(k, jnp.arange(S), base=self.rope_base)
        causal = self.is_causal if is_causal is None else is_causal
        kw = {}
        if self.readout != "softmax":
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
        res = boltzmann_attention(q, k, v, mask=mask, is_causal=causal, readout=self.readout,
                                  return_weights=return_weights, **kw)
        o, info = res if return_weights else (res, None)
        out = self.out(o.reshape(B, T, self.num_heads * self.head_dim))
        return (out, info) if return_weights else out
