"""The MCMC driver (isingattn/samplers/_driver.py): determinism, run layout, bad input and
compilation caching, for the single-site backends and parallel tempering.

Everything here is deterministic (no statistical assertion), so the false-failure rate is 0,
except where a test says otherwise.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.models import chain, random_dense
from isingattn.samplers import (
    ChainRun,
    Chains,
    GibbsSampler,
    MetropolisSampler,
    ParallelTemperingSampler,
    SwendsenWangSampler,
    init_chains,
    observables,
    run_chains,
)
from isingattn.samplers._driver import _run

# one model size and one run length everywhere, so the compiled programs are shared
N, NS, NC = 6, 20, 3
MODEL = random_dense(jax.random.key(11), N, beta=0.7)
SAMPLERS = {
    "gibbs": GibbsSampler(),
    "metropolis-random": MetropolisSampler(order="random"),
    "pt": ParallelTemperingSampler(num_replicas=3),
}


def _draw(sampler, key, model=MODEL, **kw):
    kw.setdefault("num_burnin", 5)
    return sampler.sample(model, key, NS, num_chains=NC, **kw)


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_same_key_same_samples_different_key_different(name):
    s = SAMPLERS[name]
    a = np.asarray(_draw(s, jax.random.key(0)).spins)
    b = np.asarray(_draw(s, jax.random.key(0)).spins)
    c = np.asarray(_draw(s, jax.random.key(1)).spins)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    # chains of one run are not copies of each other (2^-120-ish chance for a correct sampler)
    for i in range(NC):
        for j in range(i + 1, NC):
            assert not np.array_equal(a[i], a[j]), f"chains {i} and {j} are identical"


def test_batched_models_chains_not_copies_across_models():
    # the same model twice in a batch: the two copies must get different randomness
    m = MODEL.replace(h=jnp.stack([MODEL.h, MODEL.h]))
    x = np.asarray(_draw(GibbsSampler(), jax.random.key(3), m).spins)
    assert x.shape == (2, NC, NS, N)
    assert not np.array_equal(x[0], x[1])


def test_thinning_keeps_every_kth_sweep_of_the_same_run():
    # sweep t uses fold_in(key, t), so thinning only selects: thinning=3 keeps sweeps 4 and 7
    # of the run that keeps every sweep (num_burnin=2: first kept sweep index 2)
    s = GibbsSampler()
    every = np.asarray(s.sample(MODEL, jax.random.key(5), 6, num_chains=2, num_burnin=2).spins)
    thin = np.asarray(
        s.sample(MODEL, jax.random.key(5), 2, num_chains=2, num_burnin=2, thinning=3).spins)
    np.testing.assert_array_equal(thin, every[:, [2, 5]])


def test_initial_states_used_and_masked_forced_low():
    # beta huge, ferromagnetic chain started in the all-up ground state: nothing moves
    m = chain(5, J=1.0, beta=50.0).replace(mask=jnp.array([True, True, True, True, False]))
    x0 = jnp.ones((2, 5))  # masked variable given +1: the driver sets it to -1
    s = MetropolisSampler().sample(m, jax.random.key(0), 4, num_chains=2, num_burnin=0,
                                   initial_states=x0)
    expect = np.array([1, 1, 1, 1, -1.0])
    np.testing.assert_array_equal(np.asarray(s.spins), np.broadcast_to(expect, (2, 4, 5)))
    assert np.all(np.asarray(s.info["acceptance_rate"]) == 0)


def test_info_shapes_follow_batch_and_chain():
    m = random_dense(jax.random.key(2), N, batch_shape=(2,), beta=0.5)
    s = _draw(SAMPLERS["pt"], jax.random.key(0), m)
    assert s.spins.shape == (2, NC, NS, N)
    assert s.info["acceptance_rate"].shape == (2, NC)
    assert s.info["swap_acceptance"].shape == (2, NC, 2)
    assert s.info["betas"].shape == (2, NC, 3)
    assert set(s.info["timing"]) == {"setup_s", "sampling_s", "total_s"}


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        ({"num_sweeps": 10}, TypeError, "num_sweeps"),
        ({"num_burnin": -1}, ValueError, "num_burnin"),
        ({"thinning": 0}, ValueError, "thinning"),
        ({"thinning": 1.5}, TypeError, "thinning"),
        ({"beta_schedule": [1.0] * 24 + [0.0]}, ValueError, "beta_schedule must be positive"),
        ({"beta_schedule": [1.0] * 24 + [-2.0]}, ValueError, "-2.0 at sweep 24"),
        ({"beta_schedule": [1.0] * 24 + [np.nan]}, ValueError, "beta_schedule"),
        ({"beta_schedule": [1.0] * 24 + [np.inf]}, ValueError, "beta_schedule"),
        ({"beta_schedule": [1.0] * 7}, ValueError, "one inverse temperature per sweep"),
        ({"beta_schedule": "hot"}, TypeError, "beta_schedule"),
        ({"initial_states": np.ones((4, N))}, ValueError, "initial_states"),
        ({"initial_states": np.full((NC, N), 2.0)}, ValueError, "initial_states"),
    ],
)
def test_bad_options_name_the_parameter(kwargs, exc, words):
    with pytest.raises(exc, match=words):
        _draw(GibbsSampler(), jax.random.key(0), **kwargs)


@pytest.mark.parametrize("num_samples, num_chains, name", [(0, 2, "num_samples"),
                                                           (5, 0, "num_chains"),
                                                           (-1, 2, "num_samples")])
def test_non_positive_sizes(num_samples, num_chains, name):
    with pytest.raises(ValueError, match=name):
        MetropolisSampler().sample(MODEL, jax.random.key(0), num_samples, num_chains=num_chains)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: GibbsSampler(order="diagonal"), "order must be one of"),
        (lambda: MetropolisSampler(order=None), "order must be one of"),
        (lambda: GibbsSampler(colouring="rainbow"), "colouring must be one of"),
        (lambda: ParallelTemperingSampler(num_replicas=1), "num_replicas"),
        (lambda: ParallelTemperingSampler(betas=(1.0, 0.5)), "strictly increasing"),
        (lambda: ParallelTemperingSampler(betas=(-1.0, 0.5)), "positive"),
        (lambda: ParallelTemperingSampler(betas=(1.0,)), "at least 2"),
        (lambda: ParallelTemperingSampler(beta_min=0.0), "beta_min"),
        (lambda: ParallelTemperingSampler(beta_min_ratio=1.5), "beta_min_ratio"),
    ],
)
def test_bad_constructor_options(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_chromatic_needs_a_sparse_model():
    with pytest.raises(ValueError, match="chromatic.*SparseIsingModel"):
        GibbsSampler(order="chromatic").sample(MODEL, jax.random.key(0), 2)


def test_pt_rejects_bad_local_and_beta_min_above_target():
    from isingattn.samplers import ExactSampler

    with pytest.raises(TypeError, match="local must be an MCMC sampler"):
        ParallelTemperingSampler(local=ExactSampler())
    with pytest.raises(TypeError, match="local must be an MCMC sampler"):
        ParallelTemperingSampler(local=ParallelTemperingSampler())
    with pytest.raises(ValueError, match="beta_min = 2.0 must be below"):
        ParallelTemperingSampler(beta_min=2.0).sample(MODEL, jax.random.key(0), 2)


# ------------------------------------------------------------------ compilation caching
@dataclasses.dataclass(frozen=True)
class _CountingGibbs(GibbsSampler):
    """Gibbs with a trace counter (class attribute: instances are frozen and hashed)."""

    traces: ClassVar[list] = [0]

    def step_chains(self, model, states, keys, beta, prep=None):
        type(self).traces[0] += 1
        return super().step_chains(model, states, keys, beta, prep)


def test_second_call_with_same_sizes_does_not_trace_again():
    s = _CountingGibbs()
    m2 = random_dense(jax.random.key(9), N, beta=1.3)  # other values, same structure
    _draw(s, jax.random.key(0))
    first = s.traces[0]
    assert first > 0
    size_before = _run._cache_size()
    _draw(s, jax.random.key(1))
    _draw(s, jax.random.key(2), m2)
    # at a fixed beta burn-in and thinning are loop bounds: no new program
    _draw(s, jax.random.key(3), num_burnin=7, thinning=3)
    assert _run._cache_size() == size_before
    assert s.traces[0] == first
    # a beta schedule runs one scan over all sweeps: its length is part of the program
    _draw(s, jax.random.key(4), num_burnin=7, beta_schedule=np.full(7 + NS, 0.8))
    assert _run._cache_size() == size_before + 1
    traced = s.traces[0]
    assert traced > first
    _draw(s, jax.random.key(5), num_burnin=7, beta_schedule=np.full(7 + NS, 0.9))
    assert _run._cache_size() == size_before + 1
    # an equal configuration (a new but equal frozen dataclass) hits the same cache entry
    _draw(_CountingGibbs(), jax.random.key(6))
    assert _run._cache_size() == size_before + 1
    assert s.traces[0] == traced


def test_large_sparse_batch_models_are_independent_runs():
    # big sparse batches run one model at a time (lax.map). Model 0's draws depend only on
    # model 0 and its keys, not on the other models of the batch; copies of one model differ.
    from isingattn.models import square_lattice

    m = square_lattice(8, beta=0.4)  # n * chains = 64 * 64 >= 4096: the lax.map path
    h1 = jnp.zeros((2, 64))
    h2 = h1.at[1].set(0.7)
    run = lambda h: MetropolisSampler().sample(
        m.replace(h=h), jax.random.key(0), 3, num_chains=64, num_burnin=2)
    a, b = run(h1), run(h2)
    assert a.spins.shape == (2, 64, 3, 64) and a.info["acceptance_rate"].shape == (2, 64)
    np.testing.assert_array_equal(np.asarray(a.spins[0]), np.asarray(b.spins[0]))
    assert not np.array_equal(np.asarray(a.spins[0]), np.asarray(a.spins[1]))


# ------------------------------------------------------- streamed driver bookkeeping
# Kernels that carry their random stream run, at a fixed beta, as nested loops (burn-in, then
# one loop of `thinning` sweeps per draw) continuing one stream per chain: the run is the same
# sequence of sweeps whatever the split into burn-in, thinning and draws. These identities pin
# down which sweeps are kept and what info averages over.
_STREAMED = {
    "gibbs-dense": (GibbsSampler(), MODEL),
    "metropolis-chromatic": (MetropolisSampler(), None),
    "swendsen-wang": (SwendsenWangSampler(), MODEL),
}


@pytest.mark.parametrize("name", list(_STREAMED))
def test_streamed_driver_keeps_the_right_sweeps(name):
    from isingattn.models import square_lattice

    sampler, model = _STREAMED[name]
    model = square_lattice(4, beta=0.4) if model is None else model
    assert sampler.carries_stream
    key = jax.random.key(3)
    every = sampler.sample(model, key, 8, num_chains=2, num_burnin=3)
    thinned = sampler.sample(model, key, 4, num_chains=2, num_burnin=3, thinning=2)
    np.testing.assert_array_equal(thinned.spins, every.spins[:, 1::2])
    for k in every.info:  # the kernel's entries average the same 8 kept sweeps
        if k != "timing":
            np.testing.assert_allclose(thinned.info[k], every.info[k], rtol=1e-6)
    later = sampler.sample(model, key, 7, num_chains=2, num_burnin=4)
    np.testing.assert_array_equal(later.spins, every.spins[:, 1:])
    # a different key gives a different run
    other = sampler.sample(model, jax.random.key(4), 8, num_chains=2, num_burnin=3)
    assert not np.array_equal(other.spins, every.spins)


@pytest.mark.parametrize("name", list(_STREAMED))
def test_a_constant_schedule_is_the_fixed_beta_run(name):
    # under a schedule a streamed kernel still continues its stream, reading the sweep's beta:
    # a schedule holding the model's beta at every sweep draws exactly the fixed-beta run
    from isingattn.models import square_lattice

    sampler, model = _STREAMED[name]
    model = square_lattice(4, beta=0.4) if model is None else model
    key = jax.random.key(5)
    fixed = sampler.sample(model, key, 6, num_chains=2, num_burnin=3, thinning=2)
    sched = np.full(3 + 6 * 2, float(model.beta), np.float32)
    ruled = sampler.sample(model, key, 6, num_chains=2, num_burnin=3, thinning=2,
                           beta_schedule=sched)
    np.testing.assert_array_equal(ruled.spins, fixed.spins)
    hotter = sampler.sample(model, key, 6, num_chains=2, num_burnin=3, thinning=2,
                            beta_schedule=sched * 0.5)
    assert not np.array_equal(hotter.spins, fixed.spins)


def test_kernel_step_with_key_none_continues_the_stream():
    # step(model, state, None, beta) is deterministic given the state and advances it
    s = MetropolisSampler()
    st = s.init(MODEL, jax.random.key(0), jnp.zeros(MODEL.n))
    a, _ = s.step(MODEL, st, None, MODEL.beta)
    b, _ = s.step(MODEL, st, None, MODEL.beta)
    np.testing.assert_array_equal(a.x, b.x)
    assert not all(np.array_equal(u, v) for u, v in zip(a.rng, st.rng))
    c, _ = s.step(MODEL, st, jax.random.key(1), MODEL.beta)  # a key re-keys the stream
    assert not all(np.array_equal(u, v) for u, v in zip(c.rng, a.rng))


@pytest.mark.parametrize("name", list(_STREAMED))
def test_chain_lanes_give_the_same_draws(name, monkeypatch):
    # Large runs split the chains into lanes that XLA runs concurrently (_chain_lanes). Every
    # chain carries its own stream, so the split must change nothing: force it on a small run
    # (5 chains: lanes of 2 and 3, two models) and compare with the unsplit run.
    import isingattn.samplers._driver as mcmc
    from isingattn.models import square_lattice

    sampler, model = _STREAMED[name]
    model = square_lattice(4, beta=0.4) if model is None else model
    model = model.replace(h=jnp.stack([model.h, 0.3 + model.h]))
    runs = []
    for threshold in (1 << 62, 1):
        monkeypatch.setattr(mcmc, "LANE_MIN_UPDATES", threshold)
        assert mcmc._chain_lanes(2, 5, model.n) == (1 if threshold > 1 else mcmc.CHAIN_LANES)
        runs.append(sampler.sample(model, jax.random.key(8), 4, num_chains=5, num_burnin=2,
                                   thinning=2))
    np.testing.assert_array_equal(runs[1].spins, runs[0].spins)
    for k in runs[0].info:
        if k != "timing":
            np.testing.assert_allclose(runs[1].info[k], runs[0].info[k], rtol=1e-6)


# ------------------------------------------------------- the public driver: chunks, observers
# init_chains + run_chains is what sample() does; a run continued from the chains it returns
# draws what one longer run would, for kernels that carry their stream (at a fixed beta) and
# for those that take a key per sweep (fold_in(chain key, sweep number)) alike.
_CHUNKED = {
    "gibbs-streamed": GibbsSampler(),
    "pt-keyed": ParallelTemperingSampler(num_replicas=3),
}


@pytest.mark.parametrize("name", list(_CHUNKED))
def test_sample_is_one_driver_run(name):
    sampler = _CHUNKED[name]
    key = jax.random.key(21)
    ref = _draw(sampler, key)
    run = run_chains(sampler, MODEL, init_chains(sampler, MODEL, key, NC), NS, num_burnin=5)
    assert isinstance(run, ChainRun) and isinstance(run.chains, Chains)
    np.testing.assert_array_equal(run.draws, ref.spins)
    for k in run.info:
        np.testing.assert_array_equal(run.info[k], ref.info[k])
    assert int(run.chains.sweep) == 5 + NS
    np.testing.assert_array_equal(run.chains.state.x, ref.spins[:, -1])


@pytest.mark.parametrize("name", list(_CHUNKED))
def test_a_continued_run_draws_what_one_long_run_draws(name):
    sampler = _CHUNKED[name]
    chains = init_chains(sampler, MODEL, jax.random.key(22), NC)
    whole = run_chains(sampler, MODEL, chains, NS, num_burnin=5)
    burnt = run_chains(sampler, MODEL, chains, 0, num_burnin=5)  # burn-in only: nothing kept
    assert burnt.draws.shape == (NC, 0, N)
    first = run_chains(sampler, MODEL, burnt.chains, NS // 2)
    second = run_chains(sampler, MODEL, first.chains, NS - NS // 2)
    np.testing.assert_array_equal(
        np.concatenate([first.draws, second.draws], axis=1), whole.draws)
    assert int(second.chains.sweep) == 5 + NS


def test_continued_run_under_a_beta_schedule():
    # a schedule switches a streamed kernel to one key per sweep; chunks still add up
    sampler = GibbsSampler()
    chains = init_chains(sampler, MODEL, jax.random.key(23), NC)
    betas = np.linspace(0.2, 1.0, 12)
    whole = run_chains(sampler, MODEL, chains, 12, beta_schedule=betas)
    a = run_chains(sampler, MODEL, chains, 6, beta_schedule=betas[:6])
    b = run_chains(sampler, MODEL, a.chains, 6, beta_schedule=betas[6:])
    np.testing.assert_array_equal(np.concatenate([a.draws, b.draws], axis=1), whole.draws)


def test_observers_record_functions_of_the_kept_configurations():
    # the observations are the named functions of the very configurations a plain run keeps
    from isingattn.models import square_lattice

    model = square_lattice(4, beta=0.4).replace(h=jnp.zeros((2, 16)).at[1].set(0.3))
    model = model.replace(mask=jnp.ones((2, 16), bool).at[:, 0].set(False))
    sampler = MetropolisSampler()
    chains = init_chains(sampler, model, jax.random.key(24), 2)
    plain = run_chains(sampler, model, chains, 5, num_burnin=2, thinning=2)
    obs = observables("energy", "magnetization", "abs_magnetization", "x")
    assert observables("energy", "magnetization", "abs_magnetization", "x") is obs
    seen = run_chains(sampler, model, chains, 5, num_burnin=2, thinning=2, observe=obs)
    x = np.asarray(plain.draws)
    assert seen.draws["energy"].shape == (2, 2, 5)
    np.testing.assert_array_equal(seen.draws["x"], x)
    np.testing.assert_allclose(seen.draws["energy"], model.energy(plain.draws), rtol=1e-6)
    m = x[..., 1:].mean(-1)  # variable 0 is masked (held at -1) and does not count
    np.testing.assert_allclose(seen.draws["magnetization"], m, rtol=1e-6)
    np.testing.assert_allclose(seen.draws["abs_magnetization"], np.abs(m), rtol=1e-6)
    for k in plain.info:
        np.testing.assert_array_equal(seen.info[k], plain.info[k])
    # a user's own observer: any traceable function of (model, x)
    def first_two(model, x):
        return x[:2]

    own = run_chains(sampler, model, chains, 5, num_burnin=2, thinning=2, observe=first_two)
    np.testing.assert_array_equal(own.draws, x[..., :2])


@pytest.mark.parametrize("call, exc, words", [
    (lambda: observables(), ValueError, "at least one"),
    (lambda: observables("energy", "heat"), ValueError, "'heat'"),
    (lambda: init_chains(object(), MODEL, jax.random.key(0)), TypeError, "protocol"),
    (lambda: init_chains(GibbsSampler(), MODEL, 0), TypeError, "key"),
    (lambda: run_chains(GibbsSampler(), MODEL, "chains", 3), TypeError, "Chains"),
    (lambda: run_chains(GibbsSampler(), MODEL,
                        init_chains(GibbsSampler(), MODEL, jax.random.key(0), 2), -1),
     ValueError, "num_samples"),
    (lambda: run_chains(GibbsSampler(), MODEL.replace(h=jnp.zeros((2, N))),
                        init_chains(GibbsSampler(), MODEL, jax.random.key(0), 2), 3),
     ValueError, "batch"),
])
def test_driver_bad_input_names_the_problem(call, exc, words):
    with pytest.raises(exc, match=words):
        call()
