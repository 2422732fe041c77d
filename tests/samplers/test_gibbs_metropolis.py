"""Gibbs and Metropolis specifics beyond the shared suite: colourings, the uniform generator,
acceptance rates against closed forms, batches of models, beta schedules, sparse orders.

Statistical assertions use tests/_stats.py (false-failure rate ALPHA each; the count per test is
stated); keys are fixed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import exact
from isingattn.models import IsingModel, chain, random_dense, square_lattice
from isingattn.samplers import GibbsSampler, MetropolisSampler, colour_classes
from isingattn.samplers._rng import bits_to_uniform, xoshiro_next

from .._stats import Z_ALPHA, assert_chi2_matches, assert_mean_within_mcse, ess


# ------------------------------------------------------------------ colourings (deterministic)
@pytest.mark.parametrize(
    "model, num_colours",
    [
        (square_lattice(4, periodic=True), 2),  # even torus: checkerboard
        (square_lattice((3, 5), periodic=False), 2),  # open lattice: checkerboard
        (square_lattice(5, periodic=True), None),  # odd torus: not bipartite
        (chain(7, periodic=True), 3),  # odd ring needs 3
        (chain(2), 2),
    ],
)
def test_colour_classes_are_proper_and_cover(model, num_colours):
    g = model.graph
    classes = colour_classes(g)
    allv = np.sort(np.concatenate(classes))
    np.testing.assert_array_equal(allv, np.arange(g.n))
    colour = np.empty(g.n, int)
    for c, idx in enumerate(classes):
        colour[idx] = c
    if g.num_edges:
        assert np.all(colour[g.edges[:, 0]] != colour[g.edges[:, 1]])
    if num_colours is not None:
        assert len(classes) == num_colours
    else:
        assert 3 <= len(classes) <= 5


def test_lattice_checkerboard_is_parity():
    L = 6
    classes = colour_classes(square_lattice(L, periodic=True).graph)
    parity = [set(((idx // L) + (idx % L)) % 2) for idx in classes]
    assert sorted(map(tuple, parity)) == [(0,), (1,)]


# ------------------------------------------------------------------ the uniform generator
def _xoshiro_reference(s, count):
    """xoshiro128** written from the published algorithm with Python integers."""
    M = 0xFFFFFFFF
    rotl = lambda x, k: ((x << k) | (x >> (32 - k))) & M
    s = list(s)
    out = []
    for _ in range(count):
        out.append((rotl((s[1] * 5) & M, 7) * 9) & M)
        t = (s[1] << 9) & M
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 11)
    return out


def test_xoshiro_matches_reference_and_uniform_range():
    seed = (0x9E3779B9, 0x243F6A88, 0xB7E15162, 0x12345678)
    state = tuple(jnp.uint32(v) for v in seed)
    got = []
    for _ in range(8):
        state, r = xoshiro_next(state)
        got.append(int(r))
    assert got == _xoshiro_reference(seed, 8)
    u = np.asarray(bits_to_uniform(jnp.array([0, 0xFFFFFFFF, 0x80000000], jnp.uint32)))
    np.testing.assert_array_equal(u, [0.0, 1 - 2.0**-23, 0.5])


# ------------------------------------------------------------------ acceptance rates
H = np.array([0.3, -0.5, 1.0, 0.0, -1.5])
BETA = 0.8


def _closed_form_rates():
    p_up = 1 / (1 + np.exp(-2 * BETA * H))
    p_dn = 1 - p_up
    return {"metropolis": np.mean(2 * np.minimum(p_up, p_dn)),  # p+ min(1, p-/p+) + p- min(..)
            "gibbs": np.mean(2 * p_up * p_dn)}  # P(new != old) under the stationary law


@pytest.mark.parametrize("name, sampler", [("metropolis", MetropolisSampler()),
                                           ("gibbs", GibbsSampler(order="random"))])
def test_acceptance_rate_matches_closed_form_for_free_spins(name, sampler):
    # J = 0: each site's rate is known exactly. 64 independent chains, each reporting its mean
    # rate over 400 sweeps: their average is within Z_ALPHA standard errors (rate ALPHA).
    m = IsingModel(h=H, J=np.zeros((5, 5)), beta=BETA)
    s = sampler.sample(m, jax.random.key(7), 400, num_chains=64, num_burnin=20)
    rates = np.asarray(s.info["acceptance_rate"], float)
    truth = _closed_form_rates()[name]
    se = rates.std(ddof=1) / np.sqrt(rates.size)
    assert abs(rates.mean() - truth) < Z_ALPHA * se, (rates.mean(), truth, se)


# ------------------------------------------------------------------ batches of models
@pytest.mark.slow
def test_batch_of_models_with_shared_couplings_and_own_masks():
    # 3 models: one J (broadcast), own fields and masks. Per model: mean energy and every active
    # marginal within MCSE: 3 + 14 assertions, false-failure rate <= 17 * ALPHA.
    base = random_dense(jax.random.key(4), 5, beta=0.7)
    h = jax.random.normal(jax.random.key(5), (3, 5))
    mask = jnp.array([[True] * 5, [True, False, True, True, True], [False, True, True, False, True]])
    m = IsingModel(h=h, J=base.J, beta=jnp.array([0.7, 0.4, 1.1]), mask=mask)
    s = MetropolisSampler().sample(m, jax.random.key(6), 1500, num_chains=4, num_burnin=50)
    assert s.spins.shape == (3, 4, 1500, 5)
    for b in range(3):
        mb = m[b]
        mo = exact.moments(mb)
        x = np.asarray(s.spins[b], float)
        assert np.all(x[..., ~np.asarray(mb.mask)] == -1)
        assert_mean_within_mcse(np.asarray(s.energy[b]), float(mo.mean_energy), what=f"E[{b}]")
        for i in np.nonzero(np.asarray(mb.mask))[0]:
            assert_mean_within_mcse(x[..., i], float(mo.marginals[i]), what=f"<x_{i}>[{b}]")


# ------------------------------------------------------------------ beta schedules
@pytest.mark.slow
def test_beta_schedule_sets_the_temperature_of_every_sweep():
    # the model says beta = 0.3; the schedule anneals to 1.2 during burn-in and stays there, so
    # draws follow exp(-1.2 E): mean energy within MCSE of the exact value at 1.2 (rate ALPHA)
    # and clearly away from the value at 0.3.
    m = random_dense(jax.random.key(8), 5, beta=0.3)
    burn, ns = 40, 1500
    sched = np.concatenate([np.linspace(0.1, 1.2, burn), np.full(ns, 1.2)])
    s = GibbsSampler().sample(m, jax.random.key(9), ns, num_chains=4, num_burnin=burn,
                              beta_schedule=sched)
    e = np.asarray(s.energy)
    e_cold = float(exact.moments(m.with_beta(1.2)).mean_energy)
    e_hot = float(exact.moments(m).mean_energy)
    assert_mean_within_mcse(e, e_cold, what="mean energy at the schedule's beta")
    assert abs(e.mean() - e_hot) > 10 * e.std() / np.sqrt(ess(e))


# ------------------------------------------------------------------ sparse orders
@pytest.mark.slow
@pytest.mark.parametrize("sampler", [GibbsSampler(order="sequential"),
                                     MetropolisSampler(order="chromatic")])
def test_sparse_odd_ring_binary_masked(sampler):
    # a 7-ring (not bipartite: 3 colours), BINARY, one variable masked: chi^2 plus every
    # marginal within MCSE, 1 + 6 assertions, false-failure rate <= 7 * ALPHA.
    m = chain(7, J=-0.9, h=0.4, periodic=True, beta=0.9, vartype="BINARY")
    m = m.replace(mask=jnp.array([True, True, True, False, True, True, True]))
    s = sampler.sample(m, jax.random.key(10), 2000, num_chains=4, num_burnin=50)
    x = np.asarray(s.spins, float)
    assert np.all(x[..., 3] == 0)
    dense = m.to_dense()
    mo = exact.moments(dense)
    e = np.asarray(s.energy)
    assert_chi2_matches(x, dense, effective_fraction=min(1.0, ess(e) / e.size))
    for i in [0, 1, 2, 4, 5, 6]:
        assert_mean_within_mcse(x[..., i], float(mo.marginals[i]), what=f"<x_{i}>")
