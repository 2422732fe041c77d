"""DiabaticAnnealingSampler: simulated quantum annealing, exact in the state vector."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .. import quantum
from .._kernels import ffi
from .._validation import check_positive_int, is_concrete
from ._base import Sampler


class DiabaticAnnealingSampler(Sampler):
    """Samples of a transverse-field Ising anneal simulated exactly in the state vector.

    The register starts in ``|+...+>``, the ground state of the driver, evolves under
    ``H(t) = -(A(s)/2) sum_i X_i + (B(s)/2) H_P(Z)`` for ``annealing_time`` ns (``s = t / t_a``,
    ``A``, ``B`` in GHz) and is measured in the computational basis; every draw is an
    independent measurement of a fresh anneal, so chains are i.i.d. ``H_P`` is the problem
    energy in the annealer's sign (``E`` of the SPIN form of the model, offset dropped); the
    model's ``beta`` is not used. Masked variables are left out of the register and read out at
    the low value. See :mod:`isingattn.quantum` and docs/guide/diabatic.md.

    This is not a Boltzmann sampler: for short anneals its output is close to the Boltzmann
    distribution of :func:`isingattn.quantum.effective_model`, and ``info["effective_beta"]``
    records the first-order ``(beta_h, beta_J)`` of the anneal; the exact output distribution
    is :func:`isingattn.quantum.output_distribution`.

    The constructor's arguments are the defaults of the ``sample`` options of the same names.

    Args:
      schedule: :class:`~isingattn.quantum.AnnealingSchedule`, ``"linear"``, ``"dwave_like"``
        (default) or the path of a CSV table ``s, A, B`` (GHz).
      annealing_time: ``t_a`` in ns (default 0.1: a diabatic anneal of the default schedule,
        ``beta_J ~ 0.1``).
      num_steps: integration steps (default: chosen per model from ``t_a``, the schedule and
        the model's own largest flip energy, for an amplitude error of about ``tolerance``; a
        batch's weak models do not run the steps its strongest needs). ``info["num_steps"]``
        holds each model's count (batch-shaped).
      order: 4 (default) or 2, the order of the split-operator integrator.
      tolerance: target amplitude error of the automatic step count (default 1e-4).
      min_steps: fewest steps of the automatic count (default 64, which resolves the shape of
        ``A``, ``B`` to a relative error of about 2e-5 in ``p - uniform``; 16 leave about 2e-4).
      backend: where the state vectors evolve: ``"auto"`` (default: the compiled CPU kernel of
        :mod:`isingattn._kernels.anneal` where JAX runs on the CPU, else JAX), ``"numba"`` or
        ``"jax"``; the same integrator (the kernel in float64 arithmetic).

    Inside ``jit`` (the model's parameters traced, as in a training step with
    ``sampled(DiabaticAnnealingSampler(...))``) the whole batch is simulated in the compiled
    program on a register of all ``n`` variables (masked ones projected out), with the automatic
    step counts computed from the traced fields (:func:`isingattn.quantum.sample_traced`); the draws
    have the same distribution. ``info`` then holds traced values and no host timings.

    Cost: memory ``2^k`` complex amplitudes per model, time ``O(num_steps * k * 2^k)`` for
    ``k <= 22`` active variables.

    Example:
      >>> import jax
      >>> from isingattn.models import random_dense
      >>> from isingattn.samplers import DiabaticAnnealingSampler
      >>> s = DiabaticAnnealingSampler(annealing_time=0.2)
      >>> out = s.sample(random_dense(jax.random.key(0), 5), jax.random.key(1), 100, num_chains=2)
      >>> out.spins.shape
      (2, 100, 5)
    """

    parameters: ClassVar[dict[str, list]] = {
        "schedule": [], "annealing_time": [], "num_steps": [], "order": [], "tolerance": [],
        "min_steps": [], "backend": [],
    }
    properties: ClassVar[dict[str, Any]] = {"exact": False, "quantum": True, "max_active_n": quantum.MAX_QUBITS,
                  "annealing_time_units": "ns", "schedule_units": "GHz",
                  "exponential_cost": True}

    def __init__(self, schedule="dwave_like", annealing_time=0.1, *, num_steps=None, order=4,
                 tolerance=quantum.DEFAULT_TOLERANCE, min_steps=quantum.MIN_STEPS,
                 backend="auto"):
        self.defaults = {
            "schedule": quantum.as_schedule(schedule),
            "annealing_time": quantum.check_annealing_time(annealing_time),
            "num_steps": None if num_steps is None else check_positive_int("num_steps",
                                                                            num_steps),
            "order": quantum.check_order(order),
            "tolerance": tolerance,
            "min_steps": check_positive_int("min_steps", min_steps),
            "backend": backend,
        }
        ffi.resolve_backend(backend)  # checked now, resolved where it runs

    def _sample(self, model, key, num_samples, num_chains, **options):
        opts = dict(self.defaults)
        opts.update(options)
        schedule = quantum.as_schedule(opts["schedule"])
        t_a = quantum.check_annealing_time(opts["annealing_time"])
        min_steps = check_positive_int("min_steps", opts["min_steps"])
        total = num_chains * num_samples
        dense = model.to_dense()
        if not is_concrete(dense.h, dense.J, dense.mask):
            return self._sample_traced(model, key, num_samples, num_chains, schedule, t_a,
                                       min_steps, opts)
        t0 = time.perf_counter()
        ev = quantum.evolve(model, schedule, t_a, num_steps=opts["num_steps"],
                            order=opts["order"], tolerance=opts["tolerance"],
                            min_steps=min_steps, backend=opts["backend"])
        probs = jnp.abs(ev.amplitudes) ** 2
        norm = jnp.sum(probs, axis=-1, keepdims=True)
        probs = jax.block_until_ready(probs / norm)
        t1 = time.perf_counter()
        idx = quantum.sample_register(key, probs, total)
        states = quantum.register_to_states(idx, ev.problem, model.dtype)
        spins = states.reshape(model.batch_shape + (num_chains, num_samples, model.n))
        beta = quantum.effective_beta(schedule, t_a)
        info = {
            "schedule": schedule.name,
            "annealing_time": t_a,
            "num_steps": ev.num_steps.reshape(model.batch_shape),
            "order": ev.order,
            "num_qubits": ev.problem.num_qubits,
            "norm_error": float(np.max(np.abs(np.asarray(norm) - 1))) if norm.size else 0.0,
            "effective_beta": {"fields": beta.fields, "couplings": beta.couplings},
            "simulation_s": t1 - t0,
        }
        return spins, info

    def _sample_traced(self, model, key, num_samples, num_chains, schedule, t_a, min_steps,
                       opts):
        order = quantum.check_order(opts["order"])
        total = num_chains * num_samples
        states, steps = quantum.sample_traced(
            model, key, total, schedule, t_a, num_steps=opts["num_steps"], order=order,
            tolerance=opts["tolerance"], min_steps=min_steps, backend=opts["backend"])
        spins = states.reshape(model.batch_shape + (num_chains, num_samples, model.n))
        beta = quantum.effective_beta(schedule, t_a)
        info = {"schedule": schedule.name, "annealing_time": t_a, "num_steps": steps,
                "order": order, "num_qubits": model.n,
                "effective_beta": {"fields": beta.fields, "couplings": beta.couplings}}
        return spins, info
