"""Turning ``Samples`` or raw arrays into checked float64 arrays (private helpers)."""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

from .._validation import shape_str
from ..models import ModelBase, Vartype
from ..samplers import Samples


@contextlib.contextmanager
def quiet_arviz():
    """Import/use arviz without its import-time migration notice (real warnings still show:
    only the ``FutureWarning``/``UserWarning`` about the arviz 1.0 migration is filtered)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*arviz.*1\\.0.*", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*[Mm]igrat.*")
        yield


def import_arviz():
    with quiet_arviz():
        import arviz as az
    return az


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


def as_series(x, name="x", *, min_draws=4, min_chains=1):
    """A float64 array ``batch + (chain, draw)`` with at least ``min_draws`` draws per chain."""
    if isinstance(x, Samples):
        raise TypeError(
            f"{name} must be a scalar series shaped batch + (chain, draw), e.g. samples.energy; "
            "got a Samples object"
        )
    x = np.asarray(x, np.float64)
    if x.ndim < 2:
        hint = " (add a chain axis, e.g. x[None])" if x.ndim == 1 else ""
        raise ValueError(f"{name} must have shape batch + (chain, draw); got {shape_str(x.shape)}{hint}")
    if x.shape[-1] < min_draws:
        raise ValueError(
            f"{name} has {x.shape[-1]} draw(s) per chain (shape {shape_str(x.shape)}); this "
            f"estimate needs a chain of at least {min_draws} draws"
        )
    if x.shape[-2] < min_chains:
        raise ValueError(
            f"{name} has {x.shape[-2]} chain(s) (shape {shape_str(x.shape)}); this estimate needs "
            f"at least {min_chains} chains"
        )
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite; found NaN or inf")
    return x
