"""The anneal simulated inside a traced (``jit``) program: every model of a batch on a register
of all ``n`` variables, in one compiled program.

:func:`isingattn.quantum._evolve.evolve` lays each model's *active* variables out on the host
(a register of ``max(active)`` qubits) and picks the step count from concrete field sizes, so it
needs concrete parameters. Training calls the sampler from inside a jitted step, where the
fields are traced. This path keeps the register at ``n`` qubits and lets masked variables be the
register's unused qubits (no problem terms, so they stay in ``|+>``, an eigenstate of the driver,
and are projected out at the end: exactly the evolution without them, as in ``_evolve``), and
computes the automatic step count from the traced fields inside the program (a loop whose trip
count is a traced number). Same integrator, same schedule interpolant, same step-count rule: the
output distribution is the one :func:`isingattn.quantum.output_distribution` gives (tested).
"""

from __future__ import annotations

import jax.numpy as jnp

from .._kernels import ffi
from ..models import Vartype
from ._evolve import (
    MAX_QUBITS,
    MIN_STEPS,
    _evolve_batch,
    _real_dtype,
    _step_counts,
    problem_energies,
    sample_register,
)


def traced_num_steps(schedule, annealing_time, flip_scale, *, order=4, tolerance=1e-4,
                     min_steps=MIN_STEPS):
    """:func:`isingattn.quantum.default_num_steps` for a traced ``flip_scale`` (a scalar, or an
    array: one count per entry): the same rule (``K_p ((pi t_a)^(p+1) G(F) / tolerance)^(1/p)``
    steps, at most ``_MAX_STEP_PHASE`` of the total phase per step, at least ``min_steps``,
    rounded up to ``COUNT_BITS`` significant bits), as traced int32."""
    F = jnp.asarray(flip_scale, _real_dtype())
    return _step_counts(jnp, schedule, annealing_time, F, order, tolerance,
                       min_steps).astype(jnp.int32)


def sample_traced(model, key, total, schedule, annealing_time, *, num_steps=None, order=4,
                  tolerance=1e-4, min_steps=MIN_STEPS, backend="auto"):
    """``total`` measurements of the anneal of every model of the batch, traceable.

    Returns ``(spins, num_steps)``: spins ``batch + (total, n)`` in the model's vartype (masked
    variables at the low value) and the (traced) integration steps of each model, ``batch``
    int32: ``num_steps`` where given, else each model's automatic count from its own flip scale
    (a model with weak fields does not run the steps a strong one needs). ``n <= MAX_QUBITS``.
    ``backend``: where the state vectors evolve, as in :func:`isingattn.quantum.evolve`.
    """
    backend = ffi.resolve_backend(backend)
    n = model.n
    if n > MAX_QUBITS:
        raise ValueError(
            f"the state-vector simulator supports at most {MAX_QUBITS} variables per model "
            f"inside jit (2^{MAX_QUBITS} complex amplitudes); this model has n = {n}"
        )
    rdtype = _real_dtype()
    batch = model.batch_shape
    spin = model.to_dense().to_vartype(Vartype.SPIN)
    h = jnp.broadcast_to(spin.active_h, batch + (n,)).reshape(-1, n).astype(rdtype)
    J = jnp.broadcast_to(spin.active_J, batch + (n, n)).reshape(-1, n, n).astype(rdtype)
    active = jnp.broadcast_to(spin.mask, batch + (n,)).reshape(-1, n)
    M = h.shape[0]
    if num_steps is None:
        flip = jnp.max(jnp.abs(h) + jnp.sum(jnp.abs(J), axis=-1), axis=-1, initial=0.0)
        steps = traced_num_steps(schedule, annealing_time, flip, order=order,
                                 tolerance=tolerance, min_steps=min_steps)
    else:
        steps = jnp.full((M,), num_steps, jnp.int32)
    energy = problem_energies(h, J)
    amps = _evolve_batch(
        energy, active, jnp.asarray(schedule.s, rdtype), jnp.asarray(schedule.A, rdtype),
        jnp.asarray(schedule.B, rdtype), jnp.asarray(annealing_time, rdtype), steps, order,
        backend)
    probs = jnp.abs(amps) ** 2
    probs = probs / jnp.sum(probs, axis=-1, keepdims=True)
    idx = sample_register(key, probs, total)  # (M, total); bit i = variable i
    bits = (idx[..., None] >> jnp.arange(n, dtype=idx.dtype)) & 1
    states = bits if model.vartype is Vartype.BINARY else 2 * bits - 1
    return states.astype(model.dtype).reshape(batch + (total, n)), steps.reshape(batch)
