"""Run several samplers on the same model and compare their sampling quality in one table."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import time
import warnings

import numpy as np

from .._io import atomic_write
from ..models import ModelBase
from ._distances import (
    EmpiricalDistribution,
    chi2_test,
    energy_histogram,
    exact_energy_distribution,
    expected_tv_iid,
    hellinger,
    js_divergence,
    kl_divergence,
    moment_errors,
    total_variation,
)
from ._input import as_draws
from ._mixing import autocorrelation, effective_sample_size, integrated_autocorr_time, rhat
from ._observables import magnetization
from ._temperature import effective_temperature

#: Columns of a comparison row, in table order (see :func:`compare_samplers`).
COLUMNS = (
    "sampler", "status", "batch_size", "num_chains", "num_draws", "tv", "tv_iid", "kl",
    "hellinger", "js", "chi2_p", "marginal_max", "correlation_max", "energy_mean",
    "energy_error", "beta_eff", "beta_eff_se", "beta_method", "ess_energy", "ess_per_s",
    "tau_int_energy", "rhat_max", "chain_break_fraction", "acceptance", "sampling_s", "total_s",
)

_SKIP_ERRORS = (NotImplementedError, ValueError, TypeError)


def _skip_errors():
    """Errors that mean "this backend does not apply here" (also: no QPU credentials)."""
    from .. import samplers

    extra = getattr(samplers, "QPUConfigurationError", None)
    return _SKIP_ERRORS + ((extra,) if extra is not None else ())


def _num(v):
    if v is None:
        return None
    if isinstance(v, (str, bool)):
        return v
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    return f


def _json_safe(obj):
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, np.ndarray) or hasattr(obj, "shape"):
        return _json_safe(np.asarray(obj).tolist())
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return f if math.isfinite(f) else (None if math.isnan(f) else ("inf" if f > 0 else "-inf"))
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


@dataclasses.dataclass
class ComparisonTable:
    """Result of :func:`compare_samplers`.

    Attributes:
      rows: one dict per sampler with the keys in :data:`COLUMNS` (numbers are means over the
        batch of models; NaN where a metric does not apply, e.g. R-hat with one chain).
      model: a description of the model (n, vartype, beta, batch shape).
      curves: per sampler, data for the plots (of the first model of a batch): energy histogram,
        distance against number of samples, energy autocorrelation.
      reference: exact data for the plots (energy distribution, perfect-sampler TV curve).
      samples: the :class:`~isingattn.samplers.Samples` of each sampler (not serialized).
    """

    rows: list = dataclasses.field(default_factory=list)
    model: dict = dataclasses.field(default_factory=dict)
    curves: dict = dataclasses.field(default_factory=dict)
    reference: dict = dataclasses.field(default_factory=dict)
    samples: dict = dataclasses.field(default_factory=dict, repr=False)

    @property
    def columns(self):
        return list(COLUMNS)

    def row(self, sampler: str) -> dict:
        for r in self.rows:
            if r["sampler"] == sampler:
                return r
        raise KeyError(f"no row for sampler {sampler!r}; have {[r['sampler'] for r in self.rows]}")

    def to_csv(self, path=None) -> str:
        """CSV text (columns :data:`COLUMNS`); written atomically to ``path`` if given."""
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(COLUMNS), extrasaction="ignore",
                           lineterminator="\n")
        w.writeheader()
        for r in self.rows:
            w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in COLUMNS})
        text = buf.getvalue()
        if path is not None:
            atomic_write(path, text)
        return text

    def to_dict(self) -> dict:
        return {"columns": list(COLUMNS), "rows": self.rows, "model": self.model,
                "curves": self.curves, "reference": self.reference}

    def to_json(self, path=None) -> str:
        """JSON text (rows, model, curves, reference; NaN as null, inf as "inf"); written
        atomically to ``path`` if given."""
        text = json.dumps(_json_safe(self.to_dict()), indent=1)
        if path is not None:
            atomic_write(path, text)
        return text

    @classmethod
    def from_json(cls, text_or_path):
        """Read a table written by :meth:`to_json` (without samples)."""
        import os

        text = text_or_path
        if os.path.exists(str(text_or_path)):
            with open(text_or_path) as f:
                text = f.read()
        data = json.loads(text)

        def back(v):
            if v is None:
                return math.nan
            if v in ("inf", "-inf"):
                return float(v)
            return v

        rows = [{k: back(v) for k, v in r.items()} for r in data["rows"]]
        return cls(rows, data.get("model", {}), data.get("curves", {}), data.get("reference", {}))

    def format(self, columns=None) -> str:
        """A fixed-width text table of the main columns (for terminals)."""
        columns = columns or ["sampler", "tv", "tv_iid", "kl", "marginal_max", "correlation_max",
                              "energy_error", "beta_eff", "beta_eff_se", "ess_per_s", "rhat_max",
                              "total_s"]
        heads = {"tv_iid": "tv(ideal)", "marginal_max": "max|dm|", "correlation_max": "max|dG|",
                 "energy_error": "d<E>", "beta_eff": "beta_eff", "beta_eff_se": "+-",
                 "ess_per_s": "ESS/s", "rhat_max": "R-hat", "total_s": "time s"}
        width = {c: max(9, len(heads.get(c, c)) + 1) for c in columns}
        width["sampler"] = max([len("sampler")] + [len(str(r["sampler"])) for r in self.rows]) + 2
        lines = ["".join(f"{heads.get(c, c):<{width[c]}}" if c == "sampler" else
                         f"{heads.get(c, c):>{width[c]}}" for c in columns)]
        for r in self.rows:
            if r.get("status", "ok") != "ok":
                lines.append(f"{r['sampler']:<{width['sampler']}}  {r['status']}")
                continue
            cells = []
            for c in columns:
                v = r.get(c)
                if c == "sampler":
                    cells.append(f"{v:<{width[c]}}")
                elif isinstance(v, str):
                    cells.append(f"{v:>{width[c]}}")
                elif v is None or (isinstance(v, float) and math.isnan(v)):
                    cells.append(f"{'-':>{width[c]}}")
                elif c == "ess_per_s":
                    cells.append(f"{v:>{width[c]}.3g}")
                else:
                    cells.append(f"{v:>{width[c]}.4f}")
            lines.append("".join(cells))
        return "\n".join(lines)

    def __str__(self):
        return self.format()


def _resolve(samplers):
    from ..samplers import Sampler, get_sampler

    if isinstance(samplers, dict):
        items = list(samplers.items())
    elif isinstance(samplers, (str, Sampler)):
        items = [samplers]
    else:
        items = list(samplers)
    out = []
    for it in items:
        if isinstance(it, tuple):
            name, s = it
        elif isinstance(it, str):
            name, s = it, it
        elif isinstance(it, Sampler):
            name, s = type(it).__name__, it
        else:
            raise TypeError(
                f"samplers must be backend names, Sampler objects or a dict name -> sampler; got "
                f"{type(it).__name__}"
            )
        out.append((name, s if not isinstance(s, str) else (get_sampler, s)))
    names = [n for n, _ in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"sampler names must be unique; repeated: {sorted(dup)} (use a dict)")
    return out


def _grid(num_draws, points=10):
    ks = np.unique(np.round(np.geomspace(1, num_draws, points)).astype(int))
    return ks[ks >= 1]


def _mean(a):
    a = np.asarray(a, np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmean(a)) if a.size else math.nan


def _max(a):
    a = np.asarray(a, np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmax(a)) if a.size and not np.all(np.isnan(a)) else math.nan


def _info_scalar(info, *names):
    for n in names:
        if n in info:
            try:
                return float(np.mean(np.asarray(info[n], np.float64)))
            except (TypeError, ValueError):
                continue
    return math.nan


def compare_samplers(model, samplers, *, key, num_samples: int = 1000, num_chains: int = 4,
                     reference="exact", options=None, num_bootstrap: int = 100,
                     progress: bool = False, callback=None, max_lag: int = 200,
                     raise_errors: bool = False, skip=()) -> ComparisonTable:
    """Run ``samplers`` on the same ``model`` (or batch of models) and compare them.

    Args:
      model: an :class:`~isingattn.IsingModel` or :class:`~isingattn.SparseIsingModel`.
      samplers: backend names of :data:`isingattn.samplers.BACKENDS`, ``Sampler`` objects, or a
        dict ``name -> Sampler``.
      key: JAX PRNG key; sampler ``i`` uses ``jax.random.fold_in(key, i)``.
      num_samples, num_chains: draws per chain and chains, for every sampler.
      reference: ``"exact"`` (enumeration; distances need ``n <= 30``, the exact energy
        histogram ``n <= 20``), a :class:`~isingattn.samplers.Samples` of reference draws
        (distances between empirical distributions, any ``n``), or None (no distances).
      options: dict ``name -> dict`` of backend options passed to ``sample``.
      num_bootstrap: bootstrap resamples for the pseudo-likelihood ``beta_eff`` (used when the
        exact log Z is not available).
      progress: show a tqdm progress bar. callback: called as ``callback(table, row)`` after each
        sampler (e.g. to write files, so an interrupted run keeps what finished).
      raise_errors: re-raise a sampler's error instead of recording it in the row. A sampler
        that does not apply to the model (``NotImplementedError``, ``ValueError``,
        ``TypeError``, or missing QPU credentials) is recorded as ``status = "skipped: ..."``;
        any other failure as
        ``"error: ..."``.
      skip: names of samplers not to run (no row; e.g. finished in an earlier run that is being
        resumed). They keep their places, so every other sampler gets the key it would get in
        a full run.

    Returns:
      :class:`ComparisonTable`, one row per sampler with: ``tv`` (total variation to the
      reference), ``tv_iid`` (what a perfect sampler's ``N`` draws would show on average,
      :func:`expected_tv_iid`), ``kl`` (``KL(empirical || exact)``), ``hellinger``, ``js``,
      ``chi2_p`` (chi^2 p-value, deflated by the energies' ``ESS / N``), ``marginal_max``,
      ``correlation_max`` (largest errors of ``<x_i>`` and connected correlations), ``energy_mean``
      and ``energy_error``, ``beta_eff`` with ``beta_eff_se`` (ML with exact log Z, else MPLE),
      ``ess_energy`` (bulk ESS of the energy) and ``ess_per_s`` (per second of sampling time),
      ``tau_int_energy``, ``rhat_max`` (over energy and magnetization), ``chain_break_fraction``
      and ``acceptance`` (from the backend's info, NaN when absent), timings.
    """
    import jax

    from .. import exact
    from .._validation import check_key
    from ..samplers import Samples
    if not isinstance(model, ModelBase):
        raise TypeError(f"model must be an IsingModel or SparseIsingModel; got {type(model).__name__}")
    from .._validation import check_positive_int

    key = check_key(key)
    num_samples = check_positive_int("num_samples", num_samples)
    num_chains = check_positive_int("num_chains", num_chains)
    entries = _resolve(samplers)
    skip = set(skip)
    options = dict(options or {})
    unknown = set(options) - {n for n, _ in entries}
    if unknown:
        raise ValueError(f"options given for unknown sampler(s) {sorted(unknown)}")
    batch = tuple(model.batch_shape)
    idxs = list(np.ndindex(*batch))
    first = idxs[0]
    m0 = model[first] if batch else model

    table = ComparisonTable(model={
        "type": type(model).__name__, "n": model.n, "vartype": model.vartype.value,
        "batch_shape": list(batch), "beta": np.asarray(model.beta).tolist(),
        "num_active": np.asarray(model.num_active).tolist(),
    })
    exact_ok = False
    ref_emp = None
    mo = None
    probs0 = None
    if isinstance(reference, str):
        if reference != "exact":
            raise ValueError(f"reference must be 'exact', a Samples object or None; got {reference!r}")
        exact_ok = model.n <= exact.MAX_ENUMERATION_N
        if not exact_ok:
            warnings.warn(f"reference='exact' needs n <= {exact.MAX_ENUMERATION_N}; n = {model.n}: "
                          "distances and exact errors are left out", RuntimeWarning, stacklevel=2)
        else:
            mo = exact.moments(model)
            table.reference["kind"] = "exact"
            table.reference["mean_energy"] = np.asarray(mo.mean_energy).reshape(-1)[0]
            if model.n <= exact.MAX_PROBABILITIES_N:
                probs0 = np.asarray(exact.probabilities(m0), np.float64)
                table.reference["probabilities_available"] = True
                if model.n <= 20:
                    E, p = exact_energy_distribution(m0)
                    order = np.argsort(E)
                    Eu, inv = np.unique(np.round(E[order], 9), return_inverse=True)
                    table.reference["energy_levels"] = Eu
                    table.reference["energy_probabilities"] = np.bincount(inv, weights=p[order])
            else:
                probs0 = None
    elif isinstance(reference, Samples):
        rd = as_draws(reference, model)
        ref_emp = [EmpiricalDistribution.from_states(rd.x[i], rd.vartype) for i in idxs]
        table.reference["kind"] = "samples"
        table.reference["num_samples"] = ref_emp[0].num_samples
        probs0 = None
    elif reference is None:
        probs0 = None
    else:
        raise TypeError(f"reference must be 'exact', a Samples object or None; got "
                        f"{type(reference).__name__}")

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(entries), desc="samplers", unit="sampler")
    try:
        for i, (name, sampler) in enumerate(entries):
            if name in skip:
                if bar is not None:
                    bar.update(1)
                continue
            if bar is not None:
                bar.set_postfix_str(name)
            row = {c: math.nan for c in COLUMNS}
            row.update(sampler=name, status="ok", batch_size=int(np.prod(batch, dtype=int)),
                       num_chains=num_chains, num_draws=num_samples, beta_method="")
            k = jax.random.fold_in(key, i)
            try:
                if isinstance(sampler, tuple):  # (get_sampler, name): construct lazily
                    sampler = sampler[0](sampler[1])
                t0 = time.perf_counter()
                s = sampler.sample(model, k, num_samples, num_chains=num_chains,
                                   **options.get(name, {}))
                wall = time.perf_counter() - t0
            except Exception as e:  # record it and carry on with the other samplers
                if raise_errors:
                    raise
                kind = "skipped" if isinstance(e, _skip_errors()) else "error"
                row["status"] = f"{kind}: {type(e).__name__}: {e}".replace("\n", " ")[:300]
                table.rows.append(row)
                if callback is not None:
                    callback(table, row)
                if bar is not None:
                    bar.update(1)
                continue
            table.samples[name] = s
            _fill_row(row, s, model, idxs, wall, exact_ok, mo, ref_emp, num_bootstrap, k)
            table.curves[name] = _curves(s, model, first, m0, exact_ok, ref_emp, max_lag)
            table.rows.append(row)
            if callback is not None:
                callback(table, row)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    if probs0 is not None:
        Ns = np.unique(np.round(np.geomspace(1, num_samples * num_chains, 30)).astype(int))
        table.reference["tv_iid_curve"] = {"num_samples": Ns, "tv": expected_tv_iid(probs0, Ns)}
    return table


def _fill_row(row, s, model, idxs, wall, exact_ok, mo, ref_emp, num_bootstrap, key):
    import jax

    batch = tuple(model.batch_shape)
    N = s.num_chains * s.num_draws
    timing = s.info.get("timing", {})
    row["sampling_s"] = float(timing.get("sampling_s", wall))
    row["total_s"] = float(timing.get("total_s", wall))
    row["chain_break_fraction"] = _info_scalar(s.info, "chain_break_fraction", "chain_breaks")
    row["acceptance"] = _info_scalar(s.info, "acceptance_rate", "acceptance")
    e = np.asarray(s.energy, np.float64)
    row["energy_mean"] = float(e.mean())
    # mixing
    ess = np.full(len(idxs), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if s.num_draws >= 4:
            ess_b = np.atleast_1d(effective_sample_size(e, method="bulk")).reshape(-1)
            const = np.atleast_1d(e.std((-2, -1)) == 0).reshape(-1)
            ess = np.where(const, np.nan, ess_b)
            row["ess_energy"] = _mean(ess)
            row["tau_int_energy"] = _mean(integrated_autocorr_time(e))
            if s.num_chains >= 2:
                rh = [rhat(e), rhat(magnetization(s, model))]
                row["rhat_max"] = _max(np.concatenate([np.atleast_1d(r).reshape(-1)
                                                       for r in rh]))
    if s.num_draws < 4 and s.num_chains >= 4:
        row["ess_energy"] = float(N)  # independent reads (one draw per chain) are i.i.d.
    row["ess_per_s"] = row["ess_energy"] / row["sampling_s"] if row["sampling_s"] > 0 else math.nan
    # distances
    x = np.asarray(s.spins)
    tv, kl, hel, js, chi = [], [], [], [], []
    for j, idx in enumerate(idxs):
        emp = EmpiricalDistribution.from_states(x[idx], s.vartype)
        other = None
        if exact_ok:
            other = model[idx] if batch else model
        elif ref_emp is not None:
            other = ref_emp[j]
        if other is None:
            continue
        tv.append(total_variation(emp, other))
        kl.append(kl_divergence(emp, other))
        hel.append(hellinger(emp, other))
        js.append(js_divergence(emp, other))
        if exact_ok and model.n <= 24:
            frac = 1.0
            if not np.isnan(ess[j]):
                frac = float(min(1.0, ess[j] / N))
            try:
                chi.append(chi2_test(emp, other, effective_fraction=frac).pvalue)
            except ValueError:
                chi.append(math.nan)
    if tv:
        row.update(tv=_mean(tv), kl=_mean(kl), hellinger=_mean(hel), js=_mean(js))
    if chi:
        row["chi2_p"] = _mean(chi)
    if exact_ok:
        from .. import exact

        if model.n <= exact.MAX_PROBABILITIES_N:
            tiv = [float(expected_tv_iid(np.asarray(exact.probabilities(
                model[idx] if batch else model)), N)) for idx in idxs[:8]]
            row["tv_iid"] = _mean(tiv)
        err = moment_errors(s, model, exact_moments=mo)
        row["marginal_max"] = _mean(err["marginal_max"])
        row["correlation_max"] = _mean(err["correlation_max"])
        row["energy_error"] = _mean(err["energy_error"])
    # effective temperature
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            method = "ml" if exact_ok else "mple"
            opts = {} if method == "ml" else {"num_bootstrap": num_bootstrap}
            est = effective_temperature(s, model, method=method,
                                              key=jax.random.fold_in(key, 1), **opts)
        row["beta_eff"] = _mean(est.beta)
        row["beta_eff_se"] = _mean(est.stderr)
        row["beta_method"] = method
    except ValueError as e:
        row["beta_method"] = f"failed: {e}"[:120]


def _curves(s, model, first, m0, exact_ok, ref_emp, max_lag):
    out = {}
    x = np.asarray(s.spins)[first]  # (chain, draw, n)
    e = np.asarray(s.energy, np.float64)[first]
    try:
        h = energy_histogram(s, model, index=first, exact=exact_ok and model.n <= 20)
        out["energy_hist"] = {"edges": h.edges, "density": h.density}
    except ValueError:
        pass
    other = m0 if exact_ok else (ref_emp[0] if ref_emp is not None else None)
    if other is not None:
        ks = _grid(s.num_draws)
        Ns, tvs = [], []
        for kk in ks:
            emp = EmpiricalDistribution.from_states(x[:, :kk], s.vartype)
            Ns.append(emp.num_samples)
            tvs.append(total_variation(emp, other))
        out["tv_curve"] = {"num_samples": Ns, "tv": tvs}
    if s.num_draws >= 4 and np.any(e.std(-1) > 0):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            rho = np.nanmean(autocorrelation(e), axis=0)
        L = min(max_lag, s.num_draws - 1)
        out["energy_acf"] = {"lag": np.arange(L + 1), "rho": rho[: L + 1]}
    return out
