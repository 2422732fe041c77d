"""State-vector simulation: limits, unitarity, an independent ODE / expm check, masks, batches,
vartypes and bad input. Deterministic (no sampling): tolerances are numerical error bounds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.sparse
import scipy.sparse.linalg

from isingattn import exact
from isingattn.models import IsingModel, chain, random_dense
from isingattn.quantum import (
    MAX_QUBITS,
    _evolve,
    dwave_like_schedule,
    final_state,
    linear_schedule,
    output_distribution,
)


def _model(n, seed, scale=1.0, dtype=np.float32, mask=None):
    rng = np.random.default_rng(seed)
    h = scale * rng.normal(size=n)
    J = np.triu(scale * rng.normal(size=(n, n)), 1)
    return IsingModel(h=h.astype(dtype), J=(J + J.T).astype(dtype), beta=0.7, offset=0.3,
                      mask=mask)


def _hamiltonian_parts(model):
    """Dense reference: X = sum_i X_i and the diagonal H_P = E + offset over 2^n states."""
    n = model.n
    states = np.asarray(exact.enumerate_states(n, "SPIN"), float)
    spin = model.to_vartype("SPIN")
    E = np.asarray(spin.energy(states), float) + float(spin.offset)
    idx = np.arange(2**n)
    rows = np.concatenate([idx ^ (1 << i) for i in range(n)])
    X = scipy.sparse.csr_matrix((np.ones(n * 2**n), (rows, np.tile(idx, n))), (2**n, 2**n))
    return X, E


def _reference_ode(model, schedule, t_a):
    X, E = _hamiltonian_parts(model)

    def rhs(t, y):
        A, B = schedule(t / t_a)
        return -2j * np.pi * (-(A / 2) * (X @ y) + (B / 2) * E * y)

    y0 = np.full(2**model.n, 2 ** (-model.n / 2), complex)
    sol = scipy.integrate.solve_ivp(rhs, (0, t_a), y0, method="DOP853", rtol=1e-12, atol=1e-12)
    return sol.y[:, -1]


def _reference_expm(model, schedule, t_a, pieces):
    """Piecewise-constant H (midpoint of each piece), each piece by expm_multiply."""
    X, E = _hamiltonian_parts(model)
    D = scipy.sparse.diags(E)
    y = np.full(2**model.n, 2 ** (-model.n / 2), complex)
    dt = t_a / pieces
    for k in range(pieces):
        A, B = schedule((k + 0.5) / pieces)
        H = -(A / 2) * X + (B / 2) * D
        y = scipy.sparse.linalg.expm_multiply(-2j * np.pi * dt * H, y)
    return y


BACKENDS = ["numba", "jax"]  # the compiled kernel (the CPU default) and the JAX path


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("schedule,t_a", [(linear_schedule(1.0, 1.5), 3.0),
                                          (dwave_like_schedule(), 0.4)])
def test_amplitudes_match_scipy_ode_and_expm(schedule, t_a, backend):
    with jax.enable_x64(True):
        model = _model(4, 0, dtype=np.float64)
        ours = np.asarray(final_state(model, schedule, t_a, tolerance=1e-9, backend=backend))
        ode = _reference_ode(model, schedule, t_a)
        # piecewise-constant expm: second order in the piece length, 400 pieces -> ~1e-5
        pw = _reference_expm(model, schedule, t_a, 400)
    assert ours.dtype == np.complex128
    # amplitudes, global phase included (H_P = E + offset on both sides)
    np.testing.assert_allclose(ours, ode, atol=2e-7)
    np.testing.assert_allclose(pw, ode, atol=1e-4)
    np.testing.assert_allclose(ours, pw, atol=1e-4)


def test_default_precision_amplitudes_within_tolerance():
    # float32 / complex64 by default; the automatic step count targets an error ~1e-4
    model = _model(4, 1)
    sched = linear_schedule(1.0, 1.0)
    ours = np.asarray(final_state(model, sched, 2.0))
    assert ours.dtype == np.complex64
    np.testing.assert_allclose(ours, _reference_ode(model, sched, 2.0), atol=3e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("order", [2, 4])
def test_convergence_order(order, backend):
    # error(N) / error(2N) -> 2^order
    with jax.enable_x64(True):
        model = _model(3, 2, dtype=np.float64)
        sched = linear_schedule(1.0, 1.0)
        ref = _reference_ode(model, sched, 2.0)
        errs = [np.abs(np.asarray(final_state(model, sched, 2.0, num_steps=N, order=order,
                                              backend=backend)) - ref).max() for N in (40, 80)]
    assert errs[0] / errs[1] == pytest.approx(2**order, rel=0.15)


def test_error_moments_of_the_linear_schedule_in_closed_form():
    # A = 1 - s, B = s: int A^2 (F B) (A + F B)^(p-2) ds by Beta integrals:
    # p = 2: F / 12; p = 4: F / 30 + F^2 / 30 + F^3 / 60
    from isingattn.quantum import error_moments

    sched = linear_schedule(1.0, 1.0)
    np.testing.assert_allclose(error_moments(sched, 2), [0, 1 / 12], rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(error_moments(sched, 4), [0, 1 / 30, 1 / 30, 1 / 60], rtol=1e-6,
                               atol=1e-12)
    with pytest.raises(ValueError, match="order"):
        error_moments(sched, 3)


@pytest.mark.parametrize("schedule,t_a,n,scale,couplings", [
    ("dwave_like", 0.5, 8, 100.0, "banded"),  # strong fields: an attention query late in training
    ("dwave_like", 0.1, 5, 100.0, "dense"),   # short anneal, strong couplings: the phase bound
    ("dwave_like", 2.0, 6, 1.0, "dense"),
    ("linear", 5.0, 8, 2.0, "dense"),         # long anneal, weak fields
])
def test_automatic_count_meets_its_tolerance(schedule, t_a, n, scale, couplings):
    # largest amplitude error at the automatic count against the same integrator at 8 times the
    # count (whose own error is ~8^4 times smaller), float64; three random models per case
    from isingattn.quantum import default_num_steps

    rng = np.random.default_rng(11)
    sched = _evolve.as_schedule(schedule)
    with jax.enable_x64(True):
        for _ in range(3):
            h = rng.normal(0, scale if couplings == "banded" else 0.3 * scale, n)
            width = 2 if couplings == "banded" else n
            J = np.triu(rng.normal(0, 0.3 if couplings == "banded" else scale / np.sqrt(n),
                                   (n, n)), 1)
            J *= np.abs(np.subtract.outer(np.arange(n), np.arange(n))) <= width
            model = IsingModel(h=h, J=J + J.T)
            F = float(np.max(np.abs(h) + np.abs(J + J.T).sum(-1)))
            N = default_num_steps(sched, t_a, F)
            ours = np.asarray(final_state(model, sched, t_a))
            ref = np.asarray(final_state(model, sched, t_a, num_steps=8 * N))
            assert np.abs(ours - ref).max() <= 1e-4, (F, N)


def test_norm_conserved():
    model = _model(6, 3)
    ev = _evolve.evolve(model, dwave_like_schedule(), 1.0, num_steps=2000)
    norm = float(jnp.sum(jnp.abs(ev.amplitudes) ** 2))
    assert abs(norm - 1) < 1e-4  # float32 rounding over 6000 substeps
    with jax.enable_x64(True):
        ev = _evolve.evolve(_model(6, 3, dtype=np.float64), dwave_like_schedule(), 1.0,
                            num_steps=2000)
        assert abs(float(jnp.sum(jnp.abs(ev.amplitudes) ** 2)) - 1) < 1e-12


def test_zero_and_short_anneal_give_uniform():
    model = _model(5, 4)
    p0 = np.asarray(output_distribution(model, "dwave_like", 0.0))
    np.testing.assert_allclose(p0, 1 / 32, atol=1e-7)
    p = np.asarray(output_distribution(model, "dwave_like", 1e-3))
    tv = 0.5 * np.abs(p - 1 / 32).sum()
    assert tv < 1e-3  # O(t_a^2): ~4e-5 here


def test_long_anneal_reaches_ground_state():
    # n = 4 with fields: unique ground state, minimum gap 0.247 GHz on the linear schedule
    # (checked below); t_a = 50 ns >> 1 / gap^2 leaves 6e-4 in excited states
    model = _model(4, 0)
    X, E = _hamiltonian_parts(model)
    Xd = X.toarray()
    gaps = [np.diff(np.linalg.eigvalsh(-(1 - s) / 2 * Xd + s / 2 * np.diag(E))[:2])[0]
            for s in np.linspace(0, 1, 101)]
    assert min(gaps) > 0.2
    gs, _ = exact.ground_state(model)
    gi = int(exact.state_to_index(gs, "SPIN"))
    p = np.asarray(output_distribution(model, linear_schedule(1.0, 1.0), 50.0))
    assert p[gi] > 0.999
    # and a short anneal does not
    p = np.asarray(output_distribution(model, linear_schedule(1.0, 1.0), 1.0))
    assert p[gi] < 0.5


def test_masked_variables_left_out_and_low():
    mask = np.array([True, False, True, True, False])
    model = _model(5, 5, mask=mask)
    reduced = _model(5, 5)
    keep = np.nonzero(mask)[0]
    reduced = IsingModel(h=np.asarray(reduced.h)[keep],
                         J=np.asarray(reduced.J)[np.ix_(keep, keep)], offset=0.3)
    amp = np.asarray(final_state(model, "dwave_like", 0.3, num_steps=200))
    amp_r = np.asarray(final_state(reduced, "dwave_like", 0.3, num_steps=200))
    assert _evolve.prepare(model).num_qubits == 3
    states = np.asarray(exact.enumerate_states(5, "SPIN"))
    off_low = np.any(states[:, ~mask] != -1, axis=1)
    assert np.all(amp[off_low] == 0)
    red_idx = np.asarray(exact.state_to_index(states[~off_low][:, keep], "SPIN"))
    np.testing.assert_allclose(amp[~off_low], amp_r[red_idx], atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_with_different_masks_matches_one_by_one(backend):
    base = random_dense(jax.random.key(2), 5, batch_shape=(3,))
    masks = jnp.array([[1, 1, 1, 1, 1], [1, 0, 1, 0, 1], [0, 1, 1, 1, 0]], bool)
    model = base.replace(mask=masks)
    p = np.asarray(output_distribution(model, "linear", 0.8, num_steps=100, backend=backend))
    assert p.shape == (3, 32)
    for b in range(3):
        pb = np.asarray(output_distribution(model[b], "linear", 0.8, num_steps=100,
                                            backend=backend))
        # registers of 5 and 3 qubits: the same arithmetic up to float32 rounding
        np.testing.assert_allclose(p[b], pb, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k,M,steps", [(0, 6, 23), (1, 6, 23), (2, 6, 23), (5, 6, 23),
                                         (8, 6, 23), (10, 8, 120)])
def test_compiled_kernel_matches_the_jax_path(k, M, steps):
    # the same integrator in float64 on both sides: equal to rounding, for an odd and an even
    # number of qubits (the kernel rotates two qubits per pass), none, and unused qubits; the
    # last case (every qubit in use) is above the kernel's threading threshold (models shared
    # among threads)
    from isingattn._kernels import anneal

    rng = np.random.default_rng(k)
    h = rng.normal(size=(M, k))
    J = np.triu(rng.normal(size=(M, k, k)), 1)
    active = (rng.random((M, k)) < 0.7) | (k == 10)
    active[0] = True
    ka = active.sum(1)
    assert np.sum(steps * 3 * 2.0**ka * np.maximum(ka, 1)) >= anneal.THREADED_WORK or k < 10
    h, J = h * active, (J + J.transpose(0, 2, 1)) * active[:, :, None] * active[:, None, :]
    sched = dwave_like_schedule()
    with jax.enable_x64(True):
        E = _evolve.problem_energies(jnp.asarray(h), jnp.asarray(J))
        for order in (2, 4):
            args = (E, jnp.asarray(active), jnp.asarray(sched.s), jnp.asarray(sched.A),
                    jnp.asarray(sched.B), jnp.asarray(0.9), jnp.int32(steps), order)
            ours = np.asarray(_evolve._evolve_batch(*args, backend="numba"))
            ref = np.asarray(_evolve._evolve_batch(*args, backend="jax"))
            assert ours.dtype == np.complex128
            np.testing.assert_allclose(ours, ref, atol=1e-12)
    # float32 inputs: complex64 out, float64 arithmetic inside: the float64 run of the same
    # (rounded) inputs, up to the rounding of the output
    r32 = [np.asarray(x, np.float32) for x in (E, sched.s, sched.A, sched.B, 0.9)]
    ours = np.asarray(_evolve._evolve_batch(*map(jnp.asarray, r32[:1]), jnp.asarray(active),
                                            *map(jnp.asarray, r32[1:]), jnp.int32(steps), 4,
                                            backend="numba"))
    assert ours.dtype == np.complex64
    with jax.enable_x64(True):
        r64 = [jnp.asarray(x, jnp.float64) for x in r32]
        ref = np.asarray(_evolve._evolve_batch(r64[0], jnp.asarray(active), *r64[1:],
                                               jnp.int32(steps), 4, backend="jax"))
    np.testing.assert_allclose(ours, ref, atol=2e-7)



def test_each_model_runs_its_own_step_count():
    # a batch with a step count per model (skewed: the threaded kernel splits the models by
    # work, not by number) equals each model run alone with its count, on both backends, and
    # the two backends agree
    from isingattn._kernels import anneal

    M, k = 8, 10
    steps = np.array([120, 23, 64, 1, 400, 23, 23, 90], np.int32)
    rng = np.random.default_rng(7)
    h = rng.normal(size=(M, k))
    J = np.triu(rng.normal(size=(M, k, k)), 1)
    active = rng.random((M, k)) < 0.8
    active[[0, 4]] = True  # the two longest anneals on full registers: the threads' share
    ka = active.sum(1)
    assert np.sum(steps * 3 * 2.0**ka * np.maximum(ka, 1)) >= anneal.THREADED_WORK
    h, J = h * active, (J + J.transpose(0, 2, 1)) * active[:, :, None] * active[:, None, :]
    sched = dwave_like_schedule()
    with jax.enable_x64(True):
        E = _evolve.problem_energies(jnp.asarray(h), jnp.asarray(J))
        tab = (jnp.asarray(sched.s), jnp.asarray(sched.A), jnp.asarray(sched.B), jnp.asarray(0.7))
        out = {}
        for backend in ("numba", "jax"):
            out[backend] = np.asarray(_evolve._evolve_batch(E, jnp.asarray(active), *tab,
                                                            jnp.asarray(steps), 4,
                                                            backend=backend))
            for m in range(M):
                alone = np.asarray(_evolve._evolve_batch(E[m:m + 1], jnp.asarray(active[m:m + 1]),
                                                         *tab, jnp.int32(steps[m]), 4,
                                                         backend=backend))
                np.testing.assert_allclose(out[backend][m], alone[0], atol=1e-12)
        np.testing.assert_allclose(out["numba"], out["jax"], atol=1e-12)
        with pytest.raises(ValueError, match=r"num_steps must be a scalar or \(M,\)"):
            anneal.evolve_states(E, jnp.asarray(active), *tab, jnp.ones(3, jnp.int32), 4)



def test_models_evolved_side_by_side_equal_each_alone():
    # models that share a count and a register size are evolved in groups of up to
    # anneal.GROUP, interleaved: groups of 1 to 11 models (a full group and a partial one),
    # registers of 0 to 5 active qubits, odd and even: each model's state is the one it has
    # alone, and the JAX path's
    from isingattn._kernels import anneal

    rng = np.random.default_rng(11)
    M, k = 48, 5
    active = np.ones((M, k), bool)
    sizes = rng.choice([0, 1, 2, 3, 3, 4, 5, 5, 5], size=M)
    for m in range(M):
        active[m, rng.permutation(k)[sizes[m]:]] = False
    steps = rng.choice([30, 30, 30, 41], size=M).astype(np.int32)
    assert max(np.unique(np.stack([steps, sizes]), axis=1, return_counts=True)[1]) > anneal.GROUP
    h = rng.normal(size=(M, k)) * active
    J = np.triu(rng.normal(size=(M, k, k)), 1)
    J = (J + J.transpose(0, 2, 1)) * active[:, :, None] * active[:, None, :]
    sched = linear_schedule()
    with jax.enable_x64(True):
        E = _evolve.problem_energies(jnp.asarray(h), jnp.asarray(J))
        tab = (jnp.asarray(sched.s), jnp.asarray(sched.A), jnp.asarray(sched.B), jnp.asarray(0.6))
        both = np.asarray(_evolve._evolve_batch(E, jnp.asarray(active), *tab, jnp.asarray(steps),
                                                2, backend="numba"))
        ref = np.asarray(_evolve._evolve_batch(E, jnp.asarray(active), *tab, jnp.asarray(steps),
                                               2, backend="jax"))
        np.testing.assert_allclose(both, ref, atol=1e-12)
        for m in range(M):
            alone = np.asarray(_evolve._evolve_batch(E[m:m + 1], jnp.asarray(active[m:m + 1]),
                                                     *tab, jnp.int32(steps[m]), 2,
                                                     backend="numba"))
            np.testing.assert_allclose(both[m], alone[0], atol=1e-13)


def test_automatic_counts_are_per_model():
    # a weak and a strong model in one batch: each gets the count of the step rule for its own
    # flip scale (the weak one does not run the strong one's steps), outside and inside jit,
    # and its output is the one it has alone
    from isingattn.quantum import default_num_steps, sample_traced
    from isingattn.samplers import DiabaticAnnealingSampler

    weak, strong = _model(4, 1, scale=0.3), _model(4, 2, scale=6.0)
    batch = IsingModel(h=jnp.stack([weak.h, strong.h]), J=jnp.stack([weak.J, strong.J]))
    sched = dwave_like_schedule()
    ev = _evolve.evolve(batch, sched, 2.0)
    want = [default_num_steps(sched, 2.0, float(f)) for f in
            np.max(np.abs(np.asarray(batch.h)) + np.sum(np.abs(np.asarray(batch.J)), -1), -1)]
    assert want[0] < want[1]
    np.testing.assert_array_equal(ev.num_steps, want)
    for b, m in enumerate((weak, strong)):
        alone = _evolve.evolve(m, sched, 2.0)
        assert alone.num_steps.tolist() == [want[b]]
        np.testing.assert_allclose(np.asarray(output_distribution(batch, sched, 2.0))[b],
                                   np.asarray(output_distribution(m, sched, 2.0)),
                                   rtol=1e-5, atol=1e-6)
    _, traced = jax.jit(lambda mo: sample_traced(mo, jax.random.key(0), 4, sched, 2.0))(batch)
    np.testing.assert_array_equal(np.asarray(traced), want)
    info = DiabaticAnnealingSampler(sched, 2.0).sample(batch, jax.random.key(0), 4).info
    np.testing.assert_array_equal(info["num_steps"], want)
    with pytest.raises(ValueError, match=r"num_steps must be an integer in \[1, 2147483647\] "
                       r"or one per model \(2\); got int64 of shape \(2,\) from 0 to 10"):
        _evolve.evolve(batch, sched, 2.0, num_steps=np.array([10, 0]))
    with pytest.raises(ValueError, match=r"from 10 to 2147483648"):
        _evolve.evolve(batch, sched, 2.0, num_steps=np.array([10, 2**31]))


def test_min_steps_raises_the_automatic_counts_alike_on_the_host_and_traced():
    # min_steps above the weak model's count and below the strong one's: the weak model runs
    # min_steps, the strong one its own count, in evolve, in the sampler on concrete models and
    # in the sampler under jit (the traced count)
    from isingattn.samplers import DiabaticAnnealingSampler

    weak, strong = _model(4, 1, scale=0.3), _model(4, 2, scale=6.0)
    batch = IsingModel(h=jnp.stack([weak.h, strong.h]), J=jnp.stack([weak.J, strong.J]))
    sched = dwave_like_schedule()
    plain = _evolve.evolve(batch, sched, 2.0).num_steps
    floor = int(plain[0]) * 3
    assert plain[0] < floor < plain[1]
    ev = _evolve.evolve(batch, sched, 2.0, min_steps=floor)
    np.testing.assert_array_equal(ev.num_steps, [floor, plain[1]])
    sampler = DiabaticAnnealingSampler(sched, 2.0, min_steps=floor)
    np.testing.assert_array_equal(sampler.sample(batch, jax.random.key(0), 4).info["num_steps"],
                                  [floor, plain[1]])
    traced = jax.jit(lambda mo: sampler.sample(mo, jax.random.key(0), 4).info["num_steps"])(batch)
    np.testing.assert_array_equal(np.asarray(traced), [floor, plain[1]])
    with pytest.raises(ValueError, match="min_steps must be"):
        _evolve.evolve(batch, sched, 2.0, min_steps=0)


def test_backend_choice_errors():
    m = _model(3, 0)
    with pytest.raises(ValueError, match=r"backend must be one of .*'auto', 'numba', 'jax'"):
        output_distribution(m, "linear", 1.0, backend="fortran")


def test_binary_and_sparse_models():
    spin = chain(5, J=0.7, h=0.2)
    p_sparse = np.asarray(output_distribution(spin, "linear", 0.7))
    p_dense = np.asarray(output_distribution(spin.to_dense(), "linear", 0.7))
    np.testing.assert_allclose(p_sparse, p_dense, atol=1e-6)
    # BINARY: same table layout (bit 1 = +1 = 1), same physics up to a constant in H_P
    binary = spin.to_dense().to_vartype("BINARY")
    np.testing.assert_allclose(np.asarray(output_distribution(binary, "linear", 0.7)),
                               p_dense, atol=1e-6)


def test_beta_and_offset_do_not_matter():
    m = _model(4, 6)
    p1 = np.asarray(output_distribution(m, "linear", 1.0))
    p2 = np.asarray(output_distribution(m.replace(beta=3.0, offset=-2.0), "linear", 1.0))
    np.testing.assert_allclose(p1, p2, atol=1e-6)


def test_bad_input():
    big = IsingModel(h=np.zeros(MAX_QUBITS + 1), J=np.zeros((MAX_QUBITS + 1,) * 2))
    with pytest.raises(ValueError, match=rf"at most {MAX_QUBITS} active .* has 23 active"):
        output_distribution(big, "linear", 1.0)
    m = _model(3, 0)
    with pytest.raises(ValueError, match="annealing_time must be finite and >= 0"):
        output_distribution(m, "linear", -1.0)
    with pytest.raises(ValueError, match="annealing_time"):
        output_distribution(m, "linear", float("nan"))
    with pytest.raises(ValueError, match="order must be one of"):
        output_distribution(m, "linear", 1.0, order=3)
    with pytest.raises(ValueError, match="num_steps must be an integer >= 1"):
        output_distribution(m, "linear", 1.0, num_steps=0)
    with pytest.raises(ValueError, match="schedule must be"):
        output_distribution(m, "nonsense", 1.0)
    with pytest.raises(ValueError, match="tolerance must be"):
        output_distribution(m, "linear", 1.0, tolerance=0.0)
    # counts the kernels cannot hold (int32) are refused, not wrapped to a negative count
    with pytest.raises(ValueError, match=r"num_steps must be at most 2147483647; got 2147483648"):
        output_distribution(m, "linear", 1.0, num_steps=2**31)
    with pytest.raises(ValueError, match=r"automatic step count for annealing_time=2000.0 ns and "
                       r"tolerance=1e-06 is \d+ .* beyond 2147483647"):
        output_distribution(m.replace(h=1e6 * m.h), "dwave_like", 2000.0, tolerance=1e-6)
    # many variables but few active: simulated on the active ones only
    mask = np.zeros(30, bool)
    mask[:3] = True
    wide = IsingModel(h=np.ones(30), J=np.zeros((30, 30)), mask=mask)
    assert _evolve.prepare(wide).num_qubits == 3
    with pytest.raises(ValueError, match="n <= 24"):
        output_distribution(wide, "linear", 1.0)


def test_no_recompile_for_new_times_steps_or_schedules():
    m = _model(4, 7)
    output_distribution(m, "linear", 0.5, num_steps=70)
    before = _evolve._evolve_batch._cache_size()
    output_distribution(m, "linear", 1.5, num_steps=90)
    output_distribution(m.replace(h=np.ones(4, np.float32)), linear_schedule(2.0, 0.5), 0.7)
    assert _evolve._evolve_batch._cache_size() == before
