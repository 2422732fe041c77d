"""The compiled transfer-matrix kernel (``backend="numba"``, :mod:`isingattn._kernels.chain`)
against the log-domain JAX recursions (``backend="jax"``) in float64, and against enumeration;
its fallback where float64's range is not enough; derivatives through it; its errors.

Deterministic comparisons; tolerances set by float64 rounding (1e-12) unless marked.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn import exact
from isingattn._kernels import chain as chain_kernel
from isingattn.models import chain, square_lattice

from .test_transfer import MASK, _close, banded

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="CPU kernels")


def _both(m, **kw):
    got = exact.transfer_moments(m, correlations=False, backend="numba", **kw)
    ref = exact.transfer_moments(m, correlations=False, backend="jax", **kw)
    return got, ref


def _models64():
    rng = np.random.default_rng(4)
    mask = np.stack([MASK, np.ones_like(MASK), MASK[::-1]])
    yield banded(1, 11, 3, batch=(3,), vartype="SPIN", mask=mask, dtype=np.float64)
    yield banded(2, 11, 2, batch=(3,), vartype="BINARY", mask=mask, sparse=True,
                 dtype=np.float64)
    yield banded(3, 11, 5, batch=(3,), vartype="SPIN", shared_J=True, dtype=np.float64)
    # conditioning: a periodic chain (K = 1) and a lattice with wrap-around bonds (K > 1)
    yield chain(12, J=rng.normal(size=12), h=rng.normal(size=12), periodic=True, beta=0.9)
    yield square_lattice((3, 4), J=rng.normal(size=24), h=0.2, periodic=True, beta=0.5,
                         vartype="BINARY")


def test_kernel_equals_recursions_float64():
    with jax.enable_x64(True):
        for m in _models64():
            assert m.dtype == jnp.float64
            got, ref = _both(m)
            assert got.log_partition.dtype == jnp.float64
            _close(got.log_partition, ref.log_partition, 1e-12)
            _close(got.marginals, ref.marginals, 1e-12)
            _close(got.mean_energy, ref.mean_energy, 1e-11)
            _close(exact.transfer_log_partition(m, backend="numba"), ref.log_partition, 1e-12)
            _close(exact.transfer_marginals(m, backend="numba"), ref.marginals, 1e-12)
            # and enumeration, the outside reference
            enum = exact.moments(m)
            _close(got.log_partition, enum.log_partition, 1e-11)
            _close(got.marginals, enum.marginals, 1e-11)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 9, 10, 17, 26])
def test_every_segment_layout(n):
    # the backward pass recomputes the forward messages a segment (k = isqrt(n - 1) + 1
    # positions) at a time from checkpoints: lengths at and around k^2, k(k + 1), k^2 + 1
    with jax.enable_x64(True):
        r = min(3, max(n - 1, 0))
        m = banded(n, n, r, vartype="SPIN", beta=1.1, dtype=np.float64)
        got, ref = _both(m, bandwidth=r if n > 1 else None)
        _close(got.log_partition, ref.log_partition, 1e-12)
        _close(got.marginals, ref.marginals, 1e-12)
        _close(got.mean_energy, ref.mean_energy, 1e-11)


def test_float32_models_keep_their_dtype():
    m32 = banded(5, 40, 4, batch=(2,), vartype="SPIN", beta=1.0)
    got = exact.transfer_moments(m32, correlations=False, backend="numba")
    assert got.marginals.dtype == jnp.float32
    with jax.enable_x64(True):
        m64 = m32.replace(h=m32.h.astype(jnp.float64), J=m32.J.astype(jnp.float64),
                          beta=jnp.float64(1.0), offset=jnp.float64(0.25))
        ref = exact.transfer_moments(m64, correlations=False, backend="jax")
    # the bit form (fields, couplings times beta) is built in float32; the kernel's float64
    # recursions on it: within the float32 rounding of those inputs
    _close(got.log_partition, ref.log_partition, 2e-6)
    _close(got.marginals, ref.marginals, 2e-6)


def test_near_the_range_limit_and_beyond_it():
    # couplings strong enough that messages span e^(+-hundreds): just inside CUT_LIMIT the
    # kernel runs and is exact; past it the log-domain recursions run instead
    with jax.enable_x64(True):
        for beta, safe in ((9.0, True), (40.0, False)):
            m = banded(8, 30, 2, vartype="SPIN", beta=beta, dtype=np.float64)
            r = exact.bandwidth(m)
            band = exact._transfer._band_form(m, r, 0)
            assert bool(chain_kernel.chain_safe(band.win)) is safe
            got, ref = _both(m)
            assert np.all(np.isfinite(np.asarray(got.marginals)))
            _close(got.log_partition, ref.log_partition, 1e-12)
            _close(got.marginals, ref.marginals, 1e-9)
            _close(got.mean_energy, ref.mean_energy, 1e-10)


def test_derivatives_are_those_of_the_recursions():
    with jax.enable_x64(True):
        mask = np.array([1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 1], bool)
        m = banded(9, 12, 2, vartype="SPIN", beta=0.8, mask=mask, dtype=np.float64)

        def lz(h, backend):
            return exact.transfer_log_partition(m.replace(h=h), bandwidth=2, backend=backend)

        g = jax.grad(lz)(m.h, "numba")
        _close(g, jax.grad(lz)(m.h, "jax"), 1e-12)
        _close(g, 0.8 * np.where(m.mask, exact.moments(m).marginals, 0), 1e-11)
        t = jnp.linspace(-1, 1, 12)
        _, d = jax.jvp(lambda h: lz(h, "numba"), (m.h,), (t,))
        _close(d, jnp.dot(g, t), 1e-12)

        def marg(h, backend):
            return exact.transfer_marginals(m.replace(h=h), bandwidth=2, backend=backend)

        _close(jax.jacobian(marg)(m.h, "numba"), jax.jacobian(marg)(m.h, "jax"), 1e-12)


def test_threads_jit_and_vmap():
    # 16 models x 300 positions x 2^8 windows: past the kernel's threading threshold
    with jax.enable_x64(True):
        m = banded(6, 300, 8, batch=(16,), vartype="BINARY", beta=0.4, dtype=np.float64)
        got, ref = _both(m)
        _close(got.log_partition, ref.log_partition, 1e-12)
        _close(got.marginals, ref.marginals, 1e-12)
        small = banded(7, 10, 2, vartype="SPIN", dtype=np.float64)
        hs = jnp.asarray(np.random.default_rng(0).normal(size=(4, 10)))

        def f(h, backend):
            return exact.transfer_marginals(small.replace(h=h), bandwidth=2, backend=backend)

        _close(jax.jit(jax.vmap(lambda h: f(h, "numba")))(hs),
               jax.vmap(lambda h: f(h, "jax"))(hs), 1e-12)


def test_clear_errors():
    m = banded(1, 6, 1)
    with pytest.raises(ValueError, match="backend must be one of"):
        exact.transfer_log_partition(m, backend="gpu")
    a = jnp.zeros((1, 1, 5))
    with pytest.raises(ValueError, match=r"win \(B, n, r\)"):
        chain_kernel.chain_moments(a, a, jnp.zeros((1, 4, 2)), marginals=True, energy=False)
    with pytest.raises(ValueError, match="float32 or float64"):
        chain_kernel.chain_moments(a.astype(jnp.int32), a, jnp.zeros((1, 5, 2)),
                                   marginals=False, energy=False)
    with pytest.raises(ValueError, match="energy=True needs marginals=True"):
        chain_kernel.chain_moments(a, a, jnp.zeros((1, 5, 2)), marginals=False, energy=True)
