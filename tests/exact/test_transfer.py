"""Transfer-matrix inference against enumeration, closed forms of the 1D Ising chain, the
fluctuation identities for gradients, and chi^2 goodness of fit for its exact samples.

Deterministic comparisons use tolerances set by the float precision (float32 unless marked).
Each chi^2 assertion has false-failure rate ALPHA (tests/_stats.py) for a random key; the keys
are fixed, so a pass is reproducible.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import exact
from isingattn.models import IsingModel, SparseIsingModel, chain, square_lattice
from isingattn.samplers import TransferMatrixSampler

from .._stats import assert_chi2_matches


def banded(seed, n, r, *, batch=(), vartype="SPIN", beta=0.7, mask=None, sparse=False,
           dtype=np.float32, shared_J=False):
    """Random model with couplings only for 0 < |i - j| <= r."""
    rng = np.random.default_rng(seed)
    jb = () if shared_J else batch
    J = rng.normal(size=jb + (n, n))
    i, j = np.indices((n, n))
    J = np.triu(np.where(np.abs(i - j) <= r, J, 0), 1)
    J = (J + np.swapaxes(J, -1, -2)).astype(dtype)
    h = rng.normal(size=batch + (n,)).astype(dtype)
    m = IsingModel(h, J, beta=beta, vartype=vartype, mask=mask, offset=0.25)
    return m.to_sparse() if sparse else m


def _close(a, b, tol):
    np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), rtol=tol, atol=tol)


MASK = np.array([1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1], bool)


@pytest.mark.parametrize(
    "r,vartype,sparse",
    [(0, "SPIN", False), (1, "BINARY", True), (2, "SPIN", True), (3, "BINARY", False),
     (5, "SPIN", False)],
)
def test_equals_enumeration(r, vartype, sparse):
    # batched, masked (the mask varies over the batch), shared J for the dense cases
    mask = np.stack([MASK, np.ones_like(MASK), MASK[::-1]])
    m = banded(r, 11, r, batch=(3,), vartype=vartype, mask=mask, sparse=sparse,
               shared_J=not sparse)
    assert exact.bandwidth(m) == r
    ref = exact.moments(m)
    got = exact.transfer_moments(m)
    _close(got.log_partition, ref.log_partition, 2e-5)
    _close(got.marginals, ref.marginals, 2e-5)
    _close(got.correlations, ref.correlations, 2e-5)
    _close(got.mean_energy, ref.mean_energy, 5e-5)
    # masked variables sit at the low value
    low = m.vartype.low
    assert np.all(np.asarray(got.marginals)[~mask] == low)
    if r != 2:
        return  # (the checks below compile more programs; one case suffices)
    # the band form holds the same numbers, zero past the end
    band = exact.transfer_correlations(m, max_distance=3)
    full = np.asarray(ref.correlations)
    for k in range(4):
        _close(band[..., : 11 - k, k], np.diagonal(full, offset=k, axis1=-2, axis2=-1), 2e-5)
        assert np.all(np.asarray(band)[..., 11 - k :, k] == 0)


def test_float64_equals_enumeration_tightly():
    with jax.enable_x64(True):
        m = banded(7, 12, 3, batch=(2,), vartype="SPIN", beta=1.3, dtype=np.float64)
        ref = exact.moments(m)
        got = exact.transfer_moments(m)
        assert got.log_partition.dtype == jnp.float64
        _close(got.log_partition, ref.log_partition, 1e-12)
        _close(got.marginals, ref.marginals, 1e-12)
        _close(got.correlations, ref.correlations, 1e-12)
        _close(got.mean_energy, ref.mean_energy, 1e-11)


def test_attention_shape_shared_band_with_causal_masks():
    # one banded J shared by 3 queries, BINARY, causal masks (query q sees keys 0..q+7)
    n, r = 11, 2
    m = banded(11, n, r, batch=(3,), vartype="BINARY", beta=1.0, shared_J=True)
    causal = np.arange(n)[None, :] <= np.arange(3)[:, None] + 7
    m = m.replace(mask=jnp.asarray(causal))
    _close(exact.transfer_marginals(m, bandwidth=r), exact.moments(m).marginals, 2e-5)


def test_periodic_and_wraparound_by_conditioning_equal_enumeration():
    rng = np.random.default_rng(3)
    pc = chain(12, J=rng.normal(size=12), h=rng.normal(size=12), periodic=True, beta=0.9)
    lat = square_lattice((3, 4), J=rng.normal(size=24), h=0.2, periodic=True, beta=0.5,
                         vartype="BINARY")
    for m in (pc, lat):
        ref = exact.moments(m)
        got = exact.transfer_moments(m)
        _close(got.log_partition, ref.log_partition, 2e-5)
        _close(got.marginals, ref.marginals, 2e-5)
        _close(got.correlations, ref.correlations, 2e-5)
        _close(got.mean_energy, ref.mean_energy, 5e-5)


def test_long_open_chain_closed_form():
    n, bJ = 1000, 0.5
    m = chain(n, J=1.0, beta=bJ)
    mo = exact.transfer_moments(m, max_distance=6)
    _close(mo.log_partition, np.log(2) + (n - 1) * np.log(2 * np.cosh(bJ)), 1e-6)
    t = np.tanh(bJ) ** np.arange(7)
    _close(mo.correlations[0], t, 2e-6)  # <s_0 s_d> = tanh(beta J)^d
    _close(mo.correlations[500], t, 2e-6)
    _close(mo.marginals, np.zeros(n), 1e-6)
    _close(mo.mean_energy, -(n - 1) * np.tanh(bJ), 1e-5)


def test_very_long_chain_log_partition_float32():
    # n = 10^5 in float32: the per-step shifts are summed pairwise, so log Z keeps ~1e-7
    n, bJ = 100_000, 0.5
    lz = exact.transfer_log_partition(chain(n, J=bJ))
    _close(lz, np.log(2) + (n - 1) * np.log(2 * np.cosh(bJ)), 1e-6)


def test_periodic_chain_closed_form_with_field():
    n, b, J, h = 1000, 0.6, 0.7, 0.3
    m = chain(n, J=J, h=h, periodic=True, beta=b)
    root = np.sqrt(np.exp(2 * b * J) * np.sinh(b * h) ** 2 + np.exp(-2 * b * J))
    lp, lm = np.exp(b * J) * np.cosh(b * h) + root, np.exp(b * J) * np.cosh(b * h) - root
    mo = exact.transfer_moments(m, correlations=False)
    _close(mo.log_partition, n * np.log(lp) + np.log1p((lm / lp) ** n), 1e-6)
    # magnetisation of the ring (|lm / lp|^n is ~1e-300 here: the infinite-chain value)
    mag = np.sinh(b * h) / np.sqrt(np.sinh(b * h) ** 2 + np.exp(-4 * b * J))
    _close(mo.marginals, np.full(n, mag), 2e-5)


def test_short_periodic_chain_correlations_closed_form():
    # at h = 0: <s_0 s_d> = (t^d + t^(n-d)) / (1 + t^n), t = tanh(beta J); finite-size visible
    n, bJ = 16, 0.9
    m = chain(n, J=bJ, periodic=True)
    t = np.tanh(bJ)
    d = np.arange(n)
    mo = exact.transfer_moments(m)
    _close(mo.correlations[0], (t**d + t ** (n - d)) / (1 + t**n), 2e-6)
    _close(mo.log_partition, n * np.log(2 * np.cosh(bJ)) + np.log1p(t**n), 1e-6)


def test_low_temperature_is_stable():
    # beta = 50: weights span e^(+-1000); log-domain recursions give the ground-state limit
    m = banded(5, 12, 2, vartype="SPIN", beta=50.0)
    ref = exact.moments(m)
    got = exact.transfer_moments(m)
    assert np.all(np.isfinite(np.asarray(got.marginals)))
    _close(got.log_partition, ref.log_partition, 1e-5)
    _close(got.marginals, ref.marginals, 1e-4)
    g = jax.grad(lambda h: exact.transfer_log_partition(m.replace(h=h)))(m.h)
    assert np.all(np.isfinite(np.asarray(g)))
    _close(g, 50.0 * np.asarray(ref.marginals), 5e-3)


def test_gradients_match_fluctuation_identities():
    # d log Z / d h_i = beta <x_i>; d log Z / d J_ij = beta <x_i x_j> / 2 (dense, both entries)
    # and beta <x_u x_v> per sparse edge; d <x_i> / d h_k = beta Cov(x_i, x_k)
    mask = np.array([1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1], bool)
    m = banded(9, 12, 2, vartype="SPIN", beta=0.8, mask=mask)
    ref = exact.moments(m)
    beta = 0.8
    gh, gJ = jax.grad(
        lambda h, J: exact.transfer_log_partition(m.replace(h=h, J=J), bandwidth=2), (0, 1)
    )(m.h, m.J)
    _close(gh, beta * np.where(m.mask, ref.marginals, 0), 2e-5)
    C = np.asarray(ref.correlations)
    dist = np.abs(np.subtract.outer(np.arange(12), np.arange(12)))
    active = np.outer(m.mask, m.mask) & (dist <= 2)
    np.fill_diagonal(active, False)
    _close(gJ, np.where(active, beta * C / 2, 0), 2e-5)
    sp = m.to_sparse()
    gE = jax.grad(lambda J: exact.transfer_log_partition(sp.replace(J=J)))(sp.J)
    u, v = sp.edges[:, 0], sp.edges[:, 1]
    _close(gE, np.where(active[u, v], beta * C[u, v], 0), 2e-5)
    jac = jax.jacobian(lambda h: exact.transfer_marginals(m.replace(h=h)))(m.h)
    cov = beta * (C - np.outer(ref.marginals, ref.marginals))
    act = np.outer(m.mask, m.mask)
    _close(jac, np.where(act, cov, 0), 5e-5)


def test_gradient_of_correlations_matches_finite_differences():
    with jax.enable_x64(True):
        m = chain(7, J=np.linspace(-0.8, 1.1, 7), h=np.linspace(-0.5, 0.4, 7), periodic=True,
                  beta=0.9)
        w = np.random.default_rng(0).normal(size=(7, 7))

        def f(J):
            return jnp.sum(w * exact.transfer_correlations(m.replace(J=J)))

        g = np.asarray(jax.grad(f)(m.J))
        eps = 1e-6
        fd = [
            (f(m.J.at[e].add(eps)) - f(m.J.at[e].add(-eps))) / (2 * eps) for e in range(7)
        ]
        _close(g, fd, 1e-7)


def test_jit_with_traced_couplings():
    m = banded(2, 11, 2, batch=(3,), vartype="BINARY")
    f = jax.jit(lambda h, J: exact.transfer_marginals(m.replace(h=h, J=J), bandwidth=2))
    _close(f(m.h, m.J), exact.moments(m).marginals, 2e-5)
    with pytest.raises(ValueError, match="pass bandwidth=r"):
        jax.jit(lambda J: exact.transfer_log_partition(m.replace(J=J)))(m.J)


def _periodic_for_sampling():
    return chain(8, J=0.7, h=np.linspace(-0.4, 0.6, 8), periodic=True, beta=0.9)


@pytest.mark.parametrize("case", ["banded-binary-masked", "periodic-spin"])
def test_samples_pass_chi2(case):
    if case == "banded-binary-masked":
        mask = np.array([[1, 1, 1, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 0, 1]], bool)
        m = banded(4, 8, 2, batch=(2,), vartype="BINARY", beta=0.8, mask=mask)
    else:
        m = _periodic_for_sampling()
    x = exact.transfer_sample(m, jax.random.key(11), 20000)
    assert x.shape == m.batch_shape + (20000, 8)
    assert x.dtype == m.dtype
    flat = np.asarray(x).reshape((-1, 20000, 8))
    for b in range(flat.shape[0]):
        mb = m[b] if m.batch_shape else m
        assert np.all(flat[b][:, ~np.asarray(mb.mask)] == mb.vartype.low)
        assert_chi2_matches(flat[b], mb)


def test_same_key_same_samples_different_keys_differ():
    m = _periodic_for_sampling()  # same shapes as above: no new compilation
    a = exact.transfer_sample(m, jax.random.key(11), 20000)
    b = exact.transfer_sample(m, jax.random.key(11), 20000)
    c = exact.transfer_sample(m, jax.random.key(12), 20000)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_sampler_backend_reports_plan_and_log_partition():
    n, bJ = 500, 0.4
    m = chain(n, J=bJ, periodic=True, beta=1.0)
    s = TransferMatrixSampler().sample(m, jax.random.key(3), 4, num_chains=2)
    assert s.spins.shape == (2, 4, n)
    assert s.info["bandwidth"] == 1 and s.info["conditioned"] == 1
    t = np.tanh(bJ)
    _close(s.info["log_partition"], n * np.log(2 * np.cosh(bJ)) + np.log1p(t**n), 1e-6)
    with pytest.raises(TypeError, match="unknown option"):
        TransferMatrixSampler().sample(m, jax.random.key(3), 4, num_sweeps=3)


def test_bandwidth():
    assert exact.bandwidth(chain(10)) == 1
    assert exact.bandwidth(chain(10, periodic=True)) == 9
    assert exact.bandwidth(chain(10, dense=True)) == 1
    assert exact.bandwidth(square_lattice((3, 4), periodic=False)) == 4
    assert exact.bandwidth(banded(0, 9, 3)) == 3
    assert exact.bandwidth(IsingModel(np.zeros(5), np.zeros((5, 5)))) == 0
    # a stored edge with coupling 0 does not count
    sp = SparseIsingModel(np.zeros(6), [(0, 1), (0, 5)], [1.0, 0.0])
    assert exact.bandwidth(sp) == 1


def test_clear_errors():
    m = banded(1, 10, 2)
    big = IsingModel(np.zeros(30), np.ones((30, 30)) - np.eye(30))
    with pytest.raises(ValueError, match=r"2\^\(r \+ K\).*MAX_TRANSFER_LOG2_STATES.*sampler"):
        exact.transfer_log_partition(big)
    with pytest.raises(TypeError, match="IsingModel or SparseIsingModel"):
        exact.transfer_marginals(np.zeros(3))
    with pytest.raises(ValueError, match=r"bandwidth must be an integer in 0\.\.n-1 = 0\.\.9"):
        exact.transfer_log_partition(m, bandwidth=10)
    with pytest.raises(ValueError, match="bandwidth must be"):
        exact.transfer_log_partition(m, bandwidth=-1)
    with pytest.raises(TypeError, match="bandwidth must be None or an integer"):
        exact.transfer_log_partition(m, bandwidth=1.5)
    with pytest.raises(ValueError, match="max_distance must be"):
        exact.transfer_correlations(m, max_distance=-2)
    with pytest.raises(ValueError, match="max_distance=d"):
        exact.transfer_correlations(chain(exact.MAX_TRANSFER_FULL_CORRELATIONS_N + 1))
    with pytest.raises(ValueError, match="num_samples must be an integer >= 1"):
        exact.transfer_sample(m, jax.random.key(0), 0)
    with pytest.raises(TypeError, match="key must be a single JAX PRNG key"):
        exact.transfer_sample(m, 0, 5)
