"""boltzmann_attention: limits, agreement of the inference methods, gradients, bad input.

Deterministic checks compare against closed forms or exact enumeration in float64. Statistical
checks (sampled methods) use fixed keys; each states its false-failure rate (the chance that a
correct implementation fails for a random key), Bonferroni-corrected over the entries it tests.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from isingattn import IsingModel, exact
from isingattn.attention import (
    MAX_EXACT_KEYS,
    Couplings,
    MeanField,
    Transfer,
    boltzmann_attention,
    sampled,
)
from isingattn.samplers import ExactSampler, GibbsSampler

#: Total false-failure rate allowed to each statistical test (split over its entries).
TEST_ALPHA = 1e-3


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _qkv(B=2, T=4, N=2, K=1, H=3, S=6, seed=0):
    k = jax.random.split(jax.random.key(seed), 3)
    q = jax.random.normal(k[0], (B, T, N, H))
    kk = jax.random.normal(k[1], (B, S, K, H))
    v = jax.random.normal(k[2], (B, S, K, H))
    return q, kk, v


def _banded(N=2, r=2, strength=0.8, seed=5, kind="learned"):
    w = strength * jax.random.normal(jax.random.key(seed), (N, r))
    c = Couplings.learned(N, "banded", bandwidth=r)
    return c.replace(w) if kind == "learned" else Couplings.fixed(w, "banded")


def _z(alpha_total, m):
    return float(scipy.stats.norm.isf(alpha_total / (2 * m)))


# --------------------------------------------------------------------------------------------
# softmax readout == jax.nn.dot_product_attention


@pytest.mark.parametrize("case", ["plain", "causal", "mask_bias", "grouped", "lengths"])
def test_softmax_readout_equals_dot_product_attention(case):
    q, k, v = _qkv(B=2, T=5, N=4, K=2 if case == "grouped" else 4, H=3, S=5)
    kw = {}
    if case == "causal":
        kw["is_causal"] = True
    if case == "mask_bias":
        kw["mask"] = jax.random.bernoulli(jax.random.key(1), 0.7, (2, 1, 5, 5))
        kw["bias"] = jax.random.normal(jax.random.key(2), (1, 4, 5, 5))
    if case == "grouped":
        kw["is_causal"] = True
    if case == "lengths":
        kw["query_seq_lengths"] = jnp.array([3, 5], jnp.int32)
        kw["key_value_seq_lengths"] = jnp.array([2, 4], jnp.int32)
    ours = boltzmann_attention(q, k, v, readout="softmax", **kw)
    ref = jax.nn.dot_product_attention(q, k, v, **kw)
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-12)


def test_softmax_readout_float32_matches_to_float_precision():
    with jax.enable_x64(False):
        q, k, v = (x.astype(jnp.float32) for x in _qkv(T=7, S=7, N=2, K=2))
        ours = boltzmann_attention(q, k, v, readout="softmax", is_causal=True)
        ref = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        np.testing.assert_allclose(ours, ref, rtol=2e-6, atol=2e-6)


# --------------------------------------------------------------------------------------------
# J = 0: normalized sigmoid attention; b -> -inf: softmax


def _sigmoid_attention(q, k, v, b, beta, mask):
    G = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, G, 2), jnp.repeat(v, G, 2)
    logits = jnp.einsum("btnh,bsnh->bnts", q, k) / np.sqrt(q.shape[-1]) + b
    w = jnp.where(mask, jax.nn.sigmoid(beta * logits), 0.0)
    w = w / w.sum(-1, keepdims=True)
    return jnp.einsum("bnts,bsnh->btnh", w, v)


@pytest.mark.parametrize("method", ["exact", "transfer", "mean_field"])
def test_zero_couplings_is_normalized_sigmoid_attention(method):
    q, k, v = _qkv(N=2, K=1)
    mask = jnp.tril(jnp.ones((4, 6), bool))[None, None]
    ref = _sigmoid_attention(q, k, v, -0.3, 1.7, mask)
    # Couplings.fixed(0) goes through the full inference path (not the J = 0 shortcut).
    zero = Couplings.fixed(jnp.zeros((2, 2)), "banded")
    for c in (None, zero):
        out = boltzmann_attention(q, k, v, is_causal=True, couplings=c, beta=1.7,
                                  chemical_potential=-0.3, method=method)
        np.testing.assert_allclose(out, ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("couplings,method", [(None, "exact"), ("banded", "exact"),
                                              ("banded", "transfer")])
def test_bias_to_minus_infinity_converges_to_softmax(couplings, method):
    """The deviation from softmax(beta q.k / sqrt(d)) falls like exp(beta b): its log drops by
    beta per unit of b (first-order term: patterns with two keys, weight e^(2 beta b))."""
    q, k, v = _qkv(N=2, K=2, T=3, S=5)
    beta = 0.8
    c = None if couplings is None else _banded(strength=0.5)
    ref = jax.nn.dot_product_attention(q, k, v, scale=beta / np.sqrt(q.shape[-1]))
    bs = np.array([-6.0, -10.0, -14.0, -18.0])
    errs = []
    for b in bs:
        out = boltzmann_attention(q, k, v, couplings=c, beta=beta, chemical_potential=b,
                                  method=method)
        errs.append(float(jnp.max(jnp.abs(out - ref))))
    errs = np.array(errs)
    assert np.all(np.diff(errs) < 0), errs
    slopes = np.diff(np.log(errs)) / np.diff(bs)
    np.testing.assert_allclose(slopes, beta, rtol=0.05)
    assert errs[-1] < 1e-5


@pytest.mark.parametrize("shift", [-300.0, -60.0, 0.0, 60.0, 300.0])
def test_sigmoid_row_weights_in_float32_match_float64(shift):
    """The unnormalized weights of the J = 0 and mean-field readouts, sigmoid(z_j) / max_k
    sigmoid(z_k), computed in float32 from rows where every sigmoid underflows to rows where
    it rounds to 1 (spread 30 around ``shift``), against exp(log sigmoid - max) in float64;
    the gradient of the normalized weights too. Masked keys and an all-masked row give 0."""
    from isingattn.attention._inference import _sigmoid_rows

    rng = np.random.default_rng(3)
    z = jnp.asarray(shift + 30.0 * rng.standard_normal((4, 3, 24)), jnp.float32)
    z64 = jnp.asarray(z, jnp.float64)  # the same inputs: what is measured is the function's error
    mask = rng.random(z.shape) < 0.7
    mask[0, 0] = False

    def reference(x):  # exp(log sigmoid - max) over the allowed keys, in float64
        ls = jnp.where(mask, jax.nn.log_sigmoid(x), -jnp.inf)
        mx = jnp.max(ls, -1, keepdims=True)
        return jnp.where(mask, jnp.exp(ls - jnp.where(jnp.isfinite(mx), mx, 0.0)), 0.0)

    def normalized(f, x):
        w = f(x)
        total = w.sum(-1, keepdims=True)
        return w / jnp.where(total > 0, total, 1.0)

    u = _sigmoid_rows(z, jnp.asarray(mask))
    assert u.dtype == jnp.float32
    np.testing.assert_allclose(u, reference(z64), rtol=0, atol=3e-7)
    assert np.all(np.asarray(u)[0, 0] == 0)

    ct = jnp.asarray(rng.standard_normal(z.shape))
    g = jax.grad(lambda x: jnp.sum(normalized(lambda y: _sigmoid_rows(y, mask), x) * ct))(z)
    g_ref = jax.grad(lambda x: jnp.sum(normalized(reference, x) * ct))(z64)
    live = mask.any(-1)  # the all-masked row: compared apart, ours must be exactly 0
    g, g_ref = np.asarray(g), np.asarray(g_ref)
    np.testing.assert_allclose(g[live], g_ref[live], rtol=0,
                               atol=1e-6 * max(1.0, float(np.max(np.abs(g_ref[live])))))
    assert np.all(g[~live] == 0)


def test_mean_field_in_float32_reaches_the_softmax_limit():
    """A chemical potential of -200: every marginal underflows in float32, yet the mean-field
    readout's weights stay finite and give softmax(beta q.k / sqrt(d)) (the b -> -inf limit), to
    the float32 rounding of beta (q.k / sqrt(d) + b) near -160 (spacing 1.5e-5)."""
    q, k, v = (x.astype(jnp.float32) for x in _qkv(N=2, K=2, T=3, S=5))
    ref = jax.nn.dot_product_attention(q, k, v, scale=0.8 / np.sqrt(q.shape[-1]))
    out = boltzmann_attention(q, k, v, couplings=_banded(strength=0.5), beta=0.8,
                              chemical_potential=-200.0, method=MeanField())
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_transfer_follows_exact_into_the_softmax_limit(dtype):
    """Deep negative chemical potentials, where the chains' factors exp(beta h) underflow
    (float32 below about -87): the rows past the bound of the closed-form limit and the rows
    just inside it both match enumeration (run in float64), outputs and gradients, and reach
    softmax. Before the limit path, float32 transfer was off by O(1) from b = -90 on."""
    q, k, v = (x.astype(dtype) for x in _qkv(N=2, K=1, T=5, S=7, seed=3))
    c = _banded(r=3, strength=2.0)  # strong couplings of both signs
    # softmax in float64 by hand (jax.nn.dot_product_attention is off by 1e-7 in float64)
    k64, v64 = (jnp.repeat(x.astype(jnp.float64), 2, axis=2) for x in (k, v))
    logits = jnp.einsum("btnh,bsnh->bnts", q.astype(jnp.float64), k64) / np.sqrt(q.shape[-1])
    w = jax.nn.softmax(jnp.where(jnp.tril(jnp.ones((5, 7), bool)), logits, -jnp.inf), axis=-1)
    sm = jnp.einsum("bnts,bsnh->btnh", w, v64)
    tol = 2e-5 if dtype == jnp.float32 else 1e-9

    @functools.partial(jax.jit, static_argnames="method")
    def out(method, b, q):
        return boltzmann_attention(q, k, v, couplings=c, chemical_potential=b.astype(q.dtype),
                                   method=method, is_causal=True)

    # one compilation per method and dtype for the whole grid of b
    grad = jax.jit(jax.grad(lambda q, b, method: jnp.sum(out(method, b, q) ** 2)),
                   static_argnames="method")
    # float32 bound: log 7 + log(1/eps) + 2 = 19.9 on a_max + 2 sum(c+); the b grid crosses it
    for b in (-15.0, -25.0, -40.0, -60.0, -95.0, -300.0, -800.0):
        b = jnp.float64(b)
        ref = out("exact", b, q.astype(jnp.float64))
        got = out("transfer", b, q)
        assert got.dtype == dtype
        np.testing.assert_allclose(got, ref, atol=tol, err_msg=f"b={b}")
        if b <= -60:
            np.testing.assert_allclose(got, sm, atol=tol, err_msg=f"b={b}")
        g_ref = grad(q.astype(jnp.float64), b, "exact")
        g = grad(q, b, "transfer")
        assert np.all(np.isfinite(g)), b
        np.testing.assert_allclose(g, g_ref, atol=10 * tol, err_msg=f"b={b}")


# --------------------------------------------------------------------------------------------
# methods agree


def _exact_marginals(info, c, beta=1.0):
    S = info.fields.shape[-1]
    J = c.matrix(S, info.fields.dtype)[:, None]
    model = IsingModel(h=info.fields, J=J, beta=beta, vartype="BINARY", mask=info.mask)
    return exact.marginals(model), exact.log_partition(model)


def test_exact_method_matches_isingattn_exact():
    q, k, v = _qkv(N=2, K=1, T=4, S=7)
    c = Couplings.random(jax.random.key(3), 2, "full", max_length=9, strength=0.7)
    _, info = boltzmann_attention(q, k, v, couplings=c, beta=1.3, chemical_potential=-0.4,
                                  is_causal=True, return_weights=True, method="exact")
    m, logz = _exact_marginals(info, c, beta=1.3)
    np.testing.assert_allclose(info.marginals, m, atol=1e-12)
    np.testing.assert_allclose(info.log_partition, logz, rtol=1e-12)
    np.testing.assert_allclose(info.weights.sum(-1), 1.0, atol=1e-12)


def test_transfer_equals_exact_on_banded_couplings():
    q, k, v = _qkv(B=1, N=2, K=2, T=3, S=8)
    c = _banded(r=3, strength=1.0)
    mask = jax.random.bernoulli(jax.random.key(9), 0.8, (1, 1, 3, 8))
    kw = {"couplings": c, "chemical_potential": jnp.array([-0.5, 0.3]), "beta": 1.2, "mask": mask,
              "return_weights": True}
    oe, ie = boltzmann_attention(q, k, v, method="exact", **kw)
    ot, it = boltzmann_attention(q, k, v, method="transfer", **kw)
    np.testing.assert_allclose(it.marginals, ie.marginals, atol=1e-12)
    np.testing.assert_allclose(ot, oe, atol=1e-12)


@pytest.mark.parametrize(("causal", "dtype"), [(False, jnp.float64), (True, jnp.float32)])
def test_transfer_log_partition_matches_enumeration(causal, dtype):
    """``info.log_partition`` of ``transfer`` (its own pass over unpacked rows; causal rows are
    packed in pairs for the marginals) equals enumeration, on rows of the chains and on rows of
    the closed-form softmax limit (head 1, b = -200), with a mask that leaves one row empty;
    its gradient matches enumeration's."""
    q, k, v = (x.astype(dtype) for x in _qkv(B=2, N=2, K=1, T=4, S=7, seed=4))
    c = _banded(r=3, strength=1.2)
    mask = jax.random.bernoulli(jax.random.key(2), 0.8, (2, 1, 4, 7)).at[1, 0, 2].set(False)
    b = jnp.array([0.3, -200.0], dtype)
    kw = {"couplings": c, "chemical_potential": b, "beta": 1.1, "mask": mask,
          "is_causal": causal, "return_weights": True}

    @functools.partial(jax.jit, static_argnames="method")
    def logz(q, method):
        return boltzmann_attention(q, k, v, method=method, **kw)[1].log_partition

    ref = logz(q.astype(jnp.float64), "exact")
    got = logz(q, "transfer")
    assert got.shape == (2, 2, 4) and got.dtype == dtype
    assert float(jnp.max(jnp.abs(ref[:, 1]))) < 1e-40  # head 1: the limit, log Z ~ sum e^a
    tol = 1e-5 if dtype == jnp.float32 else 1e-12
    np.testing.assert_allclose(got, ref, atol=tol, rtol=tol)
    g_ref = jax.grad(lambda q: jnp.sum(jnp.sin(logz(q, "exact"))))(q.astype(jnp.float64))
    g = jax.grad(lambda q: jnp.sum(jnp.sin(logz(q, "transfer"))))(q)
    np.testing.assert_allclose(g, g_ref, atol=10 * tol)
    # an extra pass, made only on request (the layer asks when it returns the weights)
    h = jnp.zeros((1, 2, 1, 7), dtype)
    allowed = jnp.ones(h.shape, bool)
    assert Transfer()(h, allowed, c, 1.0).log_partition is None
    assert Transfer()(h, allowed, c, 1.0, log_partition=True).log_partition.shape == (1, 2, 1)


