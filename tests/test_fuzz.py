"""Fuzzing the public entry points: models, exact methods, samplers and the attention function.

A seeded generator (case ``i`` draws from ``numpy.random.default_rng((SEED, i))``, so any case
can be replayed alone: ``python -m tests.test_fuzz i [j]``) makes calls with random shapes
(batch dimensions, ``n`` from 0 up, empty axes), dtypes (float16/32/64, integers, booleans,
complex), NaN and inf in any input, masks (boolean, integer, wrong shapes), bad numbers
(``num_samples = 0``, ``beta = -1``), keys (typed, raw ``PRNGKey`` data, integers, batches) and
unknown options. Every call must either raise one of the library's documented errors
(``ValueError``, ``TypeError``: the validation errors named in the docstrings) with a message,
or return results of the right shape that are finite whenever its inputs were and agree with
an independent NumPy oracle where one is cheap:

- models: energies and local fields against the formula computed from the arguments given
  (masked variables left out), energies unchanged by a vartype conversion;
- exact methods: ``log Z``, marginals, ground-state energy and samples against enumeration in
  NumPy;
- samplers: spins in the vartype's two values, masked variables never moved, the energies
  returned equal to the model's energy of the spins returned;
- attention: outputs inside the range of the values (a convex combination, or 0 where no key
  is allowed), integer and boolean inputs giving what their float32 values give, and a NaN
  query giving a NaN output row (never a hidden one) where the query sees a key.

Never another exception from deep inside, never a hang: each call runs under a two-stage
watchdog. After ``CALL_LIMIT_S`` seconds a thread interrupts the call and the test fails
naming the case; if the call is stuck where Python cannot interrupt it, ``faulthandler`` ends
the process ``HANG_GRACE_S`` seconds later with every thread's traceback, written to the
terminal (pytest's capture bypassed), after the case was named there.

Cost and failure rate: valid models and attention inputs come from small pools of shapes, so
that the run compiles a bounded number of programs. The CI-sized run (``NUM_CASES = 250``
cases: 100 model, 19 exact, 52 sampler and 79 attention calls, 128 of them refused with a
documented error) takes about 32 s of CPU time on one core, most of it compiling (the whole
file, with the NaN test below and the imports, about 37 s).
``ISINGATTN_FUZZ_CASES=N`` runs N cases and also calls the costly backends on valid models.
The inputs are fixed by the seeds and every check is deterministic (no statistical test, the
samplers' own keys are seeded), so the false-failure rate is 0: a failure is a finding (or a
changed program), and the same case fails again on replay.
"""

from __future__ import annotations

import _thread
import faulthandler
import math
import os
import sys
import threading
import time
import traceback

import jax
import numpy as np
import pytest

from isingattn import IsingModel, SparseIsingModel, exact
from isingattn.attention import Couplings, boltzmann_attention, sampled
from isingattn.samplers import BACKENDS, ExactSampler

SEED = 20250623
#: Cases in CI; ISINGATTN_FUZZ_CASES=N runs N (and valid calls of every backend, see below).
NUM_CASES = int(os.environ.get("ISINGATTN_FUZZ_CASES", "250"))
CALL_LIMIT_S = 120.0  # the slowest case takes about 4 s of CPU time
HANG_GRACE_S = 60.0
DOCUMENTED = (ValueError, TypeError)
SAMPLERS = [n for n in BACKENDS if n != "qpu"]  # qpu: needs a token (tests/samplers/test_qpu)
#: Backends whose first compilation costs 3-6 s: in the CI-sized run their calls are the
#: invalid ones only (argument validation is shared, and tests/samplers/test_keys.py and the
#: shared statistical suite run them on valid models); a longer run calls them validly too.
COSTLY = () if "ISINGATTN_FUZZ_CASES" in os.environ else (
    "parallel_tempering", "swendsen_wang", "diabatic")
OPTIONS = {"qpu_offline": {"topology_shape": (2,)}, "simulated_annealing": {},
           "parallel_tempering": {}}


