"""The ``mean_field`` method: naive or TAP mean field, accelerated fixed point, implicit or
unrolled differentiation."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._constants import BIG as _BIG
from .._validation import check_choice, check_positive_int
from .._vma import carry_like
from ._inference import Inference, _sigmoid_rows, independent

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
    """``(B, N, T, S)`` -> tuple of heads-first tiles ``(N, B, t, e)``.

    The queries are split (``split``, whose transpose is one ``concatenate``) before the keys are
    cut, so that the gradient pads each tile to its own rows only (one pass over the square)."""
    if len(tiles) == 1:
        parts = [x[:, :, tiles[0][0]:tiles[0][1]]]
    else:
        parts = jnp.split(x, [t0 for t0, _, _ in tiles[1:]], axis=2)
    return tuple(jnp.swapaxes(p[..., :e], 0, 1) for p, (_, _, e) in zip(parts, tiles))


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
def _mean_field(cfg, implicit, causal, a, mask, couplings, beta):
    """Marginals (0 at masked keys), unnormalized weights (:func:`_sigmoid_rows` of
    ``z``), per-query residual and evaluations for fields ``a = beta h`` (masked:
    ``-_BIG``) and the ``mask`` in the layout ``(B, N, T, S)``; everything is computed on the
    tiles, which hold only the keys a query may attend to. Jitted so that eager calls compile
    once."""
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
    allowed = _to_tiles(mask, tiles)
    m = tuple(jnp.where(k_t, m_t, 0.0) for m_t, k_t in zip(m, allowed))
    u = tuple(_sigmoid_rows(z_t, k_t) for z_t, k_t in zip(z, allowed))
    return _from_tiles(m, tiles, S), _from_tiles(u, tiles, S), residual, iters


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
                 log_partition=False, coupling_grad=True):
        if couplings is None or couplings.is_zero:
            return independent(h, mask, beta)
        mask = jnp.broadcast_to(mask, h.shape)
        cfg = _MFConfig(self.tap, float(self.damping), int(self.max_iters), float(self.tol),
                        bool(self.accelerate), self.product, self.monitor)
        a = jnp.where(mask, beta * h, -_BIG)
        m, u, residual, iters = _mean_field(cfg, bool(self.implicit), bool(causal), a, mask,
                                            couplings, jnp.asarray(beta, h.dtype))
        return Inference(m, u, m, None,
                         {"residual": jax.lax.stop_gradient(residual),
                          "iterations": jax.lax.stop_gradient(iters)})