def test_sampled_reports_the_rows_no_draw_attended():
    """At a strongly negative chemical potential few draws attend anything: ``empty_rows`` marks
    exactly the rows whose draws are all empty (weights 0), an all-masked row included; the
    other rows' weights sum to 1."""
    q, k, v = _qkv(B=2, N=2, K=1, T=4, S=6, seed=1)
    mask = jnp.ones((2, 1, 4, 6), bool).at[0, 0, 1].set(False)
    _, info = boltzmann_attention(q, k, v, couplings=_banded(r=2), chemical_potential=-3.5,
                                  mask=mask, method=sampled(ExactSampler(), 6),
                                  rng=jax.random.key(0), return_weights=True)
    empty = np.asarray(info.extra["empty_rows"])
    assert empty.shape == (2, 2, 4) and empty.dtype == bool
    assert np.array_equal(empty, ~np.asarray(info.extra["draws"]).any(axis=(-2, -1)))
    assert empty[0, :, 1].all() and empty.any() and not empty.all()
    total = np.asarray(info.weights).sum(-1)
    np.testing.assert_allclose(total[empty], 0.0)
    np.testing.assert_allclose(total[~empty], 1.0, atol=1e-12)


def test_sampled_exact_sampler_marginals_within_monte_carlo_error():
    """i.i.d. draws: each empirical marginal is Binomial(M, m)/M. False-failure rate 1e-3."""
    q, k, v = _qkv(B=1, N=2, K=2, T=3, S=8)
    c = _banded(r=2, strength=1.0)
    M = 2000
    kw = {"couplings": c, "chemical_potential": -0.2, "is_causal": False, "return_weights": True}
    _, ie = boltzmann_attention(q, k, v, method="exact", **kw)
    _, isamp = boltzmann_attention(q, k, v, method=sampled(ExactSampler(), M),
                                   rng=jax.random.key(11), **kw)
    m = np.asarray(ie.marginals)
    se = np.sqrt(m * (1 - m) / M)
    z = _z(TEST_ALPHA, m.size)
    assert np.all(np.abs(np.asarray(isamp.marginals) - m) <= z * se + 1e-12)


