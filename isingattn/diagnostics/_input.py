"""Turning ``Samples`` or raw arrays into checked float64 arrays (private helpers).

:class:`Draws` and :func:`as_draws` live in :mod:`isingattn._draws` (shared with
:mod:`isingattn.probabilistic`) and are re-exported here for the diagnostics modules.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

from .._draws import Draws, as_draws
from .._validation import shape_str
from ..samplers import Samples

__all__ = ["Draws", "as_draws", "as_series", "import_arviz", "quiet_arviz"]


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
