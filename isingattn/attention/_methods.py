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

from .. import _vma
from .._validation import check_choice, check_positive_int
from .._vma import carry_like

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
    about half the cost. With ``causal=True`` (passed by the layer for ``is_causal``) two
    queries share one chain. A head with ``beta * sum_d |w(d)| <= 20`` (float32; 160 in
    float64) runs in probability space, exact to about 1e-6 in float32 (its gradient up to 18;
    144); any other head runs a log-domain recursion, chosen per head at run time: exact and
    finite at any coupling strength.

    ``backend``: where the forward pass runs: ``"auto"`` (default: a compiled kernel on the CPU,
    :mod:`isingattn.attention._native`, where numba is installed; else JAX), ``"numba"`` or
    ``"jax"``. The same numbers to float precision; the gradient is JAX's in every case."""

    backend: str = "auto"
    name = "transfer"
    stochastic = False

    def __post_init__(self):
        from ._banded import BACKENDS

        check_choice("backend", self.backend, BACKENDS)

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
#
# Internally the state of a mean-field solve is a tuple of query tiles in a heads-first layout
# (N, B, t, e): with causal=True the tile of queries [t0, t1) holds only the keys k < e =
# min(t1, S) they may attend to, so the coupling products and every elementwise pass skip the
# blocks above the diagonal (about 45% of the (T, S) square with 8 tiles); without it, one tile
# holds everything. Heads first makes each product one batched matrix product, no transposes.

#: The causal problem is cut into about this many query tiles of at least _MIN_TILE rows.
_CAUSAL_TILES = 8
_MIN_TILE = 32
#: Largest |a| of a SQUAREM extrapolation (steps of up to a^2 times the residual).
_SQ_MAX_STEP = 64.0


class _MFConfig(NamedTuple):
    """Static configuration of a mean-field solve."""

    tap: bool
    damping: float
    max_iters: int
    tol: float
    accelerate: bool
    product: str
    monitor: Any


