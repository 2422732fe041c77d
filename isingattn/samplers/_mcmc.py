"""The driver shared by every MCMC backend.

A backend is a frozen dataclass (hashable: its configuration is part of the compiled program)
that subclasses :class:`MCMCSampler` and supplies a pure kernel, blackjax-style:

* ``init(model, key, x0) -> state``: ``state`` is a pytree with at least the field ``x``
  (the current configuration, shape ``(n,)``, in the model's vartype);
* ``step(model, state, key, beta) -> (state, info)``: one sweep at inverse temperature ``beta``;
  ``info`` is a dict of scalars (acceptance rate, cluster size, ...).

Both act on ONE model (batch shape ``()``) and ONE chain; the driver ``vmap``s them over chains
and over every model of the batch, ``lax.scan``s over sweeps, and jit-compiles the whole run
once per (backend configuration, model structure, sizes). Users who want their own driver call
``init``/``step`` directly.

Run layout: ``num_burnin`` sweeps are discarded, then ``num_samples`` draws are kept, one every
``thinning`` sweeps. ``beta_schedule`` (optional) gives the inverse temperature of every sweep,
length ``num_burnin + num_samples * thinning``; by default every sweep uses the model's ``beta``.
``info`` of the result holds the mean of each kernel info entry over the kept sweeps, shaped
``batch + (chain,)``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_positive_int, is_concrete, shape_str
from ..models import ModelBase
from ._base import Sampler

MCMC_PARAMETERS = {"num_burnin": [], "thinning": [], "initial_states": [], "beta_schedule": []}


def random_initial_states(model_flat, key, num_chains):
    """Uniformly random states ``(B, chain, n)`` with masked variables at the low value."""
    B, n = model_flat.h.shape
    low, high = model_flat.vartype.values
    bits = jax.random.bernoulli(key, 0.5, (B, num_chains, n))
    x = jnp.where(bits, high, low).astype(model_flat.dtype)
    return jnp.where(model_flat.mask[:, None, :], x, low)


def check_initial_states(initial_states, model, num_chains):
    """Validate user initial states and broadcast them to ``batch + (chain, n)``."""
    x = jnp.asarray(initial_states, model.dtype)
    target = model.batch_shape + (num_chains, model.n)
    try:
        x = jnp.broadcast_to(x, target)
    except ValueError:
        raise ValueError(
            f"initial_states must broadcast to batch + (chain, n) = {shape_str(target)}; got "
            f"{shape_str(x.shape)}"
        ) from None
    if is_concrete(x):
        vals = set(np.unique(np.asarray(x)).tolist())
        allowed = set(float(v) for v in model.vartype.values)
        if not vals <= allowed:
            raise ValueError(
                f"initial_states must hold {model.vartype.value} values {sorted(allowed)}; "
                f"found {sorted(vals - allowed)}"
            )
    return x


def check_beta_schedule(beta_schedule, total_sweeps):
    sched = np.asarray(beta_schedule, dtype=float)
    if sched.ndim != 1 or sched.shape[0] != total_sweeps:
        raise ValueError(
            "beta_schedule must be a 1-D array with one inverse temperature per sweep, length "
            f"num_burnin + num_samples * thinning = {total_sweeps}; got shape "
            f"{shape_str(sched.shape)}"
        )
    if not (np.all(np.isfinite(sched)) and np.all(sched > 0)):
        bad = sched[~(np.isfinite(sched) & (sched > 0))][0]
        raise ValueError(f"beta_schedule must be positive and finite; found {bad}")
    return sched


@dataclasses.dataclass(frozen=True)
class MCMCSampler(Sampler):
    """Base class of MCMC backends; see the module docstring for the kernel contract.

    Options of :meth:`sample` (besides ``num_chains``): ``num_burnin`` (default
    :attr:`default_burnin`), ``thinning`` (default 1), ``initial_states`` (``batch + (chain, n)``,
    broadcastable; default uniformly random, masked variables at the low value),
    ``beta_schedule`` (see module docstring).
    """

    default_burnin = 100

    @property
    def parameters(self):
        return dict(MCMC_PARAMETERS)

    @property
    def properties(self):
        return {"mcmc": True, **{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}}

    # -- kernel (override) -------------------------------------------------------------
    def init(self, model, key, x0):
        raise NotImplementedError

    def step(self, model, state, key, beta):
        raise NotImplementedError

    def check_model(self, model):
        """Raise a clear error if this backend cannot sample ``model`` (override)."""

    # -- driver ------------------------------------------------------------------------
    def _sample(self, model, key, num_samples, num_chains, *, num_burnin=None, thinning=1,
                initial_states=None, beta_schedule=None):
        num_burnin = self.default_burnin if num_burnin is None else num_burnin
        num_burnin = check_positive_int("num_burnin", num_burnin, 0)
        thinning = check_positive_int("thinning", thinning, 1)
        self.check_model(model)
        total = num_burnin + num_samples * thinning
        flat = model.flatten_batch()
        B = flat.h.shape[0]
        k_init, k_run = jax.random.split(key)
        if initial_states is None:
            x0 = random_initial_states(flat, k_init, num_chains)
        else:
            x0 = check_initial_states(initial_states, model, num_chains).reshape(
                (B, num_chains, model.n))
        if beta_schedule is None:
            betas = jnp.broadcast_to(flat.beta[:, None], (B, total))
        else:
            sched = jnp.asarray(check_beta_schedule(beta_schedule, total), model.dtype)
            betas = jnp.broadcast_to(sched, (B, total))
        keys = jax.random.split(k_run, B * num_chains).reshape(B, num_chains)
        xs, info = _run(self, flat, keys, x0, betas, num_burnin, num_samples, thinning)
        batch = model.batch_shape
        spins = xs.reshape(batch + (num_chains, num_samples, model.n))
        info = {k: v.reshape(batch + (num_chains,)) for k, v in info.items()}
        return spins, info


@functools.partial(jax.jit, static_argnums=(0, 5, 6, 7))
def _run(sampler, flat, keys, x0, betas, num_burnin, num_samples, thinning):
    def one_chain(model, key, x, beta_row):
        k_init, k_burn, k_draw = jax.random.split(key, 3)
        state = sampler.init(model, k_init, x)

        def sweep(state, kb):
            k, beta = kb
            return sampler.step(model, state, k, beta)

        if num_burnin:
            state, _ = jax.lax.scan(
                sweep, state, (jax.random.split(k_burn, num_burnin), beta_row[:num_burnin])
            )
        draw_betas = beta_row[num_burnin:].reshape(num_samples, thinning)

        def draw(state, kb):
            k, brow = kb
            state, infos = jax.lax.scan(sweep, state, (jax.random.split(k, thinning), brow))
            return state, (state.x, jax.tree_util.tree_map(jnp.mean, infos))

        _, (xs, infos) = jax.lax.scan(
            draw, state, (jax.random.split(k_draw, num_samples), draw_betas)
        )
        return xs, jax.tree_util.tree_map(jnp.mean, infos)

    per_model = jax.vmap(one_chain, in_axes=(None, 0, 0, None))
    return jax.vmap(per_model)(flat, keys, x0, betas)
