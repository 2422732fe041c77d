"""Simulated annealing batched over models and reads, with dwave-samplers' parameters.

The annealing inverse temperature multiplies the model's energy ``E`` (physics sign, without the
model's own ``beta``), exactly as dwave-samplers' ``SimulatedAnnealingSampler`` multiplies a BQM's
energy, so :class:`SimulatedAnnealingSampler` and :class:`~isingattn.samplers.NealSampler` are
one-to-one for the same schedule: a sweep at schedule value ``b`` accepts a single-spin flip with
energy change ``dE`` with probability ``min(1, exp(-b dE))`` (Metropolis) or
``1 / (1 + exp(b dE))`` (Gibbs). The model's ``beta`` enters only through
``beta_schedule_type="fixed"`` (a constant schedule at each model's own ``beta``: a Metropolis or
Gibbs sampler of its Boltzmann distribution).

Dense models are swept sequentially over the variables ``0..n-1`` (as dwave-samplers does with
``randomize_order=False``), with the local fields ``f_i = h_i + sum_j J_ij x_j`` kept up to date.
The sweep is blocked: inside a block of ``B`` variables the fields are corrected for the flips made
earlier in the block (``O(B)`` per variable), and after the block one matrix product
``J[:, block] @ dx`` updates every field, so the arithmetic runs on wide vectors over reads and
models. On the CPU, dense models are annealed by default in a compiled kernel
(:mod:`isingattn._kernels.simulated`: the same sweep, with the reads as the vector axis and
its own random numbers; ``backend="jax"`` selects the JAX sweep). Sparse models are swept
colour class by colour class (a proper colouring of the graph: variables of one class are not
coupled, so updating them together is the same as updating them one after the other); for a
bipartite lattice this is the checkerboard sweep.

Every model is annealed in its SPIN form (a BINARY model is converted exactly, as dwave-samplers
does); states are returned in the model's vartype. Masked variables stay at the low value.
"""

from __future__ import annotations

import functools
import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_choice, check_positive_int, is_concrete, shape_str
from ..models import ModelBase, SparseIsingModel, Vartype
from ._base import Sampler
from ._colouring import colour_classes
from ._driver import check_initial_states, random_initial_states
from ._rng import bits_to_open_uniform, threefry2x32
from ._sharding import auto_axes, batch_split, map_models

#: Schedule types: dwave-samplers' three, plus ``"fixed"`` (constant at each model's own beta).
BETA_SCHEDULE_TYPES = ("linear", "geometric", "custom", "fixed")
#: Acceptance rules (dwave-samplers' ``proposal_acceptance_criteria``).
ACCEPTANCE_CRITERIA = ("Metropolis", "Gibbs")
#: dwave-samplers' default number of sweeps when no custom schedule is given.
DEFAULT_NUM_SWEEPS = 1000
_BLOCK = 16  # variables per block of the dense sweep
_SKIP_FROZEN_BLOCKS = True  # skip blocks where no read can flip (exact; see _dense_anneal)


