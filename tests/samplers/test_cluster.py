"""Cluster samplers (Swendsen–Wang, Wolff) beyond the shared suite: connected components, exact
cluster statistics on trees, Wolff's refusal of fields, determinism, and the 2D lattice at L = 16
against Kaufman's exact finite-torus mean energy for every lattice-capable MCMC backend.

False-failure rates: each statistical assertion below is at level ALPHA = 1e-4 (normal or t
quantile stated where used); the tests make at most ~20 such assertions, so a correct
implementation fails this file with probability below 2e-3 for a random key. Keys are fixed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse
import scipy.sparse.csgraph
import scipy.stats

from isingattn import exact
from isingattn.exact import BETA_C, kaufman_mean_energy
from isingattn.models import IsingModel, chain, square_lattice
from isingattn.samplers import BACKENDS, SwendsenWangSampler, WolffSampler
from isingattn.samplers._clusters import components_jax

from .._stats import ALPHA, assert_chi2_matches, assert_mean_within_mcse, ess

NS, NC = 200, 64  # draws x chains of the small-model runs (one compiled program per sampler)


def _t_quantile(df):
    return float(scipy.stats.t.isf(ALPHA / 2, df))


# --------------------------------------------------------------------------- components
@pytest.mark.parametrize("wide", [False, True])
def test_components_match_scipy(wide, monkeypatch):
    # int16 labels for small graphs; wide=True forces the int32 path (2^15 nodes or more)
    if wide:
        import isingattn.samplers._clusters as swm

        monkeypatch.setattr(swm, "_label_dtype", lambda total: jnp.int32)
    model = square_lattice((12, 10))
    u, v = model.edges[:, 0], model.edges[:, 1]
    find = jax.jit(jax.vmap(lambda b: components_jax(model.n, u, v, b)))
    for p in (0.2, 0.5, 0.7):  # below, near and above the bond-percolation threshold
        bonds = np.asarray(jax.random.bernoulli(jax.random.key(int(p * 10)), p, (8, len(u))))
        roots = np.asarray(find(bonds))
        for b, r in zip(bonds, roots):
            g = scipy.sparse.coo_matrix(
                (np.ones(b.sum()), (u[b], v[b])), shape=(model.n, model.n)
            )
            k, lab = scipy.sparse.csgraph.connected_components(g, directed=False)
            # same partition, and the label is the smallest member
            assert len(np.unique(r)) == k
            for c in range(k):
                members = np.nonzero(lab == c)[0]
                assert np.all(r[members] == members.min())


def test_scipy_components_give_identical_chains():
    m = chain(8, J=0.8, h=0.3, beta=0.8)
    # (every step of the scipy path is a host callback: a few steps show the chains equal)
    a = SwendsenWangSampler().sample(m, jax.random.key(5), 12, num_chains=3, num_burnin=8)
    b = SwendsenWangSampler(components="scipy").sample(m, jax.random.key(5), 12, num_chains=3,
                                                       num_burnin=8)
    np.testing.assert_array_equal(np.asarray(a.spins), np.asarray(b.spins))


# --------------------------------------------------------------------------- exact cluster stats
def test_swendsen_wang_cluster_count_is_exact_on_a_tree():
    # On a tree, clusters = n - bonds; edge e is bonded with probability p_e P(e satisfied),
    # P(satisfied) = (1 + sign(J_e) <x_u x_v>) / 2 from exact enumeration.
    m = chain(8, J=jnp.array([0.8, -0.5, 1.0, 0.3, -0.9, 0.6, 0.7]), h=0.3, beta=0.8)
    s = SwendsenWangSampler().sample(m, jax.random.key(11), NS, num_chains=NC, num_burnin=50)
    corr = np.asarray(exact.correlations(m))
    J = np.asarray(m.J)
    u, v = m.edges[:, 0], m.edges[:, 1]
    p = 1 - np.exp(-2 * 0.8 * np.abs(J))
    expected = m.n - np.sum(p * (1 + np.sign(J) * corr[u, v]) / 2)
    per_chain = np.asarray(s.info["num_clusters"])  # mean over draws, one value per chain
    t = abs(per_chain.mean() - expected) / (per_chain.std(ddof=1) / np.sqrt(NC))
    assert t < _t_quantile(NC - 1), f"clusters {per_chain.mean():.4f} vs exact {expected:.4f}"
    # mean_cluster_size = 8 / clusters per step, so its mean is >= 8 / <clusters> (Jensen)
    assert float(np.mean(s.info["mean_cluster_size"])) >= 8 / per_chain.mean()
    assert np.all(s.info["largest_cluster"] >= s.info["mean_cluster_size"])


def test_wolff_cluster_size_is_exact_on_a_tree():
    # Zero field on a tree: the FK bonds are independent with P(bond) = tanh(beta |J_e|), so the
    # seed's cluster on an open chain has E|C| = (1/n) sum_{i,j} prod_{e between i and j} q_e.
    n, beta = 10, 0.8
    J = np.array([0.8, -0.5, 1.0, 0.3, -0.9, 0.6, 0.7, 1.2, -0.4])
    m = chain(n, J=jnp.asarray(J), beta=beta)
    q = np.tanh(beta * np.abs(J))
    expected = np.mean([[np.prod(q[min(i, j):max(i, j)]) for j in range(n)] for i in range(n)]) * n
    s = WolffSampler().sample(m, jax.random.key(12), NS, num_chains=NC)
    per_chain = np.asarray(s.info["cluster_size"])
    t = abs(per_chain.mean() - expected) / (per_chain.std(ddof=1) / np.sqrt(NC))
    assert t < _t_quantile(NC - 1), f"<|C|> {per_chain.mean():.4f} vs exact {expected:.4f}"
    np.testing.assert_allclose(s.info["sweep_fraction"], s.info["cluster_size"] / n, rtol=1e-5)


# --------------------------------------------------------------------------- Wolff specifics
@pytest.mark.slow
def test_wolff_stack_growth_matches_exact():
    J = -np.array([[0, 1, 1, 0], [1, 0, 1, 0], [1, 1, 0, 0.5], [0, 0, 0.5, 0]], float)
    J[3, 2] = J[2, 3] = 0.5
    for model in (IsingModel(np.zeros(4), J, beta=1.0),
                  square_lattice((3, 3), periodic=False, beta=0.4)):
        s = WolffSampler(num_flips=2, cluster="stack").sample(
            model, jax.random.key(13), 2000, num_chains=4, num_burnin=20
        )
        e = np.asarray(s.energy)
        assert_mean_within_mcse(e, float(exact.mean_energy(model.to_dense())), what="mean energy")
        assert_chi2_matches(np.asarray(s.spins), model.to_dense(),
                            effective_fraction=min(1.0, ess(e) / e.size))


def test_wolff_refuses_fields():
    with pytest.raises(ValueError, match=r"WolffSampler needs h = 0; this model has fields "
                                         r"\(max \|h\| = 0\.3\)"):
        WolffSampler().sample(chain(5, h=0.3), jax.random.key(0), 10)
    # a BINARY model is judged by its SPIN form: s_i s_j couplings alone imply fields
    binary = chain(5, vartype="BINARY")
    with pytest.raises(ValueError, match="fields in its SPIN form"):
        WolffSampler().sample(binary, jax.random.key(0), 10)


def test_wolff_binary_and_masks():
    # BINARY form of a field-free SPIN model: accepted, sampled in SPIN form, returned as 0/1
    # (mask first: masking a BINARY variable drops its couplings, which are SPIN fields)
    mask = jnp.ones(9, bool).at[4].set(False)
    spin = square_lattice((3, 3), periodic=False, beta=0.5).replace(mask=mask)
    binary = spin.to_vartype("BINARY")
    s = WolffSampler().sample(binary, jax.random.key(3), 100, num_chains=2)
    x = np.asarray(s.spins)
    assert set(np.unique(x)) <= {0.0, 1.0}
    assert np.all(x[..., 4] == 0)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: SwendsenWangSampler(components="bfs"), "components must be one of"),
        (lambda: WolffSampler(num_flips=0), "num_flips must be an integer >= 1"),
        (lambda: WolffSampler(cluster="bfs"), "cluster must be 'labels' or 'stack'"),
        (lambda: WolffSampler(components="scipy"),
         r"components must be one of 'auto', 'numba', 'jax'; got 'scipy'"),
    ],
)
def test_bad_options(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("factory", [SwendsenWangSampler, WolffSampler])
def test_determinism(factory):
    m = chain(8, J=0.8, beta=0.8)
    a = factory().sample(m, jax.random.key(1), NS, num_chains=NC)
    b = factory().sample(m, jax.random.key(1), NS, num_chains=NC)
    c = factory().sample(m, jax.random.key(2), NS, num_chains=NC)
    np.testing.assert_array_equal(np.asarray(a.spins), np.asarray(b.spins))
    assert not np.array_equal(np.asarray(a.spins), np.asarray(c.spins))
    x = np.asarray(a.spins)
    assert not np.array_equal(x[0], x[1])  # chains are not copies


# --------------------------------------------------------------------------- 2D lattice, L = 16
L16_BETAS = (0.3, BETA_C, 0.5)
# name -> (sampler kwargs, sample options); single-site samplers start ordered (all +1) so that
# no stripe state has to be dissolved, and keep every 5th sweep.
L16_RUNS = {
    "swendsen_wang": ({}, {"num_samples": 1000, "num_burnin": 100}),
    "wolff": ({"num_flips": 8}, {"num_samples": 1000, "num_burnin": 200}),
    "gibbs": ({}, {"num_samples": 1000, "num_burnin": 1000, "thinning": 5, "ordered": True}),
    "metropolis": ({}, {"num_samples": 1000, "num_burnin": 1000, "thinning": 5, "ordered": True}),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(L16_RUNS))
def test_lattice_16_matches_kaufman(name):
    """Mean energy of the 16x16 torus at beta = 0.3, beta_c, 0.5 (one batched run) within
    Z_ALPHA MCSE (arviz ESS) of Kaufman's exact finite-lattice value: 3 assertions at ALPHA."""
    if name not in BACKENDS:
        pytest.skip(f"backend {name!r} is not registered yet")
    kwargs, opts = L16_RUNS[name]
    opts = dict(opts)
    L, chains = 16, 4
    betas = jnp.asarray(L16_BETAS, jnp.float32)
    model = square_lattice(L, beta=betas)
    if opts.pop("ordered", False):
        opts["initial_states"] = jnp.ones((len(L16_BETAS), chains, L * L))
    num_samples = opts.pop("num_samples")
    s = BACKENDS[name](**kwargs).sample(model, jax.random.key(16), num_samples,
                                        num_chains=chains, **opts)
    truth = np.asarray(kaufman_mean_energy(L, L, betas))
    for k, b in enumerate(L16_BETAS):
        assert_mean_within_mcse(np.asarray(s.energy[k]), float(truth[k]),
                                what=f"{name} <E> at beta={b:.4f}")
