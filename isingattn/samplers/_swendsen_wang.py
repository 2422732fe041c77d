"""Swendsen–Wang cluster updates (Fortuin–Kasteleyn bonds), for couplings of any sign and fields.

One step is one full Swendsen–Wang update of the SPIN form of the model:

1. every *satisfied* edge (``J_ij x_i x_j > 0``) is bonded with probability
   ``p_ij = 1 - exp(-2 beta |J_ij|)``; unsatisfied edges never are;
2. the bonded edges split the variables into clusters (connected components);
3. each cluster ``C`` is flipped (every ``x_i -> -x_i``, ``i in C``) by a heat-bath choice between
   its two allowed configurations, ``P(flip) = 1 / (1 + exp(2 beta H_C))`` with
   ``H_C = sum_{i in C} h_i x_i`` — the cluster's field energy. With ``h = 0`` this is the classic
   fair coin.

Why this samples ``exp(-beta E)``: in the Edwards–Sokal joint distribution each edge factor is
``exp(beta J x_i x_j) ∝ (1 - p_ij) + p_ij [J x_i x_j > 0]``; given the bonds, ``x`` is uniform
over the configurations that keep every bond satisfied, reweighted by the field term, and each
cluster then has exactly two such configurations (the current one and its flip). Any sign of
``J_ij`` works; frustration only makes clusters smaller.

Masked variables have no active couplings, so they are never bonded, and they are never flipped.
BINARY models are sampled in their SPIN form (``x = 2 s - 1``) and returned as BINARY. Dense
models use every pair ``i < j`` as an edge (pairs with ``J_ij = 0`` are never bonded).

Connected components, by ``components``:

* ``"numba"``: a union-find compiled with numba, called inside the XLA program as a typed FFI
  custom call (:mod:`isingattn._kernels.union_find`): one raster scan over a grid's bonds (or
  one pass over the neighbour tables), no rounds. Same labels as the other paths, hence the
  same chains.
* ``"jax"``: labels clusters in JAX (node hooking onto parents with a scatter-min, two pointer
  jumps per round, until nothing changes; about 6 rounds on a 64x64 lattice at beta_c), with
  the chains of a step labelled in groups of chains, each group one block-diagonal graph. Runs
  on any backend.
* ``"scipy"``: ``scipy.sparse.csgraph.connected_components`` on the host through
  ``jax.pure_callback`` (one call per step for all chains at once).
* ``"auto"`` (default): ``"numba"`` where it can run (JAX on the CPU), else
  ``"jax"``.

With ``"numba"`` (so by default on the CPU), a fixed-beta run of a grid model runs its whole
steps — bits, bonds, labels, flips and statistics — in a compiled kernel
(:mod:`isingattn._kernels.swendsen_wang`; ``runs_sweeps``/``sweeps_chains`` of the driver's
protocol): the burn-in and the steps before each kept draw in one call each, the chains shared
among its threads. It draws the same words, so it follows the same chain as the JAX step
(exactly with ``h = 0``; with fields up to an ``exp`` rounding in a flip decision).

On the CPU the compiled union-find makes the fastest step, then the in-JAX labelling, then
scipy (timings in ``docs/guide/cluster.md``).

Speed (why the step looks the way it does; timings and the variants tried and dropped are in
``docs/guide/cluster.md``, Implementation notes):

* the chains of one step share one flat label array (a batched gather or scatter costs more
  than a flat one on CPU);
* graphs that are (subsets of) a periodic ``Lx x Ly`` grid in row-major order — every
  :func:`~isingattn.models.square_lattice`, periodic or open — are recognised once per graph and
  their neighbour gathers become shifts of ``(chain, Lx, Ly)`` arrays; other graphs use padded
  neighbour tables;
* random bits come from xoshiro128** generators carried in the state, re-keyed from the step
  key when one is given (``key=None`` continues the stream, as the driver does;
  as in the single-site samplers): threefry for the ~3 words per site of a step would cost
  more than everything in the step but the labelling;
* labels are int16 in groups of up to 2^13 nodes (half the memory traffic of int32);
* each cluster's flip is decided once, at its root (the smallest index), and read by its members
  with one gather; the cluster field sums ``H_C`` (a scatter-add) are skipped when ``h = 0``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_choice
from ..models import SparseIsingModel
from ._clusters import (
    _get,
    _label_chains,
    _native_roots,
    _plan,
    _roll,
    _slot_bonds,
    bond_probability,
    bonds_from_uniforms,
    components_jax,
    components_scipy,
    from_spin,
    resolve_components,
    spin_form,
    to_spin,
)
from ._mcmc import MCMCSampler
from ._rng import bits_to_uniform, xoshiro_mix, xoshiro_next, xoshiro_seed

COMPONENTS = ("auto", "numba", "jax", "scipy")


class SwendsenWangState(NamedTuple):
    """State of one chain: ``x`` (n,) in the model's vartype and the xoshiro128** generator
    state ``rng`` (4 uint32 arrays of shape ``(lanes,)``, see :func:`xoshiro_seed`)."""

    x: jax.Array
    rng: tuple


# ----------------------------------------------------------------------------- the sampler
@dataclasses.dataclass(frozen=True)
class SwendsenWangSampler(MCMCSampler):
    """Swendsen–Wang cluster sampler (module docstring: algorithm, correctness and speed).

    Works on dense and sparse models, any coupling signs, with fields, masks, SPIN or BINARY.
    One step (the driver's "sweep") is one full cluster update: every variable can change.

    Args:
      components: how clusters are labelled: ``"auto"`` (default: ``"numba"`` where it can
        run, JAX on the CPU, else ``"jax"``), ``"numba"`` (a compiled
        union-find called as an XLA custom call; compiled by numba on first use in a
        process), ``"jax"`` (in-JAX parent hooking + pointer jumping, any backend) or
        ``"scipy"`` (``scipy.sparse.csgraph.connected_components`` on the host via
        ``jax.pure_callback``). All give the same labels, hence the same chains for the same
        key.

    ``info`` (means over kept steps, per chain): ``num_clusters``, ``mean_cluster_size``
    (active variables / clusters), ``largest_cluster``.

    Randomness: one 32-bit word per edge (per grid slot on lattices) for the bonds and one per
    variable for the flips (the word at a cluster's root decides that cluster), from xoshiro128**
    generators seeded from the chain's key at ``init`` and re-keyed from every step's key
    (``key=None`` continues the stream, as the driver does at a fixed ``beta``), so the same
    keys give the same chain.

    Example:
      >>> import jax
      >>> from isingattn.models import square_lattice
      >>> from isingattn.samplers import SwendsenWangSampler
      >>> m = square_lattice(8, beta=0.44)
      >>> s = SwendsenWangSampler().sample(m, jax.random.key(0), 100, num_chains=2)
      >>> s.spins.shape
      (2, 100, 64)
    """

    components: str = "auto"
    default_burnin = 50
    carries_stream = True

    def __post_init__(self):
        check_choice("components", self.components, COMPONENTS)

    def init(self, model, key, x0):
        plan = _plan(model)
        return SwendsenWangState(x=jnp.asarray(x0, model.dtype),
                                 rng=xoshiro_seed(key, (plan.lanes,)))

    def runs_sweeps(self, model, num_chains=None):
        """Whether many steps of ``model`` run in one call of the compiled grid kernel
        (:mod:`isingattn._kernels.swendsen_wang`): a grid model (see the module docstring) in
        float32 or float64 whose ``components`` resolve to ``"numba"``, any number of chains."""
        spin = spin_form(model)
        return (_plan(spin).grid is not None and spin.dtype in (jnp.float32, jnp.float64)
                and resolve_components(self.components, True) == "numba")

    def sweeps_chains(self, model, states, num_sweeps, beta, prep=None):
        """``num_sweeps`` steps of every chain of a grid model in one call of the compiled
        kernel, continuing the chains' streams (see :meth:`MCMCSampler.sweeps_chains`): the
        same chain as :meth:`step_chains` with ``keys=None``; ``info`` summed over the steps."""
        from .._kernels import swendsen_wang

        spin = spin_form(model)
        slots = _plan(spin).grid[2]  # (2, Lx, Ly) edge index of each grid slot
        dtype = spin.dtype
        Jg = jnp.concatenate([spin.active_J, jnp.zeros((1,), dtype)])[slots]
        s = to_spin(states.x, model.vartype).astype(dtype)
        s, rng, stats = swendsen_wang.grid_steps(s, states.rng, Jg, bond_probability(Jg, beta),
                                                 spin.active_h, spin.mask, beta, num_sweeps)
        x = from_spin(s, model.vartype).astype(states.x.dtype)
        info = {"num_clusters": stats[:, 0], "mean_cluster_size": stats[:, 1],
                "largest_cluster": stats[:, 2]}
        return SwendsenWangState(x=x, rng=rng), info

    def step(self, model, state, key, beta):
        """One Swendsen–Wang update of one chain (the one-chain case of :meth:`step_chains`)."""
        states = jax.tree_util.tree_map(lambda a: a[None], state)
        new, info = self.step_chains(model, states, None if key is None else key[None], beta)
        return (jax.tree_util.tree_map(lambda a: a[0], new),
                {k: a[0] for k, a in info.items()})

    def step_chains(self, model, states, keys, beta):
        """One update of every chain of one model (leading chain axis ``C``), all chains
        labelled at once as one graph of ``C * n`` nodes."""
        spin = spin_form(model)
        plan = _plan(spin)
        n, E = plan.n, plan.E
        C = states.x.shape[0]
        total = C * n
        dtype = spin.dtype
        s = to_spin(states.x, model.vartype).astype(dtype)  # (C, n)

        rng = states.rng if keys is None else jax.vmap(xoshiro_mix)(states.rng, keys)
        # a scan, not a Python loop: its outputs are materialized once, where unrolled draws
        # would be fused (and recomputed) into every consumer, the flip gather included
        rng, words = jax.lax.scan(lambda r, _: xoshiro_next(r), rng, None, length=plan.draws)
        if plan.grid is not None:  # lanes = n: draws 0, 1 = right, down bonds; 2 = flips
            w_bond, w_flip = words[:2], words[2]
        else:
            words = jnp.moveaxis(words, 0, 1).reshape(C, -1)  # (C, draws * lanes)
            w_bond, w_flip = words[:, :E], words[:, E:E + n]

        J = spin.active_J if isinstance(spin, SparseIsingModel) else spin.active_J[plan.u, plan.v]
        if plan.grid is not None:
            Lx, Ly, slots = plan.grid
            Jpad = jnp.concatenate([J, jnp.zeros((1,), dtype)])
            Jg = Jpad[slots]  # (2, Lx, Ly)
            g = s.reshape(C, Lx, Ly)
            other = jnp.stack([_roll(g, -1, 2), _roll(g, -1, 1)], axis=1)  # (C, 2, Lx, Ly)
            u01 = bits_to_uniform(jnp.moveaxis(w_bond, 0, 1).reshape(C, 2, Lx, Ly)).astype(dtype)
            bond = bonds_from_uniforms(Jg, g[:, None], other, u01, beta)
            links = bond  # (C, 2, Lx, Ly)
        else:
            bond = bonds_from_uniforms(J, s[:, plan.u], s[:, plan.v],
                                       bits_to_uniform(w_bond).astype(dtype), beta)  # (C, E)
            links = _slot_bonds(plan, bond)  # (C, n, d)

        offsets = (jnp.arange(C, dtype=jnp.int32) * n)[:, None]
        components = resolve_components(self.components, plan.grid is not None)
        if components == "numba":
            root = (_native_roots(plan, links) + offsets).reshape(-1)
        elif components == "jax":
            root = _label_chains(plan, links)  # (C * n,) global indices
        else:
            if plan.grid is not None:  # back to edge order for the host
                flat_slots = plan.grid[2].reshape(-1)
                edge_slot = np.empty(E, np.int64)
                edge_slot[flat_slots[flat_slots < E]] = np.nonzero(flat_slots < E)[0]
                bond = bond.reshape(C, -1)[:, edge_slot]
            root = (components_scipy(n, plan.u, plan.v, bond) + offsets).reshape(-1)

        mask = spin.mask
        h = spin.active_h
        s_flat = s.reshape(-1)

        def field_sums():
            return jax.ops.segment_sum(jnp.tile(h, C) * s_flat, root, num_segments=total)

        # H_C at each root; with h = 0 every P(flip) is 1/2 and the scatter-add is skipped
        H = jax.lax.cond(jnp.any(h != 0), field_sums, lambda: jnp.zeros((total,), dtype))
        p_flip = jax.nn.sigmoid(-2 * beta * H)
        decide = bits_to_uniform(w_flip).astype(dtype).reshape(-1) < p_flip  # used at roots
        mask_flat = jnp.tile(mask, C)
        flip = _get(decide, root) & mask_flat
        s_new = jnp.where(flip, -s_flat, s_flat).reshape(C, n)

        # cluster statistics: roots are the nodes labelled by themselves
        idx = jnp.arange(total, dtype=jnp.int32)
        num = jnp.sum(((root == idx) & mask_flat).reshape(C, n), axis=1)
        sizes = jnp.zeros((total,), jnp.int32).at[root].add(
            mask_flat.astype(jnp.int32), mode="promise_in_bounds")
        active = jnp.sum(mask)
        info = {
            "num_clusters": num.astype(jnp.float32),
            "mean_cluster_size": (active / jnp.maximum(num, 1)).astype(jnp.float32),
            "largest_cluster": jnp.max(sizes.reshape(C, n), axis=1, initial=0).astype(jnp.float32),
        }
        x = from_spin(s_new, model.vartype).astype(states.x.dtype)
        return SwendsenWangState(x=x, rng=rng), info


__all__ = ["SwendsenWangSampler", "SwendsenWangState", "components_jax", "components_scipy"]
