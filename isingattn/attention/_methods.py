"""Inference methods of the Boltzmann attention layer.

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

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._validation import check_positive_int

#: Largest number of keys ``S`` the ``exact`` method enumerates (``2^S`` patterns per query).
MAX_EXACT_KEYS = 16
_BIG = 1e30
_EXACT_TILE = 1 << 24  # elements of the (rows, 2^S) pattern table processed at once


class Inference(NamedTuple):
    expectation: jax.Array
    weights_unnormalized: jax.Array
    marginals: jax.Array | None
    log_partition: jax.Array | None = None
    info: dict | None = None


def _normalize_rows(logu, mask):
    """``exp(logu - max)`` over allowed keys (0 where masked; all-masked rows stay 0)."""
    logu = jnp.where(mask, logu, -jnp.inf)
    mx = jax.lax.stop_gradient(jnp.max(logu, axis=-1, keepdims=True))
    mx = jnp.where(jnp.isfinite(mx), mx, 0.0)
    return jnp.where(mask, jnp.exp(jnp.where(mask, logu, mx) - mx), 0.0)


def independent(h, mask, beta):
    """``J = 0``: keys are independent, ``m_j = sigmoid(beta h_j)`` (exact for every method)."""
    z = beta * h
    m = jnp.where(mask, jax.nn.sigmoid(z), 0.0)
    return Inference(m, _normalize_rows(jax.nn.log_sigmoid(z), mask), m,
                     jnp.sum(jnp.where(mask, jax.nn.softplus(z), 0.0), axis=-1))


# --------------------------------------------------------------------------------------------
# exact enumeration
# --------------------------------------------------------------------------------------------


def _pattern_table(S, dtype):
    idx = jnp.arange(1 << S, dtype=jnp.int32)
    return ((idx[:, None] >> jnp.arange(S, dtype=jnp.int32)) & 1).astype(dtype)


def _exact_rows(a, W, X, Q):
    """a (b, N, T, S) bit-form fields (masked: -BIG), W (N, S, S); returns m-proportional u,
    the shift-free marginals and log Z."""
    L = jnp.einsum("bnts,ps->bntp", a, X) + Q[None, :, None, :]
    logZ = jax.nn.logsumexp(L, axis=-1)
    # Shift by the best non-empty pattern: the empty pattern carries no weight in sum_s p(s) s,
    # so u stays O(1) even when every m_j underflows (the b -> -inf softmax limit).
    shift = jax.lax.stop_gradient(jnp.max(L[..., 1:], axis=-1, keepdims=True))
    e = jnp.exp(L[..., 1:] - shift)
    u = jnp.einsum("bntp,ps->bnts", e, X[1:])
    m = u * jnp.exp(shift - logZ[..., None])
    return u, m, logZ


@dataclasses.dataclass(frozen=True)
class Exact:
    """Exact marginals by enumerating all ``2^S`` attention patterns of every query.

    One ``(2^S, S)`` pattern table and one quadratic term per head serve every query: the
    pattern log-weights are a batched matrix product, ``log Z`` a log-sum-exp, marginals a second
    product; gradients are JAX autodiff of these. Memory ``O(rows * 2^S)``, processed in tiles of
    ``2^24`` elements. Supports ``S <= MAX_EXACT_KEYS`` (16).
    """

    name = "exact"
    stochastic = False

    def __call__(self, h, mask, couplings, beta, *, key=None, feature="marginal", causal=False,
                 log_partition=False):
        B, N, T, S = h.shape
        if couplings is None or couplings.is_zero:
            return independent(h, mask, beta)
        if S > MAX_EXACT_KEYS:
            raise ValueError(
                f"method='exact' enumerates 2^S attention patterns per query and supports "
                f"S <= {MAX_EXACT_KEYS} keys; got S = {S}. Use method='transfer' (banded "
                "couplings, exact at any length) or method=sampled(backend, num_samples)"
            )
        dt = h.dtype
        X = _pattern_table(S, dt)
        W = beta * couplings.matrix(S, dt)
        W = jnp.broadcast_to(W, (N, S, S))
        Q = 0.5 * jnp.sum((X @ W) * X, axis=-1)  # (N, 2^S)
        a = jnp.where(mask, beta * h, -_BIG)
        a = jnp.broadcast_to(a, (B, N, T, S))
        rows = max(1, _EXACT_TILE // (N * T * (1 << S)))
        if rows >= B:
            u, m, logZ = _exact_rows(a, W, X, Q)
        else:
            u, m, logZ = jax.lax.map(
                lambda ab: _exact_rows(ab[None], W, X, Q), a, batch_size=rows
            )
            u, m, logZ = u[:, 0], m[:, 0], logZ[:, 0]
        u = jnp.where(mask, u, 0.0)
        m = jnp.where(mask, m, 0.0)
        return Inference(m, u, m, logZ)


# --------------------------------------------------------------------------------------------
# transfer matrix (banded couplings)
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Transfer:
    """Exact marginals for banded couplings of range ``r`` at any length, by a transfer-matrix
    recursion over the window of the last ``r`` keys (cost ``O(S 2^r)`` per query), specialised
    to couplings shared by every query of a head (see ``isingattn.attention._banded``).

    Gradients come from a hand-written vector-Jacobian product (reverse mode only); with frozen
    couplings (``fixed``, ``random``) and a concrete ``beta`` it skips the couplings' part,
    about half the cost. With ``causal=True`` (passed by the layer for ``is_causal``) two queries share one chain. The
    arithmetic is in probability space: in float32 it is exact to about 1e-6 while
    ``beta * sum_d |w(d)| <= 30`` per head and gives NaN beyond (float64: 240).

    ``backend``: where the forward pass runs: ``"auto"`` (default: a compiled kernel on the CPU,
    :mod:`isingattn.attention._native`, where numba is installed; else JAX), ``"numba"`` or
    ``"jax"``. The same numbers to float precision; the gradient is JAX's in every case."""

    backend: str = "auto"
    name = "transfer"
    stochastic = False

    def __post_init__(self):
        from ._banded import BACKENDS

        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}; "
                             f"got {self.backend!r}")

    def __call__(self, h, mask, couplings, beta, *, key=None, feature="marginal", causal=False,
                 log_partition=False):
        if couplings is None or couplings.is_zero:
            return independent(h, mask, beta)
        S = h.shape[-1]
        r = couplings.band_width(S)
        if r is None:
            raise ValueError(
                f"method='transfer' needs banded couplings (structure='banded'); got "
                f"structure={couplings.structure!r}. Use method='exact' (S <= {MAX_EXACT_KEYS}),"
                " 'mean_field' or sampled(backend, num_samples)"
            )
        if r == 0:  # a single key: nothing to couple
            return independent(h, mask, beta)
        from ._banded import transfer_inference

        return transfer_inference(h, mask, couplings, beta, r, causal=causal,
                                  log_partition=log_partition, backend=self.backend)


