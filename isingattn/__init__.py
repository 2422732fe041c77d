"""isingattn: Boltzmann attention and Ising-model sampling in JAX.

Subpackages: :mod:`isingattn.models`, :mod:`isingattn.exact`, :mod:`isingattn.samplers`.
"""

from . import exact, models, samplers
from .models import IsingModel, SparseIsingModel, Vartype
from .samplers import Samples

__version__ = "0.1.0"
__all__ = ["IsingModel", "Samples", "SparseIsingModel", "Vartype", "exact", "models", "samplers"]