class Case:
    """What one case did, for the failure message (enough to replay it by index)."""

    def __init__(self, index):
        self.index = index
        self.rng = np.random.default_rng((SEED, index))
        self.notes = []
        self.finite_inputs = True

    def note(self, **kw):
        self.notes.append(", ".join(f"{k}={v!r}" for k, v in kw.items()))

    def __str__(self):
        return f"case {self.index}: " + "; ".join(self.notes)


# ---------------------------------------------------------------------------------------------
# random inputs
# ---------------------------------------------------------------------------------------------
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.bool_, np.complex64]


def pick(case, options, p=None):
    return options[case.rng.choice(len(options), p=p)]


def poison(case, arr, name, rate=0.15, values=(np.nan, np.inf, -np.inf)):
    """Sometimes put NaN or +-inf into ``arr`` (a float array)."""
    arr = np.array(arr, dtype=np.float64 if not np.iscomplexobj(arr) else arr.dtype)
    if arr.size and case.rng.random() < rate:
        bad = pick(case, list(values))
        arr.flat[case.rng.integers(arr.size)] = bad
        case.finite_inputs = False
        case.note(**{f"{name}_poison": bad})
    return arr


def cast(case, arr, name, rate=0.2):
    """Usually float32/64; sometimes any other dtype."""
    dt = pick(case, DTYPES) if case.rng.random() < rate else pick(case, DTYPES[:2])
    case.note(**{f"{name}_dtype": np.dtype(dt).name})
    with np.errstate(invalid="ignore"):
        return np.asarray(arr).astype(dt)


def random_key(case, rate=0.15):
    r = case.rng.random()
    if r < rate / 3:
        case.note(key="int")
        return int(case.rng.integers(100))
    if r < 2 * rate / 3:
        case.note(key="batch")
        return jax.random.split(jax.random.key(int(case.rng.integers(100))), 2)
    if r < rate:
        case.note(key="float array")
        return np.zeros(2, np.float32)
    seed = int(case.rng.integers(100))
    if case.rng.random() < 0.5:
        case.note(key="PRNGKey")
        return jax.random.PRNGKey(seed)
    case.note(key="key")
    return jax.random.key(seed)


def random_beta(case, batch):
    r = case.rng.random()
    if r < 0.1:
        beta = pick(case, [0.0, -1.0, np.nan, np.inf])
        case.finite_inputs = case.finite_inputs and np.isfinite(beta)
    elif r < 0.2 and batch:
        beta = case.rng.uniform(0.2, 1.5, size=batch)
    else:
        beta = float(case.rng.uniform(0.2, 1.5))
    case.note(beta=np.asarray(beta).tolist())
    return beta


def random_model_arguments(case):
    """Keyword arguments for IsingModel / SparseIsingModel, often invalid."""
    n = int(pick(case, [0, 1, 3, 5], p=[0.05, 0.3, 0.45, 0.2]))
    batch = pick(case, [(), (2,), (0,), (2, 1)], p=[0.5, 0.3, 0.1, 0.1])
    sparse = case.rng.random() < 0.3
    case.note(n=n, batch=batch, sparse=sparse)
    h = poison(case, case.rng.normal(size=batch + (n,)), "h")
    if case.rng.random() < 0.05:
        h = h[..., :-1] if n else h.reshape(batch + (1,))  # a mismatched n
        case.note(h_shape=h.shape)
    kw = {"h": cast(case, h, "h"), "beta": random_beta(case, batch),
          "vartype": pick(case, ["SPIN", "BINARY", "SPIN", "ising", 3], p=[0.45, 0.45, 0.04,
                                                                            0.03, 0.03])}
    if case.rng.random() < 0.2:
        kw["offset"] = poison(case, case.rng.normal(), "offset", rate=0.3)
    r = case.rng.random()
    if r < 0.3:
        kw["mask"] = case.rng.random(batch + (n,)) < 0.7
    elif r < 0.35:
        kw["mask"] = (case.rng.random((n,)) < 0.5).astype(pick(case, [np.int32, np.float32]))
    elif r < 0.38:
        kw["mask"] = np.ones((n + 1,), bool)
    if "mask" in kw:
        case.note(mask=(np.asarray(kw["mask"]).dtype.name, np.asarray(kw["mask"]).shape))
    if sparse:
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
        keep = [p for p in pairs if case.rng.random() < 0.6]
        edges = np.array(keep, np.int64).reshape(-1, 2)
        if case.rng.random() < 0.1:
            edges = np.concatenate([edges, pick(case, [[[0, 0]], [[0, n]], [[-1, 0]]])])
            case.note(edges_bad=edges[-1].tolist())
        J = poison(case, case.rng.normal(size=batch + (len(edges),)), "J")
        kw.update(edges=edges, J=cast(case, J, "J"))
    else:
        J = case.rng.normal(size=batch + (n, n))
        J = (J + np.swapaxes(J, -1, -2)) / 2
        J[..., np.arange(n), np.arange(n)] = 0
        if n >= 2 and case.rng.random() < 0.05:
            J[..., 0, 1] += 1.0  # asymmetric
            case.note(J="asymmetric")
        if n >= 1 and case.rng.random() < 0.03:
            J[..., 0, 0] = 1.0
            case.note(J="diagonal")
        if case.rng.random() < 0.05:
            J = J[..., :, :-1] if n else np.zeros(batch + (1, 1))
            case.note(J_shape=J.shape)
        kw["J"] = cast(case, poison(case, J, "J"), "J")
    return sparse, kw


