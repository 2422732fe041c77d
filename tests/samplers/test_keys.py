"""Keys: raw ``jax.random.PRNGKey`` data is accepted wherever a key is (wrapped once, same samples
as ``jax.random.key`` of the same seed), and "same key, same samples" holds for every backend
across instances and processes (the offline QPU included: its embedding search is seeded).

Every backend of ``BACKENDS`` samples one tiny model (a 5-spin chain without fields, which every
backend supports: Wolff needs h = 0, transfer a banded model); ``qpu`` needs a D-Wave token and is
covered by ``qpu_offline``, the same code on ``MockDWaveSampler``. The spins are compared by
digest. One subprocess runs the same digests; the test process is the other run.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from isingattn import exact
from isingattn._validation import normalize_key
from isingattn.models import chain, random_dense
from isingattn.probabilistic import IsingDistribution
from isingattn.samplers import BACKENDS, check_key, host_sample_callback, seed_from_key

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = [n for n in BACKENDS if n != "qpu"]  # qpu: needs a token; qpu_offline is its code
OPTIONS = {"qpu_offline": {"topology_shape": (2,)}}


def _model():
    return chain(5, J=0.6, h=0.0, beta=0.5)


def digest(name, key) -> str:
    """sha256 prefix of the spins a fresh ``BACKENDS[name]`` draws (2 chains x 4 draws)."""
    s = BACKENDS[name](**OPTIONS.get(name, {})).sample(_model(), key, 4, num_chains=2)
    return hashlib.sha256(np.asarray(s.spins, np.int8).tobytes()).hexdigest()[:16]


def main():  # the other process: python -c "from tests.samplers.test_keys import main; main()"
    print(json.dumps({n: digest(n, jax.random.key(3)) for n in NAMES}))


@pytest.fixture(scope="module")
def typed_digests():
    return {n: digest(n, jax.random.key(3)) for n in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_raw_prngkey_gives_the_samples_of_the_typed_key(name, typed_digests):
    assert digest(name, jax.random.PRNGKey(3)) == typed_digests[name]
    assert digest(name, np.asarray(jax.random.PRNGKey(3))) == typed_digests[name]  # NumPy data


def test_different_keys_give_different_samples(typed_digests):
    # 8 draws of 5 spins: a repeat by chance is far below 1e-6 for every backend
    for name in NAMES:
        assert digest(name, jax.random.key(4)) != typed_digests[name], name


def test_same_key_same_samples_in_another_process(typed_digests):
    env = {**os.environ, "PYTHONHASHSEED": "12345", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", "from tests.samplers.test_keys import main; main()"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    other = json.loads(proc.stdout.strip().splitlines()[-1])
    assert other == typed_digests


def test_offline_qpu_records_the_embedding_it_used():
    m = random_dense(jax.random.key(0), 5, beta=0.5)
    a = BACKENDS["qpu_offline"](topology_shape=(2,)).sample(m, jax.random.key(1), 3)
    b = BACKENDS["qpu_offline"](topology_shape=(2,)).sample(m, jax.random.key(2), 3)
    ea, eb = a.info["embedding"][0], b.info["embedding"][0]
    assert len(ea["hash"]) == 16 and ea["hash"] == eb["hash"] and ea["seed"] == eb["seed"]
    assert not ea["cached"]


def test_other_key_entry_points_accept_raw_keys():
    m = random_dense(jax.random.key(0), 4, beta=0.5)
    typed, raw = jax.random.key(9), jax.random.PRNGKey(9)
    np.testing.assert_array_equal(exact.sample(m, typed, 6), exact.sample(m, raw, 6))
    np.testing.assert_array_equal(random_dense(typed, 4).J, random_dense(raw, 4).J)
    assert seed_from_key(typed) == seed_from_key(raw)
    d = IsingDistribution(m)
    np.testing.assert_array_equal(d.sample(typed, (3,)), d.sample(raw, (3,)))
    f = jax.jit(lambda k: host_sample_callback(BACKENDS["neal"](num_sweeps=20), m, k, 3))
    np.testing.assert_array_equal(f(typed), f(raw))
    # inside jit a traced raw key is wrapped too
    g = jax.jit(lambda k: BACKENDS["exact"]().sample(m, k, 5).spins)
    np.testing.assert_array_equal(g(raw), BACKENDS["exact"]().sample(m, typed, 5).spins)


@pytest.mark.parametrize(
    "key, match",
    [
        (3, r"key must be a single JAX PRNG key.*got 3"),
        (None, r"got None"),
        (jax.random.split(jax.random.key(0), 3), r"batch of keys of shape \(3,\)"),
        (jax.random.split(jax.random.PRNGKey(0), 3), r"batch of raw keys of shape \(3, 2\)"),
        (np.zeros(2, np.int32), r"dtype int32 and shape \(2,\)"),
        (np.zeros(4, np.uint32), r"uint32 of shape \(2,\).*shape \(4,\)"),
    ],
)
def test_bad_keys_are_named_errors(key, match):
    with pytest.raises(TypeError, match=match):
        normalize_key(key)
    with pytest.raises(TypeError, match=match):
        check_key(key)
