"""The MCMC kernel base class, and the single-site machinery of Gibbs/Metropolis.

A backend is a frozen dataclass (hashable: its configuration is part of the compiled program)
that subclasses :class:`MCMCSampler` and supplies a pure kernel, blackjax-style:

* ``init(model, key, x0) -> state``: ``state`` is a pytree (a NamedTuple) with at least the
  field ``x`` (the current configuration, shape ``(n,)``, in the model's vartype);
* ``step(model, state, key, beta) -> (state, info)``: one sweep at inverse temperature ``beta``;
  ``info`` is a dict of arrays of fixed shape, usually scalars (acceptance rate, cluster size,
  ...; parallel tempering adds one entry per replica pair).

Both act on ONE model (batch shape ``()``) and ONE chain. The driver
(:mod:`isingattn.samplers._driver`: :func:`init_chains`, :func:`run_chains`) runs any kernel
over chains and models with burn-in, thinning, a β schedule and observers; ``sample`` is one
such run returning every kept configuration.

The driver calls ``step_chains(model, states, keys, beta)`` (all chains of one model, leading
chain axis), which defaults to ``vmap(step)``; a backend may override it with a faster layout
as long as the result is the same (the single-site samplers put the chain axis minor).

A backend whose state carries its own random stream (``carries_stream = True``: the
single-site samplers and Swendsen–Wang, whose xoshiro128** generators are seeded by ``init``)
also accepts ``key=None`` in ``step``/``step_chains``: the sweep then continues the state's
stream without mixing in a fresh key; the driver then runs loops that hold nothing but the
kernel, at a fixed β or under a schedule (see :mod:`~isingattn.samplers._driver` and
``docs/guide/mcmc.md``). Kernels may also supply loop-invariant tables (``prepare``), which the
driver computes before its loops, and run many sweeps per call (``runs_sweeps``,
``sweeps_chains``: the single-site samplers' compiled chromatic sweeps).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_choice
from ..models import IsingModel, SparseIsingModel
from ._base import Sampler
from ._driver import init_chains, run_chains
from ._rng import bits_to_uniform, xoshiro_mix, xoshiro_next, xoshiro_seed

MCMC_PARAMETERS = {"num_burnin": [], "thinning": [], "initial_states": [], "beta_schedule": []}


@dataclasses.dataclass(frozen=True)
class MCMCSampler(Sampler):
    """Base class of MCMC backends; see the module docstring for the kernel contract.

    Options of :meth:`sample` (besides ``num_chains``): ``num_burnin`` (default
    :attr:`default_burnin`), ``thinning`` (default 1), ``initial_states`` (``batch + (chain, n)``,
    broadcastable; default uniformly random, masked variables at the low value),
    ``beta_schedule`` (one β per sweep; see :func:`~isingattn.samplers.run_chains`). For runs
    that record less than every configuration, or continue in chunks, use
    :func:`~isingattn.samplers.init_chains` and :func:`~isingattn.samplers.run_chains`.
    """

    default_burnin = 100
    #: True when the kernel's state carries its own random stream, seeded by ``init``, so that
    #: ``step(model, state, None, beta)`` continues it (see the module docstring).
    carries_stream = False

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

    def step_chains(self, model, states, keys, beta):
        """One sweep of many chains of one model (``states`` and ``keys`` with a leading chain
        axis); what the driver calls. Must equal ``vmap(step)``, which is the default; a
        backend may override it with a faster layout (e.g. chains as the minor axis)."""
        return jax.vmap(self.step, in_axes=(None, 0, 0, None))(model, states, keys, beta)

    def check_model(self, model):
        """Raise a clear error if this backend cannot sample ``model`` (override)."""

    def runs_sweeps(self, model, num_chains=None):
        """Whether :meth:`sweeps_chains` runs many sweeps of ``model`` (with ``num_chains``
        chains, where known) in one call (False by default; the driver then steps sweep by
        sweep)."""
        return False

    def sweeps_chains(self, model, states, num_sweeps, beta, prep=None):
        """``num_sweeps`` sweeps of all chains at a fixed ``beta`` continuing their streams
        (``num_sweeps`` may be traced): ``(states, info)`` with each info entry summed over the
        sweeps. Only where :meth:`runs_sweeps`; the driver then calls it for a fixed-β run's
        burn-in and between kept draws, once each."""
        raise NotImplementedError(f"{type(self).__name__} runs sweep by sweep")

    def prepare(self, model, beta, num_chains):
        """Loop-invariant arrays of ``step_chains`` for ``model`` at a fixed ``beta`` (None
        when the run follows a schedule: the arrays must then not depend on it) with
        ``num_chains`` chains (those of one lane when the driver splits them), or None (the
        default). The streamed driver computes them once,
        before its loops, and passes them as ``step_chains(..., prep=prep)``: XLA does not hoist
        size-inflating operations (neighbour-table gathers, tiling over chains) out of a loop,
        and left inside they both cost time and split the loop body's dependency chain."""

    # -- sampling: one driver run keeping every configuration ---------------------------
    def _sample(self, model, key, num_samples, num_chains, *, num_burnin=None, thinning=1,
                initial_states=None, beta_schedule=None):
        num_burnin = self.default_burnin if num_burnin is None else num_burnin
        chains = init_chains(self, model, key, num_chains, initial_states=initial_states)
        run = run_chains(self, model, chains, num_samples, num_burnin=num_burnin,
                         thinning=thinning, beta_schedule=beta_schedule)
        return run.draws, run.info