# --------------------------------------------------------------------------------------------
# mean field (naive or TAP), implicit or unrolled differentiation
# --------------------------------------------------------------------------------------------


def _mf_logits(params, m, tap):
    a, couplings, beta = params
    z = a + beta * couplings.matvec(m)
    if tap:
        z = z - (m - 0.5) * (beta * beta) * couplings.matvec(m * (1 - m), squared=True)
    return z


def _mf_step(cfg, params, m):
    tap, damping = cfg[0], cfg[1]
    return (1 - damping) * m + damping * jax.nn.sigmoid(_mf_logits(params, m, tap))


def _mf_solve(cfg, params, m0):
    _, _, max_iters, tol = cfg

    def cond(c):
        i, _, res = c
        return (i < max_iters) & (res > tol)

    def body(c):
        i, m, _ = c
        m_new = _mf_step(cfg, params, m)
        return i + 1, m_new, jnp.max(jnp.abs(m_new - m))

    init = (jnp.array(0, jnp.int32), m0, jnp.array(jnp.inf, m0.dtype))
    return jax.lax.while_loop(cond, body, init)[1]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _mf_implicit(cfg, params, m0):
    return _mf_solve(cfg, params, m0)


def _mf_implicit_fwd(cfg, params, m0):
    m = _mf_solve(cfg, params, m0)
    return m, (params, m)