# ---------------------------------------------------------------------------------------------
# default beta range
# ---------------------------------------------------------------------------------------------
def default_beta_range(model: ModelBase, *, max_excitation_rate: float = 0.01) -> jax.Array:
    """dwave-samplers' default ``[hot, cold]`` annealing range of each model, shape
    ``batch + (2,)``, in units of the model's energy (the model's ``beta`` plays no part).

    Computed on the SPIN form with active biases only:

    * hot end: ``log(2) / (2 F_max)`` with ``F_max = max_i (|h_i| + sum_j |J_ij|)``, the largest
      possible local field, so the largest possible flip cost ``2 F_max`` is accepted with
      probability 1/2 at the start (fast mixing);
    * cold end: ``log(N_min / rate) / (2 g)`` with ``g`` the smallest nonzero ``|h_i|`` or
      ``|J_ij|`` (the smallest excitation gap, approximately ``2 g``) and ``N_min`` the number of
      variables whose smallest nonzero bias equals ``g``, so that at the end the chance of any
      excitation per sweep is about ``rate`` (``max_excitation_rate``, default 0.01).

    A model with no nonzero bias gets ``[0.1, 1.0]`` (dwave-samplers warns in that case).
    """
    if not 0 < max_excitation_rate < 1:
        raise ValueError(
            f"max_excitation_rate must be in (0, 1); got {max_excitation_rate!r}"
        )
    spin = model.to_vartype("SPIN")
    habs = jnp.abs(spin.active_h)
    batch = spin.batch_shape
    n = spin.n
    if isinstance(spin, SparseIsingModel):
        Jabs = jnp.abs(spin.active_J)
        Jpad = jnp.concatenate([Jabs, jnp.zeros(Jabs.shape[:-1] + (1,), Jabs.dtype)], -1)
        rows = Jpad[..., spin.graph.neighbor_edges]  # (..., n, dmax), pads are 0
    else:
        rows = jnp.abs(spin.active_J)  # (..., n, n)
    rows = jnp.broadcast_to(rows, batch + rows.shape[-2:])
    habs = jnp.broadcast_to(habs, batch + (n,))
    total = habs + jnp.sum(rows, axis=-1)
    big = jnp.inf
    min_row = jnp.min(jnp.where(rows > 0, rows, big), axis=-1, initial=big)
    min_i = jnp.minimum(jnp.where(habs > 0, habs, big), min_row)  # (..., n), inf if no bias
    f_max = jnp.max(total, axis=-1, initial=0.0)
    g = jnp.min(min_i, axis=-1, initial=big)
    count = jnp.sum((min_i == g[..., None]) & jnp.isfinite(min_i), axis=-1)
    trivial = ~jnp.isfinite(g)
    safe_g = jnp.where(trivial, 1.0, g)
    hot = jnp.where(f_max > 0, math.log(2.0) / (2 * jnp.where(f_max > 0, f_max, 1.0)), 1.0)
    cold = jnp.log(jnp.maximum(count, 1) / max_excitation_rate) / (2 * safe_g)
    hot = jnp.where(trivial, 0.1, hot)
    cold = jnp.where(trivial, 1.0, cold)
    return jnp.stack([hot, cold], axis=-1).astype(spin.dtype)


# ---------------------------------------------------------------------------------------------
# schedules
# ---------------------------------------------------------------------------------------------
def _check_schedule_values(name, arr, *, allow_zero=True):
    if not is_concrete(arr):
        return
    a = np.asarray(arr, float)
    bad = ~np.isfinite(a) | ((a < 0) if allow_zero else (a <= 0))
    if a.size and bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        rule = "finite and >= 0" if allow_zero else "finite and > 0"
        raise ValueError(
            f"{name} values must be {rule}; got {a[idx] if a.ndim else float(a)}"
            f"{' at index ' + str(idx) if a.ndim else ''}"
        )