# ---------------------------------------------------------------------------------------------
# Single-site samplers (Gibbs, Metropolis).
# ---------------------------------------------------------------------------------------------


class SingleSiteState(NamedTuple):
    """State of a single-site kernel for one chain: the configuration ``x`` (n,) and the
    xoshiro128** generator state ``rng`` (4 uint32 arrays of shape ``(lanes,)``; one lane for
    sequential and random order, the largest colour class for chromatic order)."""

    x: jax.Array
    rng: tuple


ORDERS = ("auto", "sequential", "random", "chromatic")
#: Chains per model from which ``backend="auto"`` runs chromatic sweeps on the compiled kernel
#: (it vectorizes over chains; below this XLA, vectorizing over a colour class, is faster:
#: ``docs/guide/mcmc.md``).
KERNEL_MIN_CHAINS = 64


class _ChromaticPlan(NamedTuple):
    perm: np.ndarray  # variables ordered colour class by colour class
    inv: np.ndarray  # inverse permutation
    bounds: tuple  # class c occupies perm[bounds[c]:bounds[c+1]]
    nbr: np.ndarray  # neighbour tables in the permuted order (pad n), rows permuted
    nbr_e: np.ndarray  # matching edge indices (pad E), rows permuted
    lanes: int  # size of the largest class


@functools.lru_cache(maxsize=64)
def _chromatic_plan(graph, strategy):
    from ._colouring import colour_classes

    classes = colour_classes(graph, strategy)
    n = graph.n
    perm = np.concatenate(classes) if classes else np.zeros(0, np.int32)
    inv = np.argsort(perm).astype(np.int32)
    nb = graph.neighbors
    nbr = np.where(nb < n, inv[np.minimum(nb, max(n - 1, 0))], n)[perm].astype(np.int32)
    bounds = tuple(int(b) for b in np.cumsum([0] + [len(c) for c in classes]))
    lanes = max((len(c) for c in classes), default=1)
    return _ChromaticPlan(perm.astype(np.int32), inv, bounds, nbr,
                          graph.neighbor_edges[perm].astype(np.int32), lanes)