# ---------------------------------------------------------------------------------------------
# oracles and checks of what came back
# ---------------------------------------------------------------------------------------------
def check_array(case, value, shape, name, finite=True):
    value = np.asarray(value)
    assert value.shape == tuple(shape), f"{case}: {name} shape {value.shape}, expected {shape}"
    assert not np.iscomplexobj(value), f"{case}: {name} is complex ({value.dtype})"
    if finite and case.finite_inputs and np.issubdtype(value.dtype, np.number):
        assert np.all(np.isfinite(value)), f"{case}: {name} not finite: {value}"


def check_close(case, value, expected, name, tol):
    value, expected = np.asarray(value, np.float64), np.asarray(expected, np.float64)
    err = np.abs(value - expected)
    assert not err.size or np.max(err) <= tol, (
        f"{case}: {name} differs from the NumPy oracle by {np.max(err):.3g} (tolerance "
        f"{tol:.3g}):\n{value}\nexpected\n{expected}")


def low_value(vartype):
    return -1.0 if vartype == "SPIN" else 0.0


def oracle(kw, sparse, x):
    """Energy ``batch + (k,)`` and local fields ``batch + (k, n)`` of states ``x``
    (``batch + (k, n)``) in float64, from the constructor's arguments alone."""
    h = np.asarray(kw["h"], np.float64)
    n = h.shape[-1]
    if sparse:
        edges = np.asarray(kw["edges"]).reshape(-1, 2)
        Je = np.asarray(kw["J"], np.float64)
        Je = np.full(len(edges), Je) if Je.ndim == 0 else Je
        J = np.zeros(Je.shape[:-1] + (n, n))
        J[..., edges[:, 0], edges[:, 1]] = Je
        J[..., edges[:, 1], edges[:, 0]] = Je
    else:
        J = np.asarray(kw["J"], np.float64)
    mask = np.asarray(kw["mask"]) if kw.get("mask") is not None else np.ones(n, bool)
    offset = np.asarray(kw.get("offset", 0.0), np.float64)
    xm = np.where(mask[..., None, :], x, 0.0)
    Jx = np.matmul(J[..., None, :, :], xm[..., :, None])[..., 0]
    energy = -np.sum(h[..., None, :] * xm, -1) - 0.5 * np.sum(xm * Jx, -1) - offset[..., None]
    fields = np.where(mask[..., None, :], h[..., None, :] + Jx, 0.0)
    return energy, fields, float(np.sum(np.abs(h)) + np.sum(np.abs(J)) + np.abs(offset).sum())


def tolerance(m, scale):
    return 8 * (m.n + 2) * float(np.finfo(np.dtype(m.dtype)).eps) * (1.0 + scale)