def annealing_schedule(
    model: ModelBase,
    *,
    num_sweeps=None,
    num_sweeps_per_beta: int = 1,
    beta_range=None,
    beta_schedule_type: str = "geometric",
    beta_schedule=None,
):
    """The per-sweep schedule of inverse temperatures, shape ``batch + (num_sweeps,)``, with
    dwave-samplers' rules, plus the beta range used (``batch + (2,)``).

    * ``"linear"`` / ``"geometric"``: ``num_sweeps / num_sweeps_per_beta`` values from
      ``beta_range[0]`` to ``beta_range[1]`` (``numpy.linspace`` / ``numpy.geomspace``), each held
      for ``num_sweeps_per_beta`` sweeps; ``beta_range`` defaults to :func:`default_beta_range`
      (per model); one value only means ``beta_range[1]``. ``num_sweeps`` defaults to 1000.
    * ``"custom"``: ``beta_schedule`` (``(K,)`` or ``batch + (K,)``) given, each value held for
      ``num_sweeps_per_beta`` sweeps; ``num_sweeps`` must be None or ``K * num_sweeps_per_beta``.
    * ``"fixed"``: a constant schedule at each model's own ``beta`` (``num_sweeps`` sweeps):
      Metropolis / Gibbs sampling of the Boltzmann distribution ``exp(-beta E)``.

    Any finite schedule values ``>= 0`` are allowed (not necessarily monotone); ``"geometric"``
    needs ``> 0``. Units: the schedule multiplies the model's energy ``E``.
    """
    check_choice("beta_schedule_type", beta_schedule_type, BETA_SCHEDULE_TYPES)
    num_sweeps_per_beta = check_positive_int("num_sweeps_per_beta", num_sweeps_per_beta)
    batch = model.batch_shape
    dtype = model.dtype
    if beta_schedule_type == "custom":
        if beta_schedule is None:
            raise ValueError(
                "beta_schedule must be given (a sequence of inverse temperatures) when "
                "beta_schedule_type='custom'"
            )
        sched = jnp.asarray(beta_schedule, dtype)
        if sched.ndim < 1 or sched.shape[-1] == 0:
            raise ValueError(
                f"beta_schedule must have shape (K,) or batch + (K,) with K >= 1; got "
                f"{shape_str(sched.shape)}"
            )
        _check_schedule_values("beta_schedule", beta_schedule)
        K = sched.shape[-1]
        if num_sweeps is not None and num_sweeps != K * num_sweeps_per_beta:
            raise ValueError(
                f"num_sweeps must be None or len(beta_schedule) * num_sweeps_per_beta = "
                f"{K * num_sweeps_per_beta} for beta_schedule_type='custom'; got {num_sweeps!r}"
            )
        try:
            sched = jnp.broadcast_to(sched, batch + (K,))
        except ValueError:
            raise ValueError(
                f"beta_schedule of shape {shape_str(sched.shape)} does not broadcast to the "
                f"model batch {shape_str(batch)} + (K,)"
            ) from None
        if beta_range is not None:
            raise ValueError(
                "beta_range must be None for beta_schedule_type='custom' (the schedule is given)"
            )
        rng = jnp.stack([sched[..., 0], sched[..., -1]], axis=-1)
        return jnp.repeat(sched, num_sweeps_per_beta, axis=-1), rng
    if beta_schedule is not None:
        raise ValueError(
            f"beta_schedule must be None unless beta_schedule_type='custom' "
            f"(got beta_schedule_type={beta_schedule_type!r})"
        )
    num_sweeps = DEFAULT_NUM_SWEEPS if num_sweeps is None else num_sweeps
    num_sweeps = check_positive_int("num_sweeps", num_sweeps)
    num_betas, rem = divmod(num_sweeps, num_sweeps_per_beta)
    if rem:
        raise ValueError(
            f"num_sweeps ({num_sweeps}) must be divisible by num_sweeps_per_beta "
            f"({num_sweeps_per_beta})"
        )
    if beta_schedule_type == "fixed":
        if beta_range is not None:
            raise ValueError("beta_range must be None for beta_schedule_type='fixed'")
        b = jnp.broadcast_to(model.beta, batch).astype(dtype)
        return jnp.broadcast_to(b[..., None], batch + (num_sweeps,)), jnp.stack([b, b], -1)
    if beta_range is None:
        rng = default_beta_range(model)
    else:
        rng = jnp.asarray(beta_range, dtype)
        if rng.ndim < 1 or rng.shape[-1] != 2:
            raise ValueError(
                f"beta_range must be a pair (hot, cold), or batch + (2,); got shape "
                f"{shape_str(rng.shape)}"
            )
        _check_schedule_values(
            "beta_range", beta_range, allow_zero=beta_schedule_type != "geometric"
        )
        try:
            rng = jnp.broadcast_to(rng, batch + (2,))
        except ValueError:
            raise ValueError(
                f"beta_range of shape {shape_str(rng.shape)} does not broadcast to the model "
                f"batch {shape_str(batch)} + (2,)"
            ) from None
    b0, b1 = rng[..., :1], rng[..., 1:]
    if num_betas == 1:
        sched = b1
    else:
        t = jnp.arange(num_betas, dtype=dtype) / (num_betas - 1)
        if beta_schedule_type == "linear":
            sched = b0 + (b1 - b0) * t
        else:
            sched = b0 * (b1 / b0) ** t
        sched = sched.at[..., -1].set(b1[..., 0])
    return jnp.repeat(sched, num_sweeps_per_beta, axis=-1), rng


