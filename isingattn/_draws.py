"""Checked draws shared by the diagnostics and the probabilistic models (private helpers).

:func:`as_draws` turns a :class:`~isingattn.samplers.Samples` or a raw array shaped
``batch + (chain, draw, n)`` into :class:`Draws` (float64 states, mask, vartype, energies).
It sits below :mod:`isingattn.diagnostics` and :mod:`isingattn.probabilistic` so that neither
imports the other's private modules; it needs only :mod:`isingattn.models` and
:mod:`isingattn.samplers`.
"""

from __future__ import annotations

import numpy as np

from ._validation import shape_str
from .models import ModelBase, Vartype
from .samplers import Samples


class Draws:
    """Checked draws: ``x`` float64 ``batch + (chain, draw, n)``, ``mask`` bool ``batch + (n,)``,
    ``vartype`` (or None when unknown), ``energy`` ``batch + (chain, draw)`` or None."""

    def __init__(self, x, mask, vartype, energy, model):
        self.x, self.mask, self.vartype, self.energy, self.model = x, mask, vartype, energy, model

    @property
    def batch_shape(self):
        return self.x.shape[:-3]

    @property
    def n(self):
        return self.x.shape[-1]

    @property
    def num_active(self):
        return self.mask.sum(-1)

    def active(self):
        """``x`` with masked variables set to 0 (they contribute nothing to sums)."""
        return np.where(self.mask[..., None, None, :], self.x, 0.0)


def as_draws(samples, model=None, *, name="samples", need_energy=False) -> Draws:
    """Validate ``samples`` (a :class:`Samples` or an array ``batch + (chain, draw, n)``)
    against ``model`` (optional) and return :class:`Draws`."""
    if model is not None and not isinstance(model, ModelBase):
        raise TypeError(
            f"model must be an IsingModel or SparseIsingModel (or None); got {type(model).__name__}"
        )
    energy = None
    vartype = None
    if isinstance(samples, Samples):
        x = np.asarray(samples.spins, np.float64)
        energy = samples.energy
        vartype = samples.vartype
    else:
        try:
            x = np.asarray(samples, np.float64)
        except (TypeError, ValueError):
            raise TypeError(
                f"{name} must be a Samples object or a numeric array shaped batch + (chain, draw, "
                f"n); got {type(samples).__name__}"
            ) from None
    if x.ndim < 3:
        hint = " (add a chain axis, e.g. x[None])" if x.ndim == 2 else ""
        raise ValueError(
            f"{name} must have shape batch + (chain, draw, n); got {shape_str(x.shape)}{hint}"
        )
    if model is not None:
        if vartype is not None and vartype is not model.vartype:
            raise ValueError(
                f"{name} are in vartype {vartype.value} but the model is {model.vartype.value}; "
                f"convert the model with model.to_vartype({vartype.value!r})"
            )
        vartype = model.vartype
        if x.shape[-1] != model.n:
            raise ValueError(
                f"{name} have n = {x.shape[-1]} variables (shape {shape_str(x.shape)}) but the "
                f"model has n = {model.n}"
            )
        mb = tuple(model.batch_shape)
        if tuple(x.shape[:-3]) != mb:
            raise ValueError(
                f"{name} must have shape model.batch_shape + (chain, draw, n) = "
                f"{shape_str(mb + ('chain', 'draw', model.n))}; got {shape_str(x.shape)}"
            )
        mask = np.broadcast_to(np.asarray(model.mask, bool), mb + (model.n,))
    else:
        mask = np.ones(x.shape[:-3] + (x.shape[-1],), bool)
    if model is not None and (need_energy or energy is not None):
        # The model given here defines the energy: Samples.energy belongs to the model that
        # was sampled, which need not be this one (e.g. an effective-temperature fit).
        energy = np.asarray(model.energy(x), np.float64)
    elif energy is not None:
        energy = np.asarray(energy, np.float64)
    if need_energy and energy is None:
        raise ValueError(
            f"energies are needed: pass {name} as a Samples object (it carries energies) or pass "
            "the model"
        )
    if vartype is None:
        vals = np.unique(x)
        if vals.size and np.all(np.isin(vals, (-1.0, 1.0))) and np.any(vals == -1.0):
            vartype = Vartype.SPIN
        elif vals.size and np.all(np.isin(vals, (0.0, 1.0))):
            vartype = Vartype.BINARY
    return Draws(x, mask, vartype, energy, model)
