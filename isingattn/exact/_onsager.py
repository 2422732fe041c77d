"""Exact results for the 2D nearest-neighbour Ising ferromagnet on the square lattice.

Energy ``E(x) = -J sum_<ij> x_i x_j`` (no field), ``K = beta J``. Critical point
``sinh(2 K_c) = 1``, i.e. ``beta_c J = ln(1 + sqrt 2) / 2 = 0.4406868...`` (:data:`BETA_C`).

* Infinite lattice (Onsager 1944; Yang 1952): energy per site, spontaneous magnetization and the
  specific heat per site.
* Finite ``Lx x Ly`` torus (periodic in both directions, as :func:`~isingattn.models.square_lattice`
  builds it; Kaufman 1949): the exact partition function, and from it by ``jax.grad`` the exact
  mean energy and specific heat of that finite lattice.

Every function is written in ``jax.numpy``, accepts scalar or array ``beta`` (results broadcast
like ``beta``), works under ``jit`` and is differentiable in ``beta``. Precision follows the
dtype of ``beta`` (float32 unless 64-bit mode is on); float32 gives about 6 significant digits.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_positive_int, is_concrete

#: Critical inverse temperature of the square-lattice ferromagnet with ``J = 1``:
#: ``ln(1 + sqrt 2) / 2`` (for coupling ``J`` it is ``BETA_C / J``).
BETA_C = 0.5 * math.log1p(math.sqrt(2.0))


def _check(beta, J):
    if isinstance(J, (int, float, np.floating, np.integer)) and not (
        math.isfinite(J) and J > 0
    ):
        raise ValueError(
            f"J must be a finite ferromagnetic coupling > 0 (the antiferromagnet has the same "
            f"thermodynamics with |J| on the bipartite torus of even sides); got {J}"
        )
    beta = jnp.asarray(beta)
    if not jnp.issubdtype(beta.dtype, jnp.inexact):
        beta = beta.astype(jnp.result_type(float))
    if is_concrete(beta):
        b = np.asarray(beta)
        if b.size and not (np.all(np.isfinite(b)) and np.all(b > 0)):
            raise ValueError(f"beta must be finite and > 0; got {b if b.ndim else float(b)}")
    return beta


def _agm(a, b, iterations=40):
    def body(_, ab):
        a, b = ab
        return (a + b) / 2, jnp.sqrt(a * b)

    return jax.lax.fori_loop(0, iterations, body, (a, b))[0]


def onsager_energy_per_site(beta, J=1.0):
    """Onsager's internal energy per site of the infinite square lattice,

    ``u = -J coth(2K) [1 + (2/pi) (2 tanh^2(2K) - 1) K1(k)]``, ``k = 2 sinh(2K) / cosh^2(2K)``,

    ``K1`` the complete elliptic integral of the first kind (modulus ``k``, computed by the
    arithmetic-geometric mean with ``k' = |1 - sinh^2 2K| / cosh^2 2K``, which loses no digits).
    Continuous at ``beta_c`` (where ``u = -sqrt(2) J``). Shape of ``beta``.
    """
    beta = _check(beta, J)
    K = beta * J
    s, c = jnp.sinh(2 * K), jnp.cosh(2 * K)
    kprime = jnp.abs(1 - s * s) / (c * c)
    crit = kprime == 0
    safe_kp = jnp.where(crit, 1.0, kprime)
    K1 = jnp.pi / (2 * _agm(jnp.ones_like(safe_kp), safe_kp))
    # (2 tanh^2 2K - 1) = (s^2 - 1) / c^2, exactly 0 at beta_c where K1 diverges (logarithmically)
    term = jnp.where(crit, 0.0, (s * s - 1) / (c * c) * K1)
    return -J * (c / s) * (1 + (2 / jnp.pi) * term)


def onsager_specific_heat(beta, J=1.0):
    """Specific heat per site of the infinite lattice, ``c = du/dT = -beta^2 du/dbeta`` (from
    :func:`onsager_energy_per_site` by ``jax.grad``; it diverges logarithmically at ``beta_c``,
    where ``inf`` is returned)."""
    beta = _check(beta, J)
    du = jnp.vectorize(jax.grad(lambda b: onsager_energy_per_site(b, J)))(beta)
    return jnp.where(jnp.sinh(2 * beta * J) == 1, jnp.inf, -beta * beta * du)


def onsager_magnetization(beta, J=1.0):
    """Spontaneous magnetization per site of the infinite lattice (Onsager, Yang 1952):
    ``m = (1 - sinh(2K)^-4)^(1/8)`` for ``K = beta J > K_c``, 0 above the critical temperature."""
    beta = _check(beta, J)
    K = beta * J
    s = jnp.sinh(2 * K)
    inside = jnp.where(s > 1, 1 - s ** -4.0, 0.0)
    return jnp.where(s > 1, inside ** 0.125, 0.0)


def _log2cosh(y):
    a = jnp.abs(y)
    return a + jnp.log1p(jnp.exp(-2 * a))


def _logaddexp(a, b):
    """log(e^a + e^b) whose gradient is exact for large |a|, |b| (jnp.logaddexp's gradient goes
    through exp(a - out), which loses about |out| * eps in float32: 0.2% at log Z ~ 6e4)."""
    hi = jnp.maximum(a, b)
    return hi + jnp.log1p(jnp.exp(-jnp.abs(a - b)))


def _log_neg_log_tanh(x):
    """log(-log tanh x) for x > 0, without forming tiny numbers: -log tanh x = log1p(y) with
    y = 2 / expm1(2x), and log y = log 2 - 2x - log(-expm1(-2x))."""
    log_y = jnp.log(2.0) - 2 * x - jnp.log(-jnp.expm1(-2 * x))
    y = jnp.exp(log_y)
    small = y < 1e-4
    y_safe = jnp.where(small, 1.0, y)
    log_ratio = jnp.where(small, jnp.log1p(-y / 2 + y * y / 3), jnp.log(jnp.log1p(y_safe) / y_safe))
    return log_y + log_ratio


def _log_one_minus_exp(S, log_neg_S):
    """log(1 - e^S) for S < 0 given also log(-S): log(-S) + log((1 - e^S) / (-S)), the second
    term smooth (~ S/2 for small |S|), so no 1/S appears in any derivative."""
    small = S > -1e-3
    S_safe = jnp.where(small, -1.0, S)
    phi = jnp.where(small, S / 2 + S * S / 24, jnp.log(-jnp.expm1(S_safe) / -S_safe))
    return log_neg_S + phi


def _log_cosh_plus_sinh_products(x):
    """log(prod_r 2 cosh x_r + prod_r 2 sinh x_r) for x_0 of any sign and x_r > 0 (r >= 1).

    With T = prod_{r>=1} tanh x_r in (0, 1): the sum is
    prod_{r>=1} 2 cosh x_r * ((1 + T) e^{x_0} + (1 - T) e^{-x_0}), both coefficients positive, so
    the log is smooth through x_0 = 0 (beta_c) and never cancels. 1 - T can be far below float
    precision (large lattices, high temperature) while e^{-x_0} is huge, so log(1 - T) is built
    from log(-log T) = logsumexp_r log(-log tanh x_r)."""
    x0, rest = x[0], x[1:]
    ell = _log_neg_log_tanh(rest)
    top = jax.lax.stop_gradient(jnp.max(ell))
    log_neg_S = top + jnp.log(jnp.sum(jnp.exp(ell - top)))  # log(-log T)
    S = -jnp.exp(log_neg_S)  # log T
    log_1mT = _log_one_minus_exp(S, log_neg_S)
    return jnp.sum(_log2cosh(rest)) + _logaddexp(jnp.log1p(jnp.exp(S)) + x0, log_1mT - x0)


def _kaufman_one(Lx, Ly, beta, J):
    """log Z of the Lx x Ly torus at one scalar beta (Kaufman 1949, in the form of Beale 1996)."""
    K = beta * J
    m, n = Lx, Ly  # products over 2n values gamma_l, each scaled by m
    s2 = jnp.sinh(2 * K)
    l = jnp.arange(1, 2 * n, dtype=beta.dtype)
    theta = jnp.pi * l / n
    # cosh gamma_l = cosh 2K coth 2K - cos theta_l = 1 + d_l, d_l = (1 - s)^2 / s + 2 sin^2(theta/2)
    # > 0 for l >= 1; gamma_0 is the signed 2K + ln tanh K (< 0 above T_c, 0 at beta_c)
    d = (1 - s2) ** 2 / s2 + 2 * jnp.sin(theta / 2) ** 2
    gamma = jnp.log1p(d + jnp.sqrt(d * (d + 2)))  # arccosh(1 + d), no cancellation for small d
    gamma = jnp.concatenate([(2 * K + jnp.log(jnp.tanh(K)))[None], gamma])
    half = m * gamma / 2
    # Z1 + Z2 from the odd gamma_l, Z3 + Z4 from the even ones (Z4 < 0 above T_c)
    a_odd = _log_cosh_plus_sinh_products(half[1::2])
    a_even = _log_cosh_plus_sinh_products(half[0::2])
    N = m * n
    return -jnp.log(2.0) + 0.5 * N * jnp.log(2 * s2) + _logaddexp(a_odd, a_even)


def _sizes(Lx, Ly):
    Lx = check_positive_int("Lx", Lx, 3)
    Ly = check_positive_int("Ly", Ly, 3)
    return Lx, Ly


@functools.partial(jax.jit, static_argnums=(0, 1, 3, 4))
def _kaufman(Lx, Ly, beta, J, derivative):
    """log Z (derivative 0), <E> (1) or the specific heat per site (2), vectorized over beta."""
    f = functools.partial(_kaufman_one, Lx, Ly, J=J)
    if derivative == 0:
        g = f
    elif derivative == 1:
        g = lambda b: -jax.grad(f)(b)
    else:
        g = lambda b: b * b * jax.grad(jax.grad(f))(b) / (Lx * Ly)
    return jnp.vectorize(g)(beta)


def _static_J(J):
    try:
        return float(J)
    except TypeError:
        raise TypeError(f"J must be a Python or NumPy scalar (it is part of the compiled "
                        f"program); got {type(J).__name__}") from None


def kaufman_log_partition(Lx, Ly, beta, J=1.0):
    """Exact ``log Z`` of the ``Lx x Ly`` square lattice, periodic in both directions
    (``Lx, Ly >= 3``, exactly the model ``square_lattice((Lx, Ly), J=J, beta=beta)``):

    ``Z = 1/2 (2 sinh 2K)^{N/2} (Z1 + Z2 + Z3 + Z4)``, ``N = Lx Ly``, with
    ``Z1,2 = prod_{r<Ly} 2 cosh/sinh(Lx gamma_{2r+1} / 2)``,
    ``Z3,4 = prod_{r<Ly} 2 cosh/sinh(Lx gamma_{2r} / 2)``,
    ``cosh gamma_l = cosh 2K coth 2K - cos(pi l / Ly)`` and ``gamma_0 = 2K + ln tanh K`` (negative
    above the critical temperature, which makes ``Z4`` negative).

    Evaluated in log space (``Z1 + Z2 = Z1 (1 + prod tanh)``, likewise ``Z3 + Z4``) so it neither
    overflows nor cancels for large lattices or low temperatures. ``J`` is a scalar (static).
    Jit-compiled once per ``(Lx, Ly, J)``. Shape of ``beta``.
    """
    Lx, Ly = _sizes(Lx, Ly)
    beta = _check(beta, J)
    return _kaufman(Lx, Ly, beta, _static_J(J), 0)


def kaufman_mean_energy(Lx, Ly, beta, J=1.0):
    """Exact mean energy ``<E> = -d log Z / d beta`` of the ``Lx x Ly`` torus (the whole
    lattice, as ``model.energy`` and :func:`~isingattn.exact.mean_energy`; divide by
    ``Lx * Ly`` for the energy per site). Shape of ``beta``."""
    Lx, Ly = _sizes(Lx, Ly)
    beta = _check(beta, J)
    return _kaufman(Lx, Ly, beta, _static_J(J), 1)


def kaufman_specific_heat(Lx, Ly, beta, J=1.0):
    """Exact specific heat PER SITE of the ``Lx x Ly`` torus,
    ``c = beta^2 Var(E) / N = beta^2 (d^2 log Z / d beta^2) / N``. Shape of ``beta``.
    In float32 the second derivative is accurate to about 1e-5 absolute (worse relative accuracy
    where ``c`` is tiny, deep in the ordered or disordered phase); use 64-bit mode for more."""
    Lx, Ly = _sizes(Lx, Ly)
    beta = _check(beta, J)
    return _kaufman(Lx, Ly, beta, _static_J(J), 2)


__all__ = [
    "BETA_C",
    "kaufman_log_partition",
    "kaufman_mean_energy",
    "kaufman_specific_heat",
    "onsager_energy_per_site",
    "onsager_magnetization",
    "onsager_specific_heat",
]
