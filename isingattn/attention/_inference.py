"""Inference methods of the Boltzmann attention layer: the protocol, the result and the registry.

Every method receives the models of all (batch, head, query) triples at once, in the layout
``(B, N, T, S)``: fields ``h`` (``q.k`` scale + chemical potential + bias, not yet multiplied by
``beta``), the boolean ``mask`` of allowed keys, the :class:`Couplings` (one ``J`` per head,
shared by every query) and ``beta``. Variables are BINARY, ``s_j = 1`` meaning "attend to key
``j``", and ``p(s) ∝ exp(beta (sum_j h_j s_j + sum_{j<k} J_jk s_j s_k))``; masked keys are held
at ``s_j = 0``.

``causal=True`` tells a method that the mask allows no key after the query's position
(``k <= t``, the layer's ``is_causal``); a method may use it to skip work (``transfer`` does) and
must give the same result either way. ``log_partition=True`` asks for ``log Z`` per query where
it costs extra work (``transfer``: one more pass); ``exact`` and ``J = 0`` always return it,
``mean_field`` and ``sampled`` never do.

A method returns :class:`Inference`: ``expectation``, the quantity the readout averages (the
marginals ``m_j = P(s_j = 1)`` for the marginal readout), ``weights_unnormalized``: a positive
array proportional to it along the key axis, computed in a way that does not underflow when every
``m_j`` is tiny (the ``b -> -inf`` limit), and optional ``log_partition`` and diagnostics.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp


class Inference(NamedTuple):
    """What a method returns for ``B x N x T`` queries over ``S`` keys: ``expectation`` and
    ``weights_unnormalized`` ``(B, N, T, S)`` (see the module docstring), ``marginals`` (or
    None), ``log_partition`` ``(B, N, T)`` (or None) and ``info``, diagnostics that the layer
    passes on in ``AttentionInfo.extra``."""

    expectation: jax.Array
    weights_unnormalized: jax.Array
    marginals: jax.Array | None
    log_partition: jax.Array | None = None
    info: dict | None = None


@runtime_checkable
class InferenceMethod(Protocol):
    """The protocol of an inference method: ``name`` (for messages and configs), ``stochastic``
    (True when the result depends on ``key``: the layer then requires an ``rng``) and
    ``__call__(h, mask, couplings, beta, *, key, feature, causal, log_partition,
    coupling_grad) -> Inference``.

    ``h`` ``(B, N, T, S)``, ``mask`` (same shape, bool), ``couplings`` a
    :class:`~isingattn.attention.Couplings` (or None: ``J = 0``), ``beta`` a scalar array;
    ``feature``: ``"marginal"`` or ``"sample"`` (the readout's ``phi``); ``causal`` and
    ``log_partition`` as in the module docstring; ``coupling_grad``: False when no gradient
    can reach ``beta * J`` (frozen couplings at a concrete ``beta``), so that a method may skip
    that part of its gradient. A method is registered under a name with
    :func:`register_method`."""

    name: str
    stochastic: bool

    def __call__(self, h, mask, couplings, beta, *, key=None, feature="marginal",
                 causal=False, log_partition=False, coupling_grad=True) -> Inference: ...


#: Largest argument of the exp in :func:`_sigmoid_rows` (finite in float32, and in its gradient).
_EXP_CAP = 80.0


def _sigmoid_rows(z, mask):
    """``sigmoid(z_j) / sigmoid(z_max)`` over the allowed keys of every row (0 where masked;
    all-masked rows stay 0): weights proportional to the marginals ``sigmoid(z)``, in float32
    range even when every ``sigmoid(z_j)`` underflows (the ``b -> -inf`` limit), from one
    ``exp`` per key (no softplus). With ``c = exp(-|z_max|)``: for ``z_max <= 0``,
    ``e (1 + c) / (1 + c e)`` with ``e = exp(z_j - z_max) <= 1``; above, ``(1 + c) / (1 + q)``
    with ``q = exp(-z_j)`` (capped at ``exp(80)``: the ratio is then below 1e-34 either way)."""
    mx = jax.lax.stop_gradient(jnp.max(jnp.where(mask, z, -jnp.inf), axis=-1, keepdims=True))
    mx = jnp.where(jnp.isfinite(mx), mx, 0.0)
    low = mx <= 0
    q = jnp.exp(jnp.minimum(jnp.where(low, z - mx, -z), _EXP_CAP))
    c = jnp.exp(-jnp.abs(mx))
    u = jnp.where(low, q * (1 + c) / (1 + c * q), (1 + c) / (1 + q))
    return jnp.where(mask, u, 0.0)


def independent(h, mask, beta):
    """``J = 0``: keys are independent, ``m_j = sigmoid(beta h_j)`` (exact for every method)."""
    z = beta * h
    m = jnp.where(mask, jax.nn.sigmoid(z), 0.0)
    return Inference(m, _sigmoid_rows(z, mask), m,
                     jnp.sum(jnp.where(mask, jax.nn.softplus(z), 0.0), axis=-1))


# The built-in methods by name: (module, class, keyword arguments), imported on first use (the
# method modules import this one).
_BUILTIN = {
    "exact": ("._exact", "Exact", {}),
    "transfer": ("._transfer", "Transfer", {}),
    "mean_field": ("._mean_field", "MeanField", {}),
    "tap": ("._mean_field", "MeanField", {"tap": True}),
}
_REGISTRY: dict[str, Any] = {}


def register_method(name: str, factory, *, overwrite: bool = False) -> None:
    """Make ``method=name`` (in :func:`~isingattn.attention.boltzmann_attention`, the layers and
    ``isingattn train --method``-style configs that pass names through) build ``factory()``, an
    object following :class:`InferenceMethod`. Raises ``ValueError`` for a name already taken
    (unless ``overwrite``) and ``TypeError`` for a factory that is not callable."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty string; got {name!r}")
    if not callable(factory):
        raise TypeError(f"factory must be callable (it builds the method); got {factory!r}")
    if not overwrite and (name in _BUILTIN or name in _REGISTRY):
        raise ValueError(f"method name {name!r} is taken; pass overwrite=True to replace it")
    _REGISTRY[name] = factory


def method_names() -> tuple[str, ...]:
    """The names :func:`resolve_method` accepts, built-in first."""
    return tuple(_BUILTIN) + tuple(n for n in _REGISTRY if n not in _BUILTIN)


def resolve_method(method) -> InferenceMethod:
    """A method object from a registered name (``"exact"``, ``"transfer"``, ``"mean_field"``,
    ``"tap"``, or one added by :func:`register_method`) or an object following
    :class:`InferenceMethod`, returned as it is. Raises ``ValueError`` naming the valid
    names."""
    if isinstance(method, str):
        if method in _REGISTRY:
            return _REGISTRY[method]()
        if method in _BUILTIN:
            module, cls, kwargs = _BUILTIN[method]
            return getattr(importlib.import_module(module, __package__), cls)(**kwargs)
        if method == "sampled":
            raise ValueError(
                "method='sampled' needs a backend: use method=sampled(backend, num_samples), "
                "e.g. sampled(ExactSampler(), 64)")
    elif isinstance(method, InferenceMethod):
        return method
    raise ValueError(
        f"method must be one of {', '.join(map(repr, method_names()))}, a method object (e.g. "
        f"MeanField(...) or sampled(backend, num_samples)) or one following InferenceMethod "
        f"(name, stochastic, __call__); got {method!r}")
