"""``IsingDistribution``: an Ising model as a numpyro distribution."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro.distributions import constraints

from ..models import ModelBase, Vartype


class _IsingSupport(constraints.Constraint):
    """States ``{-1, +1}^n`` (SPIN) or ``{0, 1}^n`` (BINARY); one event is a vector."""

    is_discrete = True
    event_dim = 1

    def __init__(self, vartype):
        self.vartype = Vartype(vartype)

    def __call__(self, x):
        x = jnp.asarray(x)
        lo = -1 if self.vartype is Vartype.SPIN else 0
        return jnp.all((x == lo) | (x == 1), axis=-1)

    def feasible_like(self, prototype):
        lo = -1 if self.vartype is Vartype.SPIN else 0
        return jnp.full_like(prototype, lo)

    def tree_flatten(self):
        return (), ((), {"vartype": self.vartype})

    def __repr__(self):
        return f"IsingSupport({self.vartype.value})"

    def eq(self, other, static=False):
        return isinstance(other, _IsingSupport) and other.vartype is self.vartype


class IsingDistribution(dist.Distribution):
    """The Boltzmann distribution ``p(x) = exp(-beta E(x)) / Z(beta)`` of an Ising model as a
    numpyro distribution, so the model can be a node of a numpyro program.

    Shapes follow numpyro: ``batch_shape`` is the model's batch shape, ``event_shape = (n,)``; a
    value is ``sample_shape + batch_shape + (n,)`` (note: sample dimensions come *first* here,
    while :meth:`isingattn.IsingModel.energy` puts the model's batch first; this class converts).

    - :meth:`log_prob`: exact, ``-beta E(x) - log Z`` with ``log Z`` by enumeration
      (``n <= 30``; differentiable in the model's parameters, so ``beta``, ``h`` or ``J`` may be
      numpyro sample sites). ``-inf`` for a state with a masked variable off its low value.
      For larger ``n`` it raises ``NotImplementedError``; :meth:`unnormalized_log_prob` is
      always available.
    - :meth:`sample`: draws through ``sampler`` (default
      :class:`~isingattn.samplers.ExactSampler`; any backend of
      :data:`isingattn.samplers.BACKENDS` works, with ``sampler_options``), one chain of
      ``prod(sample_shape)`` draws, run eagerly (not inside ``jit``).

    Example:
      >>> import jax, numpyro, numpyro.distributions as nd
      >>> from isingattn.models import chain
      >>> from isingattn.probabilistic import IsingDistribution
      >>> x = IsingDistribution(chain(5, beta=0.5)).sample(jax.random.key(0), (100,))
      >>> def m(x):
      ...     beta = numpyro.sample("beta", nd.HalfNormal(2.0))
      ...     numpyro.sample("x", IsingDistribution(chain(5, beta=beta)), obs=x)
    """

    arg_constraints: ClassVar[dict] = {}
    pytree_data_fields = ("model",)
    pytree_aux_fields = ("sampler", "sampler_options", "_vartype")
    has_enumerate_support = False

    def __init__(self, model, *, sampler=None, sampler_options=None, validate_args=None):
        if not isinstance(model, ModelBase):
            raise TypeError(
                f"model must be an IsingModel or SparseIsingModel; got {type(model).__name__}"
            )
        self.model = model
        self.sampler = sampler
        self.sampler_options = dict(sampler_options or {})
        self._vartype = model.vartype
        super().__init__(batch_shape=tuple(model.batch_shape), event_shape=(model.n,),
                         validate_args=validate_args)

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self):
        return _IsingSupport(self._vartype)

    # ------------------------------------------------------------------ densities
    def _energy(self, value):
        m = self.model
        batch, n = tuple(m.batch_shape), m.n
        value = jnp.asarray(value, m.dtype)
        if value.ndim < 1 or value.shape[-1] != n:
            raise ValueError(f"value must have shape sample_shape + batch_shape + (n,) with "
                             f"n = {n}; got {value.shape}")
        nb = len(batch)
        S = value.shape[: max(0, value.ndim - 1 - nb)]
        value = jnp.broadcast_to(value, S + batch + (n,))
        flat = value.reshape((-1,) + batch + (n,))
        e = m.energy(jnp.moveaxis(flat, 0, nb))  # batch + (S,)
        e = jnp.moveaxis(e, -1, 0).reshape(S + batch)
        lo = m.vartype.low
        mask = jnp.broadcast_to(m.mask, batch + (n,))
        off = jnp.any(~mask & (value != lo), axis=-1)
        return e, off

    def unnormalized_log_prob(self, value):
        """``-beta E(x)`` (no ``log Z``), shape ``sample_shape + batch_shape``; any ``n``."""
        e, off = self._energy(value)
        beta = jnp.broadcast_to(self.model.beta, self.batch_shape)
        return jnp.where(off, -jnp.inf, -beta * e)

    def log_partition(self):
        """``log Z(beta)`` by exact enumeration, shape ``batch_shape`` (``n <= 30``)."""
        from .. import exact

        if self.model.n > exact.MAX_ENUMERATION_N:
            raise NotImplementedError(
                f"IsingDistribution.log_prob needs log Z by enumeration (n <= "
                f"{exact.MAX_ENUMERATION_N}); this model has n = {self.model.n}. Use "
                "unnormalized_log_prob, or a pseudo-likelihood "
                "(isingattn.probabilistic.effective_beta_bayes(likelihood='pseudo'))."
            )
        return exact.log_partition(self.model)

    def log_prob(self, value):
        """Exact ``log p(x) = -beta E(x) - log Z``, shape ``sample_shape + batch_shape``."""
        if self._validate_args:
            self._validate_sample(value)
        return self.unnormalized_log_prob(value) - self.log_partition()

    # ------------------------------------------------------------------ sampling
    def sample(self, key, sample_shape=()):
        """Draws through the chosen backend, shape ``sample_shape + batch_shape + (n,)``."""
        from .._validation import normalize_key
        from ..samplers import ExactSampler

        key = normalize_key(key)  # numpyro passes raw jax.random.PRNGKey data
        sampler = self.sampler if self.sampler is not None else ExactSampler()
        sample_shape = tuple(sample_shape)
        S = 1
        for s in sample_shape:
            S *= int(s)
        m = self.model
        batch, nb = tuple(m.batch_shape), len(m.batch_shape)
        if S == 0:
            return jnp.zeros(sample_shape + batch + (m.n,), m.dtype)
        draws = sampler.sample(m, key, S, num_chains=1, **self.sampler_options).spins
        draws = draws.reshape(batch + (S, m.n))
        return jnp.moveaxis(draws, nb, 0).reshape(sample_shape + batch + (m.n,))

    # ------------------------------------------------------------------ moments
    @property
    def mean(self):
        """Exact ``<x_i>``, shape ``batch_shape + (n,)`` (``n <= 30``)."""
        from .. import exact

        return exact.marginals(self.model)

    @property
    def variance(self):
        """Exact ``Var(x_i)``: ``1 - <x_i>^2`` (SPIN) or ``<x_i>(1 - <x_i>)`` (BINARY)."""
        m = self.mean
        return 1 - m**2 if self._vartype is Vartype.SPIN else m * (1 - m)