# ---------------------------------------------------------------------------------------------
# kernels (one model; vmapped over the flattened batch)
# ---------------------------------------------------------------------------------------------
def _thresholds(seed, sweep, beta, mask, shape, dtype, gibbs):
    """Acceptance thresholds ``t`` of one sweep, shape ``(n, R)``: a flip with energy change
    ``dE`` is accepted iff ``dE < t``. With ``u`` uniform on (0, 1): Metropolis
    ``t = -log(u) / beta`` (i.e. ``u < exp(-beta dE)``), Gibbs ``t = log((1 - u) / u) / beta``
    (i.e. ``u < 1 / (1 + exp(beta dE))``); ``-inf`` for masked variables (never flipped).
    Computing ``t`` for the whole sweep at once keeps ``exp``/``log`` off the sequential chain."""
    n, R = shape
    half = (n * R + 1) // 2
    c0 = jax.lax.iota(jnp.uint32, half)
    c1 = jnp.full((half,), sweep, jnp.uint32)
    b0, b1 = threefry2x32(seed[0], seed[1], c0, c1)
    bits = jnp.concatenate([b0, b1])[: n * R].reshape(n, R)
    u = bits_to_open_uniform(bits, dtype)
    num = jnp.log1p(-u) - jnp.log(u) if gibbs else -jnp.log(u)
    return jnp.where(mask[:, None], num / beta, -jnp.inf)


def _dense_anneal(J, h, mask, betas, x0, seeds, *, gibbs, block):
    """Dense SPIN models, batch axis explicit. J (1 or M, n, n) active couplings, h (M, n),
    mask (M, n), betas (M, S), x0 (M, n, R) in {-1, +1}, seeds (M, 2) uint32; n a multiple of
    ``block``. Returns (x (M, n, R), accepted flips (M,))."""
    M, n, R = x0.shape
    nb = n // block
    dt = x0.dtype
    shared = J.shape[0] == 1
    # J[block b, block b] and J[:, block b] laid out per block for static-size slicing
    Jdiag = jnp.stack(
        [J[:, b * block:(b + 1) * block, b * block:(b + 1) * block] for b in range(nb)], 1
    )  # (Mj, nb, B, B)
    Jcols = J.reshape(J.shape[0], n, nb, block).transpose(0, 2, 1, 3)  # (Mj, nb, n, B)
    f0 = h[..., None] + jnp.einsum("mij,mjr->mir", jnp.broadcast_to(J, (M, n, n)), x0)
    thr_fn = jax.vmap(
        lambda seed, s, beta, mask: _thresholds(seed, s, beta, mask, (n, R), dt, gibbs),
        in_axes=(0, None, 0, 0),
    )

    def sweep(s, carry):
        x, f, acc = carry
        thr = thr_fn(seeds, s, betas[:, s], mask)

        def do_block(b, carry):
            x, f, acc = carry
            start = b * block
            fb = jax.lax.dynamic_slice_in_dim(f, start, block, 1)
            xb = jax.lax.dynamic_slice_in_dim(x, start, block, 1)
            tb = jax.lax.dynamic_slice_in_dim(thr, start, block, 1)

            def chain(args):
                x, f, acc = args
                Jd = Jdiag[:, b]  # (Mj, B, B)
                ds = []
                for k in range(block):
                    # field of variable k given the flips made so far in this block
                    field = fb[:, k]
                    for kk in range(k):
                        field = field + Jd[:, k, kk, None] * ds[kk]
                    xk = xb[:, k]
                    dk = jnp.where(2.0 * xk * field < tb[:, k], -2.0 * xk, 0.0)
                    # materialize each step: keeps XLA from fusing (and recomputing) the chain
                    ds.append(jax.lax.optimization_barrier(dk))
                d = jnp.stack(ds, 1)  # (M, B, R)
                acc = acc + jnp.sum(d != 0, axis=(1, 2))
                x = jax.lax.dynamic_update_slice_in_dim(x, xb + d, start, 1)
                if shared:
                    f = f + jnp.einsum("ib,mbr->mir", Jcols[0, b], d)
                else:
                    f = f + jnp.einsum("mib,mbr->mir", Jcols[:, b], d)
                return x, f, acc

            # With no flip in the block (every proposal rejected at the block's initial fields)
            # nothing changes: skip the sequential chain and the field update. Exact, and most
            # of the cold end of an anneal.
            if not _SKIP_FROZEN_BLOCKS:
                return chain((x, f, acc))
            any_flip = jnp.any(2.0 * xb * fb < tb)
            return jax.lax.cond(any_flip, chain, lambda a: a, (x, f, acc))

        return jax.lax.fori_loop(0, nb, do_block, (x, f, acc))

    x, _, acc = jax.lax.fori_loop(
        0, betas.shape[1], sweep, (x0, f0, jnp.zeros((M,), jnp.int32))
    )
    return x, acc