@jax.jit
def _energy_and_fields(m, x):  # one compilation per shape, not one per eager operation
    return m.energy(x), m.local_fields(x)


@jax.jit
def _energy(m, x):
    return m.energy(x)


def check_model(case, m, kw, sparse):
    vartype = m.vartype.value
    x = case.rng.choice([low_value(vartype), 1.0], size=m.batch_shape + (3, m.n))
    e, f = _energy_and_fields(m, x)
    check_array(case, e, m.batch_shape + (3,), "energy")
    check_array(case, f, m.batch_shape + (3, m.n), "local_fields")
    e0, f0, scale = oracle(kw, sparse, x)
    tol = tolerance(m, scale)
    check_close(case, e, e0, "energy", tol)
    check_close(case, f, f0, "local_fields", tol)
    if case.rng.random() < 0.3:  # a corresponding state of the other vartype has equal energy
        other = m.to_vartype("BINARY" if vartype == "SPIN" else "SPIN")
        x2 = (1 + x) / 2 if vartype == "SPIN" else 2 * x - 1
        check_close(case, _energy(other, x2), e0, "energy after to_vartype", 4 * tol)


# ---------------------------------------------------------------------------------------------
# the calls
# ---------------------------------------------------------------------------------------------
def fuzz_model(case):
    """Each ``fuzz_*`` makes one call and returns the checks of its result (a function: an
    exception raised there is a failure, documented or not)."""
    sparse, kw = random_model_arguments(case)
    m = (SparseIsingModel if sparse else IsingModel)(**kw)

    def check():
        check_model(case, m, kw, sparse)
        if not m.batch_shape and case.rng.random() < 0.2:
            bqm = m.to_bqm()
            assert len(bqm.variables) == int(np.sum(np.asarray(m.mask))), str(case)
    return check


#: valid models of few shapes (bounded compilation): n, batch, sparse, vartype, masked
POOL = [(3, (), False, "BINARY", True), (3, (2,), True, "SPIN", False),
        (1, (), False, "SPIN", False), (4, (0,), True, "SPIN", True)]


def pool_model(case, fields=True, entry=None):
    """A valid model from :data:`POOL`, with its arguments (for :func:`oracle`)."""
    entry = case.rng.integers(len(POOL)) if entry is None else entry
    n, batch, sparse, vartype, masked = POOL[entry]
    rng = case.rng
    h = rng.normal(size=batch + (n,)) if fields else np.zeros(batch + (n,))
    kw = {"h": h, "beta": 0.6, "vartype": vartype, "mask": np.arange(n) != 1 if masked else None}
    case.note(model=(n, batch, sparse, vartype, masked, fields))
    if sparse:
        kw.update(edges=np.array([(i, i + 1) for i in range(n - 1)], np.int64).reshape(-1, 2),
                  J=0.7)
        return SparseIsingModel(**kw), kw, sparse
    J = rng.normal(size=(n, n))
    J = (J + J.T) / 2
    np.fill_diagonal(J, 0)
    kw["J"] = J
    return IsingModel(**kw), kw, sparse


def enumerate_oracle(m, kw, sparse):
    """Energies, Boltzmann probabilities and the states allowed by the mask, by enumeration."""
    low = low_value(m.vartype.value)
    states = np.array(np.meshgrid(*[[low, 1.0]] * m.n, indexing="ij")).reshape(m.n, -1).T
    if kw["mask"] is not None:  # masked variables stay at the low value
        states = states[np.all(kw["mask"] | (states == low), axis=-1)]
    x = np.broadcast_to(states, m.batch_shape + states.shape)
    energy, _, scale = oracle(kw, sparse, x)
    logw = -kw["beta"] * energy
    log_z = np.log(np.sum(np.exp(logw - logw.max(-1, keepdims=True)), -1)) + logw.max(-1) \
        if logw.size else np.zeros(logw.shape[:-1])
    p = np.exp(logw - log_z[..., None])
    return states, energy, p, log_z, scale


