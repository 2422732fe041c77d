"""Bayesian effective temperature: a numpyro NUTS posterior for ``beta_eff`` (or for separate
scales of fields and couplings) given sampled states."""

from __future__ import annotations

import numpy as np

from .._draws import as_draws
from .._estimates import TemperatureEstimate
from ..models import Vartype

#: ``likelihood="auto"`` uses the exact likelihood up to this n (log Z by enumeration at every
#: NUTS gradient step), the pseudo-likelihood above it.
AUTO_EXACT_MAX_N = 20


def _flip_parts(d, model):
    """Field and coupling parts of the flip energies: Delta = Delta_h + Delta_J, (N, batch, n)."""
    x = d.x  # batch + (chain, draw, n)
    f = np.asarray(model.local_fields(x), np.float64)
    h = np.asarray(model.active_h, np.float64)
    nb = len(d.batch_shape)
    h = np.broadcast_to(h, d.batch_shape + (d.n,)).reshape(d.batch_shape + (1, 1, d.n))
    sign = 2 * x if model.vartype is Vartype.SPIN else (2 * x - 1)
    dh = np.where(d.mask[..., None, None, :], sign * h, 0.0)
    dJ = np.where(d.mask[..., None, None, :], sign * (f - h), 0.0)

    def lead(a):  # batch + (chain, draw, n) -> (chain*draw,) + batch + (n,)
        a = np.moveaxis(a, (nb, nb + 1), (0, 1))
        return a.reshape((-1,) + a.shape[2:])

    return lead(dh), lead(dJ), lead(np.broadcast_to(d.mask[..., None, None, :], x.shape))


def _sufficient_statistics(d, model):
    """``T_h = sum_k sum_i h_i x_ki`` and ``T_J = sum_k sum_{i<j} J_ij x_ki x_kj`` over active
    variables, shape ``batch``: ``log p(x_1..N) = beta_h T_h + beta_J T_J - N log Z``."""
    dense = model.to_dense()
    h = np.asarray(dense.active_h, np.float64)
    J = np.asarray(dense.active_J, np.float64)
    x = d.active()  # batch + (chain, draw, n)
    h = np.broadcast_to(h, d.batch_shape + (d.n,))
    J = np.broadcast_to(J, d.batch_shape + (d.n, d.n))
    Th = np.einsum("...cdi,...i->...", x, h)
    Tj = 0.5 * np.einsum("...cdi,...ij,...cdj->...", x, J, x)
    return Th, Tj


#: Up to this n the exact likelihood uses a precomputed table of all states' field and
#: coupling sums (2^n per model); above it, log Z by chunked enumeration at every step.
_TABLE_MAX_N = 16


def _state_table(model):
    """``H_s = sum_i h_i x_i`` and ``Q_s = sum_{i<j} J_ij x_i x_j`` for all ``2^n`` states,
    ``batch + (2^n,)``, and ``log_valid``: 0, or ``-inf`` for states with a masked variable off
    its low value (probability 0)."""
    from .. import exact

    states = np.asarray(exact.enumerate_states(model.n, model.vartype), np.float64)
    dense = model.to_dense()
    batch = tuple(model.batch_shape)
    h = np.broadcast_to(np.asarray(dense.active_h, np.float64), batch + (model.n,))
    J = np.broadcast_to(np.asarray(dense.active_J, np.float64), batch + (model.n, model.n))
    mask = np.broadcast_to(np.asarray(dense.mask, bool), batch + (model.n,))
    Hs = np.einsum("si,...i->...s", states, h)
    Qs = 0.5 * np.einsum("si,...ij,sj->...s", states, J, states)
    off = np.any(~mask[..., None, :] & (states != model.vartype.low), axis=-1)
    return np.where(off, 0.0, Hs), np.where(off, 0.0, Qs), np.where(off, -np.inf, 0.0)