def _mf_implicit_bwd(cfg, res, g):
    # Implicit function theorem at the fixed point m* = F(m*, theta):
    # theta_bar = (dF/dtheta)^T u with u = g + (dF/dm)^T u, solved by the same damped iteration.
    params, m = res
    _, _, max_iters, tol = cfg
    _, vjp_m = jax.vjp(lambda mm: _mf_step(cfg, params, mm), m)

    def cond(c):
        i, _, r = c
        return (i < max_iters) & (r > tol)

    def body(c):
        i, u, _ = c
        u_new = g + vjp_m(u)[0]
        return i + 1, u_new, jnp.max(jnp.abs(u_new - u))

    init = (jnp.array(0, jnp.int32), g, jnp.array(jnp.inf, g.dtype))
    u = jax.lax.while_loop(cond, body, init)[1]
    _, vjp_p = jax.vjp(lambda p: _mf_step(cfg, p, m), params)
    return vjp_p(u)[0], jnp.zeros_like(m)


_mf_implicit.defvjp(_mf_implicit_fwd, _mf_implicit_bwd)


@dataclasses.dataclass(frozen=True)
class MeanField:
    """Mean-field marginals: the damped fixed point ``m <- (1 - damping) m + damping
    sigmoid(beta (h + J m))`` in BINARY variables, from ``m = sigmoid(beta h)``.

    With ``tap=True`` the TAP (Onsager) correction is added to the argument of the sigmoid:
    ``- beta^2 (m_j - 1/2) sum_k J_jk^2 m_k (1 - m_k)`` (second-order Plefka expansion).

    Differentiation: ``implicit=True`` (default) uses the implicit function theorem at the fixed
    point (a ``custom_vjp`` solving the adjoint equation ``u = g + (dF/dm)^T u`` by the same
    damped iteration; memory independent of the number of iterations, exact at convergence);
    ``implicit=False`` unrolls exactly ``max_iters`` steps and lets JAX differentiate through
    them. Banded couplings use ``O(S r)`` shifted sums, others a dense ``(S, S)`` product.
    """

    damping: float = 0.5
    max_iters: int = 200
    tol: float = 1e-6
    tap: bool = False
    implicit: bool = True

    name = "mean_field"
    stochastic = False

    def __post_init__(self):
        if not 0 < self.damping <= 1:
            raise ValueError(f"damping must be in (0, 1]; got {self.damping}")
        check_positive_int("max_iters", self.max_iters)
        if not self.tol > 0:
            raise ValueError(f"tol must be > 0; got {self.tol}")

    def __call__(self, h, mask, couplings, beta, *, key=None, feature="marginal", causal=False,
                 log_partition=False):
        if couplings is None or couplings.is_zero:
            return independent(h, mask, beta)
        a = jnp.where(mask, beta * h, -_BIG)
        params = (a, couplings, jnp.asarray(beta, h.dtype))
        cfg = (self.tap, float(self.damping), int(self.max_iters), float(self.tol))
        m0 = jax.nn.sigmoid(a)
        if self.implicit:
            m = _mf_implicit(cfg, params, m0)
        else:
            m = jax.lax.fori_loop(0, self.max_iters, lambda i, mm: _mf_step(cfg, params, mm), m0)
        z = _mf_logits(params, m, self.tap)
        residual = jnp.max(jnp.abs(jax.nn.sigmoid(z) - m), axis=-1)
        m = jnp.where(mask, m, 0.0)
        return Inference(m, _normalize_rows(jax.nn.log_sigmoid(z), mask), m, None,
                         {"residual": jax.lax.stop_gradient(residual)})