def _sparse_anneal(Jpad, h, mask, betas, x0, seed, *, gibbs, nbr, nbr_e, classes):
    """One sparse SPIN model: Jpad (E+1,) active couplings with a zero pad, h (n,), x0 (n, R).
    Sweeps colour class by colour class (static index arrays ``classes``)."""
    n, R = x0.shape
    dt = x0.dtype

    def sweep(s, carry):
        x, acc = carry
        thr = _thresholds(seed, s, betas[s], mask, (n, R), dt, gibbs)
        for idx in classes:
            xpad = jnp.concatenate([x, jnp.zeros((1, R), dt)], 0)
            field = h[idx][:, None] + jnp.sum(
                Jpad[nbr_e[idx]][:, :, None] * xpad[nbr[idx]], axis=1
            )
            xi = x[idx]
            ok = 2.0 * xi * field < thr[idx]
            acc = acc + jnp.sum(ok)
            x = x.at[idx].set(jnp.where(ok, -xi, xi))
        return x, acc

    return jax.lax.fori_loop(0, betas.shape[0], sweep, (x0, jnp.zeros((), jnp.int32)))


@functools.partial(jax.jit, static_argnames=("gibbs", "block"))
def _run_dense(J, h, mask, betas, x0, seeds, *, gibbs, block):
    J = J if J.ndim == 3 else J[None]
    return _dense_anneal(J, h, mask, betas, x0, seeds, gibbs=gibbs, block=block)


@functools.partial(jax.jit, static_argnames=("gibbs",))
def _run_dense_kernel(J, h, mask, betas, x0, seeds, *, gibbs):
    """:func:`_run_dense`'s contract (``J`` ``(n, n)`` shared or ``(M, n, n)``), run by the
    compiled kernel :func:`isingattn._kernels.simulated.anneal_dense`."""
    from .._kernels import simulated

    J = J if J.ndim == 3 else J[None]
    x, acc = simulated.anneal_dense(J, h, mask, betas, x0, seeds, gibbs=gibbs)
    return x, jnp.sum(acc, -1)