@pytest.mark.slow
def test_sampled_gibbs_marginals_within_monte_carlo_error():
    """Correlated draws: the standard error comes from the spread of 16 independent chain means
    (t with 15 degrees of freedom). False-failure rate 1e-3 (Bonferroni over all entries)."""
    q, k, v = _qkv(B=1, N=2, K=2, T=3, S=8)
    c = _banded(r=3, strength=1.0)
    C, D = 16, 300
    kw = {"couplings": c, "chemical_potential": -0.2, "is_causal": True, "return_weights": True}
    _, ie = boltzmann_attention(q, k, v, method="exact", **kw)
    _, ig = boltzmann_attention(q, k, v, method=sampled(GibbsSampler(), D, num_chains=C),
                                rng=jax.random.key(12), **kw)
    draws = np.asarray(ig.extra["draws"]).reshape(ie.marginals.shape[:-1] + (C, D, 8))
    chain_means = draws.mean(-2)
    est = chain_means.mean(-2)
    se = chain_means.std(-2, ddof=1) / np.sqrt(C)
    m = np.asarray(ie.marginals)
    t = float(scipy.stats.t.isf(TEST_ALPHA / (2 * m.size), C - 1))
    np.testing.assert_allclose(est, ig.marginals, atol=1e-12)
    assert np.all(np.abs(est - m) <= t * se + 1e-12)


