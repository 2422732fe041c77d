"""NealSampler: dwave-samplers' simulated annealing behind our protocol, with the parameters of
:class:`~isingattn.samplers.SimulatedAnnealingSampler`, so the two compare one-to-one; and
:func:`host_sample_callback`, which makes any host backend callable from jitted code."""

from __future__ import annotations

import time
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_choice, check_key
from ._annealing import BETA_SCHEDULE_TYPES, SimulatedAnnealingSampler, _canonical_criteria
from ._base import Sampler, seed_from_key


def _per_model(value, batch, event_ndim, idx):
    """``value`` (event dims last, optional leading batch dims) for the model at ``idx``."""
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.ndim <= event_ndim:
        return arr
    arr = np.broadcast_to(arr, batch + arr.shape[arr.ndim - event_ndim:])
    return arr[idx]


class NealSampler(Sampler):
    """dwave-samplers' ``SimulatedAnnealingSampler`` (the "neal" annealer, C++) as a backend.

    The same options, names and meaning as :class:`~isingattn.samplers.SimulatedAnnealingSampler`
    (``num_sweeps``, ``num_sweeps_per_beta``, ``beta_range``, ``beta_schedule_type``,
    ``beta_schedule``, ``initial_states``, ``proposal_acceptance_criteria``); they are passed
    through unchanged, so dwave-samplers computes its own default beta range. The schedule
    multiplies the model's energy ``E`` (the BQM is the model's, not scaled by ``beta``);
    ``beta_schedule_type="fixed"`` becomes a custom schedule constant at the model's ``beta``.
    Batched ``beta_range`` / ``beta_schedule`` / ``initial_states`` are split per model.

    Each model of a batch is one host call (``num_reads = num_chains * num_samples``, reads in
    the order returned) with ``seed`` derived from the key by
    :func:`~isingattn.samplers.seed_from_key`. Masked variables are left out of the BQM and
    held at the low value. ``info["beta_range"]`` holds the range each call used
    (``batch + (2,)``), ``info["child_info"]`` dwave-samplers' info per model.

    Example:
      >>> import jax
      >>> from isingattn.models import random_dense
      >>> from isingattn.samplers import NealSampler
      >>> m = random_dense(jax.random.key(0), 10)
      >>> NealSampler(num_sweeps=100).sample(m, jax.random.key(1), 5).spins.shape
      (1, 5, 10)
    """

    # one-to-one with our simulated annealing: the same options, by design (but ours' backend)
    parameters: ClassVar[dict[str, list]] = {
        k: v for k, v in SimulatedAnnealingSampler.parameters.items() if k != "backend"}
    properties = SimulatedAnnealingSampler.properties

    def __init__(self, **defaults):
        from dwave.samplers import SimulatedAnnealingSampler as _Neal

        self._check_options(defaults)
        self.defaults = defaults
        self.child = _Neal()

    def _sample(self, model, key, num_samples, num_chains, **options):
        t0 = time.perf_counter()
        opts = {**self.defaults, **options}
        stype = opts.pop("beta_schedule_type", "geometric")
        check_choice("beta_schedule_type", stype, BETA_SCHEDULE_TYPES)
        crit = _canonical_criteria(opts.pop("proposal_acceptance_criteria", "Metropolis"))
        beta_range = opts.pop("beta_range", None)
        beta_schedule = opts.pop("beta_schedule", None)
        initial_states = opts.pop("initial_states", None)
        num_sweeps = opts.pop("num_sweeps", None)
        per_beta = opts.pop("num_sweeps_per_beta", 1)
        batch, n = model.batch_shape, model.n
        total = num_chains * num_samples
        size = int(np.prod(batch, dtype=int))
        keys = jax.random.split(key, max(1, size))
        low = model.vartype.low
        out = np.full((size, total, n), low, np.int8)
        ranges, child_info = [], []
        betas = np.broadcast_to(np.asarray(model.beta, float), batch)
        if initial_states is not None:
            allowed = set(model.vartype.values)
            vals = set(np.unique(np.asarray(initial_states)).tolist())
            if not vals <= allowed:
                raise ValueError(
                    f"initial_states must hold only {model.vartype.values} for a "
                    f"{model.vartype.value} model; found {sorted(vals)}"
                )
        setup = time.perf_counter() - t0
        for b, idx in enumerate(np.ndindex(*batch) if batch else [()]):
            one = model[idx] if batch else model
            bqm = one.to_bqm()
            labels = one.variable_labels
            active = [v for v in bqm.variables]
            call = {"num_reads": total, "seed": seed_from_key(keys[b]),
                        "num_sweeps_per_beta": per_beta, "proposal_acceptance_criteria": crit}
            if stype == "fixed":
                if beta_range is not None or beta_schedule is not None:
                    raise ValueError(
                        "beta_range and beta_schedule must be None for beta_schedule_type='fixed'"
                    )
                k = (1000 if num_sweeps is None else num_sweeps) // per_beta
                call.update(beta_schedule_type="custom",
                            beta_schedule=np.full(k, float(betas[idx])))
            else:
                call.update(beta_schedule_type=stype, num_sweeps=num_sweeps)
                if beta_range is not None:
                    call["beta_range"] = [float(v) for v in _per_model(beta_range, batch, 1, idx)]
                if beta_schedule is not None:
                    call["beta_schedule"] = _per_model(beta_schedule, batch, 1, idx)
            if initial_states is not None:
                init = np.broadcast_to(
                    _per_model(initial_states, batch, 2, idx), (total, n)
                )
                cols = [labels.index(v) for v in active]
                call["initial_states"] = (init[:, cols].astype(np.int8), active)
            if not active:  # dwave-samplers needs at least one variable
                ranges.append([np.nan, np.nan])
                child_info.append({})
                continue
            ss = self.child.sample(bqm, **call)
            rec = ss.record
            reads = np.repeat(rec.sample, rec.num_occurrences, axis=0)
            cols = [labels.index(v) for v in ss.variables]
            out[b][:, cols] = reads
            info = dict(ss.info)
            rng = info.get("beta_range")
            if rng is None:  # custom schedule: report its ends
                sched = np.asarray(call["beta_schedule"], float)
                rng = [sched[0], sched[-1]]
            ranges.append([float(rng[0]), float(rng[-1])])
            child_info.append(info)
        spins = jnp.asarray(out.reshape(batch + (num_chains, num_samples, n)))
        info = {
            "beta_range": np.asarray(ranges, float).reshape(batch + (2,)),
            "child_info": child_info,
            "timing": {"setup_s": setup},
        }
        return spins, info

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.defaults.items())
        return f"{type(self).__name__}({args})"


