"""Known physics of the 2D square-lattice ferromagnet: Kaufman's exact finite-torus partition
function against brute-force enumeration, and its large-L limit against Onsager's solution.

All checks are deterministic (no sampling): tolerances are float32 rounding bounds."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import exact
from isingattn.exact import (
    BETA_C,
    kaufman_log_partition,
    kaufman_mean_energy,
    kaufman_specific_heat,
    onsager_energy_per_site,
    onsager_magnetization,
    onsager_specific_heat,
)
from isingattn.models import square_lattice

BETAS = np.array([0.1, 0.3, BETA_C, 0.6, 1.5])


def _enumerated(Lx, Ly, J):
    """log Z, <E> and Var(E) of the torus at every beta in BETAS by enumeration (batched)."""
    m = square_lattice((Lx, Ly), J=J, beta=jnp.asarray(BETAS, jnp.float32))
    mo = exact.moments(m)
    states = exact.enumerate_states(m.n, m.vartype)
    E = np.asarray(m[0].energy(states), float)
    logw = -BETAS[:, None] * E[None, :]
    p = np.exp(logw - logw.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)  # float64 normalization: Var(E) at low T is a small difference
    mean = (p * E).sum(1)
    var = (p * (E - mean[:, None]) ** 2).sum(1)
    return np.asarray(mo.log_partition), np.asarray(mo.mean_energy), var


@pytest.mark.parametrize("Lx,Ly,J", [(4, 4, 1.0), (3, 4, 1.0), (4, 3, 0.7), (3, 5, 1.3)])
def test_kaufman_matches_enumeration(Lx, Ly, J):
    logZ, meanE, varE = _enumerated(Lx, Ly, J)
    np.testing.assert_allclose(kaufman_log_partition(Lx, Ly, BETAS, J), logZ, rtol=2e-6)
    np.testing.assert_allclose(
        kaufman_mean_energy(Lx, Ly, BETAS, J), meanE, rtol=1e-4, atol=1e-4 * Lx * Ly
    )
    c = BETAS**2 * varE / (Lx * Ly)
    np.testing.assert_allclose(kaufman_specific_heat(Lx, Ly, BETAS, J), c, rtol=1e-3, atol=1e-5)


def test_kaufman_tends_to_onsager():
    # away from beta_c finite-size corrections decay like exp(-L / xi): L = 128 is exact to f32
    betas = np.array([0.2, 0.35, 0.55, 0.8])
    L = 128
    np.testing.assert_allclose(
        kaufman_mean_energy(L, L, betas) / L**2, onsager_energy_per_site(betas), atol=2e-5
    )
    np.testing.assert_allclose(
        kaufman_specific_heat(L, L, betas), onsager_specific_heat(betas), rtol=2e-3
    )
    # free energy per site: -log Z / (beta N) -> Onsager's (checked through its beta-derivative
    # above); at beta_c the finite-size energy approaches -sqrt 2 like 1/L
    e16, e64 = (float(kaufman_mean_energy(L, L, BETA_C)) / L**2 for L in (16, 64))
    assert abs(e64 + np.sqrt(2)) < abs(e16 + np.sqrt(2)) / 3


def test_onsager_known_values():
    # u(beta_c) = -sqrt 2 J; u -> -2J at low T, -> -2 J tanh(K) ~ -2K at high T
    np.testing.assert_allclose(onsager_energy_per_site(BETA_C), -np.sqrt(2), rtol=1e-6)
    np.testing.assert_allclose(onsager_energy_per_site(BETA_C / 2, J=2.0), -2 * np.sqrt(2), rtol=1e-6)
    np.testing.assert_allclose(onsager_energy_per_site(5.0), -2.0, rtol=1e-6)
    np.testing.assert_allclose(onsager_energy_per_site(0.01), -2 * np.tanh(0.01), rtol=1e-3)
    # continuity through beta_c
    eps = 1e-4
    lo, hi = onsager_energy_per_site(np.array([BETA_C - eps, BETA_C + eps]))
    assert abs(lo - hi) < 5e-3
    # Yang's magnetization: 0 above T_c, (1 - sinh(2K)^-4)^(1/8) below, -> 1 at low T
    m = onsager_magnetization(np.array([0.3, BETA_C, 0.5, 3.0]))
    np.testing.assert_allclose(m[:2], 0.0)
    np.testing.assert_allclose(m[2], (1 - np.sinh(1.0) ** -4) ** 0.125, rtol=1e-6)
    np.testing.assert_allclose(m[3], 1.0, rtol=1e-6)
    assert np.isinf(onsager_specific_heat(BETA_C))


def test_onsager_functions_jit_and_grad():
    f = jax.jit(lambda b: kaufman_log_partition(6, 6, b))
    g = jax.grad(lambda b: kaufman_log_partition(6, 6, b))
    np.testing.assert_allclose(-g(0.4), kaufman_mean_energy(6, 6, 0.4), rtol=1e-5)
    assert f(jnp.array([0.3, 0.4])).shape == (2,)


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: kaufman_log_partition(2, 4, 0.4), "Lx must be an integer >= 3"),
        (lambda: kaufman_mean_energy(4, 4, -0.1), "beta must be finite and > 0"),
        (lambda: onsager_energy_per_site(0.4, J=-1.0), "J must be a finite ferromagnetic"),
        (lambda: onsager_magnetization(np.array([0.4, np.inf])), "beta must be finite"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