@dataclasses.dataclass(frozen=True)
class SingleSiteSampler(MCMCSampler):
    """Shared sweep machinery of :class:`GibbsSampler` and :class:`MetropolisSampler`.

    One sweep is ``n`` single-site updates. ``order``:

    * ``"sequential"``: sites ``0, 1, ..., n-1`` in turn (dense or sparse models);
    * ``"random"``: ``n`` updates at sites drawn uniformly with replacement (random scan; a masked
      site drawn is a no-op and does not count in the acceptance rate);
    * ``"chromatic"``: sparse models only; the graph is coloured once (a checkerboard when it is
      bipartite, else networkx's greedy colouring, see
      :func:`~isingattn.samplers.colour_classes`) and all sites of one colour, which share no
      edge, update at once from their neighbour tables;
    * ``"auto"`` (default): sequential for dense models, chromatic for sparse ones.

    ``colouring``: the networkx greedy strategy for non-bipartite graphs
    (``"DSATUR"`` by default, see ``networkx.greedy_color``).

    The local field ``f_i = h_i + sum_j J_ij x_j`` (masked ``j`` excluded) is computed from the
    current configuration at every update (a length-``n`` row product for dense models, a
    neighbour-table gather for sparse ones), so nothing drifts in low precision. Uniforms come
    from xoshiro128** generators carried in the state, seeded by ``init`` and re-keyed by every
    step's key (see :func:`xoshiro_mix`; ``key=None`` continues the stream). ``info``:
    ``acceptance_rate``, the fraction of updates of unmasked sites that changed the variable.

    ``backend``: where chromatic sweeps run: ``"auto"`` (default: the compiled CPU kernel of
    :mod:`isingattn._kernels.chromatic` where JAX runs on the CPU and a model has at least
    :data:`KERNEL_MIN_CHAINS` chains, else XLA), ``"numba"`` or ``"jax"``. The kernel vectorizes
    over chains, XLA over the sites of a colour class: with few chains XLA is the faster. The
    kernel runs a fixed-β run's burn-in and the sweeps between kept draws in one
    call each, with the chain axis minor throughout; it draws the same uniforms as the XLA sweep
    (same draws, but for an update whose uniform falls within float32's ``exp`` rounding of
    its acceptance probability, about ``1e-7``).
    """

    order: str = "auto"
    colouring: str = "DSATUR"
    backend: str = "auto"
    carries_stream = True
    _rule = None  # the kernel's update rule (isingattn._kernels.chromatic.GIBBS, METROPOLIS)

    def __post_init__(self):
        check_choice("order", self.order, ORDERS)
        from .._kernels.ffi import BACKENDS
        from ._colouring import STRATEGIES

        check_choice("colouring", self.colouring, STRATEGIES)
        check_choice("backend", self.backend, BACKENDS)

    # -- the update rule (override) ----------------------------------------------------
    def _update(self, x, f, u, beta, low, high):
        """New value of a site holding ``x`` with local field ``f`` and uniform ``u``."""
        raise NotImplementedError

    # -- kernel ------------------------------------------------------------------------
    def check_model(self, model):
        if self.order == "chromatic" and not isinstance(model, SparseIsingModel):
            raise ValueError(
                "order='chromatic' needs a SparseIsingModel (a graph to colour); got a dense "
                "IsingModel. Use order='sequential' or 'random', or model.to_sparse()."
            )

    def resolved_order(self, model):
        """The order actually used for ``model`` (``"auto"`` resolved)."""
        if self.order != "auto":
            return self.order
        return "chromatic" if isinstance(model, SparseIsingModel) else "sequential"

    def init(self, model, key, x0):
        """State for one chain started at ``x0`` (masked variables set to the low value)."""
        x0 = jnp.asarray(x0, model.dtype)
        lanes = 1
        if self.resolved_order(model) == "chromatic":
            self.check_model(model)
            lanes = _chromatic_plan(model.graph, self.colouring).lanes
        return SingleSiteState(jnp.where(model.mask, x0, model.vartype.low),
                               xoshiro_seed(key, (lanes,)))

    def step(self, model, state, key, beta):
        """One sweep at inverse temperature ``beta``: ``(state, {"acceptance_rate": ...})``."""
        order = self.resolved_order(model)
        rng = state.rng if key is None else xoshiro_mix(state.rng, key)
        if order == "chromatic":
            self.check_model(model)
            x, rng, rate = self._chromatic_sweep(model, state.x, rng, beta)
        else:
            x, rng, rate = self._site_sweep(model, state.x, rng, beta, order == "random")
        return SingleSiteState(x, rng), {"acceptance_rate": rate}

    def prepare(self, model, beta, num_chains):
        """The chromatic sweep's per-colour coupling tables (see :meth:`MCMCSampler.prepare`)."""
        if self.resolved_order(model) != "chromatic":
            return None
        self.check_model(model)
        if self.runs_sweeps(model, num_chains):
            return self._kernel_tables(model)
        return self._chromatic_prep(model)

    def runs_sweeps(self, model, num_chains=None):
        """Chromatic order on the compiled kernel (see the class doc: ``backend``): with
        ``backend="auto"``, only from :data:`KERNEL_MIN_CHAINS` chains (``num_chains``, where
        known)."""
        from .._kernels import ffi

        if (self.backend == "auto" and num_chains is not None
                and num_chains < KERNEL_MIN_CHAINS):
            return False
        return (self.resolved_order(model) == "chromatic" and self._rule is not None
                and model.dtype in (jnp.float32, jnp.float64)
                and ffi.resolve_backend(self.backend) == "numba")

    def sweeps_chains(self, model, states, num_sweeps, beta, prep=None):
        """``num_sweeps`` chromatic sweeps in one call of the compiled kernel (see
        :meth:`MCMCSampler.sweeps_chains`); the acceptance rate summed over the sweeps."""
        from .._kernels import chromatic

        self.check_model(model)
        t = self._kernel_tables(model) if prep is None or "perm" not in prep else prep
        low, high = model.vartype.values
        x, rng, rate = chromatic.chromatic_sweeps(
            states.x, states.rng, t["perm"], t["nbr"], t["Jn"], t["h"], t["mask"],
            t["bounds"], beta, num_sweeps, rule=self._rule, low=low, high=high,
            active=t["active"])
        return SingleSiteState(x, rng), {"acceptance_rate": rate}

    def _kernel_tables(self, model):
        """The compiled kernel's tables: the sites class by class and their neighbours (in the
        model's own numbering) and couplings, fields and mask in that order."""
        plan = _chromatic_plan(model.graph, self.colouring)
        g = model.graph
        n = model.n
        Jpad = jnp.concatenate([model.active_J, jnp.zeros((1,), model.dtype)])
        nbr = np.where(g.neighbors < n, g.neighbors, n)[plan.perm].astype(np.int32)
        return {"perm": plan.perm, "nbr": nbr, "Jn": Jpad[plan.nbr_e],
                "h": model.h[plan.perm], "mask": model.mask[plan.perm],
                "bounds": np.asarray(plan.bounds, np.int32),
                "active": jnp.maximum(jnp.sum(model.mask), 1).astype(model.dtype)}

    def step_chains(self, model, states, keys, beta, prep=None):
        """Many chains of one model at once. Same result as ``vmap(step)``, but dense
        sequential and chromatic sweeps run with the chain axis minor (``x`` as ``(n, chain)``):
        a site's field is then one row product over contiguous chains and a neighbour gather
        copies whole rows (chromatic sweeps on the compiled kernel where :meth:`runs_sweeps`).
        ``prep``: :meth:`prepare`'s output for this model, or None."""
        order = self.resolved_order(model)
        dense = isinstance(model, IsingModel)
        if order == "random" or (order == "sequential" and not dense):
            return super().step_chains(model, states, keys, beta)
        if self.runs_sweeps(model, states.x.shape[0]):
            if keys is not None:
                states = states._replace(rng=jax.vmap(xoshiro_mix)(states.rng, keys))
            return self.sweeps_chains(model, states, 1, beta, prep)
        rng = states.rng if keys is None else jax.vmap(xoshiro_mix)(states.rng, keys)
        rng = tuple(r.T for r in rng)  # 4 arrays (lanes, chain)
        xt = states.x.T
        if order == "chromatic":
            self.check_model(model)
            xt, rng, rate = self._chromatic_sweep(model, xt, rng, beta, prep)
        else:
            xt, rng, rate = self._dense_sweep_chains(model, xt, rng, beta)
        return SingleSiteState(xt.T, tuple(r.T for r in rng)), {"acceptance_rate": rate}

    def _dense_sweep_chains(self, model, xt, rng, beta):
        low, high = model.vartype.values
        J, h, mask, dtype = model.active_J, model.h, model.mask, model.dtype
        s = tuple(r[0] for r in rng)  # one lane per chain: (chain,)

        def body(i, carry):
            xt, s = carry
            s, r = xoshiro_next(s)
            u = bits_to_uniform(r).astype(dtype)
            xi = xt[i]
            new = self._update(xi, h[i] + J[i] @ xt, u, beta, low, high)
            return xt.at[i].set(jnp.where(mask[i], new, xi)), s

        x0 = xt
        xt, s = jax.lax.fori_loop(0, model.n, body, (xt, s))
        # every site is updated once: the sites that changed are the accepted updates
        # (counted once per sweep, not per update, which keeps the update loop one chain)
        flips = jnp.sum(xt != x0, axis=0)
        rate = flips.astype(dtype) / jnp.maximum(jnp.sum(mask), 1).astype(dtype)
        return xt, tuple(v[None] for v in s), rate

    def _field_fn(self, model):
        """``field(i, x) -> f_i`` for one site (dense row product or sparse neighbour gather)."""
        h = model.h
        if isinstance(model, IsingModel):
            J = model.active_J

            def field(i, x):
                return h[i] + J[i] @ x

            return field
        g = model.graph
        if g.num_edges == 0:
            return lambda i, x: h[i]
        Jpad = jnp.concatenate([model.active_J, jnp.zeros((1,), model.dtype)])
        nbr, nbr_e = jnp.asarray(g.neighbors), jnp.asarray(g.neighbor_edges)

        def field(i, x):
            xpad = jnp.concatenate([x, jnp.zeros((1,), x.dtype)])
            return h[i] + jnp.sum(Jpad[nbr_e[i]] * xpad[nbr[i]])

        return field

    def _site_sweep(self, model, x, rng, beta, random_order):
        n = model.n
        low, high = model.vartype.values
        mask = model.mask
        field = self._field_fn(model)
        dtype = model.dtype

        def body(t, carry):
            x, s, flips, active = carry
            if random_order:
                s, r = xoshiro_next(s)
                # top 24 bits scaled to [0, n): exact for n a power of 2, bias <= n / 2^24
                i = jnp.minimum(((r[0] >> 8).astype(jnp.float32) * (n / 2.0**24))
                                .astype(jnp.int32), n - 1)
            else:
                i = t
            s, r = xoshiro_next(s)
            u = bits_to_uniform(r[0]).astype(dtype)
            xi = x[i]
            new = self._update(xi, field(i, x), u, beta, low, high)
            new = jnp.where(mask[i], new, xi)
            if random_order:  # a site may be drawn twice: count every update
                flips = flips + (new != xi).astype(jnp.int32)
                active = active + mask[i].astype(jnp.int32)
            return x.at[i].set(new), s, flips, active

        x0 = x
        x, rng, flips, active = jax.lax.fori_loop(
            0, n, body, (x, rng, jnp.int32(0), jnp.int32(0)))
        if not random_order:  # every site updated once (see _dense_sweep_chains)
            flips, active = jnp.sum(x != x0), jnp.sum(mask)
        return x, rng, flips.astype(dtype) / jnp.maximum(active, 1).astype(dtype)

    def _chromatic_prep(self, model):
        plan = _chromatic_plan(model.graph, self.colouring)
        Jpad = jnp.concatenate([model.active_J, jnp.zeros((1,), model.dtype)])
        Jn = tuple(Jpad[plan.nbr_e[a:b]]  # (size, degree) per colour class
                   for a, b in zip(plan.bounds[:-1], plan.bounds[1:]))
        active = jnp.maximum(jnp.sum(model.mask), 1).astype(model.dtype)
        return {"h": model.h[plan.perm], "mask": model.mask[plan.perm], "Jn": Jn,
                "active": active}

    def _chromatic_sweep(self, model, x, rng, beta, prep=None):
        # x is (n,) for one chain or (n, chain) for many (rng lanes likewise (lanes, ...)).
        # Work in the colour-sorted order so that each class is a contiguous slice (no scatter).
        plan = _chromatic_plan(model.graph, self.colouring)
        prep = self._chromatic_prep(model) if prep is None else prep
        low, high = model.vartype.values
        dtype = model.dtype
        extra = x.shape[1:]
        col = (slice(None),) + (None,) * len(extra)  # broadcast per-site arrays over chains
        h, mask = prep["h"], prep["mask"]
        xp = x[plan.perm]
        zero_row = jnp.zeros((1,) + extra, dtype)
        x0 = xp
        for c in range(len(plan.bounds) - 1):
            a, b = plan.bounds[c], plan.bounds[c + 1]
            rng, r = xoshiro_next(rng)
            u = bits_to_uniform(r[: b - a]).astype(dtype)
            xpad = jnp.concatenate([xp, zero_row])
            Jn = prep["Jn"][c][(...,) + col[1:]]  # (size, degree, 1...)
            xn = xpad[plan.nbr[a:b]]  # (size, degree, *chains)
            # an unrolled sum over the (few) neighbours: as a reduction, XLA hands the product
            # to a library kernel that is slower inside the driver's loop
            if Jn.shape[1] <= 16:
                f = h[a:b][col]
                for j in range(Jn.shape[1]):
                    f = f + Jn[:, j] * xn[:, j]
            else:
                f = h[a:b][col] + jnp.sum(Jn * xn, axis=1)
            xi = xp[a:b]
            new = jnp.where(mask[a:b][col], self._update(xi, f, u, beta, low, high), xi)
            xp = jnp.concatenate([xp[:a], new, xp[b:]])
        flips = jnp.sum(xp != x0, axis=0)  # every site updated once (see _dense_sweep_chains)
        return xp[plan.inv], rng, flips.astype(dtype) / prep["active"]


__all__ = ["MCMCSampler", "SingleSiteSampler", "SingleSiteState"]
