"""The one driver of every MCMC kernel: chains over a batch of models, burn-in, thinning, a
β schedule, observers, and runs continued where the last one stopped.

A kernel is any object with the protocol of :class:`~isingattn.samplers.MCMCSampler` (every
MCMC backend is one):

* ``init(model, key, x0) -> state``: a pytree (a NamedTuple) with at least the field ``x``
  (the configuration, shape ``(n,)``, in the model's vartype), for ONE model and ONE chain;
* ``step_chains(model, states, keys, beta) -> (states, info)``: one sweep of all chains of one
  model (leading chain axis); ``info`` a dict of fixed-shape arrays (acceptance rate, cluster
  size, ...);
* ``carries_stream`` (bool), ``prepare(model, beta, num_chains)`` and ``check_model(model)``;
  optionally ``runs_sweeps(model, num_chains)`` and ``sweeps_chains(model, states, num_sweeps, beta,
  prep)``: a kernel that runs many sweeps per call (a compiled one) then gets a fixed-β run's
  burn-in, and the sweeps before each kept draw, in one call each.

:func:`init_chains` starts chains, :func:`run_chains` advances them and records one
*observation* per kept draw: the configuration by default, or what an ``observe`` function
returns (the energy and the magnetization only, say, see :func:`observables`), so long runs
keep only what they need. A run returns the chains' state; passing it to the next
:func:`run_chains` continues the same chains (runs in chunks, resumable analyses), and two
chunks give the draws of one run of their total length. ``sampler.sample`` is
``init_chains`` followed by one ``run_chains``.

Random numbers: ``init_chains`` splits ``key`` into the initial configurations' key and one
run key per chain. A kernel that carries its own stream (``carries_stream``: xoshiro128**
generators seeded by ``init``) continues it and takes no key per sweep, at a fixed β or under
a schedule; other kernels use the key ``fold_in(chain key, t)`` for the chain's sweep number
``t`` (counted from the chains' start). Either way a continued run draws what one long run
would.

Run layout: ``num_burnin`` sweeps are discarded, then ``num_samples`` draws are kept, one every
``thinning`` sweeps. ``beta_schedule`` (optional) gives the inverse temperature of every sweep,
length ``num_burnin + num_samples * thinning``; by default every sweep uses the model's
``beta``. ``info`` holds the mean of each kernel info entry over the kept sweeps. Masked
variables are held at the low value by every kernel.

The compiled program is fixed by the kernel's configuration, the model's structure and sizes,
the number of chains, ``num_samples``, the ``observe`` function (pass the same function object,
e.g. from :func:`observables`, to reuse it) and, under a schedule or for kernels keyed per
sweep, the total sweep count; ``num_burnin`` and ``thinning`` of a streamed run at a fixed β are
loop bounds and do not recompile.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_key, check_positive_int, is_concrete, shape_str
from ..models import ModelBase, SparseIsingModel
from ._sharding import auto_axes, batch_split, map_models, num_shards

#: Spin updates per sweep (models x chains x variables) from which a streamed run splits the
#: chains into :data:`CHAIN_LANES` independent lanes (see :func:`_chain_lanes`).
LANE_MIN_UPDATES = 1 << 19
#: Lanes of chains a streamed run steps side by side in one loop body.
CHAIN_LANES = 2
#: The names :func:`observables` records: the configuration, the energy (no β), the
#: magnetization (mean of the unmasked variables) and its absolute value.
OBSERVABLES = ("x", "energy", "magnetization", "abs_magnetization")


class Chains(NamedTuple):
    """Where a set of chains stands (see :func:`init_chains`). Leaves are shaped
    ``batch + (chain,) + ...`` (the model's batch shape).

    Attributes:
      state: the kernels' states (a pytree; ``state.x`` the configurations,
        ``batch + (chain, n)``).
      key: per-chain run keys, ``batch + (chain,)``.
      sweep: sweeps run so far (int32 scalar): the index ``t`` of the next sweep's key.
    """

    state: Any
    key: jax.Array
    sweep: jax.Array


class ChainRun(NamedTuple):
    """What :func:`run_chains` returns.

    Attributes:
      chains: the chains after the run; pass them to :func:`run_chains` to continue.
      draws: the observations of the kept draws: ``observe``'s output with every leaf shaped
        ``batch + (chain, num_samples) + leaf shape`` (the configurations,
        ``batch + (chain, num_samples, n)``, without ``observe``).
      info: the mean of each kernel info entry over the kept sweeps, ``batch + (chain,) +
        entry shape``.
    """

    chains: Chains
    draws: Any
    info: dict


# ---------------------------------------------------------------------------------------------
# Initial states, schedules, observers
# ---------------------------------------------------------------------------------------------


def random_initial_states(model, key, num_chains):
    """Uniformly random configurations ``batch + (chain, n)`` in the model's vartype, masked
    variables at the low value (the default start of every MCMC chain and annealing read)."""
    low, high = model.vartype.values
    shape = model.batch_shape + (num_chains, model.n)
    x = jnp.where(jax.random.bernoulli(key, 0.5, shape), high, low).astype(model.dtype)
    mask = jnp.broadcast_to(model.mask, model.batch_shape + (model.n,))
    return jnp.where(mask[..., None, :], x, low)


def check_initial_states(initial_states, model, num_chains, *, axis="chain"):
    """``initial_states`` validated (values of the model's vartype) and broadcast to
    ``batch + (num_chains, n)``; a ValueError names the expected shape (its chain axis called
    ``axis``) or the stray values."""
    x = jnp.asarray(initial_states, model.dtype)
    target = model.batch_shape + (num_chains, model.n)
    try:
        x = jnp.broadcast_to(x, target)
    except ValueError:
        raise ValueError(
            f"initial_states must broadcast to batch + ({axis}, n) = {shape_str(target)}; got "
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
    """``beta_schedule`` as a float array, checked: 1-D, one positive, finite β per sweep."""
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


def _magnetization(model, x):
    active = jnp.maximum(jnp.sum(model.mask), 1).astype(x.dtype)
    return jnp.sum(jnp.where(model.mask, x, 0)) / active


_OBSERVERS = {
    "x": lambda model, x: x,
    "energy": lambda model, x: model.energy(x),
    "magnetization": _magnetization,
    "abs_magnetization": lambda model, x: jnp.abs(_magnetization(model, x)),
}


@functools.cache
def observables(*names: str):
    """An ``observe`` function for :func:`run_chains` recording the named quantities per draw,
    as a dict: ``"x"`` (the configuration), ``"energy"`` (``model.energy``, no β),
    ``"magnetization"`` (mean of the unmasked variables) and ``"abs_magnetization"``. The same
    names give the same function object, so runs that use it share one compilation.

    Raises:
      ValueError: no name, or a name not in :data:`OBSERVABLES`.
    """
    if not names:
        raise ValueError(f"observables needs at least one name of {', '.join(OBSERVABLES)}")
    for name in names:
        if name not in _OBSERVERS:
            raise ValueError(
                f"unknown observable {name!r}; valid: {', '.join(OBSERVABLES)}"
            )

    def observe(model, x):
        return {name: _OBSERVERS[name](model, x) for name in names}

    observe.__name__ = observe.__qualname__ = f"observables{names!r}"
    return observe


# ---------------------------------------------------------------------------------------------
# The driver
# ---------------------------------------------------------------------------------------------


def _chain_lanes(num_models, num_chains, n):
    """How many lanes a streamed run splits the chains into. One sweep of all chains is a
    chain of dependent operations, which XLA's CPU runtime runs on one thread; independent lanes
    in the same loop body run concurrently, at the price of the thread pool's hand-offs, which
    only large sweeps repay."""
    if num_chains < CHAIN_LANES or num_models * num_chains * n < LANE_MIN_UPDATES:
        return 1
    return CHAIN_LANES


def _over_models(one_model, flat, *args):
    """``one_model(model, *args)`` for every model of flattened ``flat`` (leading axis B).
    One model: no vmap (batching a model's own arrays turns the neighbour gathers of sparse
    sweeps into batched gathers, much slower on CPU); large sparse models (lattices) one at a
    time for the same reason; else a vmap over models."""
    if flat.h.shape[0] == 1:
        one = jax.tree_util.tree_map(lambda a: a[0], (flat,) + args)
        return jax.tree_util.tree_map(lambda a: a[None], one_model(*one))
    num_chains = jax.tree_util.tree_leaves(args)[0].shape[1]
    if isinstance(flat, SparseIsingModel) and flat.n * num_chains >= 4096:
        return jax.lax.map(lambda a: one_model(*a), (flat,) + args)
    return jax.vmap(one_model)(flat, *args)


def _check_kernel(kernel, model):
    for name in ("init", "step_chains", "prepare", "check_model"):
        if not callable(getattr(kernel, name, None)):
            raise TypeError(
                f"kernel must follow the MCMC kernel protocol (init, step_chains, prepare, "
                f"check_model, carries_stream; e.g. an MCMCSampler); {type(kernel).__name__} "
                f"has no {name}()"
            )
    if not isinstance(model, ModelBase):
        raise TypeError(
            f"model must be an IsingModel or SparseIsingModel; got {type(model).__name__}"
        )
    kernel.check_model(model)


def init_chains(kernel, model, key, num_chains: int = 1, *, initial_states=None) -> Chains:
    """Start ``num_chains`` chains of ``kernel`` on every model of the batch.

    Args:
      kernel: an MCMC kernel (any :class:`~isingattn.samplers.MCMCSampler`).
      model: an :class:`~isingattn.IsingModel` or :class:`~isingattn.SparseIsingModel`, any
        batch shape.
      key: a JAX PRNG key; same key, same chains.
      num_chains: chains per model (>= 1).
      initial_states: configurations ``batch + (chain, n)`` (broadcastable) in the model's
        vartype; default uniformly random. Masked variables are set to the low value.

    Returns:
      :class:`Chains` at sweep 0.

    Raises:
      TypeError: ``kernel`` lacks the protocol or ``model`` is not a model.
      ValueError: bad ``num_chains`` or ``initial_states``, or a model the kernel cannot sample.
    """
    _check_kernel(kernel, model)
    key = check_key(key)
    num_chains = check_positive_int("num_chains", num_chains)
    model = auto_axes(model)
    flat = model.flatten_batch()
    B = flat.h.shape[0]
    k_init, k_run = jax.random.split(key)
    if initial_states is None:
        x0 = random_initial_states(model, k_init, num_chains).reshape((B, num_chains, model.n))
    else:
        x0 = check_initial_states(initial_states, model, num_chains).reshape(
            (B, num_chains, model.n))
        x0 = jnp.where(flat.mask[:, None, :], x0, model.vartype.low)
    keys = jax.random.split(k_run, B * num_chains).reshape(B, num_chains)
    states, run_keys = _init(kernel, flat, keys, x0, batch_split(model))
    return _unflatten(Chains(states, run_keys, jnp.int32(0)), model.batch_shape)


@functools.partial(jax.jit, static_argnums=(0, 4))
def _init(kernel, flat, keys, x0, split=None):
    def one_model(model, keys, x):
        ks = jax.vmap(jax.random.split)(keys)
        states = jax.vmap(kernel.init, in_axes=(None, 0, 0))(model, ks[:, 0], x)
        return states, ks[:, 1]

    return map_models(lambda *a: _over_models(one_model, *a), split, flat, keys, x0)


def _flatten(chains: Chains, batch, B):
    def flat(a):
        return a.reshape((B,) + a.shape[len(batch):])

    return chains._replace(state=jax.tree_util.tree_map(flat, chains.state),
                           key=flat(chains.key))


def _unflatten(tree, batch):
    if isinstance(tree, Chains):
        return tree._replace(state=_unflatten(tree.state, batch), key=_unflatten(tree.key, batch))
    return jax.tree_util.tree_map(lambda a: a.reshape(batch + a.shape[1:]), tree)


def run_chains(kernel, model, chains: Chains, num_samples: int, *, num_burnin: int = 0,
               thinning: int = 1, beta_schedule=None, observe=None) -> ChainRun:
    """Advance ``chains`` by ``num_burnin + num_samples * thinning`` sweeps of ``kernel`` and
    record ``num_samples`` draws (see the module docstring for the layout).

    Args:
      kernel: the kernel the chains were started with (:func:`init_chains`).
      model: the same models (any batch shape).
      chains: :class:`Chains` from :func:`init_chains` or a previous run.
      num_samples: draws kept per chain (>= 0; 0 only burns in).
      num_burnin: sweeps discarded first (>= 0).
      thinning: sweeps per kept draw (>= 1).
      beta_schedule: the inverse temperature of every sweep (1-D, length
        ``num_burnin + num_samples * thinning``), default the model's ``beta``.
      observe: ``observe(model, x) -> pytree`` for one model (batch shape ``()``) and one
        chain's configuration ``x`` ``(n,)``, jax-traceable; default the configuration itself.
        Must be hashable (a function is); :func:`observables` builds the usual ones.

    Returns:
      :class:`ChainRun` (the advanced chains, the observations, the kernel info).

    Raises:
      ValueError: bad counts, a ``beta_schedule`` of the wrong length or with a non-positive
        entry, chains that do not match the model's batch shape.
    """
    _check_kernel(kernel, model)
    if not isinstance(chains, Chains):
        raise TypeError(f"chains must be the Chains of init_chains or a previous run; got "
                        f"{type(chains).__name__}")
    num_samples = check_positive_int("num_samples", num_samples, 0)
    num_burnin = check_positive_int("num_burnin", num_burnin, 0)
    thinning = check_positive_int("thinning", thinning, 1)
    model = auto_axes(model)
    batch = model.batch_shape
    if tuple(chains.key.shape[:len(batch)]) != batch or chains.key.ndim != len(batch) + 1:
        raise ValueError(
            f"chains do not match the model: their keys are shaped {shape_str(chains.key.shape)}"
            f", expected batch + (chain,) with batch = {shape_str(batch)}"
        )
    num_chains = chains.key.shape[-1]
    total = num_burnin + num_samples * thinning
    flat = model.flatten_batch()
    B = flat.h.shape[0]
    streamed = bool(kernel.carries_stream)
    scheduled = beta_schedule is not None
    if scheduled:
        sched = jnp.asarray(check_beta_schedule(beta_schedule, total), model.dtype)
        betas = jnp.broadcast_to(sched, (B, total))
    elif streamed:  # one beta per model: the run length is no part of the program
        betas = flat.beta[:, None]
    else:
        betas = jnp.broadcast_to(flat.beta[:, None], (B, total))
    split = batch_split(model)
    # a kernel that runs many sweeps per call (runs_sweeps) shares its chains among threads of
    # its own: one lane
    multi = streamed and not scheduled and bool(getattr(kernel, "runs_sweeps",
                                                        lambda m, c: False)(flat, num_chains))
    lanes = (_chain_lanes(B // num_shards(split), num_chains, model.n)
             if streamed and not multi else 1)
    fc = _flatten(chains, batch, B)
    states, draws, info = _run(kernel, flat, fc.state, fc.key, betas, jnp.int32(num_burnin),
                               num_samples, jnp.int32(thinning), jnp.asarray(fc.sweep, jnp.int32),
                               streamed, scheduled, lanes, observe, split, multi)
    after = Chains(states, fc.key, jnp.asarray(chains.sweep, jnp.int32) + total)
    return ChainRun(_unflatten(after, batch), _unflatten(draws, batch), _unflatten(info, batch))


@functools.partial(jax.jit, static_argnums=(0, 6, 9, 10, 11, 12, 13, 14))
def _run(kernel, flat, states0, run_keys, betas, num_burnin, num_samples, thinning, sweep0,
         streamed, scheduled, lanes, observe, split=None, multi=False):
    # streamed (a kernel that carries its stream): nested loops whose bodies hold only the
    # kernel (and, under a schedule, the read of the sweep's beta), so XLA's CPU runtime runs
    # them inline on the calling thread, or with lanes > 1 the chains split into that many
    # independent lanes (_chain_lanes; the same draws, as every chain has its own stream).
    # num_burnin and thinning are loop bounds there, traced: changing them does not recompile.
    # multi (a kernel that runs many sweeps per call, at a fixed beta): the burn-in and the
    # sweeps before each kept draw are one call each, their counts traced likewise.
    # Otherwise: one scan over all sweeps (burn-in included), the kernel traced once. After
    # sweep t the observation goes to draw slot max(t - num_burnin, 0) // thinning; the last
    # write to slot k is sweep num_burnin + (k + 1) * thinning - 1, the kept one.
    total = betas.shape[1]
    kept = (num_samples * thinning).astype(jnp.float32)

    def one_model(model, states, k_run, beta_row):
        def look(x):  # (chain, n) -> observations with a leading chain axis
            if observe is None:
                return x
            return jax.vmap(observe, in_axes=(None, 0))(model, x)

        _, info0 = jax.eval_shape(kernel.step_chains, model, states, k_run, beta_row[0])
        acc0 = jax.tree_util.tree_map(
            lambda a: jnp.zeros(a.shape, jnp.result_type(a.dtype, jnp.float32)), info0)
        obs = jax.eval_shape(look, states.x)
        buf0 = jax.tree_util.tree_map(
            lambda a: jnp.zeros((a.shape[0], num_samples) + a.shape[1:], a.dtype), obs)

        def record(buf, x, slot):
            if num_samples == 0:  # a burn-in only run keeps nothing
                return buf
            return jax.tree_util.tree_map(
                lambda b, v: jax.lax.dynamic_update_index_in_dim(b, v, slot, 1), buf, look(x))

        def mean(acc):
            return jax.tree_util.tree_map(lambda a: a / kept.astype(a.dtype), acc)

        if streamed:
            beta0 = None if scheduled else beta_row[0]

            def beta_at(t):
                return beta_row[t] if scheduled else beta0

            bounds = list(itertools.pairwise(
                np.linspace(0, states.x.shape[0], lanes + 1).astype(int)))

            def split_lanes(tree):
                def part(lo, hi):
                    return jax.tree_util.tree_map(lambda a: a[lo:hi], tree)

                return tuple(part(lo, hi) for lo, hi in bounds)

            def join(trees):
                return jax.tree_util.tree_map(lambda *a: jnp.concatenate(a), *trees)

            kws = []
            for lo, hi in bounds:
                prep = kernel.prepare(model, beta0, int(hi - lo))
                kws.append({} if prep is None else {"prep": prep})

            def sweep(states, beta):  # one sweep of every lane: independent operation chains
                return tuple(kernel.step_chains(model, st, None, beta, **kw)
                             for st, kw in zip(states, kws))

            def burn(t, states):
                return tuple(st for st, _ in sweep(states, beta_at(t)))

            def sweeps(states, count):  # multi: count sweeps of every lane, info summed
                return tuple(kernel.sweeps_chains(model, st, count, beta0, **kw)
                             for st, kw in zip(states, kws))

            def draw(k, carry):
                states, acc, buf = carry
                first = num_burnin + k * thinning
                if multi:
                    out = sweeps(states, thinning)
                    states = tuple(st for st, _ in out)
                    acc = tuple(jax.tree_util.tree_map(lambda a, v: a + v, a, info)
                                for a, (_, info) in zip(acc, out))
                    x = jnp.concatenate([st.x for st in states])
                    return states, acc, record(buf, x, k)

                def kept_sweep(j, carry):
                    states, acc = carry
                    out = sweep(states, beta_at(first + j))
                    return (tuple(st for st, _ in out),
                            tuple(jax.tree_util.tree_map(lambda a, v: a + v, a, info)
                                  for a, (_, info) in zip(acc, out)))

                states, acc = jax.lax.fori_loop(0, thinning, kept_sweep, (states, acc))
                x = jnp.concatenate([st.x for st in states])
                return states, acc, record(buf, x, k)

            if multi:
                lanes_st = tuple(st for st, _ in sweeps(split_lanes(states), num_burnin))
            else:
                lanes_st = jax.lax.fori_loop(0, num_burnin, burn, split_lanes(states))
            lanes_st, acc, buf = jax.lax.fori_loop(0, num_samples, draw,
                                                   (lanes_st, split_lanes(acc0), buf0))
            return join(lanes_st), buf, mean(join(acc))
        fold = jax.vmap(jax.random.fold_in, in_axes=(0, None))

        def sweep(carry, t):
            states, buf, acc = carry
            states, info = kernel.step_chains(model, states, fold(k_run, sweep0 + t),
                                              beta_row[t])
            buf = record(buf, states.x, jnp.maximum(t - num_burnin, 0) // thinning)
            is_kept = t >= num_burnin
            acc = jax.tree_util.tree_map(lambda a, v: a + jnp.where(is_kept, v, 0), acc, info)
            return (states, buf, acc), None

        (states, buf, acc), _ = jax.lax.scan(sweep, (states, buf0, acc0), jnp.arange(total))
        return states, buf, mean(acc)

    return map_models(lambda *a: _over_models(one_model, *a), split, flat, states0, run_keys,
                      betas)


__all__ = ["CHAIN_LANES", "LANE_MIN_UPDATES", "OBSERVABLES", "ChainRun", "Chains",
           "check_beta_schedule", "check_initial_states", "init_chains", "observables",
           "random_initial_states", "run_chains"]