def fuzz_exact(case):
    m, kw, sparse = pool_model(case, entry=int(case.rng.integers(2)))
    what = pick(case, ["log_partition", "marginals", "moments", "ground_state", "sample"])
    case.note(exact=what)
    if what == "sample":
        k = int(pick(case, [4, 4, 0, -2]))
        case.note(num_samples=k)
        result = exact.sample(m, random_key(case), k)
    else:
        result = getattr(exact, what)(m)
    return lambda: check_exact(case, m, kw, sparse, what, result)


def check_exact(case, m, kw, sparse, what, result):
    b, n = m.batch_shape, m.n
    states, energy, p, log_z, scale = enumerate_oracle(m, kw, sparse)
    tol = tolerance(m, scale)
    if what == "log_partition":
        value = result
        check_array(case, value, b, what)
        check_close(case, value, log_z, what, tol * (1 + np.max(np.abs(log_z))))
    elif what == "marginals":
        value = result
        check_array(case, value, b + (n,), what)
        check_close(case, value, np.einsum("...k,kn->...n", p, states), what, tol)
    elif what == "moments":
        mo = result
        check_array(case, mo.correlations, b + (n, n), "correlations")
        check_array(case, mo.mean_energy, b, "mean_energy")
        check_close(case, mo.correlations, np.einsum("...k,ki,kj->...ij", p, states, states),
                    "correlations", tol)
        check_close(case, mo.mean_energy, np.sum(p * energy, -1), "mean_energy", tol)
    elif what == "ground_state":
        s, e = result
        check_array(case, s, b + (n,), "state")
        check_array(case, e, b, "energy")
        check_close(case, e, energy.min(-1), "ground-state energy", tol)
        check_close(case, oracle(kw, sparse, np.asarray(s)[..., None, :])[0][..., 0],
                    energy.min(-1), "energy of the ground state", tol)
    else:
        x = result
        check_array(case, x, b + (x.shape[-2], n), "samples")
        allowed = {tuple(s) for s in states.tolist()}
        assert {tuple(s) for s in np.asarray(x).reshape(-1, n).tolist()} <= allowed, (
            f"{case}: a sample outside the states the mask allows: {x}")


def fuzz_sampler(case):
    i = int(case.rng.integers(len(SAMPLERS)))
    name = SAMPLERS[i]
    # each backend meets one shape of the pool and one valid size: one compilation each
    m, kw, sparse = pool_model(case, fields=name != "wolff" or case.rng.random() < 0.2,
                               entry=i % len(POOL))
    num_samples = pick(case, [3, 0, -1, 2.5, True], p=[.8, .05, .05, .05, .05])
    num_chains = pick(case, [2, 0, 1.0], p=[.9, .05, .05])
    if name in COSTLY and num_samples == 3 and num_chains == 2:
        num_samples = pick(case, [0, -1, 2.5, True])
    options = {"bogus": 1} if case.rng.random() < 0.05 else {}
    case.note(sampler=name, num_samples=num_samples, num_chains=num_chains, options=options)
    s = BACKENDS[name](**OPTIONS.get(name, {})).sample(
        m, random_key(case), num_samples, num_chains=num_chains, **options)
    return lambda: check_samples(case, m, kw, sparse, s, num_chains, num_samples)


def check_samples(case, m, kw, sparse, s, num_chains, num_samples):
    shape = m.batch_shape + (num_chains, num_samples, m.n)
    check_array(case, s.spins, shape, "spins")
    check_array(case, s.energy, shape[:-1], "energy")
    x = np.asarray(s.spins)
    low = low_value(m.vartype.value)
    assert set(np.unique(x).tolist()) <= {low, 1}, f"{case}: values {np.unique(x)}"
    active = np.broadcast_to(np.asarray(m.mask), m.batch_shape + (m.n,))[..., None, None, :]
    assert np.all(active | (x == low)), f"{case}: a masked variable moved"
    flat = x.reshape(m.batch_shape + (num_chains * num_samples, m.n))
    e0, _, scale = oracle(kw, sparse, flat)
    check_close(case, np.asarray(s.energy).reshape(e0.shape), e0, "energies returned",
                tolerance(m, scale))