def host_sample_callback(sampler: Sampler, model, key, num_samples: int, *, num_chains: int = 1,
                         **options):
    """``sampler.sample(...).spins`` through ``jax.pure_callback``: a host backend (dwave-samplers,
    dwave-system, any dimod sampler, or any of ours) called from inside ``jit``/``vmap``.

    ``model`` and ``key`` may be traced; the integer arguments and ``options`` are static (closed
    over). Returns spins ``batch + (num_chains, num_samples, n)`` in the model's vartype and dtype.
    Under ``vmap`` the host call is made once per mapped element (``vmap_method="sequential"``).
    Gradients do not flow through it (use the fluctuation-dissipation estimators instead).

    Example:
      >>> import jax
      >>> from isingattn.models import random_dense
      >>> from isingattn.samplers import NealSampler, host_sample_callback
      >>> m = random_dense(jax.random.key(0), 6)
      >>> f = jax.jit(lambda m, k: host_sample_callback(NealSampler(num_sweeps=50), m, k, 4))
      >>> f(m, jax.random.key(1)).shape
      (1, 4, 6)
    """
    key = check_key(key)  # typed from here on
    impl = jax.random.key_impl(key)
    key_data = jax.random.key_data(key)
    leaves, treedef = jax.tree_util.tree_flatten(model)
    shape = model.batch_shape + (num_chains, num_samples, model.n)
    out = jax.ShapeDtypeStruct(shape, model.dtype)

    def host(key_data, *leaves):
        m = jax.tree_util.tree_unflatten(treedef, [np.asarray(x) for x in leaves])
        k = jax.random.wrap_key_data(np.asarray(key_data), impl=impl)
        s = sampler.sample(m, k, num_samples, num_chains=num_chains, **options)
        return np.asarray(s.spins, dtype=out.dtype)

    return jax.pure_callback(host, out, key_data, *leaves, vmap_method="sequential")


__all__ = ["NealSampler", "host_sample_callback"]
