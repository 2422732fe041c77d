"""The labels every connected-components path must give, from scipy: shared by the tests of the
in-JAX labelling and of the compiled union-find."""

import numpy as np
import scipy.sparse
import scipy.sparse.csgraph


def scipy_roots(n, u, v, bond):
    """Smallest member of each node's component of the graph on ``n`` nodes with the edges
    ``(u_e, v_e)`` where ``bond_e``."""
    g = scipy.sparse.coo_matrix((np.ones(bond.sum()), (u[bond], v[bond])), shape=(n, n))
    _, lab = scipy.sparse.csgraph.connected_components(g, directed=False)
    first = np.full(lab.max() + 1, n)
    np.minimum.at(first, lab, np.arange(n))
    return first[lab]
