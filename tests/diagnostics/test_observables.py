"""Observables of exact samples equal exact expectations (full enumeration) within Monte Carlo
error; masked variables contribute nothing; bad input is refused.

Errors of non-linear estimators (susceptibility, specific heat, Binder cumulant, correlation
length) use the spread over K independent batches of the i.i.d. draws: |estimate - truth| <
Z_ALPHA * sd_batches / sqrt(K); per-assertion false-failure rate about ALPHA = 1e-4 (the
t-quantile for K - 1 dof is used)."""

import itertools

import jax
import numpy as np
import pytest
import scipy.stats

from isingattn import diagnostics as dg
from isingattn import exact
from isingattn.models import IsingModel, chain
from isingattn.samplers import ExactSampler
from tests._stats import ALPHA, assert_mean_within_mcse

K = 20
T_ALPHA = float(scipy.stats.t.isf(ALPHA / 2, K - 1))


@pytest.fixture(scope="module")
def masked_batch():
    """A batch of two dense SPIN models, n = 7, variable 6 masked in both."""
    rng = np.random.default_rng(0)
    n = 7
    A = rng.normal(size=(n, n)) * 0.5
    J = np.triu(A, 1) + np.triu(A, 1).T
    h = rng.normal(size=(2, n)) * 0.4
    mask = np.array([True] * 6 + [False])
    model = IsingModel(h, J, beta=np.array([0.6, 1.1]), mask=mask)
    s = ExactSampler().sample(model, jax.random.key(11), 2000, num_chains=4)
    return model, s


def enumerate_truth(model):
    """Exact <m>, <m^2>, <m^4>, <E>, Var(E), connected G from all states (batch entry-wise)."""
    n = model.n
    states = np.array(list(itertools.product([-1.0, 1.0], repeat=n)))
    out = []
    for b in range(model.batch_shape[0]):
        m = model[b]
        mask = np.asarray(m.mask)
        E = np.asarray(m.energy(states), float)
        logw = -float(m.beta) * E
        ok = np.all(mask | (states == -1), axis=1)  # masked variable held at -1
        w = np.where(ok, np.exp(logw - logw[ok].max()), 0.0)
        p = w / w.sum()
        mag = (states * mask).sum(1) / mask.sum()
        xa = states * mask
        mu = p @ xa
        G = (xa * p[:, None]).T @ xa - np.outer(mu, mu)
        out.append({"m": p @ mag, "m2": p @ mag**2, "m4": p @ mag**4, "E": p @ E,
                    "varE": p @ E**2 - (p @ E) ** 2, "G": G, "marg": p @ states})
    return out


def batch_spread(fn, s, model, b):
    """sd over K independent batches of the draws of fn(samples) for batch entry b."""
    x = np.asarray(s.spins)[b].reshape(-1, model.n)
    e = np.asarray(s.energy)[b].reshape(-1)
    vals = []
    for xk, ek in zip(np.array_split(x, K), np.array_split(e, K)):
        from isingattn.samplers import Samples

        sk = Samples(xk[None], ek[None], model.vartype)
        vals.append(fn(sk, model[b]))
    return np.std(vals, ddof=1) / np.sqrt(K)


def test_observables_match_enumeration(masked_batch):
    model, s = masked_batch
    truth = enumerate_truth(model)
    chi = dg.susceptibility(s, model)
    C = dg.specific_heat(s, model)
    U = dg.binder_cumulant(s, model)
    m = dg.magnetization(s, model)
    G = dg.connected_correlation(s, model)
    x = np.asarray(s.spins)
    for b, t in enumerate(truth):
        beta, na = float(model.beta[b]), 6
        assert_mean_within_mcse(m[b], t["m"], what="magnetization")
        assert_mean_within_mcse(np.asarray(s.energy)[b], t["E"], what="energy")
        for i in range(6):
            assert_mean_within_mcse(x[b, ..., i], t["marg"][i], what=f"<x_{i}>")
        exact_chi = beta * na * (t["m2"] - t["m"] ** 2)
        exact_C = beta**2 * t["varE"] / na
        exact_U = 1 - t["m4"] / (3 * t["m2"] ** 2)
        for est, tr, fn in [
            (chi[b], exact_chi, dg.susceptibility),
            (C[b], exact_C, dg.specific_heat),
            (U[b], exact_U, dg.binder_cumulant),
        ]:
            se = batch_spread(fn, s, model, b)
            assert abs(est - tr) < T_ALPHA * se, (fn.__name__, est, tr, se)
        # connected correlations: each is the mean of (x_i - mu_i)(x_j - mu_j), known mu
        mu = t["marg"]
        for i, j in [(0, 1), (2, 5), (3, 4)]:
            y = (x[b, ..., i] - mu[i]) * (x[b, ..., j] - mu[j])
            assert_mean_within_mcse(y, t["G"][i, j], what=f"G_{i}{j}")
            # the estimator uses sample means: differs from the known-mean form by O(1/N)
            assert abs(G[b, i, j] - y.mean()) < 10 / y.size + abs(
                (x[b, ..., i].mean() - mu[i]) * (x[b, ..., j].mean() - mu[j])) * 1.01
    # exact marginals agree with the library's enumeration too
    np.testing.assert_allclose(
        [t["marg"] for t in truth], np.asarray(exact.marginals(model)), atol=1e-5)