@functools.partial(jax.jit, static_argnames=("gibbs", "graph"))
def _run_sparse(Jpad, h, mask, betas, x0, seeds, *, gibbs, graph):
    kern = functools.partial(
        _sparse_anneal, gibbs=gibbs, nbr=graph.neighbors, nbr_e=graph.neighbor_edges,
        classes=colour_classes(graph),
    )
    J_axis = 0 if Jpad.ndim == 2 else None
    return jax.vmap(kern, in_axes=(J_axis, 0, 0, 0, 0, 0))(Jpad, h, mask, betas, x0, seeds)


# ---------------------------------------------------------------------------------------------
# functional API
# ---------------------------------------------------------------------------------------------
def _canonical_criteria(value):
    if isinstance(value, str):
        for c in ACCEPTANCE_CRITERIA:
            if value.lower() == c.lower():
                return c
    raise ValueError(
        f"proposal_acceptance_criteria must be 'Metropolis' or 'Gibbs'; got {value!r}"
    )


def _initial_spins(model, key, num_reads, initial_states):
    """Initial SPIN states ``batch + (num_reads, n)`` (masked variables at -1): the MCMC
    chains' initial-state rules (:func:`random_initial_states`, :func:`check_initial_states`)."""
    if initial_states is None:
        x = random_initial_states(model, key, num_reads)
    else:
        x = check_initial_states(initial_states, model, num_reads, axis="num_reads")
    if model.vartype is Vartype.BINARY:
        x = 2 * x - 1
    mask = jnp.broadcast_to(model.mask, model.batch_shape + (model.n,))[..., None, :]
    return jnp.where(mask, x, -1.0).astype(model.dtype)


def anneal(
    model: ModelBase,
    key,
    num_reads: int = 1,
    *,
    num_sweeps=None,
    num_sweeps_per_beta: int = 1,
    beta_range=None,
    beta_schedule_type: str = "geometric",
    beta_schedule=None,
    initial_states=None,
    proposal_acceptance_criteria: str = "Metropolis",
    backend: str = "auto",
):
    """Simulated annealing of every model of a batch, ``num_reads`` independent reads each.

    Usable under ``jit`` with the integer/string arguments static. See
    :func:`annealing_schedule` for the schedule arguments (dwave-samplers' names and rules) and
    the module docstring for the sweep order and units (the schedule multiplies ``E``).

    Args:
      model: dense or sparse model, any batch shape, SPIN or BINARY.
      key: JAX PRNG key.
      num_reads: independent anneals per model.
      initial_states: states in the model's vartype broadcasting to ``batch + (num_reads, n)``
        (default: uniformly random). Masked variables are held at the low value regardless.
      proposal_acceptance_criteria: ``"Metropolis"`` or ``"Gibbs"``.
      backend: where dense float32/float64 models are annealed: ``"auto"`` (default: the
        compiled CPU kernel of :mod:`isingattn._kernels.simulated` where JAX runs on the CPU,
        else JAX), ``"numba"`` or ``"jax"``. Same sweep, rules and schedule; the kernel draws
        its own random numbers (xoshiro128** per read), so one key gives other reads than the
        JAX path, from the same distribution. Sparse models always run in JAX.

    Returns:
      ``(states, info)``: states ``batch + (num_reads, n)`` in the model's vartype and
      ``info`` with ``beta_range`` (``batch + (2,)``), ``beta_schedule`` (per sweep,
      ``batch + (num_sweeps,)``) and ``acceptance_rate`` (``batch``, accepted flips per
      proposed flip of an unmasked variable).
    """
    if not isinstance(model, ModelBase):
        raise TypeError(
            f"model must be an IsingModel or SparseIsingModel; got {type(model).__name__}"
        )
    num_reads = check_positive_int("num_reads", num_reads)
    gibbs = _canonical_criteria(proposal_acceptance_criteria) == "Gibbs"
    from .._kernels import ffi

    backend = ffi.resolve_backend(backend)
    # value checks on concrete inputs here; the rest runs in one compiled program
    if beta_schedule is not None:
        _check_schedule_values("beta_schedule", beta_schedule)
    if beta_range is not None:
        _check_schedule_values("beta_range", beta_range,
                               allow_zero=beta_schedule_type != "geometric")
    if initial_states is not None:  # the values and shape, before compiling
        check_initial_states(initial_states, model, num_reads, axis="num_reads")
    as_arr = lambda v: None if v is None else jnp.asarray(v)
    model = auto_axes(model)
    return _anneal_jit(
        model, key, as_arr(beta_range), as_arr(beta_schedule), as_arr(initial_states),
        split=batch_split(model), num_reads=num_reads,
        num_sweeps=num_sweeps, num_sweeps_per_beta=num_sweeps_per_beta,
        beta_schedule_type=beta_schedule_type, gibbs=gibbs, backend=backend,
    )


