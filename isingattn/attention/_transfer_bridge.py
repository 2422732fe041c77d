"""The ``transfer`` method: every (batch, head, query) model handed to
:func:`isingattn.exact.transfer_marginals` in chunks of queries.

Each chunk is one ``lax.map`` step under ``jax.checkpoint``, so the backward pass keeps the
transfer-matrix messages (``O(S 2^r)`` per query) of one chunk at a time, not of the whole batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ._methods import Inference

_CHUNK_ELEMENTS = 1 << 24  # queries per chunk * N * S * 2^r


def transfer_inference(h, mask, couplings, beta, r):
    from ..exact import transfer_marginals
    from ..models import IsingModel

    B, N, T, S = h.shape
    r = max(int(r), 1)
    J = jnp.broadcast_to(couplings.matrix(S, h.dtype), (N, S, S))
    mask = jnp.broadcast_to(mask, h.shape)
    # rows = (b, t) pairs; each row is a batch of N models sharing the head couplings J.
    hr = jnp.transpose(h, (0, 2, 1, 3)).reshape(B * T, N, S)
    mr = jnp.transpose(mask, (0, 2, 1, 3)).reshape(B * T, N, S)

    def marg(hc, mc):
        model = IsingModel(h=hc, J=J, beta=beta, vartype="BINARY", mask=mc, validate=False)
        return transfer_marginals(model, bandwidth=min(r, max(S - 1, 0)))

    rows = max(1, _CHUNK_ELEMENTS // (N * S * (1 << r)))
    if rows >= B * T:
        m = marg(hr, mr)
    else:
        m = jax.lax.map(jax.checkpoint(lambda x: marg(*x)), (hr, mr), batch_size=rows)
    m = jnp.transpose(m.reshape(B, T, N, S), (0, 2, 1, 3))
    m = jnp.where(mask, m, 0.0)
    return Inference(m, m, m, None)
