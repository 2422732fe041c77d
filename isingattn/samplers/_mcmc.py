"""The driver shared by every MCMC backend, and the single-site machinery of Gibbs/Metropolis.

A backend is a frozen dataclass (hashable: its configuration is part of the compiled program)
that subclasses :class:`MCMCSampler` and supplies a pure kernel, blackjax-style:

* ``init(model, key, x0) -> state``: ``state`` is a pytree (a NamedTuple) with at least the
  field ``x`` (the current configuration, shape ``(n,)``, in the model's vartype);
* ``step(model, state, key, beta) -> (state, info)``: one sweep at inverse temperature ``beta``;
  ``info`` is a dict of arrays of fixed shape, usually scalars (acceptance rate, cluster size,
  ...; parallel tempering adds one entry per replica pair).

Both act on ONE model (batch shape ``()``) and ONE chain; the driver ``vmap``s them over chains
and over every model of the batch, ``lax.scan``s over sweeps, and jit-compiles the whole run
once per (backend configuration, model structure, sizes): a second call with the same sizes
does not trace again. Users who want their own driver call ``init``/``step`` directly.

The driver calls ``step_chains(model, states, keys, beta)`` (all chains of one model, leading
chain axis), which defaults to ``vmap(step)``; a backend may override it with a faster layout
as long as the result is the same (the single-site samplers put the chain axis minor).

A backend whose state carries its own random stream (``carries_stream = True``: the
single-site samplers and Swendsen–Wang, whose xoshiro128** generators are seeded by ``init``)
also accepts ``key=None`` in ``step``/``step_chains``: the sweep then continues the state's
stream without mixing in a fresh key. For those backends, at a fixed ``beta``, the driver runs
nested loops that touch nothing per sweep but the kernel (burn-in loop, then one loop per kept
draw over its ``thinning`` sweeps). XLA's CPU runtime executes a loop body whose operations form
a single dependency chain inline on the calling thread, and hands it to its thread pool
otherwise; per-sweep key derivation and draw bookkeeping would make the body a graph, and the
pool's hand-offs cost more than a whole checkerboard sweep (figures in ``docs/guide/mcmc.md``,
Implementation notes). Large runs (at least :data:`LANE_MIN_UPDATES` spin updates per
sweep) split the chains into :data:`CHAIN_LANES` lanes stepped side by side in one body, so that
the runtime runs them on different cores; every chain carries its own stream, so the draws do
not change. Kernels may also supply loop-invariant tables (``prepare``), which the driver
computes before its loops. Other backends, and runs with a ``beta_schedule``,
use one scan over all sweeps with the key ``fold_in(chain key, sweep)``.

Run layout: ``num_burnin`` sweeps are discarded, then ``num_samples`` draws are kept, one every
``thinning`` sweeps. ``beta_schedule`` (optional) gives the inverse temperature of every sweep,
length ``num_burnin + num_samples * thinning``; by default every sweep uses the model's ``beta``.
``info`` of the result holds the mean of each kernel info entry over the kept sweeps, shaped
``batch + (chain,) + entry shape``. Masked variables of ``initial_states`` are set to the low
value before the first sweep, and no kernel ever changes them.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_choice, check_positive_int, is_concrete, shape_str
from ..models import IsingModel, SparseIsingModel
from ._base import Sampler
from ._sharding import batch_split, map_models, num_shards

MCMC_PARAMETERS = {"num_burnin": [], "thinning": [], "initial_states": [], "beta_schedule": []}

#: Spin updates per sweep (models x chains x variables) from which the streamed driver splits
#: the chains into :data:`CHAIN_LANES` independent lanes (see :func:`_chain_lanes`).
LANE_MIN_UPDATES = 1 << 19
#: Lanes of chains the streamed driver runs side by side in one loop body.
CHAIN_LANES = 2


def _chain_lanes(num_models, num_chains, n):
    """How many lanes the streamed driver splits the chains into. One sweep of all chains is a
    chain of dependent operations, which XLA's CPU runtime runs on one thread; independent lanes
    in the same loop body run concurrently, at the price of the thread pool's hand-offs, which
    only large sweeps repay."""
    if num_chains < CHAIN_LANES or num_models * num_chains * n < LANE_MIN_UPDATES:
        return 1
    return CHAIN_LANES


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
        allowed = {float(v) for v in model.vartype.values}
        if not vals <= allowed:
            raise ValueError(
                f"initial_states must hold {model.vartype.value} values {sorted(allowed)}; "
                f"found {sorted(vals - allowed)}"
            )
    return x


def check_beta_schedule(beta_schedule, total_sweeps):
    """Validate ``beta_schedule`` (one positive, finite beta per sweep) and return it."""
    try:
        sched = np.asarray(beta_schedule, dtype=float)
    except (TypeError, ValueError):
        raise TypeError(
            f"beta_schedule must be a 1-D array of numbers; got {beta_schedule!r}"
        ) from None
    if sched.ndim != 1 or sched.shape[0] != total_sweeps:
        raise ValueError(
            "beta_schedule must be a 1-D array with one inverse temperature per sweep, length "
            f"num_burnin + num_samples * thinning = {total_sweeps}; got shape "
            f"{shape_str(sched.shape)}"
        )
    if not (np.all(np.isfinite(sched)) and np.all(sched > 0)):
        i = int(np.nonzero(~(np.isfinite(sched) & (sched > 0)))[0][0])
        raise ValueError(
            f"beta_schedule must be positive and finite; found {sched[i]} at sweep {i}"
        )
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

    def prepare(self, model, beta, num_chains):
        """Loop-invariant arrays of ``step_chains`` for ``model`` at a fixed ``beta`` with
        ``num_chains`` chains (those of one lane when the driver splits them), or None (the
        default). The streamed driver computes them once,
        before its loops, and passes them as ``step_chains(..., prep=prep)``: XLA does not hoist
        size-inflating operations (neighbour-table gathers, tiling over chains) out of a loop,
        and left inside they both cost time and split the loop body's dependency chain."""

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
            x0 = jnp.where(flat.mask[:, None, :], x0, model.vartype.low)
        streamed = self.carries_stream and beta_schedule is None
        if streamed:  # one beta per model: the run length is no part of the program
            betas = flat.beta[:, None]
        elif beta_schedule is None:
            betas = jnp.broadcast_to(flat.beta[:, None], (B, total))
        else:
            sched = jnp.asarray(check_beta_schedule(beta_schedule, total), model.dtype)
            betas = jnp.broadcast_to(sched, (B, total))
        keys = jax.random.split(k_run, B * num_chains).reshape(B, num_chains)
        split = batch_split(model)
        lanes = _chain_lanes(B // num_shards(split), num_chains, model.n) if streamed else 1
        xs, info = _run(self, flat, keys, x0, betas, jnp.int32(num_burnin), num_samples,
                        jnp.int32(thinning), streamed, lanes, split)
        batch = model.batch_shape
        spins = xs.reshape(batch + (num_chains, num_samples, model.n))
        info = {k: v.reshape(batch + (num_chains,) + v.shape[2:]) for k, v in info.items()}
        return spins, info


@functools.partial(jax.jit, static_argnums=(0, 6, 8, 9, 10))
def _run(sampler, flat, keys, x0, betas, num_burnin, num_samples, thinning, streamed, lanes,
         split=None):
    # streamed (fixed beta, a kernel that carries its stream): nested loops whose bodies hold
    # only the kernel, so XLA runs them inline (module docstring), or with lanes > 1 the chains
    # split into that many independent lanes (_chain_lanes; the same draws, as every chain has
    # its own stream). num_burnin and thinning are loop bounds there, traced: changing them
    # does not recompile.
    # Otherwise: one scan over all sweeps (burn-in included), the kernel traced and compiled once.
    # After sweep t the state is written to draw slot max(t - num_burnin, 0) // thinning; the
    # last write to slot k is sweep num_burnin + (k + 1) * thinning - 1, the kept one. Only the
    # sweep count (betas' shape) and num_samples (the buffer) fix the compiled program;
    # num_burnin and thinning are traced, so changing them alone does not recompile.
    total = betas.shape[1]

    def one_model(model, keys, x, beta_row):
        ks = jax.vmap(jax.random.split)(keys)
        k_init, k_run = ks[:, 0], ks[:, 1]
        states = jax.vmap(sampler.init, in_axes=(None, 0, 0))(model, k_init, x)
        _, info0 = jax.eval_shape(sampler.step_chains, model, states, k_run, beta_row[0])
        acc0 = jax.tree_util.tree_map(
            lambda a: jnp.zeros(a.shape, jnp.result_type(a.dtype, jnp.float32)), info0)
        kept = (num_samples * thinning).astype(jnp.float32)
        buf0 = jnp.zeros((x.shape[0], num_samples) + x.shape[1:], x.dtype)
        if streamed:
            beta = beta_row[0]
            bounds = list(itertools.pairwise(np.linspace(0, x.shape[0], lanes + 1).astype(int)))

            def split(tree):
                def part(lo, hi):
                    return jax.tree_util.tree_map(lambda a: a[lo:hi], tree)

                return tuple(part(lo, hi) for lo, hi in bounds)

            def join(trees):
                return jax.tree_util.tree_map(lambda *a: jnp.concatenate(a), *trees)

            kws = []
            for lo, hi in bounds:
                prep = sampler.prepare(model, beta, int(hi - lo))
                kws.append({} if prep is None else {"prep": prep})

            def sweep(states):  # one sweep of every lane: independent operation chains
                return tuple(sampler.step_chains(model, st, None, beta, **kw)
                             for st, kw in zip(states, kws))

            def burn(_, states):
                return tuple(st for st, _ in sweep(states))

            def kept_sweep(_, carry):
                states, acc = carry
                out = sweep(states)
                return (tuple(st for st, _ in out),
                        tuple(jax.tree_util.tree_map(lambda a, v: a + v, a, info)
                              for a, (_, info) in zip(acc, out)))

            def draw(k, carry):
                states, acc, buf = carry
                states, acc = jax.lax.fori_loop(0, thinning, kept_sweep, (states, acc))
                x = jnp.concatenate([st.x for st in states])
                return states, acc, jax.lax.dynamic_update_index_in_dim(buf, x, k, 1)

            states = jax.lax.fori_loop(0, num_burnin, burn, split(states))
            _, acc, buf = jax.lax.fori_loop(0, num_samples, draw, (states, split(acc0), buf0))
            return buf, jax.tree_util.tree_map(lambda a: a / kept.astype(a.dtype), join(acc))
        fold = jax.vmap(jax.random.fold_in, in_axes=(0, None))

        def sweep(carry, t):
            states, buf, acc = carry
            states, info = sampler.step_chains(model, states, fold(k_run, t), beta_row[t])
            slot = jnp.maximum(t - num_burnin, 0) // thinning
            buf = jax.lax.dynamic_update_index_in_dim(buf, states.x, slot, 1)
            kept = t >= num_burnin
            acc = jax.tree_util.tree_map(lambda a, v: a + jnp.where(kept, v, 0), acc, info)
            return (states, buf, acc), None

        (_, buf, acc), _ = jax.lax.scan(sweep, (states, buf0, acc0), jnp.arange(total))
        return buf, jax.tree_util.tree_map(lambda a: a / kept.astype(a.dtype), acc)

    def models(flat, keys, x0, betas):
        if flat.h.shape[0] == 1:
            # one model: no vmap over models. Batching the model's own arrays turns the
            # neighbour gathers of sparse sweeps into batched gathers, much slower on CPU.
            one = jax.tree_util.tree_map(lambda a: a[0], (flat, keys, x0, betas))
            return jax.tree_util.tree_map(lambda a: a[None], one_model(*one))
        if isinstance(flat, SparseIsingModel) and flat.n * x0.shape[1] >= 4096:
            # large sparse models (lattices): one model at a time, for the same reason
            return jax.lax.map(lambda args: one_model(*args), (flat, keys, x0, betas))
        return jax.vmap(one_model)(flat, keys, x0, betas)

    return map_models(models, split, flat, keys, x0, betas)


# ---------------------------------------------------------------------------------------------
# A cheap vectorized uniform stream for the single-site hot loops.
#
# Why not jax.random in the loop: a sweep needs one uniform per site and chain, and on CPU
# threefry costs more than the whole field computation (figures in docs/guide/mcmc.md).
# So the kernel state carries xoshiro128** generators (Blackman & Vigna, 2018),
# seeded from the key at init; every sweep XORs 128 fresh threefry bits of its own key into
# them, so the draws stay a pure function of the keys (same keys, same samples; another sweep
# key, other draws) while threefry makes 4 words per chain and sweep instead of n.
# ---------------------------------------------------------------------------------------------


def _rotl(x, k):
    return (x << k) | (x >> (32 - k))


def _nonzero(s):
    # xoshiro's only bad state is all-zero (probability 2^-128 per lane); make it impossible
    s0, s1, s2, s3 = s
    zero = (s0 | s1 | s2 | s3) == 0
    return (s0, s1, s2, jnp.where(zero, jnp.uint32(1), s3))


def xoshiro_seed(key, lanes=()):
    """xoshiro128** states (a 4-tuple of uint32 arrays shaped ``lanes``) from a JAX key."""
    s = jax.random.bits(key, (4,) + tuple(lanes), jnp.uint32)
    return _nonzero(tuple(s))


def xoshiro_mix(s, key):
    """XOR 128 random bits of ``key`` into every lane of state ``s`` (a bijection per lane)."""
    k = jax.random.bits(key, (4,), jnp.uint32)
    return _nonzero(tuple(si ^ k[j] for j, si in enumerate(s)))


def xoshiro_next(s):
    """One xoshiro128** step of every lane: ``(new state, 32 random bits per lane)``."""
    s0, s1, s2, s3 = s
    r = _rotl(s1 * jnp.uint32(5), 7) * jnp.uint32(9)
    t = s1 << 9
    s2 = s2 ^ s0
    s3 = s3 ^ s1
    s1 = s1 ^ s2
    s0 = s0 ^ s3
    s2 = s2 ^ t
    s3 = _rotl(s3, 11)
    return (s0, s1, s2, s3), r


def bits_to_uniform(r):
    """Uniform float32 in [0, 1) from 32 random bits (the top 23 bits, as jax.random does)."""
    return jax.lax.bitcast_convert_type((r >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0


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
    """

    order: str = "auto"
    colouring: str = "DSATUR"
    carries_stream = True

    def __post_init__(self):
        check_choice("order", self.order, ORDERS)
        from ._colouring import STRATEGIES

        check_choice("colouring", self.colouring, STRATEGIES)

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
        return self._chromatic_prep(model)

    def step_chains(self, model, states, keys, beta, prep=None):
        """Many chains of one model at once. Same result as ``vmap(step)``, but dense
        sequential and chromatic sweeps run with the chain axis minor (``x`` as ``(n, chain)``):
        a site's field is then one row product over contiguous chains and a neighbour gather
        copies whole rows. ``prep``: :meth:`prepare`'s output for this model, or None."""
        order = self.resolved_order(model)
        dense = isinstance(model, IsingModel)
        if order == "random" or (order == "sequential" and not dense):
            return super().step_chains(model, states, keys, beta)
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
            xt, s, flips = carry
            s, r = xoshiro_next(s)
            u = bits_to_uniform(r).astype(dtype)
            xi = xt[i]
            new = self._update(xi, h[i] + J[i] @ xt, u, beta, low, high)
            new = jnp.where(mask[i], new, xi)
            return xt.at[i].set(new), s, flips + (new != xi).astype(jnp.int32)

        flips0 = jnp.zeros(xt.shape[1:], jnp.int32)
        xt, s, flips = jax.lax.fori_loop(0, model.n, body, (xt, s, flips0))
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
            return (x.at[i].set(new), s, flips + (new != xi).astype(jnp.int32),
                    active + mask[i].astype(jnp.int32))

        x, rng, flips, active = jax.lax.fori_loop(
            0, n, body, (x, rng, jnp.int32(0), jnp.int32(0)))
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
        flips = jnp.zeros(extra, jnp.int32)
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
            flips = flips + jnp.sum(new != xi, axis=0).astype(jnp.int32)
            xp = jnp.concatenate([xp[:a], new, xp[b:]])
        return xp[plan.inv], rng, flips.astype(dtype) / prep["active"]


__all__ = ["MCMCSampler", "SingleSiteSampler", "SingleSiteState"]