def test_mean_field_error_shrinks_with_coupling_strength():
    """Naive mean field errs at second order in J, TAP at third: halving J divides the
    marginal error by ~4 and ~8."""
    q, k, v = _qkv(N=2, K=2, T=3, S=7)
    pattern = jax.random.normal(jax.random.key(4), (2, 7, 7))
    errs = {"mf": [], "tap": []}
    eps = [0.2, 0.1, 0.05]
    for e in eps:
        c = Couplings.fixed(e * pattern, "full")
        kw = {"couplings": c, "chemical_potential": -0.3, "return_weights": True}
        _, ie = boltzmann_attention(q, k, v, method="exact", **kw)
        for name, tap in (("mf", False), ("tap", True)):
            meth = MeanField(tap=tap, tol=1e-13, max_iters=2000)
            _, im = boltzmann_attention(q, k, v, method=meth, **kw)
            errs[name].append(float(jnp.max(jnp.abs(im.marginals - ie.marginals))))
    mf, tap = np.array(errs["mf"]), np.array(errs["tap"])
    order_mf = np.log2(mf[:-1] / mf[1:])
    order_tap = np.log2(tap[:-1] / tap[1:])
    assert np.all(order_mf > 1.8) and np.all(order_mf < 2.3), (mf, order_mf)
    assert np.all(order_tap > 2.6), (tap, order_tap)
    assert np.all(tap < mf)