def _mf_tiles(T, S, causal):
    """``(t0, t1, e)`` of every query tile: queries ``[t0, t1)``, keys ``[0, e)``."""
    tile = max(_MIN_TILE, -(-T // _CAUSAL_TILES))
    if not causal or tile >= T:
        return ((0, T, S),)
    return tuple((t0, min(T, t0 + tile), min(T, t0 + tile, S)) for t0 in range(0, T, tile))


def _to_tiles(x, tiles):
    """``(B, N, T, S)`` -> tuple of heads-first tiles ``(N, B, t, e)``."""
    return tuple(jnp.swapaxes(x[:, :, t0:t1, :e], 0, 1) for t0, t1, e in tiles)


def _from_tiles(xs, tiles, S, fill=0.0):
    """Inverse of :func:`_to_tiles`, keys a tile does not hold set to ``fill``."""
    parts = [jnp.pad(jnp.swapaxes(x, 0, 1), [(0, 0)] * 3 + [(0, S - e)], constant_values=fill)
             for x, (_, _, e) in zip(xs, tiles)]
    return parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=2)


def _mf_logits(cfg, params, m):
    """``z = a + beta J m`` (minus the TAP term) for every tile."""
    a, couplings, beta = params
    out = []
    for a_t, m_t in zip(a, m):
        z = a_t + beta * couplings.matvec(m_t, product=cfg.product, head_axis=0)
        if cfg.tap:
            z = z - (m_t - 0.5) * (beta * beta) * couplings.matvec(
                m_t * (1 - m_t), squared=True, product=cfg.product, head_axis=0)
        out.append(z)
    return tuple(out)


def _max_abs(xs):
    return functools.reduce(jnp.maximum, [jnp.max(jnp.abs(x)) for x in xs])


def _fixed_point(step, x0, *, accelerate, max_iters, tol, clip):
    """Fixed point ``x = G(x)`` of every row of a tuple of arrays (the last axis is one
    problem), from ``x0``.

    Without ``accelerate``: the plain iteration ``x <- G(x)``. With it: SQUAREM (Varadhan &
    Roland 2008): cycles of two steps ``x1 = G(x)``, ``x2 = G(x1)`` and the extrapolation
    ``x - 2 a r + a^2 v`` (``r = x1 - x``, ``v = x2 - 2 x1 + x``, per row ``a = -|r| / |v|``,
    at most ``-1``: never shorter than the two plain steps); a row whose largest residual grew
    over the last cycle takes the two plain steps (``a = -1``) in its next cycle, then doubles
    its bound on ``|a|`` again, up to ``_SQ_MAX_STEP``. ``clip=(lo, hi)`` bounds the iterates.
    No history is carried from cycle to cycle (only the point: XLA copies every extra array
    carried through a loop once per iteration).

    Stops at the first evaluation with ``max |G(x) - x| <= tol`` over all rows (or after
    ``max_iters`` evaluations) and returns ``(G(x), evaluations, residual)``: the plain step
    from that point, as the plain iteration does."""
    dt = x0[0].dtype
    big = jnp.array(jnp.inf, dt)
    k0 = jnp.array(0, jnp.int32)
    if not accelerate:
        def body0(c):
            k, x, _ = c
            gx = step(x)
            return k + 1, gx, _max_abs([g - y for g, y in zip(gx, x)])

        k, x, res = jax.lax.while_loop(lambda c: (c[0] < max_iters) & (c[2] > tol), body0,
                                       carry_like(body0, (k0, x0, big)))
        return x, k, res

    def body(c):
        k, x, _, bound, prev = c
        x1 = step(x)
        r = [p - q for p, q in zip(x1, x)]
        rmax = [jnp.max(jnp.abs(t), axis=-1) for t in r]
        res1 = functools.reduce(jnp.maximum, [jnp.max(t) for t in rmax])
        bound = [jnp.where(rm > pv, 1.0, jnp.minimum(2 * bd, _SQ_MAX_STEP))
                 for rm, pv, bd in zip(rmax, prev, bound)]
        stop1 = (res1 <= tol) | (k + 1 >= max_iters)
        # the second step only when the first did not end the solve
        x2 = jax.lax.cond(stop1, lambda y: y, step, x1)
        d = [p - q for p, q in zip(x2, x1)]
        dmax = [jnp.max(jnp.abs(t), axis=-1) for t in d]
        res2 = functools.reduce(jnp.maximum, [jnp.max(t) for t in dmax])
        stop2 = res2 <= tol
        x_next = []
        for x_t, x1_t, x2_t, r_t, d_t, bd in zip(x, x1, x2, r, d, bound):
            v = d_t - r_t
            nr = jnp.sum(r_t * r_t, axis=-1)
            nv = jnp.sum(v * v, axis=-1)
            a = -jnp.sqrt(nr / jnp.where(nv > 0, nv, 1.0))
            a = jnp.clip(jnp.where(nv > 0, a, -1.0), -bd, -1.0)[..., None]
            xe = x_t - 2 * a * r_t + a * a * v
            if clip is not None:
                xe = jnp.clip(xe, *clip)
            x_next.append(jnp.where(stop1, x1_t, jnp.where(stop2, x2_t, xe)))
        return (k + jnp.where(stop1, 1, 2), tuple(x_next), jnp.where(stop1, res1, res2),
                tuple(bound), tuple(dmax))

    rows = [t.shape[:-1] for t in x0]
    init = (k0, x0, big, tuple(jnp.full(s, _SQ_MAX_STEP, dt) for s in rows),
            tuple(jnp.full(s, jnp.inf, dt) for s in rows))
    k, x, res, _, _ = jax.lax.while_loop(lambda c: (c[0] < max_iters) & (c[2] > tol), body,
                                         carry_like(body, init))
    return x, k, res


def _report(cfg, stage, iterations, residual):
    if cfg.monitor is not None:
        jax.debug.callback(functools.partial(cfg.monitor, stage), iterations, residual)


def _mf_step(cfg, params, x):
    lam = cfg.damping
    z = _mf_logits(cfg, params, x)
    return tuple((1 - lam) * x_t + lam * jax.nn.sigmoid(z_t) for x_t, z_t in zip(x, z))


def _mf_forward(cfg, params, m0):
    """The fixed point ``m``, its logits ``z = Z(m)`` and the number of evaluations."""
    m, iters, res = _fixed_point(functools.partial(_mf_step, cfg, params), m0,
                                 accelerate=cfg.accelerate, max_iters=cfg.max_iters,
                                 tol=cfg.tol, clip=(0.0, 1.0))
    _report(cfg, "forward", iters, res)
    return m, _mf_logits(cfg, params, m), iters


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _mf_implicit(cfg, params, m0):
    return _mf_forward(cfg, params, m0)


def _mf_implicit_fwd(cfg, params, m0):
    m, z, iters = _mf_forward(cfg, params, m0)
    return (m, z, iters), (params, m, z)


def _mf_implicit_bwd(cfg, res, cot):
    # Implicit function theorem at the fixed point m* = sigmoid(z*), z* = Z(m*, theta): with
    # D = diag(sigmoid'(z*)) and w = D g_m + g_z, theta_bar = Z_theta^T y where
    # y = w + D Z_m^T y, solved by the same damped iteration (and acceleration) as the forward
    # pass. The damping cancels from y, as it does from the fixed point; y starts from its
    # value at J = 0, w. The tolerance is relative to max |w|: the gradient's accuracy does not
    # depend on the scale of the loss.
    params, m, z = res
    g_m, g_z = cot[0], cot[1]
    lam = cfg.damping
    D = tuple(jax.nn.sigmoid(t) * jax.nn.sigmoid(-t) for t in z)
    w = tuple(d * gm + gz for d, gm, gz in zip(D, g_m, g_z))
    _, vjp_m = jax.vjp(lambda mm: _mf_logits(cfg, params, mm), m)

    def step(y):
        back = vjp_m(y)[0]
        return tuple((1 - lam) * y_t + lam * (w_t + d * b)
                     for y_t, w_t, d, b in zip(y, w, D, back))

    scale = _max_abs(w)
    y, iters, r = _fixed_point(step, w, accelerate=cfg.accelerate, max_iters=cfg.max_iters,
                               tol=cfg.tol * scale, clip=None)
    _report(cfg, "adjoint", iters, r / jnp.where(scale > 0, scale, 1.0))
    _, vjp_p = jax.vjp(lambda p: _mf_logits(cfg, p, m), params)
    return vjp_p(y)[0], tuple(jnp.zeros_like(t) for t in m)


_mf_implicit.defvjp(_mf_implicit_fwd, _mf_implicit_bwd)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _mean_field(cfg, implicit, causal, a, couplings, beta):
    """Marginals, logits, per-query residual and evaluations for fields ``a = beta h`` (masked:
    ``-_BIG``) in the layout ``(B, N, T, S)``; jitted so that eager calls compile once."""
    T, S = a.shape[-2:]
    tiles = _mf_tiles(T, S, causal)
    params = (_to_tiles(a, tiles), couplings, beta)
    m0 = tuple(jax.nn.sigmoid(t) for t in params[0])
    if implicit:
        m, z, iters = _mf_implicit(cfg, params, m0)
    else:
        m = jax.lax.fori_loop(0, cfg.max_iters, lambda i, x: _mf_step(cfg, params, x), m0)
        z = _mf_logits(cfg, params, m)
        iters = jnp.array(cfg.max_iters, jnp.int32)
    residual = tuple(jnp.max(jnp.abs(jax.nn.sigmoid(z_t) - m_t), axis=-1)
                     for z_t, m_t in zip(z, m))
    residual = jnp.swapaxes(jnp.concatenate(residual, axis=-1), 0, 1)
    return (_from_tiles(m, tiles, S), _from_tiles(z, tiles, S, -_BIG), residual, iters)


@dataclasses.dataclass(frozen=True)
class MeanField:
    """Mean-field marginals: the damped fixed point ``m <- (1 - damping) m + damping
    sigmoid(beta (h + J m))`` in BINARY variables, from ``m = sigmoid(beta h)``.

    With ``tap=True`` the TAP (Onsager) correction is added to the argument of the sigmoid:
    ``- beta^2 (m_j - 1/2) sum_k J_jk^2 m_k (1 - m_k)`` (second-order Plefka expansion).

    The solve stops at the first ``m`` with ``max |m_new - m| <= tol`` over the batch (``m_new``
    the damped step from ``m``, which is returned) or after ``max_iters`` evaluations of the
    step. ``accelerate=True`` (default) extrapolates every query's iterates (SQUAREM: two steps,
    then a step along them of a length fitted per query; never shorter than the two steps, and
    the plain steps for a query whose residual grew): the same fixed point in a third to a half
    of the evaluations; ``False``: the plain damped iteration.

    Differentiation: ``implicit=True`` (default) uses the implicit function theorem at the fixed
    point (a ``custom_vjp`` solving the adjoint equation by the same, accelerated, damped
    iteration to ``tol`` relative to the largest incoming gradient; memory independent of the
    number of iterations, exact at convergence); ``implicit=False`` unrolls exactly
    ``max_iters`` plain steps and lets JAX differentiate through them.

    ``product``: how :meth:`Couplings.matvec` forms ``J m`` (``"auto"``: shifted sums for
    short-range couplings, an FFT for long relative ones from ``FFT_MIN_KEYS`` keys, a dense
    product otherwise). With ``is_causal`` the queries are solved in tiles that hold only the
    keys they may attend to (about half the work).

    Diagnostics (``AttentionInfo.extra``): ``residual`` ``(B, N, T)``, the largest
    ``|sigmoid(beta (h + J m)) - m|`` of each query at the returned ``m``, and ``iterations``,
    the evaluations of the step (the forward solve). ``monitor``: a host function called as
    ``monitor(stage, iterations, residual)`` after every solve (``stage`` ``"forward"`` or
    ``"adjoint"``, ``residual`` relative for the adjoint; through ``jax.debug.callback``), to
    follow the counts along a training run, where the layer's diagnostics are out of reach.
    """

    damping: float = 0.5
    max_iters: int = 200
    tol: float = 1e-6
    tap: bool = False
    implicit: bool = True
    accelerate: bool = True
    product: str = "auto"
    monitor: Any = None

    name = "mean_field"
    stochastic = False

    def __post_init__(self):
        from ._couplings import PRODUCTS

        if not 0 < self.damping <= 1:
            raise ValueError(f"damping must be in (0, 1]; got {self.damping}")
        check_positive_int("max_iters", self.max_iters)
        if not self.tol > 0:
            raise ValueError(f"tol must be > 0; got {self.tol}")
        check_choice("product", self.product, PRODUCTS)
        if self.monitor is not None and not callable(self.monitor):
            raise TypeError(f"monitor must be callable or None; got {self.monitor!r}")

    def __call__(self, h, mask, couplings, beta, *, key=None, feature="marginal", causal=False,
                 log_partition=False):
        if couplings is None or couplings.is_zero:
            return independent(h, mask, beta)
        mask = jnp.broadcast_to(mask, h.shape)
        cfg = _MFConfig(self.tap, float(self.damping), int(self.max_iters), float(self.tol),
                        bool(self.accelerate), self.product, self.monitor)
        a = jnp.where(mask, beta * h, -_BIG)
        m, z, residual, iters = _mean_field(cfg, bool(self.implicit), bool(causal), a,
                                            couplings, jnp.asarray(beta, h.dtype))
        m = jnp.where(mask, m, 0.0)
        return Inference(m, _normalize_rows(jax.nn.log_sigmoid(z), mask), m, None,
                         {"residual": jax.lax.stop_gradient(residual),
                          "iterations": jax.lax.stop_gradient(iters)})


# --------------------------------------------------------------------------------------------
# sampled: any sampler backend, fluctuation-dissipation gradients
# --------------------------------------------------------------------------------------------


def _features(s, feature):
    if feature == "marginal":
        return s
    return s / jnp.maximum(1.0, jnp.sum(s, axis=-1, keepdims=True))


def _programmed(h, J, mask, scales):
    """The BINARY model handed to the backend when ``scales`` ``(N, 2)`` rescale the SPIN form
    of the intended one: SPIN fields ``c_h h^spin`` and couplings ``c_J J^spin`` (per head),
    i.e. ``J' = c_J J`` and ``h' = c_h h + (c_h - c_J) sum_k J_jk / 2`` over allowed keys ``k``
    (``h^spin = h / 2 + sum_k J_jk / 4``, ``J^spin = J / 4``). ``scales=None``: unchanged."""
    if scales is None:
        return h, J
    scales = jnp.asarray(scales, h.dtype)
    ch = scales[:, 0][None, :, None, None]
    cJ = scales[:, 1]
    rows = jnp.einsum("bntk,njk->bntj", mask.astype(h.dtype), J)
    return ch * h + (ch - cJ[None, :, None, None]) * rows / 2, cJ[:, None, None] * J


def _host_backend(backend):
    """A backend that runs on the host (dwave-samplers, dwave-system, dimod): called through
    ``jax.pure_callback`` so that it works inside ``jit``."""
    from ..samplers import DimodSampler, NealSampler, QPUSampler

    return isinstance(backend, (DimodSampler, NealSampler, QPUSampler))


def _sample_host(backend, model, key, num_samples, num_chains, options):
    """Spins ``batch + (chain, draw, n)`` of a host backend, through a callback. A QPU places the
    models of the batch side by side on its graph, many per call
    (:class:`~isingattn.samplers._qpu_tiled.TiledQPUSampler`)."""
    from ..samplers import QPUSampler, host_sample_callback

    if isinstance(backend, QPUSampler):
        from ..samplers._qpu_tiled import TiledQPUSampler

        backend = TiledQPUSampler(backend)
    return host_sample_callback(backend, model, key, num_samples, num_chains=num_chains,
                                **options)


def _sample_models(backend, h, J, beta, mask, key, num_samples, num_chains, options):
    """Draws ``(..., M, n)`` of the BINARY models ``(h, J, beta, mask)``; ``J`` broadcasts
    against ``h``'s batch."""
    from ..models import IsingModel

    # NaN parameters are drawn as 0 (their rows come out NaN: Sampled.__call__), since a
    # backend that checks its model would refuse them
    h = jnp.where(mask & ~jnp.isnan(h), h, 0.0)
    J = jnp.where(jnp.isnan(J), 0.0, J)
    beta = jnp.where(jnp.isnan(beta), 1.0, beta)
    model = IsingModel(h=h, J=J, beta=beta, vartype="BINARY", mask=mask, validate=False)
    if _host_backend(backend):
        spins = _sample_host(backend, model, key, num_samples, num_chains, options)
    else:
        spins = backend.sample(model, key, num_samples, num_chains=num_chains,
                               **options).spins
    s = spins.astype(h.dtype)
    return s.reshape(s.shape[:-3] + (num_chains * num_samples, s.shape[-1]))


class _DrawConfig:
    """``cfg`` as the static argument of the compiled draw: a JAX backend is compared by its
    type and settings, so that equal backends (``sampled(ExactSampler(), M)`` built anew in a
    loop) share one program; a host backend (its callback is part of the program, and it keeps
    per-object records) by identity."""

    __slots__ = ("_key", "cfg")

    def __init__(self, cfg):
        self.cfg = cfg
        backend, rest = cfg[0], cfg[1:]
        ident = backend
        if not _host_backend(backend):
            try:
                ident = (type(backend), tuple(sorted(vars(backend).items())))
                hash(ident)
            except TypeError:  # settings that are not hashable: identity
                ident = backend
        self._key = (ident, rest)

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, _DrawConfig) and self._key == other._key


