"""``boltzmann_attention_fn``: Boltzmann attention as the ``attention_fn`` of Flax's own attention
modules (``nnx.MultiHeadAttention``, ``flax.linen.MultiHeadDotProductAttention``)."""

from __future__ import annotations

import contextlib
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from flax.nnx.nn import dtypes as _nnx_dtypes

from .._validation import check_beta, check_choice, is_concrete, normalize_key, shape_str
from ._couplings import Couplings
from ._function import READOUTS, boltzmann_attention, dropout_weights
from ._inference import resolve_method
from ._sampled import Sampled

#: Folded into ``dropout_rng`` to key a stochastic method, so that its draws are independent of
#: the dropout mask drawn from ``dropout_rng`` itself (which stays bit-identical to Flax's).
_SAMPLING_SALT = 0x5A3E

#: Names ``jax.default_matmul_precision`` accepts (JAX's own list, repeated for the message).
_PRECISION_NAMES = (
    "default", "high", "highest", "bfloat16", "tensorfloat32", "float32",
    "ANY_F8_ANY_F8_F32", "ANY_F8_ANY_F8_F32_FAST_ACCUM", "ANY_F8_ANY_F8_ANY",
    "ANY_F8_ANY_F8_ANY_FAST_ACCUM", "F16_F16_F16", "F16_F16_F32", "BF16_BF16_BF16",
    "BF16_BF16_F32", "BF16_BF16_F32_X3", "BF16_BF16_F32_X6", "BF16_BF16_F32_X9",
    "TF32_TF32_F32", "TF32_TF32_F32_X3", "F32_F32_F32", "F64_F64_F64",
)


def _precision_name(precision):
    """The one ``jax.default_matmul_precision`` name for Flax's ``precision`` argument (None:
    JAX's default)."""
    if precision is None:
        return None
    if isinstance(precision, (tuple, list)):
        names = {_precision_name(p) for p in precision}
        if len(precision) == 2 and len(names) == 1:
            return names.pop()
        raise ValueError(
            "precision must be one precision for every matmul of the layer (it is applied with "
            "jax.default_matmul_precision, which has no per-operand setting); got "
            f"precision={precision!r}: pass a single jax.lax.Precision or name, e.g. 'highest'"
        )
    if isinstance(precision, (jax.lax.Precision, jax.lax.DotAlgorithmPreset)):
        name = precision.name
        name = name.lower() if isinstance(precision, jax.lax.Precision) else name
    elif isinstance(precision, str):
        name = precision
    else:
        name = None
    if name not in _PRECISION_NAMES:
        raise ValueError(
            f"precision must be None, a jax.lax.Precision, a jax.lax.DotAlgorithmPreset or one "
            f"of {', '.join(map(repr, _PRECISION_NAMES))}; got precision={precision!r}"
        )
    return name


def _static_or_data(x):
    if is_concrete(x) and np.ndim(x) == 0:
        return float(x)
    return nnx.data(jnp.asarray(x))


def _to_batch(name, x, batch, what):
    """``x`` broadcastable to ``batch + what`` as an array with one leading batch axis (1 where
    ``x`` does not vary over the batch), ready for :func:`boltzmann_attention`."""
    x = jnp.asarray(x)
    nb = len(batch)
    full = shape_str(batch + what)
    if x.ndim > nb + len(what):
        raise ValueError(
            f"{name} must broadcast to (batch..., N, T, S) = {full}; got {shape_str(x.shape)} "
            f"(more dimensions)"
        )
    x = x.reshape((1,) * (nb + len(what) - x.ndim) + x.shape)
    lead, rest = x.shape[:nb], x.shape[nb:]
    if all(d == 1 for d in lead):
        return x.reshape((1,) + rest)
    try:
        x = jnp.broadcast_to(x, batch + rest)
    except ValueError:
        raise ValueError(
            f"{name} must broadcast to (batch..., N, T, S) = {full}; got {shape_str(x.shape)}"
        ) from None
    return x.reshape((math.prod(batch),) + rest)