# --------------------------------------------------------------------------------------------
# sampled: any sampler backend, fluctuation-dissipation gradients
# --------------------------------------------------------------------------------------------


def _features(s, feature):
    if feature == "marginal":
        return s
    return s / jnp.maximum(1.0, jnp.sum(s, axis=-1, keepdims=True))


def _draw(cfg, h, J, beta, mask, key):
    from ..models import IsingModel

    backend, num_samples, num_chains, options, _ = cfg
    model = IsingModel(h=jnp.where(mask, h, 0.0), J=J[:, None], beta=beta, vartype="BINARY",
                       mask=mask, validate=False)
    draws = backend.sample(model, key, num_samples, num_chains=num_chains, **dict(options))
    s = draws.spins.astype(h.dtype)
    return s.reshape(s.shape[:-3] + (num_chains * num_samples, s.shape[-1]))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fdt_mean(cfg, h, J, beta, mask, key):
    s = _draw(cfg, h, J, beta, mask, key)
    return jnp.mean(_features(s, cfg[4]), axis=-2), s


def _fdt_fwd(cfg, h, J, beta, mask, key):
    s = _draw(cfg, h, J, beta, mask, key)
    return (jnp.mean(_features(s, cfg[4]), axis=-2), s), (h, J, beta, s)


def _fdt_bwd(cfg, res, cot):
    # d E[phi(s)] / d theta = Cov(phi(s), d(-beta E(s))/d theta): with f = g . phi(s),
    # dL/dh_k = beta Cov(f, s_k), dL/dJ_jk = beta Cov(f, s_j s_k) / 2 per matrix entry,
    # dL/dbeta = Cov(f, sum_j h_j s_j + sum_{j<k} J_jk s_j s_k). Same draws as the forward pass;
    # the 1/(M-1) covariance is unbiased for i.i.d. draws.
    g, _ = cot
    h, J, beta, s = res
    M = s.shape[-2]
    f = jnp.einsum("...ms,...s->...m", _features(s, cfg[4]), g)
    fc = (f - jnp.mean(f, axis=-1, keepdims=True)) / (M - 1)
    dh = beta * jnp.einsum("...m,...ms->...s", fc, s)
    fs = fc[..., None] * s  # (B, N, T, M, S)
    dJ = 0.5 * beta * jnp.einsum("bntmj,bntmk->njk", fs, s)
    neg_energy = jnp.einsum("...ms,...s->...m", s, h) + 0.5 * jnp.einsum(
        "bntmj,njk,bntmk->bntm", s, J, s)
    dbeta = jnp.sum(fc * neg_energy).astype(jnp.result_type(beta))
    dbeta = jnp.broadcast_to(dbeta, jnp.shape(beta))
    return dh, dJ, dbeta, None, None


_fdt_mean.defvjp(_fdt_fwd, _fdt_bwd)