def test_masked_variables_contribute_nothing(masked_batch):
    model, s = masked_batch
    x = np.array(s.spins)
    rng = np.random.default_rng(1)
    x2 = x.copy()
    x2[..., 6] = rng.choice([-1.0, 1.0], size=x2[..., 6].shape)  # scramble the masked one
    for fn in (dg.magnetization, dg.susceptibility, dg.binder_cumulant,
               dg.connected_correlation):
        np.testing.assert_allclose(fn(x2, model), fn(x, model), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(dg.connected_correlation(x2, model)[..., 6, :], 0)
    # site magnetization of a masked variable reports its held value, like exact.marginals
    np.testing.assert_array_equal(dg.site_magnetization(s, model)[..., 6], -1)
    # without a model every variable counts
    assert not np.allclose(dg.magnetization(x2), dg.magnetization(x2, model))


def periodic_chain_truth(n, K_):
    t = np.tanh(K_)
    r = np.arange(n)
    return (t**r + t ** (n - r)) / (1 + t**n)


def test_correlation_function_and_length_on_periodic_chain():
    n, beta = 10, 0.6
    model = chain(n, J=1.0, periodic=True, beta=beta)
    s = ExactSampler().sample(model, jax.random.key(3), 2000, num_chains=4)
    r, C = dg.correlation_function(s, model, connected=False)
    np.testing.assert_array_equal(r, np.arange(1, n // 2 + 1))  # graph distance on the ring
    g = periodic_chain_truth(n, beta)
    x = np.asarray(s.spins, np.float64)
    D = dg.chain_distances(n, periodic=True)
    for k, rk in enumerate(r):
        pairs = np.argwhere(np.triu(D == rk, 1))
        y = np.mean([x[..., i] * x[..., j] for i, j in pairs], axis=0)
        assert abs(C[k] - y.mean()) < 1e-9
        assert_mean_within_mcse(y, g[int(rk)], what=f"C({rk})")
    # second-moment correlation length: from exact correlations against the closed form
    Gex = np.asarray(exact.correlations(model), float)
    xi_exact = dg.correlation_length_from_correlations(Gex, n)
    Gcf = g[np.asarray(D, int)]
    np.testing.assert_allclose(xi_exact, dg.correlation_length_from_correlations(Gcf, n),
                               rtol=1e-5)
    chi0 = Gcf.sum() / n
    chik = (Gcf * np.cos(2 * np.pi / n * (np.arange(n)[:, None] - np.arange(n)))).sum() / n
    np.testing.assert_allclose(
        xi_exact, np.sqrt(chi0 / chik - 1) / (2 * np.sin(np.pi / n)), rtol=1e-5)
    xi = dg.correlation_length(s, model, shape=n)
    se = batch_spread(lambda sk, m: dg.correlation_length(sk, m, shape=n),
                      s, model.replace(h=model.h[None]), 0)
    assert abs(xi - xi_exact) < T_ALPHA * se


def test_lattice_distances():
    D = dg.lattice_distances(4, periodic=True)
    assert D[0, 1] == 1 and D[0, 3] == 1 and D[0, 5] == pytest.approx(np.sqrt(2))
    assert D[0, 10] == pytest.approx(np.sqrt(8))
    Dopen = dg.lattice_distances((2, 3), periodic=False)
    assert Dopen[0, 5] == pytest.approx(np.sqrt(1 + 4))


def test_bad_input(masked_batch):
    model, s = masked_batch
    x = np.asarray(s.spins)
    with pytest.raises(ValueError, match="chain axis"):
        dg.magnetization(x[0, 0])
    with pytest.raises(ValueError, match="n = 7"):
        dg.magnetization(x[..., :5], model)
    with pytest.raises(ValueError, match="batch_shape"):
        dg.magnetization(x[0], model)
    with pytest.raises(ValueError, match="beta"):
        dg.susceptibility(x)
    with pytest.raises(ValueError, match="energies are needed"):
        dg.specific_heat(x, beta=1.0)
    with pytest.raises(ValueError, match="vartype"):
        dg.magnetization(s, model.to_vartype("BINARY"))
    with pytest.raises(TypeError, match="model"):
        dg.magnetization(s, "not a model")
    with pytest.raises(ValueError, match="at least 2 draws"):
        dg.specific_heat(s.spins[:, :1, :1], model)
    half = np.broadcast_to(np.array([1.0, -1.0] * 3 + [-1.0]), (2, 1, 3, 7))  # m = 0
    with pytest.warns(RuntimeWarning, match="Binder"):
        U = dg.binder_cumulant(half, model)
    assert np.isnan(U).all()
