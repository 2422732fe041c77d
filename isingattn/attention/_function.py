"""``boltzmann_attention``: the layer as a function, with the calling convention of
``jax.nn.dot_product_attention``."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_beta, check_choice, is_concrete, normalize_key, shape_str
from ._couplings import Couplings
from ._inference import resolve_method
from ._sampled import Sampled

READOUTS = ("marginal", "sample", "softmax")


class AttentionInfo(NamedTuple):
    """What ``return_weights=True`` adds to the output (layout ``(B, N, T, S)`` like the logits
    of ``jax.nn.dot_product_attention``).

    Fields:

    - ``weights``: attention weights ``a_ij`` (rows sum to 1 over allowed keys; rows with no allowed
      key, or where no drawn pattern attended anything, are 0 for the Boltzmann readouts).
    - ``marginals``: ``m_ij = P_i(s_j = 1)`` (exact, approximate or estimated by the method);
      None for the softmax readout.
    - ``log_partition``: ``log Z_i`` per query ``(B, N, T)``: ``exact``, ``transfer`` (one more
      forward pass, made only when the weights are returned) and ``J = 0``; None for
      ``mean_field`` and ``sampled``; the log-sum-exp of the logits for the softmax readout.
    - ``expected_count``: ``sum_j m_ij``, the expected number of attended keys ``(B, N, T)``.
    - ``fields``: ``h_ij`` (before ``beta``), masked entries 0; for the softmax readout, the logits.
    - ``mask``: the combined boolean mask of allowed keys.
    - ``extra``: method diagnostics (``residual`` of mean field; ``draws`` and ``empty_rows`` of
      sampled, the latter True where no draw attended any key).
    """

    weights: jax.Array
    marginals: jax.Array | None
    log_partition: jax.Array | None
    expected_count: jax.Array | None
    fields: jax.Array
    mask: jax.Array
    extra: dict


def _ensure_4d(name, x):
    x = jnp.asarray(x)
    if x.ndim > 4:
        raise ValueError(f"{name} must have at most 4 dimensions; got shape {shape_str(x.shape)}")
    return jnp.expand_dims(x, tuple(range(4 - x.ndim))) if x.ndim < 4 else x


def _large_negative(dtype):
    # jax.nn.dot_product_attention's fill value for masked logits (softmax in float32).
    return jnp.asarray(-0.7 * min(float(jnp.finfo(dtype).max), float(np.finfo(np.float32).max)),
                       dtype)


IMPLEMENTATIONS = (None, "xla", "cudnn")

#: Methods whose derivatives JAX can take in forward mode (``jax.jvp``, ``jax.jacfwd``) with
#: couplings; the others define their gradient as a custom VJP (reverse mode only). With J = 0
#: every deterministic method is the closed form and supports both.
FORWARD_MODE_METHODS = ("exact",)


def _window(local_window_size):
    """``(left, right)`` from ``jax.nn.dot_product_attention``'s ``local_window_size``."""
    w = local_window_size
    pair = (w, w) if isinstance(w, (int, np.integer)) and not isinstance(w, bool) else w
    if (not isinstance(pair, (tuple, list)) or len(pair) != 2
            or not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and x >= 0
                       for x in pair)):
        raise ValueError(
            "local_window_size must be a non-negative int or a pair (left, right) of them (query "
            f"i attends to keys i - left ... i + right); got local_window_size={w!r}"
        )
    return int(pair[0]), int(pair[1])


def _combined_mask(B, N, T, S, mask, is_causal, q_len, kv_len, window=None):
    combined = jnp.ones((1, 1, T, S), bool)
    if mask is not None:
        combined = combined & mask
    if is_causal:
        combined = combined & jnp.tril(jnp.ones((T, S), bool))[None, None]
    if window is not None:
        d = jnp.arange(T)[:, None] - jnp.arange(S)[None, :]  # query minus key position
        combined = combined & ((d <= window[0]) & (-d <= window[1]))[None, None]
    if q_len is not None:
        combined = combined & (jnp.arange(T)[None, :, None] < q_len[:, None, None])[:, None]
    if kv_len is not None:
        combined = combined & (jnp.arange(S)[None, None, :] < kv_len[:, None, None])[:, None]
    return combined


