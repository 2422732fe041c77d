"""Mixing diagnostics: autocorrelation (FFT), integrated autocorrelation time with Sokal's
automatic window, effective sample size and R-hat through arviz, arviz InferenceData, summaries.

Series are scalar observables per draw, shaped ``batch + (chain, draw)`` (e.g. ``samples.energy``
or :func:`magnetization`); results have the batch shape.
"""

from __future__ import annotations

import warnings

import numpy as np

from ._input import as_draws, as_series, import_arviz, quiet_arviz


def autocorrelation(x) -> np.ndarray:
    """Normalized autocorrelation ``rho(t) = C(t) / C(0)`` of each chain, by FFT (arviz's
    ``autocorr``), with each chain's own mean removed. ``x``: ``batch + (chain, draw)``; returns
    the same shape (lag ``t`` on the last axis). A constant chain gives NaN."""
    x = as_series(x, "x", min_draws=2)
    az = import_arviz()
    xc = x - x.mean(-1, keepdims=True)
    const = np.all(xc == 0, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"), quiet_arviz():
        rho = az.autocorr(np.where(const, 1.0, x), axis=-1)  # any non-constant stand-in
    return np.where(const, np.nan, rho)


def _sokal_window(rho, c):
    """Smallest M with M >= c * tau_abs(M), tau_abs(M) = 1 + 2 sum_{t=1}^M |rho(t)|; returns
    (tau(M) = 1 + 2 sum_{t=1}^M rho(t), M, found)."""
    taus = 2.0 * np.cumsum(rho, axis=-1) - 1.0  # tau(M) at index M (rho[0] = 1)
    taus_abs = 2.0 * np.cumsum(np.abs(rho), axis=-1) - 1.0
    M = np.arange(rho.shape[-1])
    ok = M >= c * taus_abs
    found = ok[..., 1:].any(-1)
    idx = np.where(found, np.argmax(ok[..., 1:], axis=-1) + 1, rho.shape[-1] - 1)
    tau = np.take_along_axis(taus, idx[..., None], -1)[..., 0]
    return tau, idx, found


MEANS = ("chain", "pooled")


def _pooled_autocorrelation(x):
    """``rho(t) = C(t) / C(0)`` with ``C(t) = mean_c 1/(N-t) sum_s (x_cs - xbar)(x_c,s+t - xbar)``,
    ``xbar`` the mean over all chains and draws (one mean for the whole batch element), by FFT
    zero-padded to ``2N`` (no wrap-around). ``x``: ``batch + (chain, draw)``; returns
    ``batch + (draw,)``; NaN where ``C(0) = 0``."""
    n = x.shape[-1]
    xc = x - x.mean(axis=(-2, -1), keepdims=True)
    size = 1 << int(2 * n - 1).bit_length()  # next power of two >= 2n - 1
    f = np.fft.rfft(xc, n=size, axis=-1)
    acov = np.fft.irfft(f * np.conj(f), n=size, axis=-1)[..., :n].mean(axis=-2)
    acov = acov / (n - np.arange(n))  # unbiased lag sums: no (1 - t/N) taper on short chains
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = acov / acov[..., :1]
    return np.where(acov[..., :1] > 0, rho, np.nan)


def integrated_autocorr_time(x, *, c: float = 5.0, mean: str = "chain",
                             return_window: bool = False):
    """Integrated autocorrelation time ``tau_int = 1 + 2 sum_{t=1}^{M} rho(t)``.

    ``rho`` is the autocorrelation of the chains, combined as ``mean`` says:

    * ``"chain"`` (default): each chain's own mean is removed and the normalized
      autocorrelations of the chains are averaged (:func:`autocorrelation`; emcee's and arviz's
      per-chain convention). Removing a chain's own mean biases every ``rho(t)`` down by about
      ``tau_int / N`` (``N`` draws per chain), so ``tau_int`` comes out low by about
      ``2M tau_int / N``, a few percent for chains of a few hundred ``tau_int``;
    * ``"pooled"``: one mean over all chains and draws is removed, the autocovariances
      ``C(t)`` (lag sums divided by ``N - t``, so short chains carry no ``1 - t/N`` taper) are
      averaged over chains and normalized by the averaged ``C(0)``. The bias
      becomes ``2M tau_int / (chains * N)``, so many short chains estimate ``tau_int``
      well, provided every chain samples the same (stationary) distribution: chains stuck in
      different modes inflate ``C(t)`` at all lags and give a large ``tau_int`` or NaN, which
      is the right warning.

    The window ``M`` is chosen automatically as the smallest ``M >= c * tau_abs(M)`` (Sokal's
    rule, ``c = 5`` as in emcee), where ``tau_abs(M) = 1 + 2 sum_{t<=M} |rho(t)|``: for positively
    correlated chains this is Sokal's ``M >= c tau_int(M)``; for anticorrelated (oscillating)
    chains, where ``tau_int < 1``, it still waits until the oscillation has died out. For
    i.i.d. draws ``tau_int = 1``; for an AR(1) series with coefficient ``phi``,
    ``tau_int = (1 + phi) / (1 - phi)``. The number of independent draws is about
    ``chain * draw / tau_int``; Sokal's standard error is
    ``tau_int * sqrt(2 (2M + 1) / (chain * draw))``.

    ``x``: ``batch + (chain, draw)`` (at least 4 draws). Returns shape ``batch`` (and the window
    if ``return_window``). Where no window satisfies the condition the chain is too short to
    estimate ``tau_int``: NaN is returned there with a warning stating the lower bound found.
    An estimate ``<= 0`` (impossible for a stationary series; the noise of short,
    anticorrelated chains) is also NaN, with a warning.

    Example:
      >>> import numpy as np
      >>> from isingattn.diagnostics import integrated_autocorr_time
      >>> x = np.random.default_rng(0).standard_normal((4, 1000))  # i.i.d.: tau_int = 1
      >>> round(integrated_autocorr_time(x, mean="pooled"), 1)
      1.0
    """
    if not c > 0:
        raise ValueError(f"c must be > 0; got {c}")
    if mean not in MEANS:
        raise ValueError(
            f"mean must be one of {', '.join(map(repr, MEANS))} (which mean is removed before "
            f"the autocorrelation: each chain's own, or one over all chains); got {mean!r}"
        )
    x = as_series(x, "x", min_draws=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all chains constant: NaN, handled
        if mean == "chain":
            rho = np.nanmean(autocorrelation(x), axis=-2)  # mean over chains
        else:
            rho = _pooled_autocorrelation(x)
    const = np.isnan(rho[..., 0])
    rho = np.where(const[..., None], 0.0, rho)
    rho[..., 0] = 1.0
    tau, M, found = _sokal_window(rho, c)
    if np.any(~found & ~const):
        lb = float(np.nanmax(np.where(~found & ~const, tau, np.nan)))
        warnings.warn(
            f"chain too short for an integrated autocorrelation time: no window M <= "
            f"{x.shape[-1] - 1} satisfies M >= {c} tau(M) (tau >= {lb:.3g} at the largest window); "
            "returning NaN there. Run longer chains (at least ~50 tau draws).",
            RuntimeWarning, stacklevel=2,
        )
    # A stationary series has tau_int >= 0 (the spectral density at zero is >= 0); a sum below
    # -1/2 is noise of a chain too short for the oscillations it has.
    negative = found & ~const & (tau <= 0)
    if np.any(negative):
        warnings.warn(
            f"integrated autocorrelation time estimated <= 0 ({float(np.min(tau[negative])):.3g} "
            f"with window M = {int(np.max(M[negative]))}): the chains are too short (or too "
            "strongly anticorrelated) for the estimate; returning NaN there",
            RuntimeWarning, stacklevel=2,
        )
    tau = np.where(found & ~const & ~negative, tau, np.nan)
    tau = tau if tau.ndim else float(tau)
    return (tau, M) if return_window else tau


def _arviz_stat(x, fn, **kw):
    az = import_arviz()
    arr = np.moveaxis(x, (-2, -1), (0, 1))  # (chain, draw, batch...)
    with quiet_arviz():
        ds = az.convert_to_dataset({"x": arr})
        out = np.asarray(fn(ds, **kw)["x"].values, np.float64)
    return out if out.ndim else float(out)


def effective_sample_size(x, *, method: str = "bulk"):
    """Effective sample size of a series ``batch + (chain, draw)`` by arviz (``az.ess``;
    ``method`` "bulk" (rank-normalized, default), "tail", "mean", ...). Needs at least 4 draws per
    chain. Shape ``batch``. With ``method="mean"`` it estimates ``chain * draw / tau_int``."""
    x = as_series(x, "x", min_draws=4)
    az = import_arviz()
    return _arviz_stat(x, az.ess, method=method)


def rhat(x, *, method: str = "rank"):
    """Potential scale reduction ``R-hat`` of a series ``batch + (chain, draw)`` by arviz
    (``az.rhat``; rank-normalized split R-hat by default). Values above about 1.01 flag chains
    that have not mixed (e.g. stuck in different modes). Needs at least 2 chains of at least 4
    draws. Shape ``batch``."""
    x = as_series(x, "x", min_draws=4, min_chains=2)
    az = import_arviz()
    return _arviz_stat(x, az.rhat, method=method)


def _observable_series(samples, model):
    from ._observables import magnetization

    d = as_draws(samples, model)
    out = {"magnetization": magnetization(samples, model)}
    if d.energy is not None or model is not None:
        out = {"energy": as_draws(samples, model, need_energy=True).energy, **out}
    return d, out


def to_arviz(samples, model=None, *, include_spins: bool = True):
    """Convert samples to an ``arviz.InferenceData`` with ``(chain, draw)`` leading axes.

    The ``posterior`` group holds ``energy`` (when known: a ``Samples`` object or a model is
    given), ``magnetization`` and, with ``include_spins``, ``x`` with the variables on a
    ``variable`` dimension (coordinates: the model's labels). Batch dimensions of a batch of
    models follow ``draw`` as ``batch_0, batch_1, ...``. arviz's plots and statistics work on the
    result, e.g. ``az.plot_trace(to_arviz(s), var_names=["energy"])``.
    """
    az = import_arviz()
    d, series = _observable_series(samples, model)
    nb = len(d.batch_shape)
    bdims = [f"batch_{i}" for i in range(nb)]

    def lead(a, event=0):  # batch + (chain, draw) + event -> (chain, draw) + batch + event
        return np.moveaxis(a, (nb, nb + 1), (0, 1))

    data = {k: lead(v) for k, v in series.items()}
    dims = {k: bdims for k in series}
    coords = {}
    if include_spins:
        data["x"] = lead(d.x)
        dims["x"] = bdims + ["variable"]
        labels = getattr(samples, "labels", None) or (
            model.labels if model is not None else None)
        coords["variable"] = list(labels) if labels is not None else list(range(d.n))
    with quiet_arviz():
        return az.from_dict(posterior=data, dims=dims, coords=coords)


def summary(samples, model=None, *, include_spins: bool = True, c: float = 5.0):
    """Summary table per observable (``energy``, ``magnetization``, and each ``x[i]``): arviz's
    ``az.summary`` columns (mean, sd, hdi, mcse, ess_bulk, ess_tail, r_hat) plus ``tau_int``
    (:func:`integrated_autocorr_time`). Returns a ``pandas.DataFrame``. Needs at least 4 draws
    per chain."""
    d = as_draws(samples, model)
    if d.x.shape[-2] < 4:
        raise ValueError(
            f"summary needs chains of at least 4 draws; got {d.x.shape[-2]} draw(s) per chain"
        )
    az = import_arviz()
    idata = to_arviz(samples, model, include_spins=include_spins)
    with quiet_arviz(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning)  # constant (masked) columns
        table = az.summary(idata, round_to=None)
    taus = []
    post = idata.posterior
    for name in table.index:
        var, _, rest = name.partition("[")
        arr = np.asarray(post[var].values, np.float64)  # (chain, draw, ...)
        if rest:
            idx = []
            for k, item in enumerate(rest.rstrip("]").split(",")):
                vals = [str(v) for v in post[var].coords[post[var].dims[2 + k]].values]
                idx.append(vals.index(item.strip()))
            idx = tuple(idx)
            arr = arr[(slice(None), slice(None)) + idx]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            taus.append(integrated_autocorr_time(arr, c=c))
    table["tau_int"] = taus
    return table