def fuzz_attention(case):
    B, T, S, N, K, H = 2, 3, 4, 2, 1, 4
    if case.rng.random() < 0.2:  # another shape, often an invalid one
        B, T, S = (int(pick(case, v)) for v in ([1, 0], [1, 0], [1, 2, 0]))
        N, K, H = (int(pick(case, v)) for v in ([1, 3], [1, 2], [3, 0]))
    case.note(B=B, T=T, S=S, N=N, K=K, H=H)
    q = cast(case, poison(case, case.rng.normal(size=(B, T, N, H)), "q", 0.12, (np.nan,)),
             "q", 0.1)
    k = cast(case, case.rng.normal(size=(B, S, K, H)), "k", 0.1)
    v = cast(case, poison(case, case.rng.normal(size=(B, S, K, H)), "v", 0.05), "v", 0.1)
    kw = {"is_causal": bool(case.rng.random() < 0.3)}
    r = case.rng.random()
    if r < 0.2:
        kw["mask"] = case.rng.random((B, 1, T, S)) < 0.7
    elif r < 0.25:
        kw["mask"] = np.ones((B, 1, T, S + 1), bool)
    elif r < 0.28:
        kw["mask"] = np.ones((B, 1, T, S), np.int32)
    r = case.rng.random()
    if r < 0.08:
        kw["bias"] = poison(case, case.rng.normal(size=(1, 1, 1, S)), "bias", 0.2)
    elif r < 0.1:
        kw["bias"] = np.zeros((1, 1, 1, S + 1))
    r = case.rng.random()
    if r < 0.05:
        kw["chemical_potential"] = float(case.rng.normal())
    elif r < 0.1:
        kw["chemical_potential"] = case.rng.normal(size=pick(case, [(N,), (N + 1,)]))
    kw["couplings"] = pick(case, [None, "banded", "relative"])
    if kw["couplings"] == "banded":
        kw["couplings"] = Couplings.fixed(case.rng.normal(size=(N, 2)) * 0.5, "banded")
    elif kw["couplings"] == "relative":
        kw["couplings"] = Couplings.fixed(case.rng.normal(size=(N, 3)) * 0.5, "relative")
    kw["beta"] = float(pick(case, [1.0, 0.7, 1.0, 0.0, -1.0, np.nan], p=[.4, .3, .15, .05, .05,
                                                                          .05]))
    case.finite_inputs = case.finite_inputs and math.isfinite(kw["beta"])
    kw["readout"] = pick(case, ["marginal", "marginal", "softmax", "sample", "argmax"],
                         p=[.4, .25, .15, .15, .05])
    # not "transfer": its compiled kernel costs a numba build (tests/attention cover it)
    kw["method"] = pick(case, ["exact", "mean_field", "tap", "sampled", "bp"],
                        p=[.4, .25, .1, .2, .05])
    if kw["method"] == "sampled":  # one configuration: its compilation is the costliest
        kw["method"] = sampled(ExactSampler(), 4)
        kw.update(is_causal=False, couplings=Couplings.fixed(
            case.rng.normal(size=(N, 2)) * 0.5, "banded"))
        for name in ("mask", "bias", "chemical_potential"):
            kw.pop(name, None)
    if case.rng.random() < 0.7:
        kw["rng"] = random_key(case, rate=0.1)
    case.note(**{k2: (v2 if not hasattr(v2, "shape") else (v2.dtype.name, v2.shape))
                 for k2, v2 in kw.items() if k2 != "rng"})
    out = boltzmann_attention(q, k, v, **kw)
    return lambda: check_attention(case, q, k, v, kw, out)