def _check_inputs(query, key, value, bias, mask, q_len, kv_len):
    if key.shape != value.shape:
        raise ValueError(
            f"key and value must have the same shape (B, S, K, H); got key "
            f"{shape_str(key.shape)} and value {shape_str(value.shape)}"
        )
    B, S, K, H = key.shape
    if query.shape[0] != B or query.shape[3] != H:
        raise ValueError(
            f"query must have shape (B, T, N, H) with the B and H of key (B, S, K, H); got "
            f"query {shape_str(query.shape)} and key {shape_str(key.shape)}"
        )
    for name, arr in (("query", query), ("key", key), ("value", value)):
        if jnp.issubdtype(arr.dtype, jnp.complexfloating):
            raise TypeError(f"{name} must be real; got dtype {arr.dtype}")
    if 0 in query.shape or 0 in key.shape:
        # the layer's Ising models need n = S >= 1 keys (as every IsingModel needs n >= 1), and
        # an empty batch, head or query axis is far likelier a slip upstream than intended
        raise ValueError(
            "query (B, T, N, H) and key/value (B, S, K, H) must have no empty axis (every size "
            f">= 1); got query {shape_str(query.shape)} and key {shape_str(key.shape)}"
        )
    N = query.shape[2]
    if N % K:
        raise ValueError(
            f"the number of query heads N must be a multiple of the key/value heads K; got "
            f"query {shape_str(query.shape)} (N = {N}) and key {shape_str(key.shape)} (K = {K})"
        )
    T = query.shape[1]
    for name, arr in (("bias", bias), ("mask", mask)):
        if arr is None:
            continue
        try:
            jnp.broadcast_shapes(arr.shape, (B, N, T, S))
        except ValueError:
            raise ValueError(
                f"{name} must broadcast to (B, N, T, S) = {shape_str((B, N, T, S))} from query "
                f"{shape_str(query.shape)} and key {shape_str(key.shape)}; got "
                f"{shape_str(arr.shape)}"
            ) from None
    if mask is not None and mask.dtype != jnp.bool_:
        raise ValueError(f"mask must be boolean (True = attend); got dtype {mask.dtype}")
    for name, arr in (("query_seq_lengths", q_len), ("key_value_seq_lengths", kv_len)):
        if arr is not None and arr.shape != (B,):
            raise ValueError(f"{name} must have shape (B,) = ({B},); got {shape_str(arr.shape)}")


def dropout_weights(weights, rate, rng, broadcast, batch_ndim=1):
    """Attention weights ``(..., N, T, S)`` after dropout as Flax applies it: each weight kept
    with probability ``1 - rate`` (the mask drawn from ``rng``; shared over the ``batch_ndim``
    batch axes and the heads when ``broadcast``) and scaled by ``1 / (1 - rate)``, in the
    weights' dtype."""
    keep_prob = 1.0 - rate
    shape = (1,) * (batch_ndim + 1) + weights.shape[-2:] if broadcast else weights.shape
    keep = jax.random.bernoulli(normalize_key(rng, "dropout_rng"), keep_prob, shape)
    return weights * (keep.astype(weights.dtype) / jnp.asarray(keep_prob, weights.dtype))


def _check_dropout(rate, rng):
    if not is_concrete(rate):
        raise TypeError(f"dropout_rate must be a concrete number; got a traced {rate!r}")
    if not 0.0 <= float(rate) < 1.0:
        raise ValueError(f"dropout_rate must be in [0, 1); got dropout_rate={rate!r}")
    if rate > 0 and rng is None:
        raise ValueError(
            f"dropout_rate={rate!r} needs dropout_rng (a PRNG key, e.g. jax.random.key(0)); "
            "dropout_rate=0 for none"
        )


def _explicit_axes(*arrays):
    """The ``Explicit`` mesh axes that ``arrays`` are sharded over (their types carry them)."""
    axes = set()
    for x in arrays:
        sharding = getattr(jax.typeof(x), "sharding", None)
        mesh = getattr(sharding, "mesh", None)
        spec = getattr(sharding, "spec", None)
        if mesh is None or not spec:
            continue
        explicit = {n for n, t in zip(mesh.axis_names, mesh.axis_types)
                    if t == jax.sharding.AxisType.Explicit}
        for entry in spec:
            names = entry if isinstance(entry, tuple) else (entry,)
            axes |= {n for n in names if n in explicit}
    return sorted(axes)


