"""Wolff single-cluster updates, for models without fields (couplings of any sign).

One cluster flip: pick a seed variable uniformly among the unmasked ones, grow its
Fortuin–Kasteleyn cluster — from every cluster member ``i``, each neighbour ``j`` not yet in the
cluster joins with probability ``1 - exp(-2 beta |J_ij|)`` if the edge is satisfied
(``J_ij x_i x_j > 0``), each edge tested at most once — then flip the whole cluster. With ``h = 0``
the flipped configuration has the same weight as the current one given the bonds, so the flip is
always accepted; this is detailed balance for ``exp(-beta E)`` whatever the signs of ``J`` (the
Fortuin–Kasteleyn construction never needs ferromagnetic couplings; frustration only makes the
clusters small). With fields the cluster flip would need an acceptance test whose rate collapses
for large clusters; use :class:`SwendsenWangSampler`, which handles fields exactly.

Two ways to find the cluster, same distribution:

* ``cluster="labels"`` (default): draw the FK bonds of every edge, label all clusters (with
  :class:`SwendsenWangSampler`'s compiled union-find on the CPU, ``components="numba"``, or
  ``components_jax``, the hooking rounds of its in-JAX labelling over the model's edge list),
  flip the one holding the seed.
  The bonds outside the seed's cluster are never looked at, so the flipped cluster has exactly
  the Wolff distribution. Cost ``O(E)`` per flip in a few vectorized rounds.
* ``cluster="stack"``: the textbook growth from a stack in a ``lax.while_loop``, one iteration
  per member (its neighbours tested at once: neighbour tables of sparse models, all variables
  for dense ones), cost ``O(|C| * degree)``. Each loop iteration is a handful of tiny kernels, so
  on CPU it only wins when clusters are small (high temperature); near criticality on a 64x64
  lattice "labels" was more than 10x faster per flip.

Time unit: one step (the driver's "sweep") is ``num_flips`` cluster flips (default 1). A flip
touches ``|C|`` variables, so ``num_flips`` flips are ``num_flips * <|C|> / N`` sweep-equivalents;
``info["cluster_size"]`` (mean ``|C|`` per flip) and ``info["sweep_fraction"]`` (flipped variables
per step / active variables) give the conversion. At the 2D critical point ``<|C|> / N ~ L^{-1/4}``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_choice, check_positive_int, is_concrete
from ..models import SparseIsingModel
from ._clusters import (
    _plan,
    components_jax,
    edge_bond_roots,
    edge_list,
    fk_bonds,
    from_spin,
    resolve_components,
    spin_form,
    to_spin,
)
from ._mcmc import MCMCSampler

#: Labellings of ``cluster="labels"`` (see :class:`SwendsenWangSampler`'s ``components``).
COMPONENTS = ("auto", "numba", "jax")


class WolffState(NamedTuple):
    """State of one chain: ``x`` (n,) in the model's vartype."""

    x: jax.Array


def neighbour_table(model):
    """``(nbr, Jn)`` of an unbatched SPIN model: neighbour indices ``(n, d)`` (padded with ``n``)
    and active couplings ``(n, d)`` (zero on padding). Dense models: every variable, self with
    ``J_ii = 0``."""
    n = model.n
    if isinstance(model, SparseIsingModel):
        J = model.active_J
        Jpad = jnp.concatenate([J, jnp.zeros((1,), J.dtype)])
        return model.graph.neighbors, Jpad[model.graph.neighbor_edges]
    return np.broadcast_to(np.arange(n, dtype=np.int32), (n, n)), model.active_J


def grow_cluster(key, s, nbr, Jn, beta, seed):
    """The Wolff cluster of ``seed``: bool ``(n,)``. ``s`` spins (n,), ``nbr``/``Jn`` as from
    :func:`neighbour_table`."""
    n = s.shape[0]
    spad = jnp.concatenate([s, jnp.zeros((1,), s.dtype)])
    nbr = jnp.asarray(nbr)

    def body(c):
        inc, stack, ptr, it = c
        i = stack[ptr - 1]
        ptr = ptr - 1
        nb, jn = nbr[i], Jn[i]
        p = -jnp.expm1(-2 * beta * jnp.abs(jn))
        r = jax.random.uniform(jax.random.fold_in(key, it), jn.shape, jn.dtype)
        add = (~inc[nb]) & (jn * s[i] * spad[nb] > 0) & (r < p)
        pos = jnp.where(add, ptr + jnp.cumsum(add) - 1, n)
        stack = stack.at[pos].set(nb, mode="drop")
        inc = inc.at[jnp.where(add, nb, n + 1)].set(True, mode="drop")
        return inc, stack, ptr + jnp.sum(add), it + 1

    inc = jnp.zeros((n + 1,), bool).at[seed].set(True).at[n].set(True)  # n: padding, "taken"
    stack = jnp.zeros((n,), jnp.int32).at[0].set(seed)
    inc, *_ = jax.lax.while_loop(lambda c: c[2] > 0, body, (inc, stack, jnp.int32(1), jnp.int32(0)))
    return inc[:n]