def check_attention(case, q, k, v, kw, out):
    """What every successful attention call must give: see the module docstring."""
    B, T, N, H = q.shape
    S = k.shape[1]
    check_array(case, out, (B, T, N, H), "output")
    dtype = np.asarray(out).dtype
    assert np.issubdtype(dtype, np.floating), f"{case}: output dtype {dtype}"
    out = np.asarray(out, np.float64)
    allowed = np.ones((B, 1, T, S), bool)
    if "mask" in kw:
        allowed &= np.asarray(kw["mask"])
    if kw["is_causal"]:
        allowed &= np.tril(np.ones((T, S), bool))
    sees_a_key = np.transpose(allowed.any(-1), (0, 2, 1))  # (B, T, 1)
    # a NaN query is never hidden (outputs of queries that see no key are 0 by definition)
    if np.issubdtype(q.dtype, np.floating):
        nan_rows = np.isnan(q).any(-1) & sees_a_key
        assert np.all(np.isnan(out[nan_rows])), (
            f"{case}: a NaN query gave a non-NaN output {out[nan_rows]}")
    if not case.finite_inputs:
        return
    # a convex combination of the values (at most one in total for the sample readout, 0
    # for queries without a key)
    vv = np.asarray(v, np.float64)
    lo = np.minimum(vv.min(axis=(1, 2)), 0)[:, None, None, :]
    hi = np.maximum(vv.max(axis=(1, 2)), 0)[:, None, None, :]
    eps = float(np.finfo(np.float16 if np.float16 in (q.dtype, k.dtype, v.dtype, dtype)
                         else np.float32).eps)
    tol = 8 * S * eps * (1 + np.abs(vv).max())
    assert np.all((out >= lo - tol) & (out <= hi + tol)), (
        f"{case}: outputs outside the range of the values [{lo.min()}, {hi.max()}]: {out}")
    # integer and boolean inputs mean their values as float32
    if any(not np.issubdtype(x.dtype, np.floating) for x in (q, k, v)):
        as_float = [x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float32)
                    for x in (q, k, v)]
        again = np.asarray(boltzmann_attention(*as_float, **kw), np.float64)
        check_close(case, out, again, "output for integer inputs against their float32 values",
                    tol)


KINDS = {"model": (fuzz_model, 0.4), "exact": (fuzz_exact, 0.1),
         "sampler": (fuzz_sampler, 0.2), "attention": (fuzz_attention, 0.3)}


# ---------------------------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------------------------
class Watchdog:
    """Bounds every call (see the module docstring). ``err``: a file descriptor that reaches
    the terminal."""

    def __init__(self, err):
        self.err = err
        self.lock = threading.Lock()
        self.case, self.timer, self.done, self.fired = None, None, True, False

    def arm(self, case):
        self.case, self.done, self.fired = case, False, False
        self.timer = threading.Timer(CALL_LIMIT_S, self._interrupt)
        self.timer.daemon = True
        self.timer.start()
        faulthandler.dump_traceback_later(CALL_LIMIT_S + HANG_GRACE_S, exit=True, file=self.err)

    def disarm(self):
        with self.lock:
            self.done = True
        self.timer.cancel()
        faulthandler.cancel_dump_traceback_later()

    def _interrupt(self):
        with self.lock:
            if self.done:
                return
            self.fired = True
        os.write(self.err, (
            f"\ntest_fuzz: no result after {CALL_LIMIT_S:.0f} s, interrupting {self.case} "
            f"(replay: python -m tests.test_fuzz {self.case.index})\n").encode())
        _thread.interrupt_main()


def run_case(index, watchdog):
    """Run case ``index``; returns ``(kind, outcome, cpu seconds, description)``, raises
    AssertionError on a wrong result, an undocumented error or a hang."""
    t0 = time.process_time()
    case = Case(index)
    names = list(KINDS)
    kind = names[case.rng.choice(len(names), p=[KINDS[k][1] for k in names])]
    watchdog.arm(case)
    try:
        try:
            check = KINDS[kind][0](case)
        except DOCUMENTED as e:
            outcome = type(e).__name__
            assert str(e) and "Traceback" not in str(e), f"{case}: {outcome} without a message"
        else:
            outcome = "ok"
            try:
                check()
            except AssertionError:
                raise
            except Exception as e:  # noqa: BLE001 - on a valid result, any error is a finding
                raise AssertionError(f"{case}: checking the result raised {type(e).__name__}: "
                                     f"{e}\n" + traceback.format_exc()) from None
    except AssertionError:
        raise
    except KeyboardInterrupt:
        if not watchdog.fired:
            raise
        raise AssertionError(f"{case}: no result after {CALL_LIMIT_S:.0f} s\n"
                             + traceback.format_exc()) from None
    except Exception as e:  # noqa: BLE001 - the point: anything else is a finding
        raise AssertionError(f"{case}: undocumented {type(e).__name__}: {e}\n"
                             + traceback.format_exc()) from None
    finally:
        watchdog.disarm()
    return kind, outcome, time.process_time() - t0, str(case)