class BoltzmannAttentionFn(nnx.Module):
    """Boltzmann attention with the signature of Flax's ``dot_product_attention``: pass it as
    ``attention_fn`` to ``nnx.MultiHeadAttention`` or ``flax.linen.MultiHeadDotProductAttention``.
    Build it with :func:`boltzmann_attention_fn` (its docstring holds the details)."""

    def __init__(self, couplings=None, *, method="exact", readout="marginal", beta=1.0,
                 chemical_potential=0.0, rng=None, rngs=None):
        check_choice("readout", readout, READOUTS)
        if couplings is not None and not isinstance(couplings, Couplings):
            raise TypeError(
                "couplings must be a Couplings object (e.g. Couplings.fixed(...), "
                f"Couplings.random(...)) or None; got {type(couplings).__name__}"
            )
        check_beta(beta)
        stochastic = False
        if readout != "softmax":
            method = resolve_method(method)
            if readout == "sample" and not isinstance(method, Sampled):
                raise ValueError(
                    "readout='sample' averages drawn patterns: use method=sampled(backend, "
                    f"num_samples); got method={method!r}"
                )
            stochastic = method.stochastic
        if couplings is not None and couplings.kind == "learned" and is_concrete(couplings.params):
            warnings.warn(
                "couplings of kind 'learned' given to boltzmann_attention_fn are constants of "
                "the callable: Flax's attention modules will not train them. Use "
                "isingattn.attention.BoltzmannMultiHeadAttention, which owns its couplings as "
                "parameters",
                UserWarning,
                stacklevel=3,
            )
        if rng is not None and rngs is not None:
            raise ValueError(
                "pass either rng (one fixed key, the same draws on every call) or rngs (an "
                "nnx.Rngs: a fresh key on every call), not both"
            )
        if rngs is not None and not isinstance(rngs, (nnx.Rngs, nnx.RngStream)):
            raise TypeError(
                f"rngs must be an nnx.Rngs or nnx.RngStream; got {type(rngs).__name__} (a single "
                "key goes to rng=)"
            )
        self.couplings = nnx.data(couplings)
        self.method = method if readout != "softmax" else None
        self.readout = readout
        # scalars stay static Python floats (a concrete beta lets methods skip gradients that
        # cannot be needed); arrays are data, as nnx refuses them in static attributes
        self.beta = _static_or_data(beta)
        self.chemical_potential = _static_or_data(chemical_potential)
        self.stochastic = stochastic
        self.rng = nnx.data(None if rng is None else normalize_key(rng, "rng"))
        if isinstance(rngs, nnx.Rngs):
            try:
                rngs = rngs["attention"].fork()  # stream 'attention', falling back to 'default'
            except KeyError:
                raise ValueError(
                    "rngs must have a stream named 'attention' or 'default', e.g. "
                    f"nnx.Rngs(attention=0); got streams {sorted(rngs)}"
                ) from None
        self.rngs = rngs

    def _sampling_key(self, rng, dropout_rng, module):
        if rng is not None:
            return normalize_key(rng, "rng")
        if self.rng is not None:
            return self.rng
        if self.rngs is not None:
            return self.rngs()
        if dropout_rng is not None:
            return jax.random.fold_in(normalize_key(dropout_rng, "dropout_rng"), _SAMPLING_SALT)
        if module is not None:
            if isinstance(module, nnx.Module):
                stream = getattr(module, "rngs", None)  # nnx.MultiHeadAttention: its dropout stream
                if isinstance(stream, (nnx.Rngs, nnx.RngStream)):
                    return stream()
            elif hasattr(module, "make_rng"):
                for name in ("attention", "dropout"):
                    if module.has_rng(name):
                        return module.make_rng(name)
        raise ValueError(
            f"method={self.method.name!r} is stochastic and needs a PRNG key; none was found. "
            "Give one of: boltzmann_attention_fn(..., rngs=nnx.Rngs(attention=0)) (a fresh key "
            "per call, kept in the nnx module's state under nnx.jit), "
            "boltzmann_attention_fn(..., rng=jax.random.key(0)) (the same key on every call), "
            "rng= when calling the function directly, run the Flax module with dropout "
            "active (dropout_rate > 0, deterministic=False: the key is derived from dropout_rng), "
            "or with sow_weights=True, so that Flax passes the module, whose rngs give the key "
            "(linen: rngs={'attention': key} in init/apply)"
        )

    def __call__(
        self,
        query,
        key,
        value,
        bias=None,
        mask=None,
        broadcast_dropout: bool = True,
        dropout_rng=None,
        dropout_rate: float = 0.0,
        deterministic: bool = False,
        dtype=None,
        precision=None,
        module=None,
        promote_dtype=None,
        is_causal: bool = False,
        force_fp32_for_softmax: bool = False,
        einsum_dot_general=None,
        qk_attn_weights_einsum=None,
        attn_weights_value_einsum=None,
        *,
        rng=None,
    ):
        """Attention outputs ``(batch..., T, N, H)`` from ``query (batch..., T, N, H)`` and
        ``key``, ``value (batch..., S, K, H)``; the other arguments are those of Flax's
        ``dot_product_attention`` (see :func:`boltzmann_attention_fn`), plus ``rng``, a PRNG key
        for stochastic methods."""
        for name, fn in (("einsum_dot_general", einsum_dot_general),
                         ("qk_attn_weights_einsum", qk_attn_weights_einsum),
                         ("attn_weights_value_einsum", attn_weights_value_einsum)):
            if fn is not None:
                raise ValueError(
                    f"{name} cannot be honoured: Boltzmann attention computes its fields and "
                    f"outputs with its own products; got {name}={fn!r} (use None; for the "
                    "precision of those products pass precision=)"
                )
        if is_concrete(dropout_rate) and not 0.0 <= float(dropout_rate) < 1.0:
            raise ValueError(f"dropout_rate must be in [0, 1); got dropout_rate={dropout_rate!r}")
        dropout = not deterministic and dropout_rate > 0.0
        if dropout and dropout_rng is None:
            raise ValueError(
                f"dropout_rate={dropout_rate!r} with deterministic=False needs dropout_rng (a "
                "PRNG key); pass deterministic=True for no dropout"
            )
        matmul_precision = _precision_name(precision)
        promote = _nnx_dtypes.promote_dtype if promote_dtype is None else promote_dtype
        query, key, value = promote((query, key, value), dtype=dtype)
        dtype = query.dtype

        arrays = {"query": query, "key": key, "value": value}
        if any(a.ndim < 3 for a in arrays.values()) or len({a.ndim for a in arrays.values()}) > 1:
            raise ValueError(
                "query, key and value must have the same rank >= 3, (batch..., length, heads, "
                f"features); got query {shape_str(query.shape)}, key {shape_str(key.shape)}, "
                f"value {shape_str(value.shape)}"
            )
        batch = query.shape[:-3]
        if key.shape[:-3] != batch or value.shape[:-3] != batch:
            raise ValueError(
                "query, key and value must have the same batch dimensions (batch..., length, "
                f"heads, features); got query {shape_str(query.shape)}, key "
                f"{shape_str(key.shape)}, value {shape_str(value.shape)}"
            )
        T, N, _ = query.shape[-3:]
        S = key.shape[-3]
        B = math.prod(batch)
        q, k, v = (x.reshape((B,) + x.shape[-3:]) for x in (query, key, value))
        what = (N, T, S)
        bias4 = None if bias is None else _to_batch("bias", bias, batch, what)
        # Flax's masks may be float (nnx.make_causal_mask: float32 0/1); nonzero = attend
        mask4 = None if mask is None else _to_batch("mask", jnp.asarray(mask) != 0, batch, what)

        kw = {}
        if self.readout != "softmax":
            kw = {"couplings": self.couplings, "beta": self.beta,
                  "chemical_potential": self.chemical_potential, "method": self.method}
            if self.stochastic:
                kw["rng"] = self._sampling_key(rng, dropout_rng, module)
        need_weights = dropout or module is not None
        # None leaves any precision the caller set around the call in place
        context = (contextlib.nullcontext() if matmul_precision is None
                   else jax.default_matmul_precision(matmul_precision))
        with context:
            res = boltzmann_attention(q, k, v, bias4, mask4, is_causal=bool(is_causal),
                                      readout=self.readout, return_weights=need_weights, **kw)
            if not need_weights:
                return res.reshape(batch + res.shape[1:])
            out, info = res
            weights = info.weights.astype(dtype)  # (B, N, T, S), as Flax's are in dtype
            weights_batch = weights.reshape(batch + weights.shape[1:])
            if module is not None:
                if isinstance(module, nnx.Module):
                    module.sow(nnx.Intermediate, "attention_weights", weights_batch)
                else:
                    module.sow("intermediates", "attention_weights", weights_batch)
            if dropout:
                # Flax's dropout, bit for bit: the same keep mask from dropout_rng (shared over
                # batch and heads with broadcast_dropout), on the weights in Flax's dtype
                weights = dropout_weights(weights_batch, dropout_rate, dropout_rng,
                                          broadcast_dropout, len(batch)).reshape(weights.shape)
                if v.shape[2] != N:
                    v = jnp.repeat(v, N // v.shape[2], axis=2)
                out = jnp.einsum("bnts,bsnh->btnh", weights, v)
        return out.reshape(batch + out.shape[1:])


def boltzmann_attention_fn(couplings: Couplings | None = None, *, method="exact",
                           readout: str = "marginal", beta=1.0, chemical_potential=0.0, rng=None,
                           rngs=None) -> BoltzmannAttentionFn:
    """Boltzmann attention as the ``attention_fn`` of Flax's attention modules.

    ``nnx.MultiHeadAttention(..., attention_fn=boltzmann_attention_fn(couplings, method=...))``
    and ``flax.linen.MultiHeadDotProductAttention(..., attention_fn=...)`` then compute, on their
    projected queries, keys and values, :func:`boltzmann_attention` with these settings instead of
    softmax attention. The returned callable takes the arguments of Flax's
    ``dot_product_attention``:

    - ``query (batch..., T, N, H)``, ``key``/``value (batch..., S, K, H)``: any number of leading
      batch dimensions (none included), ``N`` a multiple of ``K`` (grouped heads);
    - ``bias``: added to the fields ``h_ij`` (the logits for ``readout="softmax"``),
      broadcastable to ``(batch..., N, T, S)``;
    - ``mask``: broadcastable to ``(batch..., N, T, S)``, True (nonzero) = attend, as
      ``nnx.make_causal_mask`` and ``nnx.make_attention_mask`` build it; ``is_causal`` too;
    - ``dropout_rate``, ``dropout_rng``, ``broadcast_dropout``, ``deterministic``: Flax's dropout
      on the attention weights ``a_ij`` (after normalization; the same keep mask as Flax's from
      the same ``dropout_rng``, shared over batch and heads when ``broadcast_dropout``), only when
      ``dropout_rate > 0`` and not ``deterministic``;
    - ``dtype``: ``query``, ``key``, ``value`` are promoted to it (``promote_dtype``, Flax's by
      default) and the output has it; fields and statistics are computed in at least float32
      (so ``force_fp32_for_softmax`` always holds);
    - ``precision``: applied to every matrix product of the layer through
      ``jax.default_matmul_precision`` (a ``jax.lax.Precision``, a ``DotAlgorithmPreset`` or its
      name; a pair of different precisions is refused);
    - ``module``: when Flax passes it (``sow_weights=True``), the attention weights
      ``(batch..., N, T, S)`` are sown as Flax's are (``nnx.Intermediate`` /
      ``"intermediates"``, name ``attention_weights``);
    - ``einsum_dot_general``, ``qk_attn_weights_einsum``, ``attn_weights_value_einsum``: only
      None (a clear error otherwise).

    Stochastic methods (``sampled(...)``, ``readout="sample"``) take their PRNG key from, in
    order: ``rng=`` of the call; ``rng`` here (one fixed key: the same draws on every call);
    ``rngs`` here (an ``nnx.Rngs``, stream ``attention`` falling back to ``default``: a fresh key
    per call, part of the nnx module's state so ``nnx.jit`` threads it); ``dropout_rng`` (folded
    with a constant, so draws and dropout mask are independent); ``module``'s rngs (nnx: its
    ``rngs`` stream; linen: ``make_rng("attention")``, else ``"dropout"``). With none of them
    the call raises, naming these options. ``deterministic`` concerns dropout only: a sampled
    method draws in either mode.

    Couplings are **fixed**: the callable holds the given :class:`Couplings` as constants (no
    Flax module makes them parameters, whatever their kind; ``kind="learned"`` warns). To learn
    couplings (and the chemical potential), use :class:`BoltzmannMultiHeadAttention`, which owns
    them as ``nnx.Param``.

    Args:
      couplings: :class:`Couplings` (None: ``J = 0``), e.g. ``Couplings.fixed(...)`` or
        ``Couplings.random(...)``, with one head or ``N`` heads.
      method: ``"exact"``, ``"transfer"``, ``"mean_field"``, ``"tap"``, a :class:`MeanField` or
        :func:`sampled` (as in :func:`boltzmann_attention`).
      readout: ``"marginal"`` (default), ``"sample"`` or ``"softmax"`` (then equal to Flax's own
        ``dot_product_attention``).
      beta: inverse temperature (> 0).
      chemical_potential: ``b``, scalar or per head ``(N,)``.
      rng: a fixed PRNG key for stochastic methods.
      rngs: an ``nnx.Rngs`` (or ``RngStream``) for stochastic methods.

    Returns:
      A :class:`BoltzmannAttentionFn` (an ``nnx.Module``, so that ``rngs`` is state nnx can
      thread; it holds no parameters).

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from isingattn.attention import Couplings, boltzmann_attention_fn
      >>> J = Couplings.fixed(jnp.full((2, 1), 0.5), "banded")
      >>> layer = nnx.MultiHeadAttention(
      ...     num_heads=2, in_features=8, decode=False, rngs=nnx.Rngs(0),
      ...     attention_fn=boltzmann_attention_fn(J, method="transfer"))
      >>> layer(jnp.ones((3, 5, 8))).shape
      (3, 5, 8)
    """
    return BoltzmannAttentionFn(couplings, method=method, readout=readout, beta=beta,
                                chemical_potential=chemical_potential, rng=rng, rngs=rngs)