def _forward_mode_error(method, couplings, err):
    return TypeError(
        f"jax.jvp (forward-mode differentiation) through method={method.name!r} with couplings "
        "is not available: its gradient is a custom VJP, reverse mode only. Use reverse mode "
        "(jax.grad, jax.vjp, jax.jacrev), or a method that supports forward mode: "
        f"{', '.join(map(repr, FORWARD_MODE_METHODS))} (and every deterministic method with "
        "J = 0, the closed form)"
    ).with_traceback(err.__traceback__)


def _chemical_potential(b, N, dtype):
    b = jnp.asarray(b, dtype)
    if b.ndim == 0:
        return b
    if b.shape != (N,):
        raise ValueError(
            f"chemical_potential must be a scalar or one value per head, shape ({N},); got "
            f"{shape_str(b.shape)}"
        )
    return b[None, :, None, None]


def boltzmann_attention(
    query,
    key,
    value,
    bias=None,
    mask=None,
    *,
    scale=None,
    is_causal: bool = False,
    query_seq_lengths=None,
    key_value_seq_lengths=None,
    local_window_size=None,
    implementation=None,
    couplings: Couplings | None = None,
    beta=1.0,
    chemical_potential=0.0,
    readout: str = "marginal",
    method="exact",
    rng=None,
    dropout_rate=0.0,
    dropout_rng=None,
    broadcast_dropout: bool = True,
    return_weights: bool = False,
):
    """Boltzmann attention: per (batch, head, query) an Ising model over the allowed keys.

    For query ``i`` of head ``n`` the attention pattern ``s in {0,1}^S`` (``s_j = 1``: attend
    to key ``j``) has ``p_i(s) ∝ exp(-beta E_i(s))`` with
    ``E_i(s) = -sum_j h_ij s_j - sum_{j<k} J^n_jk s_j s_k``, fields
    ``h_ij = scale * (q_i . k_j) + b_n + bias_ij`` and couplings ``J^n`` from ``couplings``;
    masked keys are held at ``s_j = 0``. Readouts:

    - ``"marginal"``: ``m_ij = P_i(s_j = 1)``, ``a_ij = m_ij / sum_k m_ik``,
      ``o_i = sum_j a_ij v_j``. With ``J = 0``, ``a_ij ∝ sigmoid(beta h_ij)``; as ``b -> -inf``
      it tends to ``softmax_j(beta h_ij)``.
    - ``"sample"``: the average over drawn patterns of ``sum_j s_j v_j / max(1, sum_j s_j)``
      (stochastic; needs ``method=sampled(...)`` and ``rng``).
    - ``"softmax"``: ordinary softmax attention over the logits ``scale q.k + bias``, equal to
      ``jax.nn.dot_product_attention`` (couplings, beta and chemical potential unused).

    Args:
      query: ``(B, T, N, H)`` (or without the batch dimension, as in JAX). Real numbers:
        integer and boolean ``query``, ``key`` and ``value`` are taken as float32 (the output
        then is float32), complex ones are a ``TypeError``.
      key: ``(B, S, K, H)`` with ``N`` a multiple of ``K`` (grouped heads: head ``n`` uses
        key/value head ``n // (N / K)``).
      value: ``(B, S, K, H)``.
      bias: added to the fields (and softmax logits), broadcastable to ``(B, N, T, S)``.
      mask: boolean, broadcastable to ``(B, N, T, S)``; ``False`` removes a key.
      scale: multiplies ``q.k``; default ``1 / sqrt(H)``.
      is_causal: query ``i`` sees keys ``j <= i``.
      query_seq_lengths, key_value_seq_lengths: ``(B,)`` int32 padding lengths (as in JAX;
        outputs of padded queries are 0).
      local_window_size: as in JAX: an int ``w`` or a pair ``(left, right)``; query ``i``
        attends only to keys ``i - left ... i + right`` (a mask: with it, banded couplings and
        ``transfer`` stay exact at any length).
      implementation: as in JAX: None or ``"xla"`` (the computation is XLA's); ``"cudnn"`` only
        for ``readout="softmax"`` without ``return_weights`` (passed on to
        ``jax.nn.dot_product_attention``); anything else is a ``ValueError``.
      couplings: :class:`Couplings` (None or ``Couplings.none()``: ``J = 0``).
      beta: inverse temperature (> 0) multiplying fields and couplings.
      chemical_potential: ``b``, scalar or per head ``(N,)``.
      readout: ``"marginal"`` (default), ``"sample"`` or ``"softmax"``.
      method: ``"exact"`` (``S <= 16``), ``"transfer"`` (banded couplings, any ``S``),
        ``"mean_field"``, ``"tap"``, a :class:`MeanField`, or :func:`sampled` (any sampler).
        With ``J = 0`` every deterministic method uses the closed form ``m = sigmoid(beta h)``.
      rng: JAX PRNG key for stochastic methods (named ``rng`` so it does not clash with ``key``);
        typed (``jax.random.key``) or raw (``jax.random.PRNGKey``).
      dropout_rate, dropout_rng, broadcast_dropout: dropout on the attention weights as in
        Flax (:func:`dropout_weights`: kept with probability ``1 - dropout_rate``, rescaled; the
        mask from ``dropout_rng``, shared over batch and heads when ``broadcast_dropout``);
        ``dropout_rate`` (concrete, in ``[0, 1)``) > 0 needs ``dropout_rng``. The returned
        :class:`AttentionInfo` holds the weights before dropout.
      return_weights: also return an :class:`AttentionInfo`.

    Returns:
      ``(B, T, N, H)`` outputs, or ``(outputs, AttentionInfo)`` with ``return_weights=True``.

    Raises:
      TypeError: ``jax.jvp`` (forward mode) through a method whose gradient is a custom VJP
        (``transfer``, ``mean_field``, ``tap``, ``sampled`` with couplings): the message names
        the methods that support it (:data:`FORWARD_MODE_METHODS`).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from isingattn.attention import Couplings, boltzmann_attention
      >>> q = k = v = jnp.ones((1, 4, 2, 8))
      >>> J = Couplings.fixed(jnp.full((2, 1), 0.5), "banded")
      >>> boltzmann_attention(q, k, v, couplings=J, method="exact").shape
      (1, 4, 2, 8)
    """
    check_choice("readout", readout, READOUTS)
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}; got "
                         f"implementation={implementation!r}")
    if implementation == "cudnn":
        if readout != "softmax" or return_weights or dropout_rate:
            raise ValueError(
                "implementation='cudnn' runs only the softmax readout, without return_weights "
                f"or dropout (cuDNN's fused kernel); got readout={readout!r}, return_weights="
                f"{return_weights!r}, dropout_rate={dropout_rate!r}: use implementation=None"
            )
        return jax.nn.dot_product_attention(
            query, key, value, bias, mask, scale=scale, is_causal=is_causal,
            query_seq_lengths=query_seq_lengths, key_value_seq_lengths=key_value_seq_lengths,
            local_window_size=local_window_size, implementation="cudnn")
    window = None if local_window_size is None else _window(local_window_size)
    _check_dropout(dropout_rate, dropout_rng)
    rng = None if rng is None else normalize_key(rng, "rng")  # raw PRNGKey data wrapped once
    squeeze = jnp.ndim(query) == 3
    query, key, value = (_ensure_4d(n, x) for n, x in (("query", query), ("key", key),
                                                        ("value", value)))
    bias = None if bias is None else _ensure_4d("bias", bias)
    mask = None if mask is None else _ensure_4d("mask", mask)
    q_len = None if query_seq_lengths is None else jnp.asarray(query_seq_lengths)
    kv_len = None if key_value_seq_lengths is None else jnp.asarray(key_value_seq_lengths)
    _check_inputs(query, key, value, bias, mask, q_len, kv_len)
    # integer and boolean inputs compute in floating point (as a model's h and J do); cast to
    # an integer value's dtype, the weights would be truncated to 0 and 1 silently
    query, key, value = (x if jnp.issubdtype(x.dtype, jnp.inexact)
                         else x.astype(jnp.promote_types(x.dtype, jnp.float32))
                         for x in (query, key, value))

    B, T, N, H = query.shape
    S, K = key.shape[1], key.shape[2]
    G = N // K
    if G > 1:
        key = jnp.repeat(key, G, axis=2)
        value = jnp.repeat(value, G, axis=2)
    dtype = jnp.promote_types(query.dtype, jnp.float32)
    scale = 1.0 / np.sqrt(H) if scale is None else scale
    logits = jnp.einsum("btnh,bsnh->bnts", query, key, preferred_element_type=dtype)
    logits = logits * jnp.asarray(scale, dtype)
    if bias is not None:
        logits = (logits + bias).astype(dtype)
    allowed = _combined_mask(B, N, T, S, mask, is_causal, q_len, kv_len, window)

    if readout == "softmax":
        padded = jnp.where(allowed, logits, _large_negative(dtype)).astype(jnp.float32)
        weights = jax.nn.softmax(padded, axis=-1).astype(value.dtype)
        info = AttentionInfo(weights, None, jax.nn.logsumexp(padded, axis=-1), None, logits,
                             jnp.broadcast_to(allowed, logits.shape), {})
    else:
        method = resolve_method(method)
        if readout == "sample" and not isinstance(method, Sampled):
            raise ValueError(
                "readout='sample' averages drawn patterns: use method=sampled(backend, "
                "num_samples) (e.g. sampled(ExactSampler(), 64) for exact draws); got "
                f"method={method!r}"
            )
        if method.stochastic and rng is None:
            raise ValueError(
                f"method={method.name!r} is stochastic and needs a PRNG key: pass "
                "rng=jax.random.key(...)"
            )
        check_beta(beta)
        explicit = _explicit_axes(query, key, value)
        if explicit and method.name != "exact":
            raise ValueError(
                f"method={method.name!r} does not take inputs sharded on Explicit mesh axes "
                f"yet (here {explicit}): use a mesh with Auto axes (jax.make_mesh(..., "
                "axis_types=(jax.sharding.AxisType.Auto,) * k)) or jax.shard_map; method='exact' "
                "and readout='softmax' take them"
            )
        if couplings is None:
            couplings = Couplings.none()
        if not isinstance(couplings, Couplings):
            raise TypeError(
                f"couplings must be a Couplings object (or None); got {type(couplings).__name__}"
            )
        couplings.check_length(S)
        if couplings.num_heads not in (None, 1, N):
            raise ValueError(
                f"couplings have {couplings.num_heads} heads; the query has N = {N} heads"
            )
        h = logits + _chemical_potential(chemical_potential, N, dtype)
        allowed = jnp.broadcast_to(allowed, h.shape)
        h = jnp.where(allowed, h, 0.0)
        feature = "sample" if readout == "sample" else "marginal"
        # no gradient reaches beta * J when the couplings are frozen and beta is concrete
        # (transfer then skips the couplings' part of its gradient)
        coupling_grad = not (couplings.kind in ("fixed", "random") and is_concrete(beta))
        try:
            res = method(h, allowed, couplings, jnp.asarray(beta, dtype), key=rng,
                         feature=feature, causal=bool(is_causal),
                         log_partition=bool(return_weights), coupling_grad=coupling_grad)
        except TypeError as e:
            if "forward-mode autodiff" in str(e):
                raise _forward_mode_error(method, couplings, e) from None
            raise
        u = res.weights_unnormalized
        total = jnp.sum(u, axis=-1, keepdims=True)
        if readout == "sample":
            weights = u  # already the average of s / max(1, |s|)
        else:
            weights = u / jnp.where(total > 0, total, 1.0)
        m = res.marginals
        info = AttentionInfo(weights, m, res.log_partition,
                             None if m is None else jnp.sum(m, axis=-1), h, allowed,
                             dict(res.info or {}))
    used = weights.astype(value.dtype)
    if dropout_rate:
        used = dropout_weights(used, dropout_rate, dropout_rng, broadcast_dropout)
    out = jnp.einsum("bnts,bsnh->btnh", used, value)
    if q_len is not None:
        out = out * (jnp.arange(T)[None, :] < q_len[:, None])[:, :, None, None].astype(out.dtype)
    if squeeze:
        out = out[0]
    return (out, info) if return_weights else out