def ising_temperature_model(*, model, stats=None, flips=None, separate_scales=False,
                            likelihood="exact", prior_scale=10.0):
    """The numpyro model behind :func:`effective_beta_bayes`.

    Priors ``beta ~ Normal(0, prior_scale)`` per model of the batch (or ``beta_h`` and
    ``beta_J`` with ``separate_scales``, so ``p(x) ∝ exp(beta_h sum_i h_i x_i + beta_J
    sum_{i<j} J_ij x_i x_j)``). Likelihood ``"exact"``: the log-likelihood of all draws through
    its sufficient statistics, ``beta_h T_h + beta_J T_J - N log Z(beta_h, beta_J)``
    (``stats = (T_h, T_J, N)``), ``log Z`` by enumeration (differentiable); ``"pseudo"``: the
    pseudo-log-likelihood ``sum_k w_k sum_i log sigmoid(beta_h Delta_h + beta_J Delta_J)``
    over distinct draws with counts ``w`` (``flips = (Delta_h, Delta_J, w)``).
    """
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as nd

    from .. import exact

    batch = tuple(model.batch_shape)
    prior = nd.Normal(0.0, prior_scale).expand(batch).to_event(len(batch))
    if separate_scales:
        bh = numpyro.sample("beta_h", prior)
        bJ = numpyro.sample("beta_J", prior)
    else:
        bh = bJ = numpyro.sample("beta", prior)
    bh, bJ = jnp.asarray(bh), jnp.asarray(bJ)
    if likelihood == "exact" and len(stats) == 6:
        # log Z(beta_h, beta_J) = logsumexp_s(beta_h H_s + beta_J Q_s) over all 2^n states,
        # with H_s, Q_s precomputed: the same exponential family, no enumeration per step.
        Th, Tj, N, Hs, Qs, valid = stats
        logZ = jax.scipy.special.logsumexp(bh[..., None] * Hs + bJ[..., None] * Qs + valid,
                                           axis=-1)
        numpyro.factor("loglik", jnp.sum(bh * Th + bJ * Tj - N * logZ))
    elif likelihood == "exact":
        Th, Tj, N = stats
        m = model.replace(h=model.h * bh[..., None], J=model.J * _coupling_scale(model, bJ),
                          offset=jnp.zeros_like(model.offset), beta=1.0)
        numpyro.factor("loglik", jnp.sum(bh * Th + bJ * Tj - N * exact.log_partition(m)))
    else:
        dh, dJ, w = flips  # (K, batch..., n) each, w (K,)
        z = bh[..., None] * dh + bJ[..., None] * dJ
        ll = jnp.sum(jnp.where((dh != 0) | (dJ != 0), jax.nn.log_sigmoid(z), 0.0), axis=-1)
        numpyro.factor("pseudo_loglik", jnp.sum(w.reshape((-1,) + (1,) * len(batch)) * ll))


def _coupling_scale(model, bJ):
    """``bJ`` (batch-shaped) reshaped to broadcast against ``model.J`` (dense ``(..., n, n)`` or
    per-edge ``(..., E)``)."""
    import jax.numpy as jnp

    bJ = jnp.asarray(bJ)
    extra = 1 if getattr(model, "graph", None) is not None else 2
    return bJ.reshape(bJ.shape + (1,) * extra)


