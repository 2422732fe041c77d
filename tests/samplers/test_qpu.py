"""QPUSampler end to end, offline on MockDWaveSampler (Pegasus P3) with the Boltzmann emulator;
chain-break methods against their definitions; the no-credentials error.

False-failure rates: the two binomial checks of random tie-breaking / weighted choice use
two-sided tests at level ALPHA each; everything else is deterministic given the fixed keys.
"""

from __future__ import annotations

import time

import dimod
import dwave.cloud.config  # imported here so the no-token timing excludes imports
import dwave.system  # noqa: F401
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from dwave.embedding import majority_vote as dwave_majority_vote

from isingattn.models import IsingModel, random_dense, square_lattice
from isingattn.samplers import (
    BACKENDS,
    OfflineQPUSampler,
    QPUConfigurationError,
    QPUSampler,
    TiledQPUSampler,
    as_dimod_sampler,
    get_sampler,
    host_sample_callback,
)
from isingattn.samplers._qpu import MajorityVote, WeightedRandom, auto_scale_factor

from .._stats import ALPHA

KEY = jax.random.key(5)


@pytest.fixture(scope="module")
def qpu():
    # P3: 128 qubits, built once per module (embeddings are cached inside the sampler)
    return QPUSampler.offline(topology_shape=(3,), embedding_parameters={"random_seed": 1})


def _model(key=0, n=6, beta=0.5, **kw):
    return random_dense(jax.random.key(key), n, beta=beta, **kw)


def test_end_to_end_offline(qpu):
    m = _model(1)
    s = qpu.sample(m, KEY, 40, num_chains=2)
    x = np.asarray(s.spins)
    assert x.shape == (2, 40, 6) and set(np.unique(x).tolist()) <= {-1.0, 1.0}
    # energies in the model's convention (physics sign, without beta)
    np.testing.assert_allclose(np.asarray(s.energy), np.asarray(m.energy(s.spins)), rtol=1e-6)
    bqm = m.to_bqm()
    np.testing.assert_allclose(np.asarray(s.energy).ravel(),
                               bqm.energies((x.reshape(-1, 6).astype(np.int8), list(range(6)))),
                               rtol=1e-5, atol=1e-5)
    info = s.info
    assert info["scale"].shape == () and info["chain_break_fraction"].shape == (2, 40)
    assert np.all((info["chain_break_fraction"] >= 0) & (info["chain_break_fraction"] <= 1))
    # the scale factor recorded is the one the (emulated) QPU applied to the embedded problem
    assert float(info["scale"]) == pytest.approx(qpu._emulator.last_scale)
    emb = qpu._cache[next(iter(qpu._cache))][0] if len(qpu._cache) == 1 else None
    if emb is not None:
        sb = m.to_bqm()
        sb.scale(0.5)
        embedded = emb.embedding.embed_bqm(sb, chain_strength=float(info["chain_strength"]))
        assert float(info["scale"]) == pytest.approx(
            auto_scale_factor(embedded, qpu.h_range, qpu.j_range))
    # Boltzmann-like: many distinct states, not one local minimum repeated
    assert len({tuple(r) for r in x.reshape(-1, 6)}) > 5


def test_embedding_found_once_per_structure(qpu):
    found = qpu.embeddings_found
    a = _model(2, n=7)
    b = _model(3, n=7)  # same (complete) structure, other values
    t0 = time.perf_counter()
    sa = qpu.sample(a, KEY, 5)
    t1 = time.perf_counter()
    sb = qpu.sample(b, KEY, 5)
    t2 = time.perf_counter()
    assert sa.info["embedding"][0]["cached"] is False
    assert sb.info["embedding"][0]["cached"] is True and sb.info["embedding"][0]["find_s"] == 0.0
    assert qpu.embeddings_found == found + 1
    print(f"first call {t1 - t0:.3f} s (embedding {sa.info['embedding'][0]['find_s']:.3f} s), "
          f"second call {t2 - t1:.3f} s")
    # a batch of same-structure models shares it too; another structure gets its own
    batch = random_dense(jax.random.key(4), 7, batch_shape=(3,), beta=0.5)
    sc = qpu.sample(batch, KEY, 4)
    assert sc.spins.shape == (3, 1, 4, 7)
    assert all(e["cached"] for e in sc.info["embedding"])
    assert qpu.embeddings_found == found + 1
    qpu.sample(square_lattice((2, 3), periodic=False, beta=0.5), KEY, 4)
    assert qpu.embeddings_found == found + 2


def test_masks_binary_and_same_key(qpu):
    # weak couplings without auto-scaling: a warm distribution, many distinct states
    m = random_dense(jax.random.key(6), 6, J_scale=0.1, h_scale=0.1, vartype="BINARY")
    m = m.replace(mask=jnp.array([1, 0, 1, 1, 1, 0], bool))
    opts = {"auto_scale": False, "chain_strength": 0.5}
    s = qpu.sample(m, KEY, 30, **opts)
    x = np.asarray(s.spins)
    assert set(np.unique(x).tolist()) <= {0.0, 1.0}
    assert np.all(x[..., [1, 5]] == 0)
    np.testing.assert_allclose(np.asarray(s.energy), np.asarray(m.energy(s.spins)), rtol=1e-6)
    again = qpu.sample(m, KEY, 30, **opts)
    other = qpu.sample(m, jax.random.key(99), 30, **opts)
    np.testing.assert_array_equal(x, np.asarray(again.spins))
    assert not np.array_equal(x, np.asarray(other.spins))


