"""Probabilistic programming with Ising models (numpyro): :class:`IsingDistribution` makes a
model a node of a numpyro program; :func:`effective_beta_bayes` is a NUTS posterior for a
sampler's effective inverse temperature."""

from ._distribution import IsingDistribution
from ._temperature import AUTO_EXACT_MAX_N, effective_beta_bayes, ising_temperature_model

__all__ = [
           "AUTO_EXACT_MAX_N",
           "IsingDistribution",
           "effective_beta_bayes",
           "ising_temperature_model",
]