# --------------------------------------------------------------------------------------------
# gradients


def _loss_fn(method, q, k, v, c, mask=None, rng=None):
    w_out = jax.random.normal(jax.random.key(21), q.shape)

    def loss(q, k, v, p, b, beta):
        o = boltzmann_attention(q, k, v, couplings=c.replace(p), chemical_potential=b,
                                beta=beta, method=method, mask=mask, rng=rng)
        return jnp.sum(w_out * jnp.tanh(o))

    return loss


def _check_fd(loss, args, eps=1e-6, rtol=1e-6):
    grads = jax.grad(loss, argnums=tuple(range(len(args))))(*args)
    for i, (a, g) in enumerate(zip(args, grads)):
        d = jax.random.normal(jax.random.key(100 + i), jnp.shape(a))
        plus = list(args)
        minus = list(args)
        plus[i] = a + eps * d
        minus[i] = a - eps * d
        fd = (loss(*plus) - loss(*minus)) / (2 * eps)
        an = jnp.sum(g * d)
        assert abs(float(fd - an)) <= rtol * max(1.0, abs(float(an))), (i, float(fd), float(an))


@pytest.mark.parametrize("method", ["exact", "transfer", "mean_field", "unrolled", "tap"])
def test_gradients_match_finite_differences(method):
    q, k, v = _qkv(B=1, N=2, K=1, T=3, S=6)
    c = _banded(r=2, strength=0.6)
    meth = {"mean_field": MeanField(tol=1e-14, max_iters=3000),
            "unrolled": MeanField(implicit=False, max_iters=400),
            "tap": MeanField(tap=True, tol=1e-14, max_iters=3000)}.get(method, method)
    mask = jnp.tril(jnp.ones((3, 6), bool))[None, None]
    loss = _loss_fn(meth, q, k, v, c, mask=mask)
    _check_fd(loss, (q, k, v, c.params, jnp.array([-0.2, 0.4]), jnp.array(1.1)),
              rtol=1e-6 if method in ("exact", "transfer") else 1e-5)


def test_mean_field_implicit_and_unrolled_gradients_agree():
    q, k, v = _qkv(B=1, N=2, K=1, T=3, S=6)
    c = _banded(r=2, strength=0.6)
    g1 = jax.grad(_loss_fn(MeanField(tol=1e-14, max_iters=3000), q, k, v, c), argnums=3)(
        q, k, v, c.params, -0.2, 1.0)
    g2 = jax.grad(_loss_fn(MeanField(implicit=False, max_iters=400), q, k, v, c), argnums=3)(
        q, k, v, c.params, -0.2, 1.0)
    np.testing.assert_allclose(g1, g2, rtol=1e-9, atol=1e-12)


