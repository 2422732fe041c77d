"""Proper colourings of a model's graph for chromatic (block) single-site updates."""

from __future__ import annotations

import functools

import numpy as np

#: networkx greedy colouring strategies accepted by ``colouring=`` (see networkx.greedy_color).
STRATEGIES = (
    "DSATUR", "largest_first", "smallest_last", "independent_set",
    "connected_sequential_bfs", "connected_sequential_dfs", "random_sequential",
)


@functools.lru_cache(maxsize=64)
def colour_classes(graph, strategy: str = "DSATUR") -> tuple[np.ndarray, ...]:
    """The variables of ``graph`` (a model's static :class:`~isingattn.models.Graph`) split into
    colour classes: no edge joins two variables of one class, so a class can update at once.

    A bipartite graph gets its two-colouring (the checkerboard of a periodic lattice with even
    sides, or of an open lattice); any other graph networkx's ``greedy_color`` with ``strategy``.
    Returns a tuple of sorted int32 index arrays, together covering ``0..n-1`` exactly once.
    Cached per graph (graphs are hashable and static).
    """
    import networkx as nx

    G = nx.Graph()
    G.add_nodes_from(range(graph.n))
    G.add_edges_from(map(tuple, graph.edges.tolist()))
    if graph.num_edges == 0:
        colour = {v: 0 for v in G}
    elif nx.is_bipartite(G):
        colour = nx.bipartite.color(G)
    else:
        colour = nx.greedy_color(G, strategy=strategy)
    c = np.array([colour[v] for v in range(graph.n)], np.int64)
    classes = tuple(np.nonzero(c == k)[0].astype(np.int32) for k in np.unique(c))
    u, v = graph.edges[:, 0], graph.edges[:, 1]
    if graph.num_edges and np.any(c[u] == c[v]):  # a colouring bug would bias the sampler
        raise RuntimeError("colouring is not proper; please report this")
    return classes


__all__ = ["STRATEGIES", "colour_classes"]