def _draw(cfg, h, J, beta, mask, key, scales=None):
    # one compiled program: called outside jit, a backend's sampling would otherwise run op by
    # op (hundreds of small compilations on first use)
    return _draw_compiled(_DrawConfig(cfg), h, J, beta, mask, key, scales)


@functools.partial(jax.jit, static_argnums=0)
def _draw_compiled(static, h, J, beta, mask, key, scales):
    return _draw_traced(static.cfg, h, J, beta, mask, key, scales)


def _draw_traced(cfg, h, J, beta, mask, key, scales):
    backend, num_samples, num_chains, options, _, causal = cfg
    h, J = _programmed(h, J, mask, scales)
    options = dict(options)
    B, N, T, S = h.shape
    if not (causal and backend.properties.get("exponential_cost") and S > 1):
        return _sample_models(backend, h, J[:, None], beta, mask, key, num_samples,
                              num_chains, options)
    # Causal rows: query t attends to keys k <= t only, so its model has min(t + 1, S)
    # variables. A backend whose cost grows like 2^n (enumeration, the state-vector anneal)
    # samples the query positions on smaller registers: sizes S, S - 1, S - 2, S - 4, S - 8, ...
    # (each position on the smallest that holds its keys; the keys past it are masked), about
    # sum_t 2^(t+1) instead of T 2^S amplitudes per head in a handful of calls. The draws have
    # the same distribution.
    sizes = _register_sizes(S)
    size_of = [min(b for b in sizes if b >= min(t + 1, S)) for t in range(T)]
    out = jnp.zeros((B, N, T, num_chains * num_samples, S), h.dtype)
    for i, k in enumerate(sorted(set(size_of), reverse=True)):
        ts = jnp.array([t for t in range(T) if size_of[t] == k], jnp.int32)
        s = _sample_models(backend, h[:, :, ts, :k], J[:, :k, :k][:, None], beta,
                           mask[:, :, ts, :k], jax.random.fold_in(key, i), num_samples,
                           num_chains, options)
        out = out.at[:, :, ts, :, :k].set(s)
    return out