@dataclasses.dataclass(frozen=True)
class Sampled:
    """Statistics from ``num_chains * num_samples`` draws of a sampler backend (any
    :class:`isingattn.samplers.Sampler`), with fluctuation-dissipation gradients.

    The readout's expectation ``E[phi(s)]`` (``phi(s) = s`` for the marginal readout,
    ``s / max(1, sum_j s_j)`` for the sample readout) is estimated by the sample mean; its
    gradients come from a ``custom_vjp`` that reuses the forward draws:
    ``dL/dh_k = beta Cov(g.phi(s), s_k)``, ``dL/dJ_jk = beta Cov(g.phi(s), s_j s_k)``, so the
    sampler itself need not be differentiable. Needs a PRNG key (``rng=`` of the layer) and at
    least two draws per query. The backend must be traceable by JAX (pure-JAX samplers, or host
    samplers that call back from jitted code) when the layer is used under ``jit``.

    Diagnostics (``AttentionInfo.extra``): ``draws`` ``(B, N, T, M, S)`` and ``empty_rows``
    ``(B, N, T)``, True where no draw attended any key (those rows' weights are 0: likely at
    strongly negative chemical potentials, where ``sampled`` needs more draws or ``exact`` /
    ``transfer`` give the softmax limit).
    """

    backend: Any
    num_samples: int = 64
    num_chains: int = 1
    options: tuple = ()

    name = "sampled"
    stochastic = True

    def __post_init__(self):
        from ..samplers import Sampler

        if not isinstance(self.backend, Sampler):
            raise TypeError(
                "sampled(backend, ...) needs a sampler instance from isingattn.samplers, e.g. "
                f"ExactSampler(); got {self.backend!r}"
            )
        check_positive_int("num_samples", self.num_samples)
        check_positive_int("num_chains", self.num_chains)
        if self.num_samples * self.num_chains < 2:
            raise ValueError(
                "sampled needs num_samples * num_chains >= 2 draws per query (covariances for "
                f"the gradients); got {self.num_samples * self.num_chains}"
            )

    def __hash__(self):
        return hash((id(self.backend), self.num_samples, self.num_chains, self.options))

    def __eq__(self, other):
        return (isinstance(other, Sampled) and other.backend is self.backend
                and (other.num_samples, other.num_chains, other.options)
                == (self.num_samples, self.num_chains, self.options))

    def __call__(self, h, mask, couplings, beta, *, key=None, feature="marginal", causal=False,
                 log_partition=False):
        if key is None:
            raise ValueError(
                "method=sampled(...) is stochastic and needs a PRNG key: pass rng=jax.random.key(...)"
            )
        _B, N, _T, S = h.shape
        if couplings is None or couplings.is_zero:
            J = jnp.zeros((N, S, S), h.dtype)
        else:
            J = jnp.broadcast_to(couplings.matrix(S, h.dtype), (N, S, S))
        mask = jnp.broadcast_to(mask, h.shape)
        cfg = (self.backend, self.num_samples, self.num_chains, self.options, feature)
        mean, s = _fdt_mean(cfg, h, J, jnp.asarray(beta, h.dtype), mask, key)
        marg = jnp.mean(jax.lax.stop_gradient(s), axis=-2) if feature != "marginal" else mean
        s = jax.lax.stop_gradient(s)
        # rows where no draw attended any key: their weights are 0 (all-masked rows included)
        return Inference(mean, mean, marg, None, {"draws": s, "empty_rows": ~jnp.any(s > 0, (-2, -1))})


def sampled(backend, num_samples: int = 64, *, num_chains: int = 1, **options) -> Sampled:
    """``method=sampled(ExactSampler(), 256)``: statistics from a sampler backend (see
    :class:`Sampled`); ``options`` are passed to ``backend.sample``."""
    return Sampled(backend, num_samples, num_chains, tuple(sorted(options.items())))


_METHODS = {"exact": Exact, "transfer": Transfer, "mean_field": MeanField}


def resolve_method(method):
    """A method object from a name (``"exact"``, ``"transfer"``, ``"mean_field"``,
    ``"tap"``) or an instance."""
    if isinstance(method, (Exact, Transfer, MeanField, Sampled)):
        return method
    if method == "tap":
        return MeanField(tap=True)
    if isinstance(method, str) and method in _METHODS:
        return _METHODS[method]()
    if method == "sampled":
        raise ValueError(
            "method='sampled' needs a backend: use method=sampled(backend, num_samples), e.g. "
            "sampled(ExactSampler(), 64)"
        )
    raise ValueError(
        f"method must be 'exact', 'transfer', 'mean_field', 'tap', a MeanField(...) or "
        f"sampled(backend, num_samples); got {method!r}"
    )
