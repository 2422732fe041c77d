"""Many small problems per QPU call: the models of a batch placed side by side on disjoint parts
of the QPU's graph ("tiling", or parallel embedding).

Boltzmann attention asks for one small Ising model per (batch, head, query): thousands per
layer call, each of ``S`` variables. :class:`~isingattn.samplers.QPUSampler` sends one problem
per call; a QPU call costs the same programming and readout time whether it holds one small
problem or many, so :class:`TiledQPUSampler` packs as many problems into one call as the
hardware graph holds:

1. **Tiles, cached per structure.** The structure is the variables ``0..n-1`` and the union of
   the coupled pairs over the batch (the attention's band, or every pair). Disjoint embeddings
   of it are found one after another with minorminer on the part of the QPU graph not used yet
   (each search seeded from the structure), until none fits or ``max_tiles`` are found, and kept
   on the QPU backend object: every later batch of that structure reuses them. A model with
   fewer active variables (a causal query) uses its variables' chains of a tile (a sub-embedding
   is an embedding of the induced subgraph).
2. **Calls.** ``ceil(batch / tiles)`` groups; each group's problems (SPIN form times the model's
   ``beta``, with their own chain strengths) are embedded on their tiles and summed into one
   problem on the QPU graph, sampled with ``num_chains * num_samples`` reads (``answer_mode``
   raw; more calls above the solver's ``num_reads_range``). With ``auto_scale`` the QPU scales
   the whole call at once, so a problem's effective temperature depends on its neighbours'
   largest biases: ``info["scale"]`` records the factor per model (its call's).
3. **Unembedding** per problem with the chain-break method (``majority_vote`` with random ties,
   or ``weighted_random``, seeded from the key; ``discard`` is not offered: reads are shared by
   all problems of a call).

``info``: ``tiles`` (problems per call), ``calls``, ``embedding`` (``cached``, ``find_s``,
``qubits``, ``max_chain_length``), ``scale`` and ``chain_strength`` per model,
``chain_break_fraction`` per read, ``qpu_timing`` (the solver's timing dict of every call) and
``call_s`` (wall time of every call).
"""

from __future__ import annotations

import time
from typing import ClassVar

import jax.numpy as jnp
import numpy as np

from ..models import Vartype
from ._base import Sampler, seed_from_key
from ._qpu import (
    MajorityVote,
    QPUSampler,
    WeightedRandom,
    _call_options,
    _digest,
    auto_scale_factor,
)

#: Chain-break methods of a tiled call.
TILED_CHAIN_BREAK_METHODS = ("majority_vote", "weighted_random")
#: Default largest number of tiles (problems per call).
DEFAULT_MAX_TILES = 256


def find_tiles(qpu: QPUSampler, n: int, edges, *, max_tiles: int = DEFAULT_MAX_TILES):
    """Disjoint embeddings ("tiles") of one problem structure (``n`` variables, ``edges`` a list
    of ``(i, j)`` pairs) on ``qpu``'s working graph, found with minorminer one after another on
    the qubits the earlier tiles left free, at most ``max_tiles``; cached on ``qpu`` per
    structure, so a batch of problems of one shape is embedded once. Returns ``(tiles,
    info)``: ``tiles`` a list of ``{variable: chain of qubits}``, ``info`` with ``cached``,
    ``find_s`` (seconds spent searching), ``tiles``, ``qubits`` and ``max_chain_length``.

    Raises ``RuntimeError`` when not even one embedding is found (the message suggests fewer
    keys per query, sparser couplings or a larger topology)."""
    import minorminer
    import networkx as nx

    cache = qpu.__dict__.setdefault("_tile_cache", {})
    key = (n, tuple(edges), max_tiles)
    if key in cache:
        tiles, find_s = cache[key]
        return tiles, {"cached": True, "find_s": 0.0, **_tile_stats(tiles)}
    t0 = time.perf_counter()
    params = dict(qpu.embedding_parameters)
    seed = params.pop("random_seed", None)
    if seed is None:
        seed = _digest(repr((n, tuple(edges))), 31)
    source = list(edges) + [(i, i) for i in range(n)]
    graph = nx.Graph(qpu._finder.target_structure.edgelist)
    used: set = set()
    tiles = []
    while len(tiles) < max_tiles:
        free = graph.subgraph([q for q in graph if q not in used])
        found = minorminer.find_embedding(source, list(free.edges()),
                                          random_seed=(int(seed) + len(tiles)) % 2**31,
                                          **params)
        if len(found) < n:
            break
        tiles.append({v: tuple(int(q) for q in found[v]) for v in range(n)})
        used |= {q for c in found.values() for q in c}
    if not tiles:
        raise RuntimeError(
            f"no embedding found for a problem with {n} variables and {len(edges)} couplings on "
            f"{type(qpu.child).__name__} ({len(graph)} qubits); use fewer keys per query "
            "(a shorter context), sparser couplings, or a larger topology")
    find_s = time.perf_counter() - t0
    cache[key] = (tiles, find_s)
    return tiles, {"cached": False, "find_s": find_s, **_tile_stats(tiles)}


