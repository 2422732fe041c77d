"""isingattn: Boltzmann attention and Ising-model sampling in JAX.

Subpackages: :mod:`isingattn.models` (Ising models), :mod:`isingattn.exact` (enumeration and
transfer matrices), :mod:`isingattn.samplers` (the sampler backends),
:mod:`isingattn.quantum` (the annealing simulator), :mod:`isingattn.attention` (Boltzmann
attention: the function, the Flax modules, the transformer), :mod:`isingattn.diagnostics`
(observables, mixing, sampler comparison), :mod:`isingattn.probabilistic` (numpyro models) and
:mod:`isingattn.experiments` (tasks and training); :mod:`isingattn.testing` checks any sampler
against exact Boltzmann statistics.

The models, exact inference and samplers are imported with the package; the others, and the
most used names from them (:func:`boltzmann_attention`, :class:`BoltzmannMultiHeadAttention`,
:class:`Couplings`, :func:`get_sampler`, :func:`compare_samplers`), on first use, so that
``import isingattn`` does not load Flax, matplotlib or numpyro.
"""

import importlib

from . import exact, models, samplers
from .models import IsingModel, SparseIsingModel, Vartype
from .samplers import BACKENDS, Samples, get_sampler

__version__ = "0.1.0"

#: Subpackages imported on first attribute access.
_LAZY_MODULES = ("attention", "diagnostics", "experiments", "probabilistic", "quantum",
                 "testing")
#: Names imported on first access: name -> subpackage.
_LAZY_NAMES = {
    "boltzmann_attention": "attention",
    "BoltzmannMultiHeadAttention": "attention",
    "Couplings": "attention",
    "compare_samplers": "diagnostics",
}

__all__ = ["BACKENDS", "BoltzmannMultiHeadAttention", "Couplings", "IsingModel", "Samples",
           "SparseIsingModel", "Vartype", "attention", "boltzmann_attention",
           "compare_samplers", "diagnostics", "exact", "experiments", "get_sampler", "models",
           "probabilistic", "quantum", "samplers", "testing"]


def __getattr__(name):
    if name in _LAZY_MODULES:
        module = importlib.import_module(f".{name}", __name__)
    elif name in _LAZY_NAMES:
        module = getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    else:
        raise AttributeError(f"module 'isingattn' has no attribute {name!r}")
    globals()[name] = module  # later accesses skip this function
    return module


def __dir__():
    return sorted(set(globals()) | set(__all__))
