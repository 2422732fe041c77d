"""ParallelTemperingSampler: replica exchange on a beta ladder around any MCMC local move."""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import is_concrete
from ._gibbs import GibbsSampler
from ._mcmc import MCMCSampler


class TemperingState(NamedTuple):
    """State of :class:`ParallelTemperingSampler` for one chain.

    ``x`` (n,): the configuration at the target (coldest) rung; ``local``: the local kernel's
    state of every replica, leading axis ``num_replicas`` (rung 0 hottest, last = target);
    ``count``: sweeps done (selects even or odd pairs for the exchange).
    """

    x: jax.Array
    local: Any
    count: jax.Array


@dataclasses.dataclass(frozen=True)
class ParallelTemperingSampler(MCMCSampler):
    """Parallel tempering (replica exchange): ``num_replicas`` copies of the chain at inverse
    temperatures ``beta_0 < beta_1 < ... < beta_{R-1}``; the last (coldest) rung is the target
    beta, and only its configurations are returned, so samples follow ``exp(-beta E) / Z``.

    Each sweep: one ``local`` sweep of every replica at its own rung, then exchange attempts
    between neighbouring rungs, pairs ``(0,1), (2,3), ...`` after even sweeps and
    ``(1,2), (3,4), ...`` after odd ones, each accepted with probability
    ``min(1, exp((beta_{r+1} - beta_r) (E_{r+1} - E_r)))``.

    Args:
      local: any :class:`MCMCSampler` (Gibbs, Metropolis, Swendsen–Wang, ...) whose state
        depends only on the configuration (it is swapped with it).
      betas: the ladder, ascending, positive. It is rescaled by ``beta / betas[-1]`` so that its
        last rung is the target beta (the model's beta, or the ``beta_schedule`` value of the
        sweep): give ``betas`` ending at the model's beta to use them as they are.
      num_replicas: rungs of the default geometric ladder (ignored when ``betas`` is given).
      beta_min: the hottest rung of the default ladder, ``beta_r = beta_min (beta /
        beta_min)^(r / (R - 1))``; default ``beta / 10`` (``beta_min_ratio``).

    ``info`` per chain: the local kernel's info at the target rung, ``swap_acceptance``
    (``num_replicas - 1``,), the mean over sweeps of the exchange acceptance probability of each
    neighbour pair (computed every sweep, whether or not that pair was tried), and ``betas``
    (``num_replicas``,), the mean ladder.

    Example:
      >>> import jax
      >>> from isingattn.models import random_dense
      >>> from isingattn.samplers import ParallelTemperingSampler
      >>> m = random_dense(jax.random.key(0), 8, beta=2.0)
      >>> pt = ParallelTemperingSampler(num_replicas=4)
      >>> s = pt.sample(m, jax.random.key(1), 100, num_chains=2)
      >>> s.spins.shape, s.info["swap_acceptance"].shape
      ((2, 100, 8), (2, 3))
    """

    local: MCMCSampler = GibbsSampler()  # noqa: RUF009 (frozen, hashable: a safe default)
    betas: tuple | None = None
    num_replicas: int = 8
    beta_min: float | None = None
    beta_min_ratio: float = 0.1

    def __post_init__(self):
        if not isinstance(self.local, MCMCSampler) or isinstance(
            self.local, ParallelTemperingSampler
        ):
            raise TypeError(
                "local must be an MCMC sampler such as GibbsSampler() or MetropolisSampler() "
                f"(not parallel tempering); got {self.local!r}"
            )
        if self.betas is not None:
            b = np.asarray(self.betas, float)
            if b.ndim != 1 or b.size < 2:
                raise ValueError(
                    f"betas must be a 1-D ladder of at least 2 inverse temperatures; got {self.betas!r}"
                )
            if not (np.all(np.isfinite(b)) and np.all(b > 0) and np.all(np.diff(b) > 0)):
                raise ValueError(
                    f"betas must be positive, finite and strictly increasing; got {b.tolist()}"
                )
            object.__setattr__(self, "betas", tuple(float(v) for v in b))
            object.__setattr__(self, "num_replicas", len(b))
        if (isinstance(self.num_replicas, bool) or not isinstance(self.num_replicas, numbers.Integral)
                or self.num_replicas < 2):
            raise ValueError(f"num_replicas must be an integer >= 2; got {self.num_replicas!r}")
        if self.beta_min is not None and not (np.isfinite(self.beta_min) and self.beta_min > 0):
            raise ValueError(f"beta_min must be positive and finite; got {self.beta_min!r}")
        if not (0 < self.beta_min_ratio < 1):
            raise ValueError(f"beta_min_ratio must be in (0, 1); got {self.beta_min_ratio!r}")

    @property
    def properties(self):
        return {"mcmc": True, "local": type(self.local).__name__, "betas": self.betas,
                "num_replicas": self.num_replicas, "beta_min": self.beta_min}

    def check_model(self, model):
        self.local.check_model(model)
        if self.betas is None and self.beta_min is not None and is_concrete(model.beta):
            bmin = float(np.min(np.asarray(model.beta)))
            if self.beta_min >= bmin:
                raise ValueError(
                    f"beta_min = {self.beta_min} must be below the model's beta ({bmin}): the "
                    "ladder runs from beta_min (hottest) up to the target beta"
                )

    def ladder(self, beta):
        """The rungs ``(num_replicas,)`` for target ``beta`` (ascending, last == beta)."""
        R = self.num_replicas
        if self.betas is not None:
            b = jnp.asarray(self.betas, jnp.result_type(beta))
            return b * (beta / b[-1])
        t = jnp.arange(R, dtype=jnp.result_type(beta)) / (R - 1)
        bmin = beta * self.beta_min_ratio if self.beta_min is None else self.beta_min
        lad = bmin * (beta / bmin) ** t
        return lad.at[-1].set(beta)

    def init(self, model, key, x0):
        R = self.num_replicas
        k_x, k_init = jax.random.split(key)
        low, high = model.vartype.values
        xs = jnp.where(jax.random.bernoulli(k_x, 0.5, (R, model.n)), high, low)
        xs = xs.astype(model.dtype).at[-1].set(jnp.asarray(x0, model.dtype))
        xs = jnp.where(model.mask, xs, low)
        local = jax.vmap(self.local.init, in_axes=(None, 0, 0))(
            model, jax.random.split(k_init, R), xs)
        return TemperingState(local.x[-1], local, jnp.int32(0))

    def step(self, model, state, key, beta):
        R = self.num_replicas
        lad = self.ladder(beta)
        k_local, k_swap = jax.random.split(key)
        local, linfo = jax.vmap(self.local.step, in_axes=(None, 0, 0, 0))(
            model, state.local, jax.random.split(k_local, R), lad)
        E = model.energy(local.x)  # (R,)
        log_acc = (lad[1:] - lad[:-1]) * (E[1:] - E[:-1])
        p_acc = jnp.exp(jnp.minimum(log_acc, 0.0))
        u = jax.random.uniform(k_swap, (R - 1,), p_acc.dtype)
        tried = (jnp.arange(R - 1) % 2) == (state.count % 2)
        swap = tried & (u < p_acc)
        # disjoint pairs: replica r takes r+1's state where pair r swaps, r+1 takes r's
        idx = jnp.arange(R)
        take_up = jnp.concatenate([swap, jnp.zeros((1,), bool)])
        take_down = jnp.concatenate([jnp.zeros((1,), bool), swap])
        perm = idx + take_up.astype(jnp.int32) - take_down.astype(jnp.int32)
        local = jax.tree_util.tree_map(lambda a: a[perm], local)
        info = {k: v[-1] for k, v in linfo.items()}
        info["swap_acceptance"] = p_acc
        info["betas"] = lad
        return TemperingState(local.x[-1], local, state.count + 1), info


__all__ = ["ParallelTemperingSampler", "TemperingState"]