def _fdt_check(readout, loss_of_info, R=40, M=64):
    """Average FDT gradient over R keys vs the exact gradient: per entry a t-test with R - 1
    degrees of freedom, Bonferroni over entries. False-failure rate TEST_ALPHA."""
    q, k, v = _qkv(B=1, N=2, K=1, T=3, S=5)
    c = _banded(r=2, strength=0.9)
    mask = jnp.tril(jnp.ones((3, 5), bool), k=2)[None, None]

    def make(method, rng=None):
        def f(q, v, p, b, beta):
            o, info = boltzmann_attention(q, k, v, couplings=c.replace(p), chemical_potential=b,
                                          beta=beta, method=method, rng=rng, mask=mask,
                                          readout=readout, return_weights=True)
            return loss_of_info(o, info)
        return f

    args = (q, v, c.params, jnp.array([-0.3, 0.2]), jnp.array(1.2))
    argnums = tuple(range(len(args)))
    if readout == "marginal":
        exact_f = make("exact")
    else:
        exact_f = _expected_sample_loss(k, c, mask, loss_of_info)
    exact_g = jax.grad(exact_f, argnums=argnums)(*args)
    meth = sampled(ExactSampler(), M)

    @jax.jit
    def one(key):
        return jax.grad(make(meth, key), argnums=argnums)(*args)

    draws = [one(kk) for kk in jax.random.split(jax.random.key(7), R)]
    flat_exact = np.concatenate([np.ravel(g) for g in exact_g])
    flat = np.stack([np.concatenate([np.ravel(g) for g in d]) for d in draws])
    mean, se = flat.mean(0), flat.std(0, ddof=1) / np.sqrt(R)
    t = float(scipy.stats.t.isf(TEST_ALPHA / (2 * flat.shape[1]), R - 1))
    assert np.all(np.abs(mean - flat_exact) <= t * se + 1e-10), np.max(
        np.abs(mean - flat_exact) / (se + 1e-12))
    # the estimates are not trivially noisy: the mean is informative
    assert np.linalg.norm(mean - flat_exact) < 0.5 * np.linalg.norm(flat_exact)


def _expected_sample_loss(k, c, mask, loss_of_info):
    """Exact E[sum_j s_j v_j / max(1, |s|)] by enumerating patterns (small S)."""
    def f(q, v, p, b, beta):
        _, info = boltzmann_attention(q, k, v, couplings=c.replace(p), chemical_potential=b,
                                      beta=beta, mask=mask, method="exact",
                                      return_weights=True)
        S = k.shape[1]
        J = c.replace(p).matrix(S, info.fields.dtype)[:, None]
        model = IsingModel(h=info.fields, J=J, beta=beta, vartype="BINARY", mask=info.mask,
                           validate=False)
        probs = exact.probabilities(model)  # (B, N, T, 2^S)
        X = exact.enumerate_states(S, "BINARY").astype(probs.dtype)
        phi = X / jnp.maximum(1.0, X.sum(-1, keepdims=True))
        w = probs @ phi
        o = jnp.einsum("bnts,bsnh->btnh", w, jnp.repeat(v, q.shape[2] // v.shape[2], 2))
        return loss_of_info(o, info._replace(weights=w))
    return f


def test_fdt_gradients_unbiased_marginal_readout():
    """Loss linear in the marginals: the FDT estimator is unbiased for every parameter."""
    c_m = jax.random.normal(jax.random.key(31), (1, 2, 3, 5))
    _fdt_check("marginal", lambda o, info: jnp.sum(c_m * info.marginals))


def test_fdt_gradients_unbiased_sample_readout():
    """Loss linear in the layer output of the sample readout: unbiased for every parameter,
    including the projections' inputs (query) and the values."""
    w_o = jax.random.normal(jax.random.key(32), (1, 3, 2, 3))
    _fdt_check("sample", lambda o, info: jnp.sum(w_o * o))


def test_sampled_same_key_same_output_different_key_different_output():
    q, k, v = _qkv(B=1, N=2, K=1, T=3, S=5)
    c = _banded()
    meth = sampled(ExactSampler(), 8)
    a = boltzmann_attention(q, k, v, couplings=c, method=meth, rng=jax.random.key(1))
    b = boltzmann_attention(q, k, v, couplings=c, method=meth, rng=jax.random.key(1))
    d = boltzmann_attention(q, k, v, couplings=c, method=meth, rng=jax.random.key(2))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, d)


@pytest.mark.parametrize(
    "method",
    ["exact", "transfer", "mean_field", "tap", sampled(ExactSampler(), 8),
     sampled(GibbsSampler(), 4, num_chains=2)],
    ids=["exact", "transfer", "mean_field", "tap", "sampled-exact", "sampled-gibbs"],
)
def test_raw_prngkey_rng_gives_the_output_of_the_typed_key(method):
    # jax.random.PRNGKey is what most JAX / flax code passes: wrapped once, same draws
    q, k, v = _qkv(B=1, N=2, K=1, T=3, S=5)
    kw = {"couplings": _banded(), "method": method}
    a = boltzmann_attention(q, k, v, rng=jax.random.key(1), **kw)
    b = boltzmann_attention(q, k, v, rng=jax.random.PRNGKey(1), **kw)
    c = jax.jit(lambda r: boltzmann_attention(q, k, v, rng=r, **kw))(jax.random.PRNGKey(1))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12)
    with pytest.raises(TypeError, match="rng must be a single JAX PRNG key"):
        boltzmann_attention(q, k, v, rng=7, **kw)


