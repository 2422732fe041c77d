"""IsingDistribution: exact log_prob (normalized, equal to exact.probabilities, -inf off the
mask), numpyro shapes (sample dims first), sampling through a backend (chi^2 against exact at
ALPHA = 1e-4), and use as an observed node in a numpyro model."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as nd
import pytest

from isingattn import exact
from isingattn.models import IsingModel, chain, random_dense
from isingattn.probabilistic import IsingDistribution
from tests._stats import assert_chi2_matches


@pytest.mark.parametrize("vartype", ["SPIN", "BINARY"])
def test_log_prob_is_exact_and_normalized(vartype):
    m = random_dense(jax.random.key(0), 5, J_scale=0.6, h_scale=0.5, beta=0.9,
                     vartype=vartype)
    d = IsingDistribution(m)
    states = exact.enumerate_states(5, vartype)
    lp = np.asarray(d.log_prob(states), float)
    np.testing.assert_allclose(np.exp(lp), np.asarray(exact.probabilities(m)), atol=1e-6)
    assert np.exp(lp).sum() == pytest.approx(1.0, abs=1e-5)
    assert d.support(states).all()
    assert d.batch_shape == () and d.event_shape == (5,)


def test_batch_mask_and_sample_dims_first():
    h = np.array([[0.3, -0.2, 0.1], [0.0, 0.5, -0.5]])
    J = np.array([[0, 0.4, 0], [0.4, 0, -0.3], [0, -0.3, 0]])
    m = IsingModel(h, J, beta=0.7, mask=np.array([True, True, False]))
    d = IsingDistribution(m)
    assert d.batch_shape == (2,)
    states = exact.enumerate_states(3, "SPIN")  # (8, 3): sample dim first, broadcast over batch
    lp = np.asarray(d.log_prob(states[:, None, :]), float)
    assert lp.shape == (8, 2)
    np.testing.assert_allclose(np.exp(lp).T, np.asarray(exact.probabilities(m)), atol=1e-6)
    assert np.all(np.isneginf(lp[np.asarray(states)[:, 2] == 1]))  # masked variable off -1
    x = d.sample(jax.random.key(1), (4, 6))
    assert x.shape == (4, 6, 2, 3)
    assert np.all(np.asarray(x)[..., 2] == -1)


def test_sampling_through_a_backend_matches_exact():
    m = chain(6, J=0.8, h=0.2, beta=0.7)
    x = IsingDistribution(m).sample(jax.random.key(2), (4000,))
    assert_chi2_matches(np.asarray(x), m)
    with pytest.raises(NotImplementedError, match="n <= 30"):
        IsingDistribution(chain(40)).log_prob(jnp.ones(40))
    assert IsingDistribution(chain(40)).unnormalized_log_prob(jnp.ones(40)).shape == ()


def test_node_in_a_numpyro_model():
    """beta as a numpyro site: the joint log density is prior + exact Boltzmann log-likelihood,
    and its gradient in beta is sum_k (<E>_beta - E(x_k)) + d log prior."""
    base = chain(5, J=1.0, h=0.3)
    x = IsingDistribution(base.with_beta(0.6)).sample(jax.random.key(3), (50,))

    def model(x):
        beta = numpyro.sample("beta", nd.HalfNormal(2.0))
        numpyro.sample("x", IsingDistribution(base.with_beta(beta)), obs=x)

    from numpyro.infer.util import log_density

    @jax.jit
    def logp(beta):
        return log_density(model, (x,), {}, {"beta": beta})[0]

    b = 0.6
    E = np.asarray(base.energy(x), float)
    expected = (float(nd.HalfNormal(2.0).log_prob(b)) - b * E.sum()
                - 50 * float(exact.log_partition(base.with_beta(b))))
    assert float(logp(b)) == pytest.approx(expected, rel=1e-5)
    grad = float(jax.grad(logp)(b))
    mean_E = float(exact.mean_energy(base.with_beta(b)))
    assert grad == pytest.approx(50 * mean_E - E.sum() - b / 4.0, rel=1e-3, abs=1e-3)
    with pytest.raises(TypeError, match="IsingModel"):
        IsingDistribution("chain")