def run_cases(indices, err):
    stats, slowest = {}, (0.0, None)
    watchdog = Watchdog(err)
    with np.errstate(all="ignore"):
        for i in indices:
            kind, outcome, dt, _ = run_case(i, watchdog)
            stats.setdefault(kind, {}).setdefault(outcome, 0)
            stats[kind][outcome] += 1
            slowest = max(slowest, (dt, i))
    return stats, slowest


def test_fuzz_public_entry_points(capsys):
    with capsys.disabled():  # the watchdog writes where pytest's capture does not reach
        err = os.dup(sys.stderr.fileno())
    t0 = time.process_time()
    try:
        stats, slowest = run_cases(range(NUM_CASES), err)
    finally:
        os.close(err)
    with capsys.disabled():
        print(f"\ntest_fuzz: {NUM_CASES} cases in {time.process_time() - t0:.0f} s of CPU time: "
              f"{stats}; slowest case {slowest[1]} ({slowest[0]:.1f} s)")
    # the generator reaches both sides of every kind
    for kind, outcomes in stats.items():
        assert outcomes.get("ok", 0) > 0, (kind, outcomes)
    assert sum(v for o in stats.values() for k, v in o.items() if k != "ok") > 0.2 * NUM_CASES


#: the methods of the layer, each with a NaN query: its row NaN, every other row finite (the
#: fuzz above meets few NaN queries per run; this meets every method, the deterministic ones
#: with and without is_causal, sampled without only: a causal sampled call compiles for 7 s)
NAN_CASES = [(m, c) for m in ("exact", "transfer", "mean_field", "tap") for c in (False, True)]
NAN_CASES += [("sampled", False), ("sampled-sample", False)]


@pytest.mark.parametrize("method, is_causal", NAN_CASES,
                         ids=[f"{m}-{'causal' if c else 'full'}" for m, c in NAN_CASES])
def test_a_nan_query_is_never_hidden_and_stays_in_its_row(method, is_causal):
    rng = np.random.default_rng((SEED, 2**32 - 1))  # apart from the cases
    q = rng.normal(size=(2, 3, 2, 4))
    k, v = rng.normal(size=(2, 2, 4, 1, 4))
    q[1, 2, 0, 3] = np.nan
    readout = "sample" if method == "sampled-sample" else "marginal"
    m = sampled(ExactSampler(), 4) if method.startswith("sampled") else method
    out = np.asarray(boltzmann_attention(
        q, k, v, couplings=Couplings.fixed(rng.normal(size=(2, 2)) * 0.5, "banded"),
        is_causal=is_causal, method=m, readout=readout, rng=jax.random.key(0)))
    assert np.all(np.isnan(out[1, 2, 0])), out[1, 2, 0]
    others = np.ones(out.shape[:3], bool)
    others[1, 2, 0] = False
    assert np.all(np.isfinite(out[others])), np.argwhere(~np.isfinite(out).all(-1))


if __name__ == "__main__":  # replay: python -m tests.test_fuzz FIRST [LAST]
    first = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    last = int(sys.argv[2]) if len(sys.argv) > 2 else first + 1
    dog = Watchdog(sys.stderr.fileno())
    for i in range(first, last):
        try:
            with np.errstate(all="ignore"):
                print(i, *run_case(i, dog))
        except AssertionError as e:
            print(i, "FAIL", str(e)[:3000])
