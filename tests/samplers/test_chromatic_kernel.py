"""The compiled chromatic sweeps (``isingattn._kernels.chromatic``, ``backend="numba"`` of the
single-site samplers) against the XLA sweep (``backend="jax"``): the same uniforms, hence the
same draws, for Gibbs and Metropolis, SPIN and BINARY, float32 and float64, masks, unequal colour
classes, batches of models, thinning, schedules and continued runs; and the errors.

Deterministic (fixed keys). The two paths round ``exp`` differently, so an update whose uniform
falls within about ``1e-7`` of its acceptance probability may differ; over the few thousand
updates of a test that has probability below ``1e-3``, and the tests allow no difference: a
failure would show a real divergence (and, being deterministic, would fail every time)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn._kernels import chromatic, ffi
from isingattn.models import SparseIsingModel, square_lattice
from isingattn.samplers import GibbsSampler, MetropolisSampler, init_chains, run_chains

pytestmark = pytest.mark.skipif(not ffi.available(), reason="JAX not on the CPU")

SAMPLERS = {"gibbs": GibbsSampler, "metropolis": MetropolisSampler}


def _lattice(vartype="SPIN", dtype=np.float32, batch=()):
    rng = np.random.default_rng(0)
    m = square_lattice((4, 6), J=rng.normal(0, 0.8, batch + (48,)).astype(dtype),
                       h=rng.normal(0, 0.4, batch + (24,)).astype(dtype), beta=0.9,
                       vartype=vartype)
    mask = np.ones(24, bool)
    mask[[3, 17]] = False
    return m.replace(mask=jnp.asarray(mask))


def _odd_graph():
    # a 5-cycle with chords: not bipartite, three colour classes of unequal sizes (so some
    # generator lanes go unused in a class, as in the XLA sweep)
    edges = np.array([(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 2), (5, 0), (5, 3), (6, 5)])
    rng = np.random.default_rng(1)
    return SparseIsingModel(h=rng.normal(0, 0.5, 7), edges=edges,
                            J=rng.normal(0, 1.0, len(edges)), beta=0.8)


def _pair(name, model, **kw):
    kernel = SAMPLERS[name](order="chromatic", backend="numba")
    xla = SAMPLERS[name](order="chromatic", backend="jax")
    assert kernel.runs_sweeps(model) and not xla.runs_sweeps(model)
    opts = {"num_chains": 5, "num_burnin": 7, "thinning": 3} | kw
    return (kernel.sample(model, jax.random.key(3), 6, **opts),
            xla.sample(model, jax.random.key(3), 6, **opts))


@pytest.mark.parametrize("name", list(SAMPLERS))
@pytest.mark.parametrize("case", ["spin", "binary", "odd-graph", "batch"])
def test_kernel_draws_what_the_xla_sweep_draws(name, case):
    model = {"spin": lambda: _lattice(), "binary": lambda: _lattice("BINARY"),
             "odd-graph": _odd_graph, "batch": lambda: _lattice(batch=(2,))}[case]()
    a, b = _pair(name, model)
    np.testing.assert_array_equal(a.spins, b.spins)
    np.testing.assert_allclose(a.info["acceptance_rate"], b.info["acceptance_rate"], rtol=1e-6)
    if case == "spin":  # masked sites stay at the low value
        assert np.all(np.asarray(a.spins)[..., [3, 17]] == -1)


def test_float64_models():
    with jax.enable_x64(True):
        m = _lattice(dtype=np.float64)
        assert m.dtype == jnp.float64
        a, b = _pair("gibbs", m)
        assert a.spins.dtype == jnp.float64
        np.testing.assert_array_equal(a.spins, b.spins)


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_schedules_and_continued_runs(name):
    m = _lattice()
    sched = np.linspace(0.2, 1.2, 7 + 6 * 3).astype(np.float32)
    a, b = _pair(name, m, beta_schedule=sched)  # sweep by sweep, each a one-sweep call
    np.testing.assert_array_equal(a.spins, b.spins)
    s = SAMPLERS[name](order="chromatic", backend="numba")
    chains = init_chains(s, m, jax.random.key(9), 4)
    whole = run_chains(s, m, chains, 6, num_burnin=5, thinning=2)
    first = run_chains(s, m, chains, 2, num_burnin=5, thinning=2)
    second = run_chains(s, m, first.chains, 4, thinning=2)
    np.testing.assert_array_equal(np.concatenate([first.draws, second.draws], axis=1),
                                  whole.draws)


def test_the_float32_exp():
    # the kernel's polynomial exp against float64 over the range the updates meet, and its
    # overflow and underflow as float32's exp
    x = np.concatenate([np.linspace(-87, 88.3, 200001), [-1e-8, 0.0, 1e-8]]).astype(np.float32)
    got = np.array([chromatic.expf(v) for v in x[::97]] + [chromatic.expf(v) for v in x[-3:]])
    ref = np.exp(np.concatenate([x[::97], x[-3:]]).astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=3e-7)
    assert chromatic.expf(np.float32(89.0)) == np.inf
    assert chromatic.expf(np.float32(-88.0)) == 0.0


def test_auto_keeps_few_chains_on_the_xla_sweep():
    # the kernel vectorizes over chains: "auto" uses it from KERNEL_MIN_CHAINS chains per
    # model, "numba" always; the draws are the same either way (test above)
    from isingattn.samplers._mcmc import KERNEL_MIN_CHAINS

    m = _lattice()
    for cls in SAMPLERS.values():
        auto, numba = cls(order="chromatic"), cls(order="chromatic", backend="numba")
        assert not auto.runs_sweeps(m, KERNEL_MIN_CHAINS - 1)
        assert auto.runs_sweeps(m, KERNEL_MIN_CHAINS) and auto.runs_sweeps(m)
        assert numba.runs_sweeps(m, 1)


def test_errors():
    with pytest.raises(ValueError, match="backend must be one of"):
        GibbsSampler(backend="gpu")
    # dense sweeps and random order stay on XLA whatever the backend
    dense = _lattice().to_dense()
    assert not GibbsSampler(backend="numba").runs_sweeps(dense)
    assert not MetropolisSampler(order="random", backend="numba").runs_sweeps(_lattice())


def test_threaded_call():
    # 40 chains x 64 sites x 200 sweeps: past THREADED_WORK, the chains in two threads' shares
    m = square_lattice(8, J=1.0, h=0.1, beta=0.44)
    assert 40 * 64 * 200 >= chromatic.THREADED_WORK and 40 // chromatic.MIN_CHAINS >= 2
    a, b = _pair("metropolis", m, num_chains=40, num_burnin=200, thinning=1)
    np.testing.assert_array_equal(a.spins, b.spins)
