"""Probabilistic programming with Ising models (numpyro): :class:`IsingDistribution` makes a
model a node of a numpyro program; :func:`effective_beta_bayes` is a NUTS posterior for a
sampler's effective inverse temperature."""

from ._distribution import IsingDistribution
from ._temperature import AUTO_EXACT_MAX_N, effective_beta_bayes, ising_temperature_model

__all__ = ["IsingDistribution", "effective_beta_bayes", "ising_temperature_model",
           "AUTO_EXACT_MAX_N"]