# --------------------------------------------------------------------------------------------
# bad input


def test_shape_mismatch_names_both_shapes():
    q, k, v = _qkv(H=3)
    with pytest.raises(ValueError, match=r"query \(2, 4, 2, 3\).*key \(2, 6, 1, 4\)"):
        boltzmann_attention(q, jnp.ones((2, 6, 1, 4)), jnp.ones((2, 6, 1, 4)))
    with pytest.raises(ValueError, match=r"key \(2, 6, 1, 3\) and value \(2, 5, 1, 3\)"):
        boltzmann_attention(q, k, jnp.ones((2, 5, 1, 3)))
    with pytest.raises(ValueError, match="multiple of the key/value heads"):
        boltzmann_attention(jnp.ones((2, 4, 3, 3)), jnp.ones((2, 6, 2, 3)), jnp.ones((2, 6, 2, 3)))
    with pytest.raises(ValueError, match=r"mask must broadcast to \(B, N, T, S\)"):
        boltzmann_attention(q, k, v, mask=jnp.ones((3, 1, 4, 6), bool))


@pytest.mark.parametrize("axis", ["B", "T", "N", "H", "S"])
def test_empty_axes_are_refused_like_models_without_variables(axis):
    sizes = {"B": 1, "T": 2, "N": 2, "H": 3, "S": 4, axis: 0}
    q = jnp.ones((sizes["B"], sizes["T"], sizes["N"], sizes["H"]))
    k = jnp.ones((sizes["B"], sizes["S"], 1, sizes["H"]))
    for method in ("exact", "mean_field"):
        with pytest.raises(ValueError, match=r"must have no empty axis.*got query \("):
            boltzmann_attention(q, k, k, couplings=_banded(), method=method)


def test_complex_inputs_are_refused():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="value must be real; got dtype complex"):
        boltzmann_attention(q, k, v.astype(jnp.complex64))


@pytest.mark.parametrize("readout", ["marginal", "softmax"])
def test_integer_and_boolean_inputs_mean_their_float32_values(readout):
    # an integer value once truncated the weights to 0 and 1 (outputs off by up to 2.9)
    q, k, v = _qkv()
    q, v = jnp.round(2 * q), jnp.round(3 * v)
    want = boltzmann_attention(q, (k > 0).astype(jnp.float32), v, readout=readout)
    got = boltzmann_attention(q.astype(jnp.int32), k > 0, v.astype(jnp.int32), readout=readout)
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_exact_beyond_limit_names_limit_and_alternatives():
    S = MAX_EXACT_KEYS + 1
    q, k, v = _qkv(B=1, T=2, S=S)
    with pytest.raises(ValueError, match=rf"S <= {MAX_EXACT_KEYS}.*S = {S}.*transfer.*sampled"):
        boltzmann_attention(q, k, v, couplings=_banded(), method="exact")


def test_full_couplings_shorter_than_sequence():
    q, k, v = _qkv(S=6)
    c = Couplings.random(jax.random.key(0), 2, "full", max_length=4)
    with pytest.raises(ValueError, match="max_length=4.*6 keys"):
        boltzmann_attention(q, k, v, couplings=c)


def test_stochastic_method_without_key():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="needs a PRNG key.*rng="):
        boltzmann_attention(q, k, v, couplings=_banded(), method=sampled(ExactSampler(), 4))


def test_other_bad_configurations():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="needs banded couplings"):
        boltzmann_attention(q, k, v, method="transfer",
                            couplings=Couplings.random(jax.random.key(0), 2, "relative",
                                                       max_distance=3))
    with pytest.raises(ValueError, match="readout='sample'.*sampled"):
        boltzmann_attention(q, k, v, readout="sample", couplings=_banded())
    with pytest.raises(ValueError, match="readout must be one of"):
        boltzmann_attention(q, k, v, readout="argmax")
    with pytest.raises(ValueError, match="method must be"):
        boltzmann_attention(q, k, v, method="bp")
    with pytest.raises(ValueError, match="beta"):
        boltzmann_attention(q, k, v, beta=-1.0)
    with pytest.raises(ValueError, match="chemical_potential.*\\(2,\\)"):
        boltzmann_attention(q, k, v, chemical_potential=jnp.zeros(3))
    with pytest.raises(ValueError, match="couplings have 3 heads"):
        boltzmann_attention(q, k, v, couplings=_banded(N=3))


# --------------------------------------------------------------------------------------------
# jax.nn.dot_product_attention's local_window_size and implementation; dropout; forward mode