@functools.partial(jax.jit, static_argnames=(
    "num_reads", "num_sweeps", "num_sweeps_per_beta", "beta_schedule_type", "gibbs", "split",
    "backend"))
def _anneal_jit(model, key, beta_range, beta_schedule, initial_states, *, num_reads, num_sweeps,
                num_sweeps_per_beta, beta_schedule_type, gibbs, split=None, backend="jax"):
    betas, rng = annealing_schedule(
        model, num_sweeps=num_sweeps, num_sweeps_per_beta=num_sweeps_per_beta,
        beta_range=beta_range, beta_schedule_type=beta_schedule_type,
        beta_schedule=beta_schedule,
    )
    spin = model.to_vartype("SPIN")
    batch, n = spin.batch_shape, spin.n
    M = int(np.prod(batch, dtype=int))
    k_init, k_run = jax.random.split(key)
    x0 = _initial_spins(model, k_init, num_reads, initial_states)
    info = {"beta_range": rng, "beta_schedule": betas}
    if n == 0:
        info["acceptance_rate"] = jnp.zeros(batch, spin.dtype)
        return x0.astype(model.dtype), info
    dt = spin.dtype
    seeds = jax.random.bits(k_run, (M, 2), jnp.uint32)
    mask = jnp.broadcast_to(spin.mask, batch + (n,)).reshape(M, n)
    h = jnp.broadcast_to(spin.active_h, batch + (n,)).reshape(M, n)
    S = betas.shape[-1]
    betas_f = betas.reshape(M, S)
    x0f = jnp.swapaxes(x0.reshape(M, num_reads, n), -1, -2)  # (M, n, R): reads contiguous
    if isinstance(spin, SparseIsingModel):
        J = spin.active_J
        if J.ndim > 1 or spin.mask.ndim > 1:
            J = jnp.broadcast_to(J, batch + J.shape[-1:]).reshape(M, -1)
        Jpad = jnp.concatenate([J, jnp.zeros(J.shape[:-1] + (1,), dt)], -1)
        run = functools.partial(_run_sparse, gibbs=gibbs, graph=spin.graph)
        x, acc = map_models(run, split, Jpad, h, mask, betas_f, x0f, seeds,
                            shared=(0,) if Jpad.ndim == 1 else ())
    else:
        J = spin.active_J
        shared = J.ndim == 2  # one J for the whole batch (and an unbatched mask)
        if not shared:
            J = jnp.broadcast_to(J, batch + (n, n)).reshape(M, n, n)
        if backend == "numba" and dt in (jnp.float32, jnp.float64):
            run = functools.partial(_run_dense_kernel, gibbs=gibbs)
        else:
            block = min(_BLOCK, n)
            pad = -n % block
            if pad:
                J = jnp.pad(J, [(0, 0)] * (J.ndim - 2) + [(0, pad), (0, pad)])
                h = jnp.pad(h, [(0, 0), (0, pad)])
                mask = jnp.pad(mask, [(0, 0), (0, pad)])
                x0f = jnp.pad(x0f, [(0, 0), (0, pad), (0, 0)], constant_values=-1.0)
            run = functools.partial(_run_dense, gibbs=gibbs, block=block)
        x, acc = map_models(run, split, J, h, mask, betas_f, x0f, seeds,
                            shared=(0,) if shared else ())
        x = x[:, :n]
    x = jnp.swapaxes(x, -1, -2).reshape(batch + (num_reads, n))
    active = jnp.maximum(jnp.sum(mask, -1), 1).astype(dt)
    info["acceptance_rate"] = (acc.astype(dt) / (active * num_reads * S)).reshape(batch)
    if model.vartype is Vartype.BINARY:
        x = (x + 1) / 2
    return x.astype(model.dtype), info


