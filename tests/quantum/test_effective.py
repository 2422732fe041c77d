"""The effective inverse temperature of short anneals against the exact simulation.

Derivation (docs/guide/diabatic.md): to first order in the problem Hamiltonian the output is the
Boltzmann distribution with fields beta_h h and couplings beta_J J; the remainder is O(t_a^4) in
total variation while the output departs from uniform by O(t_a^2). Deterministic: the slopes are
fitted to exact probabilities computed in double precision."""

import jax
import numpy as np
import pytest

from isingattn import exact
from isingattn.models import IsingModel
from isingattn.quantum import (
    annealing_time_for_beta,
    dwave_like_schedule,
    effective_beta,
    effective_model,
    linear_schedule,
    output_distribution,
    single_effective_beta,
)


def _model(n, seed, fields=True, couplings=True):
    rng = np.random.default_rng(seed)
    h = 0.5 * rng.normal(size=n) * fields
    J = np.triu(0.5 * rng.normal(size=(n, n)), 1) * couplings
    return IsingModel(h=h, J=J + J.T)


def _tv(p, q):
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def _slope(x, y):
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def test_linear_closed_form():
    # short-time: beta_h = 4 pi^2 t^2 int_0^1 B1 s * A0 (1 - s)^2 / 2 ds = pi^2 A0 B1 t^2 / 6
    A0, B1, t = 1.3, 0.7, np.array([0.01, 0.1, 1.0])
    b = effective_beta(linear_schedule(A0, B1), t, expansion="short_time")
    np.testing.assert_allclose(b.fields, np.pi**2 * A0 * B1 * t**2 / 6, rtol=1e-6)
    np.testing.assert_allclose(b.couplings, 2 * b.fields, rtol=1e-12)
    np.testing.assert_allclose(b.driver_phase, np.pi * t * A0 / 2, rtol=1e-12)
    np.testing.assert_allclose(b.problem_phase, np.pi * t * B1 / 2, rtol=1e-12)


@pytest.mark.parametrize("schedule", [linear_schedule(), dwave_like_schedule()])
def test_first_order_tends_to_short_time(schedule):
    t = np.array([0.002, 0.004])
    b1 = effective_beta(schedule, t)
    b0 = effective_beta(schedule, t, expansion="short_time")
    rel = np.abs(b1.couplings / b0.couplings - 1)
    assert rel[0] < 1e-3
    assert rel[0] / rel[1] == pytest.approx(0.25, rel=0.05)  # sin x = x (1 - x^2/6): O(t^2)


@pytest.mark.parametrize("schedule,times", [
    (linear_schedule(1.0, 1.0), (0.02, 0.04, 0.08)),
    (dwave_like_schedule(), (0.01, 0.02, 0.04)),
])
def test_tv_to_effective_boltzmann_shrinks_as_t4(schedule, times):
    with jax.enable_x64(True):
        model = _model(5, 0)
        tv_uni, tv_first, tv_short, tv_single = [], [], [], []
        for t in times:
            p = output_distribution(model, schedule, t, tolerance=1e-10)
            tv_uni.append(_tv(p, 1 / 32))
            tv_first.append(_tv(p, exact.probabilities(effective_model(model, schedule, t))))
            tv_short.append(_tv(p, exact.probabilities(
                effective_model(model, schedule, t, expansion="short_time"))))
            beta = single_effective_beta(model, schedule, t)
            tv_single.append(_tv(p, exact.probabilities(model.with_beta(beta))))
    assert _slope(times, tv_uni) == pytest.approx(2.0, abs=0.1)
    assert _slope(times, tv_first) == pytest.approx(4.0, abs=0.2)
    assert _slope(times, tv_short) == pytest.approx(4.0, abs=0.2)
    # fields and couplings at one beta: only O(t^2), the same order as the signal
    assert _slope(times, tv_single) == pytest.approx(2.0, abs=0.2)
    assert max(np.array(tv_first) / np.array(tv_uni)) < 0.05


def test_single_beta_exact_at_first_order_without_fields():
    times = (0.02, 0.04, 0.08)
    with jax.enable_x64(True):
        model = _model(5, 1, fields=False)
        tvs = []
        for t in times:
            p = output_distribution(model, "linear", t, tolerance=1e-10)
            beta = single_effective_beta(model, "linear", t)
            assert float(beta) == pytest.approx(effective_beta("linear", t).couplings)
            tvs.append(_tv(p, exact.probabilities(model.with_beta(beta))))
    assert _slope(times, tvs) == pytest.approx(4.0, abs=0.2)


def test_first_order_moments():
    # <z_i> = beta_h h_i and <z_i z_j> = beta_J J_ij at first order (high-temperature Boltzmann)
    with jax.enable_x64(True):
        model = _model(4, 2)
        t = 0.01
        p = np.asarray(output_distribution(model, "linear", t, tolerance=1e-10))
        z = np.asarray(exact.enumerate_states(4, "SPIN"), float)
    b = effective_beta("linear", t)
    m = p @ z
    c = np.einsum("k,ki,kj->ij", p, z, z)
    h, J = np.asarray(model.h), np.asarray(model.J)
    scale = b.fields * np.abs(h).max()
    np.testing.assert_allclose(m, b.fields * h, atol=0.02 * scale)
    off = ~np.eye(4, dtype=bool)
    np.testing.assert_allclose(c[off], b.couplings * J[off], atol=0.02 * scale)


def test_annealing_time_for_beta_inverts():
    for sched in ("linear", "dwave_like"):
        t = annealing_time_for_beta(sched, 0.02)
        assert effective_beta(sched, t).couplings == pytest.approx(0.02, rel=1e-8)
        t = annealing_time_for_beta(sched, 0.02, which="fields")
        assert effective_beta(sched, t).fields == pytest.approx(0.02, rel=1e-8)
    with pytest.raises(ValueError, match="not reached .* short-anneal regime"):
        annealing_time_for_beta(linear_schedule(1.0, 1.0), 1e3)


def test_bad_input():
    with pytest.raises(ValueError, match="annealing_time must be finite and >= 0"):
        effective_beta("linear", -0.1)
    with pytest.raises(ValueError, match="expansion must be one of"):
        effective_beta("linear", 0.1, expansion="third")
    with pytest.raises(ValueError, match="beta must be finite and > 0"):
        annealing_time_for_beta("linear", -1.0)