def test_chain_break_methods_end_to_end(qpu):
    m = _model(7, n=8, beta=1.0)
    weak = 0.05  # chains break often
    for method in ("majority_vote", "weighted_random", "discard"):
        s = qpu.sample(m, KEY, 25, chain_strength=weak, chain_break_method=method)
        assert s.spins.shape == (1, 25, 8)
        assert s.info["chain_break_method"] == method
        if method == "discard":
            assert np.all(s.info["chain_break_fraction"] == 0)
            assert int(s.info["discarded"]) > 0
    strong = qpu.sample(m, KEY, 25, chain_strength=5.0)
    assert float(strong.info["chain_strength"]) == 5.0
    assert strong.info["chain_break_fraction"].mean() < s.info["chain_break_fraction"].mean() + 1
    with pytest.raises(ValueError, match="chain_break_method"):
        qpu.sample(m, KEY, 2, chain_break_method="vote")
    with pytest.raises(ValueError, match="chain_strength"):
        qpu.sample(m, KEY, 2, chain_strength=-1.0)


@pytest.mark.parametrize("bad", [-1.0, 0.0, float("nan")])
def test_tiled_sampler_refuses_what_the_qpu_refuses(qpu, bad):
    # the tiled sampler reads the QPU's call options with the same code
    tiled = TiledQPUSampler(qpu)
    with pytest.raises(ValueError, match=r"chain_strength must be finite and > 0 or None; got"):
        tiled.sample(_model(batch_shape=(2,)), KEY, 2, chain_strength=bad)


def test_auto_scale_off_range_errors_and_unit_scale(qpu):
    big = IsingModel(h=np.array([10.0, 0, 0]), J=np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0.0]]))
    with pytest.raises(ValueError, match="h_range"):
        qpu.sample(big, KEY, 2, auto_scale=False)
    strongJ = IsingModel(h=np.zeros(3), J=3.0 * np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0.0]]))
    with pytest.raises(ValueError, match="j_range"):
        qpu.sample(strongJ, KEY, 2, auto_scale=False)
    small = IsingModel(h=np.array([0.3, -0.2, 0.1]),
                       J=0.4 * np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0.0]]))
    s = qpu.sample(small, KEY, 4, auto_scale=False)
    assert float(s.info["scale"]) == 1.0 and qpu._emulator.last_scale == 1.0
    s = qpu.sample(small, KEY, 4)
    assert float(s.info["scale"]) == pytest.approx(1 / 0.4)  # J fills j_range first


def test_majority_vote_unbiased_ties():
    # chains of length 2 with disagreeing qubits: every read is a tie
    rng = np.random.default_rng(0)
    samples = np.tile(np.array([[1, -1, -1, 1]], np.int8), (4000, 1))
    out, rows = MajorityVote(rng)(samples, [[0, 1], [2, 3]])
    assert rows.tolist() == list(range(4000))
    for c in range(2):
        k = int(np.sum(out[:, c] == 1))
        assert scipy.stats.binomtest(k, 4000, 0.5).pvalue > ALPHA
    # dwave-system's version sends every tie to +1
    theirs, _ = dwave_majority_vote(samples, [[0, 1], [2, 3]])
    assert np.all(theirs == 1)
    # no ties: identical to dwave-system's majority vote
    samples = rng.choice(np.array([-1, 1], np.int8), size=(200, 9))
    chains = [[0, 1, 2], [3], [4, 5, 6, 7, 8]]
    np.testing.assert_array_equal(MajorityVote(rng)(samples, chains)[0],
                                  dwave_majority_vote(samples, chains)[0])


def test_weighted_random_follows_chain_fractions():
    rng = np.random.default_rng(1)
    samples = np.tile(np.array([[1, 1, 1, -1]], np.int8), (4000, 1))  # one chain, 3/4 up
    out, _ = WeightedRandom(rng)(samples, [[0, 1, 2, 3]])
    k = int(np.sum(out[:, 0] == 1))
    assert scipy.stats.binomtest(k, 4000, 0.75).pvalue > ALPHA


def test_no_token_fails_fast(monkeypatch, tmp_path):
    import os

    for name in list(os.environ):
        if name.startswith("DWAVE_"):
            monkeypatch.delenv(name)
    empty = tmp_path / "dwave.conf"
    empty.write_text("")
    monkeypatch.setenv("DWAVE_CONFIG_FILE", str(empty))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    t0 = time.perf_counter()
    with pytest.raises(QPUConfigurationError, match="DWAVE_API_TOKEN"):
        QPUSampler()
    assert time.perf_counter() - t0 < 1.0  # an error at once, not a network hang
    with pytest.raises(QPUConfigurationError):
        get_sampler("qpu")


def test_registry_dimod_api_and_callback(qpu):
    assert BACKENDS["qpu"] is QPUSampler and BACKENDS["qpu_offline"] is OfflineQPUSampler
    off = get_sampler("qpu_offline", topology_shape=(2,))
    assert isinstance(off, QPUSampler)
    d = as_dimod_sampler(qpu)
    dimod.testing.assert_sampler_api(d)
    bqm = dimod.BinaryQuadraticModel({0: 0.2, 1: -0.3}, {(0, 1): -0.5}, 0.0, "SPIN")
    ss = d.sample(bqm, num_reads=6, seed=2)
    assert len(ss) == 6
    np.testing.assert_allclose(ss.record.energy, bqm.energies(ss))
    m = _model(8, n=5)
    direct = qpu.sample(m, KEY, 6).spins
    jitted = jax.jit(lambda m, k: host_sample_callback(qpu, m, k, 6))(m, KEY)
    np.testing.assert_array_equal(np.asarray(direct), np.asarray(jitted))