@pytest.mark.parametrize("window", [1, (2, 0), (0, 3)])
def test_local_window_is_jax_window_and_a_mask(window):
    q, k, v = _qkv(B=2, T=7, N=2, K=2, H=3, S=7)
    ref = jax.nn.dot_product_attention(q, k, v, local_window_size=window)
    ours = boltzmann_attention(q, k, v, readout="softmax", local_window_size=window)
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-12)
    # for the Boltzmann readout the window is a mask: query i sees keys i - left ... i + right
    left, right = (window, window) if isinstance(window, int) else window
    d = np.arange(7)[:, None] - np.arange(7)[None, :]
    mask = jnp.asarray((d <= left) & (-d <= right))[None, None]
    c = _banded(N=2, r=2)
    for method in ("exact", "transfer"):
        got = boltzmann_attention(q, k, v, couplings=c, method=method, local_window_size=window)
        want = boltzmann_attention(q, k, v, couplings=c, method="exact", mask=mask)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_local_window_and_implementation_bad_values_name_the_valid_ones():
    q, k, v = _qkv()
    for bad in (-1, (1,), (1, -2), 1.5, True, "2"):
        with pytest.raises(ValueError, match="local_window_size must be a non-negative int"):
            boltzmann_attention(q, k, v, local_window_size=bad)
    with pytest.raises(ValueError, match="implementation must be one of"):
        boltzmann_attention(q, k, v, implementation="triton")
    for kw in ({}, {"readout": "softmax", "return_weights": True}):
        with pytest.raises(ValueError, match="implementation='cudnn' runs only the softmax"):
            boltzmann_attention(q, k, v, implementation="cudnn", **kw)
    out = boltzmann_attention(q, k, v, implementation="xla", couplings=_banded())
    np.testing.assert_array_equal(out, boltzmann_attention(q, k, v, couplings=_banded()))


@pytest.mark.parametrize("readout", ["marginal", "softmax"])
def test_dropout_keeps_weights_with_flax_mask_and_scale(readout):
    """Dropout equals the weights (before dropout, as returned) times Flax's keep mask over
    keep_prob, drawn from dropout_rng (shared over batch and heads when broadcast)."""
    q, k, v = _qkv(B=2, T=4, N=2, K=2, H=3, S=5)
    kw = {"couplings": _banded(), "method": "exact"} if readout == "marginal" else {}
    rate, rng = 0.3, jax.random.key(7)
    _, info = boltzmann_attention(q, k, v, readout=readout, return_weights=True, **kw)
    for broadcast in (True, False):
        shape = (1, 1, 4, 5) if broadcast else (2, 2, 4, 5)
        keep = np.asarray(jax.random.bernoulli(rng, 1 - rate, shape))
        w = np.asarray(info.weights) * keep / (1 - rate)
        want = np.einsum("bnts,bsnh->btnh", w, np.asarray(v))
        got = boltzmann_attention(q, k, v, readout=readout, dropout_rate=rate, dropout_rng=rng,
                                  broadcast_dropout=broadcast, **kw)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # rate 0: no dropout whatever the key
    np.testing.assert_array_equal(
        boltzmann_attention(q, k, v, readout=readout, dropout_rate=0.0, dropout_rng=rng, **kw),
        boltzmann_attention(q, k, v, readout=readout, **kw))


def test_dropout_bad_values():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="dropout_rate=0.1 needs dropout_rng"):
        boltzmann_attention(q, k, v, dropout_rate=0.1)
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match=r"dropout_rate must be in \[0, 1\)"):
            boltzmann_attention(q, k, v, dropout_rate=bad, dropout_rng=jax.random.key(0))
    with pytest.raises(TypeError, match="dropout_rate must be a concrete number"):
        jax.jit(lambda r: boltzmann_attention(q, k, v, dropout_rate=r,
                                              dropout_rng=jax.random.key(0)))(0.1)


def test_forward_mode_names_the_methods_that_support_it():
    q, k, v = _qkv()
    c = _banded()

    def f(method):
        return lambda x: boltzmann_attention(x, k, v, couplings=c, method=method)

    # exact supports forward mode: jvp equals the directional finite difference
    t = jax.random.normal(jax.random.key(3), q.shape)
    _, tangent = jax.jvp(f("exact"), (q,), (t,))
    eps = 1e-6
    fd = (f("exact")(q + eps * t) - f("exact")(q - eps * t)) / (2 * eps)
    np.testing.assert_allclose(tangent, fd, rtol=1e-6, atol=1e-8)
    for method in ("transfer", "mean_field", sampled(ExactSampler(), 4)):
        g = f(method)
        if not isinstance(method, str):
            g = lambda x, m=method: boltzmann_attention(x, k, v, couplings=c, method=m,
                                                        rng=jax.random.key(0))
        with pytest.raises(TypeError, match=r"forward-mode.*reverse mode.*'exact'"):
            jax.jvp(g, (q,), (t,))