# ---------------------------------------------------------------------------------------------
# the backend
# ---------------------------------------------------------------------------------------------
class SimulatedAnnealingSampler(Sampler):
    """Simulated annealing in JAX (see :func:`anneal`), batched over models and reads.

    Protocol: ``sample(model, key, num_samples, num_chains=1, **options)`` runs
    ``num_reads = num_chains * num_samples`` independent anneals per model; read
    ``c * num_samples + d`` is ``spins[..., c, d, :]`` (draws of a chain are independent
    reads, not successive states). The dimod face (:func:`~isingattn.samplers.as_dimod_sampler`)
    takes dwave-samplers' ``num_reads`` and ``seed`` directly.

    Options (dwave-samplers' names): ``num_sweeps`` (default 1000), ``num_sweeps_per_beta``,
    ``beta_range``, ``beta_schedule_type`` (``"geometric"`` default, ``"linear"``,
    ``"custom"``, ``"fixed"``), ``beta_schedule``, ``initial_states`` (``batch + (num_reads,
    n)`` or broadcastable), ``proposal_acceptance_criteria`` (``"Metropolis"``/``"Gibbs"``);
    and ours, ``backend`` (``"auto"``, ``"numba"``, ``"jax"``: where dense models are
    annealed, see :func:`anneal`). The schedule multiplies the model's energy ``E``, not
    ``beta * E``; ``"fixed"`` anneals at each model's own ``beta`` throughout (a Boltzmann
    sampler). Constructor keywords preset any option.

    ``info``: ``beta_range``, ``beta_schedule`` (per sweep), ``acceptance_rate``; energies of
    the reads are ``Samples.energy``.

    Example:
      >>> import jax
      >>> from isingattn.models import random_dense
      >>> from isingattn.samplers import SimulatedAnnealingSampler
      >>> m = random_dense(jax.random.key(0), 12, batch_shape=(3,))
      >>> s = SimulatedAnnealingSampler(num_sweeps=200).sample(m, jax.random.key(1), 8)
      >>> s.spins.shape
      (3, 1, 8, 12)
    """

    parameters: ClassVar[dict[str, list]] = {
        "num_sweeps": [],
        "num_sweeps_per_beta": [],
        "beta_range": [],
        "beta_schedule_type": ["beta_schedule_options"],
        "beta_schedule": [],
        "initial_states": [],
        "proposal_acceptance_criteria": [],
        "backend": [],
    }
    properties: ClassVar[dict[str, Any]] = {"beta_schedule_options": BETA_SCHEDULE_TYPES,
                  "proposal_acceptance_criteria": ACCEPTANCE_CRITERIA}

    def __init__(self, **defaults):
        self._check_options(defaults)
        if "backend" in defaults:
            from .._kernels.ffi import BACKENDS

            check_choice("backend", defaults["backend"], BACKENDS)
        self.defaults = defaults

    def _sample(self, model, key, num_samples, num_chains, **options):
        opts = {**self.defaults, **options}
        states, info = anneal(model, key, num_chains * num_samples, **opts)
        spins = states.reshape(model.batch_shape + (num_chains, num_samples, model.n))
        return spins, info

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.defaults.items())
        return f"{type(self).__name__}({args})"


__all__ = [
    "ACCEPTANCE_CRITERIA",
    "BETA_SCHEDULE_TYPES",
    "SimulatedAnnealingSampler",
    "anneal",
    "annealing_schedule",
    "default_beta_range",
]