@dataclasses.dataclass(frozen=True)
class WolffSampler(MCMCSampler):
    """Wolff single-cluster sampler for models without fields (module docstring: algorithm).

    Supports dense and sparse models, ferromagnetic, antiferromagnetic and mixed-sign couplings
    (frustrated ones included), masks, SPIN and BINARY (a BINARY model qualifies when its SPIN
    form has no fields). A model with fields is refused with an error naming the largest field.

    Args:
      num_flips: cluster flips per step (the driver's "sweep"), >= 1.
      cluster: ``"labels"`` (default) or ``"stack"``: how the seed's cluster is found (module
        docstring); both give the same Markov chain in distribution.
      components: how ``cluster="labels"`` labels the clusters, as Swendsen–Wang's
        ``components``: ``"auto"`` (default: the compiled union-find ``"numba"`` on the CPU,
        else ``"jax"``), ``"numba"`` or ``"jax"``; the same labels, hence the same chains.

    ``info`` (means over kept steps, per chain): ``cluster_size`` (mean ``|C|`` per flip) and
    ``sweep_fraction`` (variables flipped per step / active variables: sweep-equivalents per step).

    Example:
      >>> import jax
      >>> from isingattn.models import square_lattice
      >>> from isingattn.samplers import WolffSampler
      >>> m = square_lattice(8, beta=0.44)
      >>> s = WolffSampler(num_flips=4).sample(m, jax.random.key(0), 100)
      >>> s.spins.shape
      (1, 100, 64)
    """

    num_flips: int = 1
    cluster: str = "labels"
    components: str = "auto"
    default_burnin = 100

    def __post_init__(self):
        check_positive_int("num_flips", self.num_flips)
        if self.cluster not in ("labels", "stack"):
            raise ValueError(f"cluster must be 'labels' or 'stack'; got {self.cluster!r}")
        check_choice("components", self.components, COMPONENTS)

    def check_model(self, model):
        spin = spin_form(model)
        h = spin.active_h
        if not is_concrete(h):
            return
        h = np.abs(np.asarray(h))
        biggest = float(h.max()) if h.size else 0.0
        # BINARY -> SPIN conversion can leave rounding-level fields on a field-free model
        tol = 0.0
        if model.vartype != "SPIN":
            J = np.abs(np.asarray(spin.active_J))
            tol = 1e-6 * max(1.0, float(J.max()) if J.size else 0.0)
        if biggest > tol:
            form = "" if model.vartype == "SPIN" else " in its SPIN form"
            raise ValueError(
                f"WolffSampler needs h = 0; this model has fields{form} (max |h| = {biggest:.3g}). "
                "Use SwendsenWangSampler, which handles fields exactly, or a single-site sampler."
            )

    def init(self, model, key, x0):
        return WolffState(x=jnp.asarray(x0, model.dtype))

    def step(self, model, state, key, beta):
        spin = spin_form(model)
        mask = spin.mask
        active = jnp.sum(mask)
        logits = jnp.where(mask, 0.0, -jnp.inf)
        if self.cluster == "stack":
            nbr, Jn = neighbour_table(spin)

            def find(k, s, seed):
                return grow_cluster(k, s, nbr, Jn, beta, seed)
        else:
            u, v, J = edge_list(spin)
            plan = _plan(spin)
            native = resolve_components(self.components, plan.grid is not None) == "numba"

            def find(k, s, seed):
                bond = fk_bonds(k, s, u, v, J, beta)
                root = edge_bond_roots(plan, bond) if native else components_jax(model.n, u, v,
                                                                                  bond)
                return root == root[seed]

        def flip(s, k):
            k_seed, k_grow = jax.random.split(k)
            seed = jax.random.categorical(k_seed, logits).astype(jnp.int32)
            c = find(k_grow, s, seed) & mask
            return jnp.where(c, -s, s), jnp.sum(c)

        s = to_spin(state.x, model.vartype)
        s, sizes = jax.lax.scan(flip, s, jax.random.split(key, self.num_flips))
        info = {
            "cluster_size": jnp.mean(sizes).astype(jnp.float32),
            "sweep_fraction": (jnp.sum(sizes) / jnp.maximum(active, 1)).astype(jnp.float32),
        }
        return WolffState(x=from_spin(s, model.vartype).astype(state.x.dtype)), info


__all__ = ["WolffSampler", "WolffState"]