def _tile_stats(tiles):
    chains = [c for t in tiles for c in t.values()]
    return {"tiles": len(tiles), "qubits": int(sum(len(c) for c in chains)),
            "max_chain_length": int(max((len(c) for c in chains), default=0))}


def _structure(cache, tiles, t, active, target):
    """The ``EmbeddedStructure`` of tile ``t`` restricted to the ``active`` variables (a
    sub-embedding embeds the induced subgraph), built from the edges among the tile's own
    qubits and cached in ``cache``."""
    from dwave.embedding import EmbeddedStructure

    key = (t, tuple(int(v) for v in active))
    out = cache.get(key)
    if out is None:
        emb = {int(v): tiles[t][int(v)] for v in active}
        qubits = {q for c in emb.values() for q in c}
        edges = [(q, r) for q in qubits for r in target[q] if r in qubits and q < r]
        out = cache[key] = EmbeddedStructure(edges, emb)
    return out


class TiledQPUSampler(Sampler):
    """A :class:`~isingattn.samplers.QPUSampler` (real or offline) that samples a batch of
    models with as few QPU calls as its graph allows: problems side by side on disjoint tiles
    (see the module doc). Options as the QPU's (``chain_strength``, ``chain_break_method`` of
    :data:`TILED_CHAIN_BREAK_METHODS`, ``annealing_time``, ``fast_anneal``, ``auto_scale``).

    Example (offline):
      >>> import jax
      >>> from isingattn.models import random_dense
      >>> from isingattn.samplers import QPUSampler
      >>> from isingattn.samplers._qpu_tiled import TiledQPUSampler
      >>> tiled = TiledQPUSampler(QPUSampler.offline(topology_shape=(3,)))
      >>> m = random_dense(jax.random.key(0), 4, batch_shape=(6,))
      >>> s = tiled.sample(m, jax.random.key(1), 10)
      >>> s.spins.shape, s.info["calls"]
      ((6, 1, 10, 4), 1)
    """

    parameters: ClassVar[dict[str, list]] = {
        "chain_strength": [], "chain_break_method": [], "annealing_time": [],
        "fast_anneal": [], "auto_scale": [],
    }

    def __init__(self, qpu: QPUSampler, *, max_tiles: int = DEFAULT_MAX_TILES):
        if not isinstance(qpu, QPUSampler):
            raise TypeError(f"TiledQPUSampler needs a QPUSampler; got {type(qpu).__name__}")
        self.qpu = qpu
        self.max_tiles = int(max_tiles)

    @property
    def properties(self):
        return {**self.qpu.properties, "tiled": True, "max_tiles": self.max_tiles}

    def _sample(self, model, key, num_samples, num_chains, **options):
        import dimod
        from dwave.embedding import embed_bqm, unembed_sampleset
        from dwave.embedding.chain_strength import uniform_torque_compensation

        qpu = self.qpu
        opts = {**{k: v for k, v in qpu.defaults.items() if k in self.parameters}, **options}
        method = opts.get("chain_break_method", "majority_vote")
        if method not in TILED_CHAIN_BREAK_METHODS:
            valid = ", ".join(map(repr, TILED_CHAIN_BREAK_METHODS))
            raise ValueError(
                f"chain_break_method must be one of {valid} when problems share QPU calls "
                f"(tiled); got {method!r} ('discard' would drop reads of every problem of a "
                "call)")
        auto_scale, chain_strength, qpu_kw = _call_options(opts)

        batch, n = model.batch_shape, model.n
        total = num_chains * num_samples
        size = int(np.prod(batch, dtype=int))
        spin = model.to_dense().to_vartype(Vartype.SPIN)
        h = np.broadcast_to(np.asarray(spin.active_h, np.float64), batch + (n,)).reshape(-1, n)
        J = np.broadcast_to(np.asarray(spin.active_J, np.float64),
                            batch + (n, n)).reshape(-1, n, n)
        mask = np.broadcast_to(np.asarray(spin.mask), batch + (n,)).reshape(-1, n)
        beta = np.broadcast_to(np.asarray(spin.beta, np.float64), batch).reshape(-1)
        nz = np.any(J != 0, axis=0)
        edges = [(int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(nz, 1)))]
        tiles, einfo = find_tiles(qpu, n, edges, max_tiles=self.max_tiles)
        # embedded structures per (tile, active variables), kept with the tiles: building one
        # from the whole QPU graph for every problem was half the host time of a call
        structures = qpu.__dict__.setdefault("_structure_cache", {}).setdefault(
            (n, tuple(edges), self.max_tiles), {})
        K = len(tiles)
        rng = np.random.default_rng(seed_from_key(key))
        target = qpu.child.adjacency
        out = np.full((size, total, n), -1, np.int8)
        cbf = np.zeros((size, total))
        scales = np.ones(size)
        strengths = np.zeros(size)
        timing, call_s = [], []
        calls = 0
        for g0 in range(0, size, K):
            group = []
            combined = dimod.BinaryQuadraticModel(dimod.SPIN)
            for p in range(g0, min(size, g0 + K)):
                act = np.nonzero(mask[p])[0]
                if len(act) == 0:
                    continue
                bqm = dimod.BinaryQuadraticModel(
                    {int(i): -beta[p] * h[p, i] for i in act},
                    {(int(i), int(j)): -beta[p] * J[p, i, j] for i in act for j in act
                     if i < j and J[p, i, j] != 0}, 0.0, dimod.SPIN)
                emb = _structure(structures, tiles, p - g0, act, target)
                cs = (uniform_torque_compensation(bqm, emb) if chain_strength is None
                      else float(chain_strength))
                combined.update(embed_bqm(bqm, emb, chain_strength=cs,
                                          smear_vartype=dimod.SPIN))
                strengths[p] = cs
                group.append((p, bqm, dict(emb)))
            if not group:
                continue
            if auto_scale:
                scale = auto_scale_factor(combined, qpu.h_range, qpu.j_range)
            else:
                scale = 1.0
                qpu._check_ranges(combined)
            rows = []
            got = 0
            while got < total:
                ask = min(qpu.max_reads, total - got)
                if qpu._emulator is not None:
                    qpu._emulator.seed = int(rng.integers(2**31 - 1))
                t0 = time.perf_counter()
                ss = qpu.child.sample(combined, num_reads=ask, **qpu_kw)
                ss.resolve()
                call_s.append(time.perf_counter() - t0)
                timing.append(dict(ss.info.get("timing", {})))
                calls += 1
                rows.append(ss)
                got += ask
            for p, bqm, emb in group:
                cbm = (MajorityVote(rng) if method == "majority_vote" else WeightedRandom(rng))
                blocks, fracs = [], []
                for ss in rows:
                    un = unembed_sampleset(ss, emb, bqm, chain_break_method=cbm,
                                           chain_break_fraction=True)
                    rec = un.record
                    cols = [int(v) for v in un.variables]
                    block = np.full((len(rec), n), -1, np.int8)
                    block[:, cols] = rec.sample
                    blocks.append(block)
                    fracs.append(np.asarray(rec.chain_break_fraction, float))
                out[p] = np.concatenate(blocks)[:total]
                cbf[p] = np.concatenate(fracs)[:total]
                scales[p] = scale
        spins = out.reshape(batch + (num_chains, num_samples, n))
        if model.vartype is Vartype.BINARY:
            spins = (spins + 1) // 2
        info = {"tiles": K, "calls": calls, "embedding": einfo,
                "scale": scales.reshape(batch), "chain_strength": strengths.reshape(batch),
                "chain_break_fraction": cbf.reshape(batch + (num_chains, num_samples)),
                "chain_break_method": method, "auto_scale": auto_scale,
                "qpu_timing": timing, "call_s": call_s}
        # what the callbacks of a jitted layer do not return: the last call's record and totals
        qpu.__dict__["last_tiled_info"] = info
        qpu.__dict__["tiled_calls"] = qpu.__dict__.get("tiled_calls", 0) + calls
        qpu.__dict__["tiled_problems"] = qpu.__dict__.get("tiled_problems", 0) + size
        return jnp.asarray(spins), info

    def __repr__(self):
        return f"TiledQPUSampler({self.qpu!r}, max_tiles={self.max_tiles})"


__all__ = ["DEFAULT_MAX_TILES", "TILED_CHAIN_BREAK_METHODS", "TiledQPUSampler", "find_tiles"]