def effective_beta_bayes(samples, model, key, *, separate_scales: bool = False,
                         likelihood: str = "auto", prior_scale: float = 10.0,
                         num_warmup: int = 300, num_samples: int = 300, num_chains: int = 1,
                         progress_bar: bool = False) -> TemperatureEstimate:
    """Posterior of the effective inverse temperature by numpyro's NUTS.

    ``p(x | beta) = exp(-beta E(x)) / Z(beta)`` with ``E`` the model's energy, prior
    ``beta ~ Normal(0, prior_scale)`` (weak; both signs allowed). With ``separate_scales`` the
    fields and the couplings get their own scales ``beta_h`` and ``beta_J`` (equal for a
    Boltzmann sampler; a quantum annealer's fields and couplings can be effectively
    mis-scaled).

    ``likelihood``: ``"exact"`` (log Z by enumeration at each step: ``n <= 30``, fast up to
    about 20), ``"pseudo"`` (pseudo-likelihood, any ``n``; its posterior is narrower than a
    true posterior because the pseudo-likelihood over-counts information: read its spread as a
    lower bound), or ``"auto"`` (exact for ``n <= 20``). Draws are treated as independent.

    Returns a :class:`~isingattn.diagnostics.TemperatureEstimate` with ``method="nuts"``:
    ``beta`` the posterior mean and ``stderr`` the posterior standard deviation (with separate
    scales these are of ``beta_J``; ``extra`` holds both scales' means and standard deviations),
    ``extra["posterior"]`` the draws ``(num_chains * num_samples,) + batch`` per site and
    ``extra["rhat"]`` / ``extra["ess"]`` of each site.
    """
    import jax
    import jax.numpy as jnp
    from numpyro.infer import MCMC, NUTS

    from .. import exact
    from .._validation import check_key
    from ..diagnostics import effective_sample_size, rhat

    if model is None:
        raise ValueError("an effective temperature needs the model whose energy defines p_beta")
    key = check_key(key)
    if likelihood == "auto":
        likelihood = "exact" if model.n <= AUTO_EXACT_MAX_N else "pseudo"
    if likelihood not in ("exact", "pseudo"):
        raise ValueError(f"likelihood must be 'auto', 'exact' or 'pseudo'; got {likelihood!r}")
    if likelihood == "exact" and model.n > exact.MAX_ENUMERATION_N:
        raise ValueError(f"likelihood='exact' needs n <= {exact.MAX_ENUMERATION_N}; "
                         f"n = {model.n}: use likelihood='pseudo'")
    if not prior_scale > 0:
        raise ValueError(f"prior_scale must be > 0; got {prior_scale}")
    d = as_draws(samples, model)
    N = d.x.shape[-3] * d.x.shape[-2]
    if N < 2:
        raise ValueError(f"effective_beta_bayes needs at least 2 samples; got {N}")
    stats = flips = None
    if likelihood == "exact":
        Th, Tj = _sufficient_statistics(d, model)
        stats = (jnp.asarray(Th, model.dtype), jnp.asarray(Tj, model.dtype), float(N))
        if model.n <= _TABLE_MAX_N:
            stats = stats + tuple(jnp.asarray(a, model.dtype) for a in _state_table(model))
    else:
        dh, dJ, _ = _flip_parts(d, model)
        K = dh.shape[0]
        rows = np.concatenate([dh.reshape(K, -1), dJ.reshape(K, -1)], axis=1)
        uniq, w = np.unique(rows, axis=0, return_counts=True)
        half = uniq.shape[1] // 2
        flips = (jnp.asarray(uniq[:, :half].reshape((-1,) + dh.shape[1:]), model.dtype),
                 jnp.asarray(uniq[:, half:].reshape((-1,) + dh.shape[1:]), model.dtype),
                 jnp.asarray(w, model.dtype))
    kernel = NUTS(ising_temperature_model)
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                progress_bar=progress_bar, chain_method="sequential")
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    mcmc.run(key, model=model, stats=stats, flips=flips, separate_scales=separate_scales,
             likelihood=likelihood, prior_scale=prior_scale)
    post = {k: np.asarray(v, np.float64) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    extra = {"posterior": {k: v.reshape((-1,) + v.shape[2:]) for k, v in post.items()},
             "likelihood": likelihood, "rhat": {}, "ess": {}}
    for k, v in post.items():
        series = np.moveaxis(v, (0, 1), (-2, -1))  # batch + (chain, draw)
        extra["rhat"][k] = rhat(series) if num_chains >= 2 else np.nan
        extra["ess"][k] = effective_sample_size(series)
        extra[k] = {"mean": v.mean((0, 1)), "sd": v.std((0, 1), ddof=1)}
    main = "beta_J" if separate_scales else "beta"
    beta = extra[main]["mean"]
    sd = extra[main]["sd"]
    sq = (lambda a: float(a)) if not d.batch_shape else (lambda a: np.asarray(a))
    return TemperatureEstimate(sq(beta), sq(sd), "nuts", N, extra=extra)