def _register_sizes(S):
    """``S, S - 1, S - 2, S - 4, S - 8, ...`` (down to 1)."""
    sizes, d = [S], 1
    while S - d >= 1:
        sizes.append(S - d)
        d *= 2
    return sizes


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fdt_mean(cfg, h, J, beta, mask, key, scales):
    s = _draw(cfg, h, J, beta, mask, key, scales)
    return jnp.mean(_features(s, cfg[4]), axis=-2), s


def _fdt_fwd(cfg, h, J, beta, mask, key, scales):
    s = _draw(cfg, h, J, beta, mask, key, scales)
    return (jnp.mean(_features(s, cfg[4]), axis=-2), s), (h, J, beta, s)


def _fdt_bwd(cfg, res, cot):
    # d E[phi(s)] / d theta = Cov(phi(s), d(-beta E(s))/d theta): with f = g . phi(s),
    # dL/dh_k = beta Cov(f, s_k), dL/dJ_jk = beta Cov(f, s_j s_k) / 2 per matrix entry,
    # dL/dbeta = Cov(f, sum_j h_j s_j + sum_{j<k} J_jk s_j s_k). Same draws as the forward pass;
    # the 1/(M-1) covariance is unbiased for i.i.d. draws. The draws stand for the intended
    # model (beta, h, J) whatever the backend was programmed with (calibration scales), so
    # these are its gradients; the scales get none.
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
    # inside shard_map, inputs shared by every shard get the sum of their gradients
    dh, dJ, dbeta = _vma.sum_like((dh, dJ, dbeta), (h, J, beta))
    return dh, dJ, dbeta, None, None, None


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
    least two draws per query. Under ``jit`` pure-JAX backends are traced into the program (the
    diabatic simulator included: all queries of the call in one compiled program), host backends
    (dwave-samplers, dimod, the QPU) are called back (``jax.pure_callback``); a QPU receives the
    queries' models side by side on its graph, as many per call as fit
    (:mod:`isingattn.samplers._qpu_tiled`). With ``is_causal`` a backend whose cost grows
    like ``2^n`` (``properties["exponential_cost"]``: exact, diabatic) samples each query
    position on a register of its ``t + 1`` allowed keys.

    ``calibration``: a :class:`~isingattn.attention.Calibration`: the backend is programmed with
    SPIN fields and couplings rescaled by ``scales`` ``(N, 2)`` = ``(c_h, c_J)`` per head
    (:meth:`with_scales`; a :class:`~isingattn.attention.BoltzmannMultiHeadAttention` keeps them
    in its state), so that a sampler that sees fields at ``beta_h`` and couplings at ``beta_J``
    (a short anneal: ``beta_J ~ 2 beta_h``) draws from the intended Boltzmann distribution.
    The gradients are those of the intended model. See docs/guide/annealer-training.md.

    A row whose fields, couplings or ``beta`` hold a NaN gives NaN statistics (the sampler's
    draws of a NaN model are meaningless), as the other methods do.

    Diagnostics (``AttentionInfo.extra``): ``draws`` ``(B, N, T, M, S)`` and ``empty_rows``
    ``(B, N, T)``, True where no draw attended any key (those rows' weights are 0: likely at
    strongly negative chemical potentials, where ``sampled`` needs more draws or ``exact`` /
    ``transfer`` give the softmax limit).
    """

    backend: Any
    num_samples: int = 64
    num_chains: int = 1
    options: tuple = ()
    calibration: Any = None
    scales: Any = dataclasses.field(default=None, compare=False, repr=False)

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
        if self.calibration is not None:
            from ._calibration import Calibration

            if not isinstance(self.calibration, Calibration):
                raise TypeError(f"calibration must be a Calibration or None; got "
                                f"{self.calibration!r}")

    def __hash__(self):
        return hash((id(self.backend), self.num_samples, self.num_chains, self.options,
                     self.calibration))

    def __eq__(self, other):
        return (isinstance(other, Sampled) and other.backend is self.backend
                and (other.num_samples, other.num_chains, other.options, other.calibration)
                == (self.num_samples, self.num_chains, self.options, self.calibration))

    def with_scales(self, scales) -> Sampled:
        """The same method programming the backend with calibration ``scales`` ``(N, 2)``
        (``(c_h, c_J)`` per head; may be traced)."""
        return dataclasses.replace(self, scales=scales)

    def draw(self, h, mask, couplings_matrix, beta, key, num_samples, *, scales=None):
        """Draws ``(B, N, T, num_samples, S)`` of the intended BINARY models (fields ``h``
        ``(B, N, T, S)``, couplings ``(N, S, S)``) from the backend programmed with ``scales``:
        what the layer's forward pass uses, for measuring the backend (calibration probes)."""
        cfg = (self.backend, num_samples, 1, self.options, "marginal", False)
        return _draw(cfg, h, couplings_matrix, jnp.asarray(beta, h.dtype), mask, key, scales)

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
        beta = jnp.asarray(beta, h.dtype)
        from ._calibration import record_problem

        record_problem(self, h, mask, J, beta)
        scales = self.scales
        if scales is not None:
            scales = jax.lax.stop_gradient(jnp.broadcast_to(jnp.asarray(scales, h.dtype),
                                                            (N, 2)))
        cfg = (self.backend, self.num_samples, self.num_chains, self.options, feature,
               bool(causal))
        mean, s = _fdt_mean(cfg, h, J, beta, mask, key, scales)
        marg = jnp.mean(jax.lax.stop_gradient(s), axis=-2) if feature != "marginal" else mean
        # a NaN in a row's model (a NaN query, key, coupling or beta) makes the row NaN, as in
        # the other methods: the draws of a NaN model are meaningless, not zeros
        bad = (jnp.isnan(jnp.sum(jnp.where(mask, h, 0.0), axis=-1, keepdims=True))
               | jnp.isnan(jnp.sum(J, axis=(-2, -1)))[None, :, None, None] | jnp.isnan(beta))
        mean = jnp.where(bad, jnp.nan, mean)
        marg = jnp.where(bad, jnp.nan, marg)
        s = jax.lax.stop_gradient(s)
        # rows where no draw attended any key: their weights are 0 (all-masked rows included)
        return Inference(mean, mean, marg, None, {"draws": s, "empty_rows": ~jnp.any(s > 0, (-2, -1))})


def sampled(backend, num_samples: int = 64, *, num_chains: int = 1, calibration=None,
            **options) -> Sampled:
    """``method=sampled(ExactSampler(), 256)``: statistics from a sampler backend (see
    :class:`Sampled`); ``options`` are passed to ``backend.sample``; ``calibration``: a
    :class:`~isingattn.attention.Calibration` (or its mode, ``"formula"`` / ``"measured"``)."""
    if isinstance(calibration, str):
        from ._calibration import Calibration

        calibration = Calibration(calibration)
    return Sampled(backend, num_samples, num_chains, tuple(sorted(options.items())),
                   calibration)


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
