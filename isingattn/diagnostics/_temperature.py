"""Effective inverse temperature of sampled states.

The question: for which ``beta`` do the draws look like ``p_beta(x) = exp(-beta E(x)) / Z(beta)``,
with ``E`` the model's energy (physics sign, without the model's own ``beta``)? Three estimators:

- :func:`effective_beta_ml`: maximum likelihood with the exact ``log Z`` (``n <= 30``).
- :func:`effective_beta_mple`: maximum pseudo-likelihood (any ``n``), with a bootstrap of
  full-size resamples.
- :func:`isingattn.probabilistic.effective_beta_bayes`: a numpyro NUTS posterior, optionally
  with separate scales for fields and couplings.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import scipy.optimize
import scipy.special

from .._estimates import TemperatureEstimate
from .._validation import check_positive_int
from ..models import Vartype
from ._input import as_draws


def _check_model(model):
    if model is None:
        raise ValueError("an effective temperature needs the model whose energy defines p_beta")


def _one(model, idx):
    return model[idx] if idx else model


# ---------------------------------------------------------------------------- maximum likelihood
def _at_beta(m, beta):
    """``(model, sign)``: a model whose Boltzmann distribution is ``exp(-beta E)`` for any real
    ``beta`` (models require beta > 0: a negative beta is the negated energy at ``|beta|``),
    and the sign relating its energy to ``E``."""
    beta = float(beta)
    if beta > 0:
        return m.with_beta(beta), 1.0
    b = max(abs(beta), 1e-30)  # beta = 0: the uniform distribution, up to 1e-30 E
    return m.replace(h=-m.h, J=-m.J, offset=-m.offset, beta=b), -1.0


def _mean_energy_fn(m):
    from .. import exact

    def f(beta):
        mb, sign = _at_beta(m, beta)
        return sign * float(np.asarray(exact.mean_energy(mb)))

    return f


def _solve_ml(m, ebar):
    """Root of the score ``ebar - <E>_beta`` (increasing in beta); +-inf if not bracketed."""
    from .. import exact

    f = _mean_energy_fn(m)
    # The ends of the spectrum: an average at the ground (top) energy has its maximum at
    # beta = +inf (-inf); detect it exactly rather than chase float32 round-off at huge beta.
    e_min = float(np.asarray(exact.ground_state(m)[1]))
    e_max = -float(np.asarray(exact.ground_state(m.replace(h=-m.h, J=-m.J, offset=-m.offset))[1]))
    tol = 1e-6 * max(1.0, abs(e_min), abs(e_max))
    if ebar <= e_min + tol:
        return math.inf
    if ebar >= e_max - tol:
        return -math.inf

    def score(b):
        return ebar - f(b)

    b = max(1.0, 4.0 * abs(float(np.asarray(m.beta))))
    lo, hi = -b, b
    s_lo, s_hi = score(lo), score(hi)
    while s_hi < 0 and hi < 1e6:
        lo, s_lo = hi, s_hi
        hi *= 2.0
        s_hi = score(hi)
    while s_lo > 0 and lo > -1e6:
        hi, s_hi = lo, s_lo
        lo *= 2.0
        s_lo = score(lo)
    if not (s_lo <= 0 <= s_hi):
        return math.inf if s_hi < 0 else -math.inf
    if s_lo == 0:
        return lo
    if s_hi == 0:
        return hi
    return scipy.optimize.brentq(score, lo, hi, xtol=1e-10, rtol=1e-10)


def effective_beta_ml(samples, model, *, ess="auto") -> TemperatureEstimate:
    """Maximum-likelihood effective ``beta`` with the exact partition function (``n <= 30``).

    Maximizes ``l(beta) = sum_k log p_beta(x_k) = -beta sum_k E(x_k) - N log Z(beta)`` over
    ``beta`` (any sign). The family is exponential in ``beta``, so ``l`` is concave and its
    maximum is the root of the score ``l'(beta) / N = E_bar - <E>_beta``, found by bracketing and
    Brent's method on the exact ``<E>_beta``; the maximum sits at ``+inf`` (``-inf``) when the
    mean sampled energy is at (above) the ground (highest) energy, returned with a warning.

    Standard error by the delta method (sandwich form, valid for non-Boltzmann samplers too):
    ``se = sqrt(s_E^2 / ESS) / Var_beta(E)``, with ``s_E^2`` the sample variance of the energies,
    ``Var_beta(E) = -d<E>/dbeta`` (exact, by central differences) and ``ESS`` the effective
    sample size of the energy series: ``"auto"`` (arviz's ESS of the mean when there are at least
    4 draws per chain, else ``N``), ``"iid"`` (``N``) or a number.

    Returns a :class:`TemperatureEstimate` with the batch shape of the model.
    """
    from .. import exact
    from ._mixing import effective_sample_size

    _check_model(model)
    d = as_draws(samples, model, need_energy=True)
    if model.n > exact.MAX_ENUMERATION_N:
        raise ValueError(
            f"effective_beta_ml needs the exact log Z (n <= {exact.MAX_ENUMERATION_N}); the model "
            f"has n = {model.n}: use effective_beta_mple"
        )
    batch = d.batch_shape
    N = d.x.shape[-3] * d.x.shape[-2]
    if N < 2:
        raise ValueError(f"effective_beta_ml needs at least 2 samples; got {N}")
    beta = np.empty(batch)
    se = np.empty(batch)
    ess_out = np.empty(batch)
    ll = np.empty(batch)
    for idx in np.ndindex(*batch):
        m = _one(model, idx)
        e = d.energy[idx]
        ebar = float(e.mean())
        b = _solve_ml(m, ebar)
        beta[idx] = b
        if isinstance(ess, str):
            if ess == "iid" or e.shape[-1] < 4:
                ne = float(N)
            elif ess == "auto":
                ne = float(effective_sample_size(e, method="mean")) if e.std() > 0 else float(N)
            else:
                raise ValueError(f"ess must be 'auto', 'iid' or a positive number; got {ess!r}")
        else:
            ne = float(ess)
            if not ne > 0:
                raise ValueError(f"ess must be 'auto', 'iid' or a positive number; got {ess!r}")
        ess_out[idx] = ne
        if not np.isfinite(b):
            warnings.warn(
                f"maximum-likelihood beta is {b} for batch entry {idx}: the mean sampled energy "
                f"{ebar:.6g} lies at an end of the energy spectrum (e.g. only ground states)",
                RuntimeWarning, stacklevel=2,
            )
            se[idx] = np.nan
            ll[idx] = np.nan
            continue
        f = _mean_energy_fn(m)
        h = 2e-3 * max(1.0, abs(b))
        var_model = (f(b - h) - f(b + h)) / (2 * h)
        s2 = float(e.var(ddof=1))
        se[idx] = math.sqrt(s2 / ne) / var_model if var_model > 0 else np.nan
        logZ = float(np.asarray(exact.log_partition(_at_beta(m, b)[0])))
        ll[idx] = -b * float(e.sum()) - N * logZ
    sq = (lambda a: float(a)) if not batch else (lambda a: a)
    return TemperatureEstimate(sq(beta), sq(se), "ml", N, ess=sq(ess_out), log_likelihood=sq(ll))


# ---------------------------------------------------------------------------- pseudo-likelihood
def flip_energies(samples, model) -> np.ndarray:
    """``Delta_i(x) = E(x with variable i flipped) - E(x)`` for every draw and active variable:
    ``2 x_i f_i`` (SPIN) or ``(2 s_i - 1) f_i`` (BINARY), ``f = model.local_fields(x)``. Masked
    variables get NaN. Shape ``batch + (chain, draw, n)``."""
    d = as_draws(samples, model)
    f = np.asarray(model.local_fields(d.x), np.float64)
    x = d.x
    delta = 2 * x * f if model.vartype is Vartype.SPIN else (2 * x - 1) * f
    return np.where(d.mask[..., None, None, :], delta, np.nan)


def _pl_score(beta, delta, weights=None):
    """Score and curvature of sum log sigmoid(beta Delta) for beta of shape (B,)."""
    z = beta[:, None, None] * delta[None]  # (B, K, n); masked entries have Delta = 0
    s_neg = scipy.special.expit(-z)
    g = np.sum(delta[None] * s_neg, -1)  # (B, K)
    c = np.sum(delta[None] ** 2 * s_neg * (1 - s_neg), -1)
    if weights is None:
        return g.sum(-1), c.sum(-1)
    return (weights * g).sum(-1), (weights * c).sum(-1)


def _solve_pl(delta, weights, beta0):
    """Per-replicate maximizer of the weighted pseudo-likelihood (B,), by safeguarded Newton."""
    B = weights.shape[0]
    d = delta[delta != 0]
    # Concave in beta; the maximum is infinite when no draw has a downhill flip (Delta < 0)
    # or no uphill flip (Delta > 0) (one-sided excitations).
    has_neg = (weights * np.any(delta < 0, -1)).sum(-1) > 0
    has_pos = (weights * np.any(delta > 0, -1)).sum(-1) > 0
    beta = np.full(B, float(beta0))
    lo = np.full(B, -np.inf)
    hi = np.full(B, np.inf)
    scale = 1.0 / max(float(np.abs(d).mean()) if d.size else 1.0, 1e-12)
    for _ in range(100):
        g, c = _pl_score(beta, delta, weights)
        lo = np.where(g > 0, np.maximum(lo, beta), lo)
        hi = np.where(g < 0, np.minimum(hi, beta), hi)
        step = g / np.maximum(c, 1e-300)
        new = beta + np.clip(step, -10 * scale, 10 * scale)
        inside = (new > lo) & (new < hi)
        mid = np.where(np.isfinite(lo) & np.isfinite(hi), 0.5 * (lo + hi), new)
        new = np.where(inside, new, mid)
        if np.all(np.abs(new - beta) <= 1e-12 * np.maximum(1.0, np.abs(beta))):
            beta = new
            break
        beta = new
    beta = np.where(~has_neg, np.inf, beta)
    beta = np.where(~has_pos & has_neg, -np.inf, beta)
    return beta


def effective_beta_mple(samples, model, *, num_bootstrap: int = 200, key=None,
                        chunk: int = 64) -> TemperatureEstimate:
    """Maximum-pseudo-likelihood effective ``beta`` (any ``n``), with a bootstrap error.

    Maximizes ``PL(beta) = sum_k sum_{i active} log p_beta(x_ki | x_k,-i)
    = sum_k sum_i log sigmoid(beta Delta_ki)``, with ``Delta_ki`` the energy cost of flipping
    variable ``i`` in draw ``k`` (:func:`flip_energies`); concave in ``beta``, solved by
    safeguarded Newton. ``+inf`` (with a warning) when no draw has a downhill flip, i.e. every
    draw is a local minimum. For independent spins this is the maximum-likelihood estimator.

    Bootstrap: ``num_bootstrap`` resamples of the draws (chains and draws pooled), each of the
    *full* size ``N`` with replacement; ``stderr`` is the standard deviation of their estimates.
    (dwave-system's ``maximum_pseudolikelihood_temperature`` draws resamples of size
    ``num_bootstrap_samples`` instead, which overstates the error when that is below ``N``.) The
    bootstrap treats draws as independent: for autocorrelated MCMC output thin the chains first
    or read the error as a lower bound. ``key`` (JAX PRNG key) seeds the resampling;
    ``num_bootstrap=0`` skips it (``stderr`` NaN).
    """
    from ..samplers import seed_from_key

    _check_model(model)
    if isinstance(num_bootstrap, bool) or not isinstance(num_bootstrap, (int, np.integer)) or \
            num_bootstrap < 0:
        raise ValueError(f"num_bootstrap must be an integer >= 0; got {num_bootstrap!r}")
    chunk = check_positive_int("chunk", chunk)
    if num_bootstrap and key is None:
        raise ValueError("key (a JAX PRNG key) is needed to seed the bootstrap; pass key=...")
    delta = flip_energies(samples, model)
    batch = delta.shape[:-3]
    N = delta.shape[-3] * delta.shape[-2]
    if num_bootstrap and N < 2:
        raise ValueError(f"a bootstrap error needs at least 2 draws; got {N} (num_bootstrap=0 "
                         "gives the estimate alone)")
    rng = np.random.default_rng(seed_from_key(key)) if num_bootstrap else None
    beta = np.empty(batch)
    se = np.full(batch, np.nan)
    boots = np.empty(batch + (num_bootstrap,))
    ll = np.empty(batch)
    for idx in np.ndindex(*batch):
        dfull = delta[idx].reshape(N, -1)
        active = ~np.isnan(dfull[0])
        # Identical draws contribute identically: work on the K distinct rows with their
        # counts (a full-size resample of the N draws is a multinomial over them).
        dl, counts = np.unique(np.where(active, dfull, 0.0), axis=0, return_counts=True)
        b0 = float(np.asarray(_one(model, idx).beta))
        b = float(_solve_pl(dl, counts[None].astype(np.float64), b0)[0])
        beta[idx] = b
        if not np.isfinite(b):
            warnings.warn(
                f"maximum-pseudo-likelihood beta is {b} for batch entry {idx}: no draw has a "
                f"{'downhill' if b > 0 else 'uphill'} single flip (all draws are local "
                f"{'minima' if b > 0 else 'maxima'})", RuntimeWarning, stacklevel=2,
            )
        with np.errstate(over="ignore"):
            ll[idx] = (float(np.sum(counts[:, None] * -np.logaddexp(0.0, -b * dl[:, active])))
                       if np.isfinite(b) else np.nan)
        if num_bootstrap:
            out = []
            for start in range(0, num_bootstrap, chunk):
                B = min(chunk, num_bootstrap - start)
                w = rng.multinomial(N, counts / N, size=B).astype(np.float64)
                out.append(_solve_pl(dl, w, b if np.isfinite(b) else b0))
            boots[idx] = np.concatenate(out)
            fin = boots[idx][np.isfinite(boots[idx])]
            se[idx] = fin.std(ddof=1) if fin.size >= 2 and np.isfinite(b) else np.nan
    sq = (lambda a: float(a)) if not batch else (lambda a: a)
    return TemperatureEstimate(sq(beta), sq(se), "mple", N,
                               bootstrap=boots if num_bootstrap else None, log_likelihood=sq(ll))


def effective_temperature(samples, model, *, method: str = "auto", key=None, **options):
    """Effective ``beta`` by ``method``: ``"ml"`` (exact log Z), ``"mple"`` (pseudo-likelihood,
    bootstrap error), ``"nuts"`` (numpyro posterior, see
    :func:`isingattn.probabilistic.effective_beta_bayes`) or ``"auto"`` (``"ml"`` when
    ``n <= 30``, else ``"mple"``). Returns a :class:`TemperatureEstimate`."""
    from .. import exact

    _check_model(model)
    if method == "auto":
        method = "ml" if model.n <= exact.MAX_ENUMERATION_N else "mple"
    if method == "ml":
        return effective_beta_ml(samples, model, **options)
    if method == "mple":
        return effective_beta_mple(samples, model, key=key, **options)
    if method in ("nuts", "bayes"):
        from ..probabilistic import effective_beta_bayes

        if key is None:
            raise ValueError("method='nuts' needs key=... (a JAX PRNG key)")
        return effective_beta_bayes(samples, model, key, **options)
    raise ValueError(f"method must be 'auto', 'ml', 'mple' or 'nuts'; got {method!r}")
