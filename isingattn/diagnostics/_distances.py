"""Distances between distributions of states: hashed empirical distributions (any ``n``), total
variation, Kullback-Leibler, Jensen-Shannon, Hellinger; chi^2 goodness of fit; errors of
marginals and correlations against exact values; energy histograms.

A *distribution* argument is one of: an :class:`EmpiricalDistribution`; a model (its exact
Boltzmann distribution, ``n <= 30``); or an array of probabilities over all ``2^n`` states in the
index convention of :mod:`isingattn.exact` (state index ``k``: variable ``i`` takes bit ``i``).
Comparisons against a model only need the model's probabilities of the *sampled* states
(``exp(-beta E(x) - log Z)``) plus the total mass of the unsampled ones, so they work up to
``n = 30`` without a ``2^n`` table. All values are in nats.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import scipy.special
import scipy.stats

from .._validation import shape_str
from ..models import ModelBase, Vartype
from ._input import as_draws


class EmpiricalDistribution:
    """Counts of distinct sampled states, hashed by their packed bits (exact, no collisions;
    memory grows with the number of *distinct* states, not with ``2^n``).

    Attributes:
      keys: ``(K, ceil(n/8))`` uint8, the packed bits of each distinct state (bit ``i`` is
        variable ``i``: +1 for SPIN, 1 for BINARY), sorted.
      counts: ``(K,)`` occurrences; ``num_samples = counts.sum()``.
      n: number of variables. vartype: of the decoded states (default SPIN).
    """

    def __init__(self, keys, counts, n, vartype=Vartype.SPIN):
        self.keys = np.asarray(keys, np.uint8)
        self.counts = np.asarray(counts, np.int64)
        self.n = int(n)
        self.vartype = Vartype(vartype) if vartype is not None else Vartype.SPIN

    @classmethod
    def from_states(cls, states, vartype=None):
        """From an array ``(..., n)`` of states (every leading axis is pooled)."""
        states = np.asarray(states)
        if states.ndim < 1:
            raise ValueError(f"states must have shape (..., n); got {shape_str(states.shape)}")
        n = states.shape[-1]
        bits = states.reshape(-1, n) > 0  # +1 (SPIN) or 1 (BINARY) is bit 1
        if vartype is None:
            vartype = Vartype.BINARY if states.size and states.min() >= 0 else Vartype.SPIN
        packed = np.packbits(bits, axis=-1, bitorder="little")
        if packed.shape[0] == 0:
            return cls(np.zeros((0, packed.shape[1]), np.uint8), np.zeros(0, np.int64), n, vartype)
        keys, counts = np.unique(packed, axis=0, return_counts=True)
        return cls(keys, counts, n, vartype)

    @property
    def num_samples(self) -> int:
        return int(self.counts.sum())

    @property
    def num_states(self) -> int:
        """Number of distinct states seen."""
        return int(self.counts.size)

    @property
    def probabilities(self) -> np.ndarray:
        """Relative frequencies ``counts / num_samples``, ``(K,)``."""
        return self.counts / max(self.num_samples, 1)

    def states(self) -> np.ndarray:
        """The distinct states ``(K, n)`` in :attr:`vartype`."""
        bits = np.unpackbits(self.keys, axis=-1, count=self.n, bitorder="little").astype(np.int8)
        return 2 * bits - 1 if self.vartype is Vartype.SPIN else bits

    def indices(self) -> np.ndarray:
        """State indices (bit ``i`` of the index is variable ``i``), ``(K,)`` int64; n <= 62."""
        if self.n > 62:
            raise ValueError(f"state indices need n <= 62; this distribution has n = {self.n}")
        w = np.left_shift(np.ones(self.keys.shape[1], np.int64), 8 * np.arange(self.keys.shape[1]))
        return self.keys.astype(np.int64) @ w

    def dense(self) -> np.ndarray:
        """Frequencies over all ``2^n`` states (index convention of :mod:`isingattn.exact`)."""
        if self.n > 24:
            raise ValueError(f"a dense table needs n <= 24; this distribution has n = {self.n}")
        return np.bincount(self.indices(), weights=self.counts, minlength=1 << self.n) / max(
            self.num_samples, 1)

    def __repr__(self):
        return (f"EmpiricalDistribution(n={self.n}, num_samples={self.num_samples}, "
                f"num_states={self.num_states})")


def empirical_distribution(samples, model=None, *, index=()) -> EmpiricalDistribution:
    """The :class:`EmpiricalDistribution` of one model's draws (chains and draws pooled).
    ``samples``: ``Samples`` or ``batch + (chain, draw, n)``; for a batch, ``index`` picks the
    model (e.g. ``index=(0,)``)."""
    d = as_draws(samples, model)
    index = index if isinstance(index, tuple) else (index,)
    if len(index) != len(d.batch_shape):
        raise ValueError(
            f"index must pick one model of the batch {d.batch_shape}; got index={index}"
        )
    return EmpiricalDistribution.from_states(d.x[index], d.vartype)


# ---------------------------------------------------------------------------- alignment
def _model_log_probs(model, states_pm):
    """log p(x) of states (K, n) given as packed-bit-decoded SPIN +-1, for one model."""
    from .. import exact

    if model.batch_shape != ():
        raise ValueError(
            f"distances compare one model's distribution; got a batch {model.batch_shape}: "
            "index it, e.g. model[0]"
        )
    if model.n > exact.MAX_ENUMERATION_N:
        raise ValueError(
            f"exact probabilities need n <= {exact.MAX_ENUMERATION_N}; model has n = {model.n}. "
            "Compare against reference samples (an EmpiricalDistribution) instead."
        )
    x = states_pm.astype(np.float64)
    if model.vartype is Vartype.BINARY:
        x = (x + 1) / 2
    dense = model.to_dense()
    mask = np.asarray(dense.mask, bool)
    h = np.asarray(dense.active_h, np.float64)
    J = np.asarray(dense.active_J, np.float64)
    beta = float(np.asarray(dense.beta))
    xm = np.where(mask, x, 0.0)
    E = -(xm @ h) - 0.5 * np.einsum("ki,ij,kj->k", xm, J, xm) - float(np.asarray(dense.offset))
    logZ = float(np.asarray(exact.log_partition(model)))
    logp = -beta * E - logZ
    low = -1.0 if model.vartype is Vartype.SPIN else 0.0
    off_mask = np.any(~mask & (x != low), axis=-1)
    return np.where(off_mask, -np.inf, logp)


class _Aligned:
    """p and q on a common finite set of states, plus mass outside it (only a model side)."""

    def __init__(self, p, q, p_rest=0.0, q_rest=0.0):
        self.p, self.q = np.asarray(p, np.float64), np.asarray(q, np.float64)
        self.p_rest, self.q_rest = max(float(p_rest), 0.0), max(float(q_rest), 0.0)


def _check_prob_array(a, name):
    a = np.asarray(a, np.float64)
    if a.ndim != 1 or a.size == 0 or (a.size & (a.size - 1)):
        raise ValueError(
            f"{name} as an array must be probabilities over all 2^n states, shape (2^n,); got "
            f"{shape_str(a.shape)}"
        )
    if np.any(a < 0) or not math.isclose(a.sum(), 1.0, rel_tol=0, abs_tol=1e-6):
        raise ValueError(f"{name} must be non-negative and sum to 1; sums to {a.sum():.6g}")
    return a


def _n_of(obj, name):
    if isinstance(obj, EmpiricalDistribution):
        return obj.n
    if isinstance(obj, ModelBase):
        return obj.n
    return int(np.log2(_check_prob_array(obj, name).size))


def _smoothed(e: EmpiricalDistribution, pseudocount):
    dense = e.dense() * e.num_samples + pseudocount
    return dense / dense.sum()


def _align(p, q, pseudocount=0.0) -> _Aligned:
    from .. import exact

    for obj, name in ((p, "p"), (q, "q")):
        if not isinstance(obj, (EmpiricalDistribution, ModelBase, np.ndarray, list, tuple)):
            raise TypeError(
                f"{name} must be an EmpiricalDistribution, a model or a probability array; "
                f"got {type(obj).__name__}"
            )
    np_, nq = _n_of(p, "p"), _n_of(q, "q")
    if np_ != nq:
        raise ValueError(f"p and q must be over the same number of variables; got n = {np_} and {nq}")
    emp = [isinstance(o, EmpiricalDistribution) for o in (p, q)]
    if pseudocount:
        if pseudocount < 0:
            raise ValueError(f"pseudocount must be >= 0; got {pseudocount}")
        if np_ > 24:
            raise ValueError(f"pseudocount smoothing over all 2^n states needs n <= 24; n = {np_}")
    if any(emp) and not pseudocount:
        if all(emp):
            keys = np.concatenate([p.keys, q.keys])
            uk, inv = np.unique(keys, axis=0, return_inverse=True)
            inv = inv.reshape(-1)
            pv = np.zeros(len(uk))
            qv = np.zeros(len(uk))
            np.add.at(pv, inv[: len(p.keys)], p.probabilities)
            np.add.at(qv, inv[len(p.keys):], q.probabilities)
            return _Aligned(pv, qv)
        e, other = (p, q) if emp[0] else (q, p)
        ev = e.probabilities
        if isinstance(other, ModelBase):
            bits = np.unpackbits(e.keys, axis=-1, count=e.n, bitorder="little")
            ov = np.exp(_model_log_probs(other, 2.0 * bits - 1.0))
        else:
            ov = _check_prob_array(other, "p" if emp[1] else "q")[e.indices()]
        rest = 1.0 - ov.sum()
        return _Aligned(ev, ov, 0.0, rest) if emp[0] else _Aligned(ov, ev, rest, 0.0)

    def dense(o, name):
        if isinstance(o, EmpiricalDistribution):
            return _smoothed(o, pseudocount) if pseudocount else o.dense()
        if isinstance(o, ModelBase):
            if o.batch_shape != ():
                raise ValueError(f"{name}: one model expected; got a batch {o.batch_shape}")
            return np.asarray(exact.probabilities(o), np.float64)
        return _check_prob_array(o, name)

    return _Aligned(dense(p, "p"), dense(q, "q"))


# ---------------------------------------------------------------------------- distances
def total_variation(p, q) -> float:
    """Total variation distance ``TV(P, Q) = (1/2) sum_x |P(x) - Q(x)|``, in ``[0, 1]``."""
    a = _align(p, q)
    return float(0.5 * (np.abs(a.p - a.q).sum() + a.p_rest + a.q_rest))


def kl_divergence(p, q, *, pseudocount: float = 0.0) -> float:
    """Kullback-Leibler divergence ``KL(P || Q) = sum_{x: P(x) > 0} P(x) log(P(x) / Q(x))``.

    Unseen states: terms with ``P(x) = 0`` contribute 0; a state with ``P(x) > 0`` and
    ``Q(x) = 0`` makes the divergence ``+inf`` (so ``KL(empirical || model)`` is finite, while
    ``KL(model || empirical)`` is ``inf`` unless every state was seen). With
    ``pseudocount = a > 0`` every :class:`EmpiricalDistribution` argument is first smoothed
    over all ``2^n`` states, ``(count(x) + a) / (N + a 2^n)`` (additive/Laplace smoothing,
    ``n <= 24``), which makes both directions finite at the price of a bias of order
    ``a 2^n / N``.
    """
    a = _align(p, q, pseudocount)
    sel = a.p > 0
    if np.any(a.q[sel] == 0) or a.p_rest > 0:
        return math.inf
    return float(np.sum(a.p[sel] * (np.log(a.p[sel]) - np.log(a.q[sel]))))


def js_divergence(p, q) -> float:
    """Jensen-Shannon divergence ``JS = KL(P || M)/2 + KL(Q || M)/2``, ``M = (P + Q)/2``, in
    ``[0, log 2]`` nats; always finite (unseen states are handled exactly)."""
    a = _align(p, q)
    m = 0.5 * (a.p + a.q)

    def part(v):
        s = v > 0
        return np.sum(v[s] * (np.log(v[s]) - np.log(m[s])))

    return float(0.5 * (part(a.p) + part(a.q)) + 0.5 * math.log(2) * (a.p_rest + a.q_rest))


def hellinger(p, q) -> float:
    """Hellinger distance ``H = sqrt(1 - sum_x sqrt(P(x) Q(x)))``, in ``[0, 1]``."""
    a = _align(p, q)
    bc = float(np.sum(np.sqrt(a.p * a.q)))
    return math.sqrt(max(0.0, 1.0 - bc))


def expected_tv_iid(probabilities, num_samples) -> np.ndarray:
    """Exact expected total variation ``E[TV(P_N, P)]`` between the empirical distribution of
    ``N`` i.i.d. draws and ``P`` itself: ``(1/2N) sum_x E|X_x - N p_x|`` with de Moivre's mean
    absolute deviation of ``X_x ~ Binomial(N, p_x)``. About ``sum_x sqrt(p_x (1 - p_x) / (2 pi
    N))`` for large ``N``: the floor a perfect sampler reaches with ``N`` samples.
    ``num_samples``: int or array; returns its shape."""
    p = np.asarray(probabilities, np.float64).reshape(-1)
    p = p[p > 0]
    N = np.asarray(num_samples, np.float64)
    Nf = N.reshape(-1, 1)
    nu = np.floor(Nf * p) + 1
    with np.errstate(divide="ignore", invalid="ignore"):
        logmd = (np.log(2 * nu) + scipy.special.gammaln(Nf + 1) - scipy.special.gammaln(nu + 1)
                 - scipy.special.gammaln(Nf - nu + 1) + nu * np.log(p)
                 + (Nf - nu + 1) * np.log1p(-p))
    md = np.where(nu <= Nf, np.exp(logmd), 0.0)  # p = 1 exactly: no deviation
    return (0.5 * md.sum(-1) / Nf[:, 0]).reshape(N.shape)


# ---------------------------------------------------------------------------- chi^2
@dataclasses.dataclass(frozen=True)
class Chi2Result:
    """Pearson chi^2 goodness of fit: ``statistic`` (already scaled by ``effective_fraction``),
    degrees of freedom ``dof`` (bins - 1), ``pvalue``, ``num_bins`` after pooling."""

    statistic: float
    dof: int
    pvalue: float
    num_bins: int


def chi2_test(samples, model, *, min_expected: float = 5.0, effective_fraction: float = 1.0,
              index=()) -> Chi2Result:
    """Pearson chi^2 test of sampled states against the exact probabilities of ``model``.

    States with expected count ``N p(x) < min_expected`` are pooled into one bin (the classic
    validity rule); if fewer than 2 bins remain the test refuses (``ValueError``: draw more
    samples). ``effective_fraction`` (``ESS / N <= 1``) scales the statistic down for correlated
    draws. ``samples``: ``Samples``/array for ``model`` (pick a batch entry with ``index``) or an
    :class:`EmpiricalDistribution`. ``n <= 24``.
    """
    from .. import exact

    if not 0 < effective_fraction <= 1:
        raise ValueError(f"effective_fraction must be in (0, 1]; got {effective_fraction}")
    if isinstance(samples, EmpiricalDistribution):
        e = samples
        m = model
    else:
        e = empirical_distribution(samples, model, index=index)
        index = index if isinstance(index, tuple) else (index,)
        m = model[index] if index else model
    if m.n > exact.MAX_PROBABILITIES_N:
        raise ValueError(f"chi2_test needs n <= {exact.MAX_PROBABILITIES_N}; model has n = {m.n}")
    probs = np.asarray(exact.probabilities(m), np.float64)
    N = e.num_samples
    counts = e.dense() * N
    expected = N * probs
    big = expected >= min_expected
    obs = list(counts[big])
    exp = list(expected[big])
    rest_o, rest_e = counts[~big].sum(), expected[~big].sum()
    if rest_e >= min_expected:
        obs.append(rest_o)
        exp.append(rest_e)
    elif rest_e > 0 or rest_o > 0:
        if not exp:
            raise ValueError(
                f"no state reaches the minimum expected count {min_expected} with N = {N} "
                "samples: too thin to judge; draw more samples"
            )
        j = int(np.argmin(exp))
        obs[j] += rest_o
        exp[j] += rest_e
    if len(exp) < 2:
        raise ValueError(
            f"fewer than 2 bins with expected count >= {min_expected} (N = {N}): the chi^2 test "
            "cannot judge; draw more samples"
        )
    obs, exp = np.array(obs), np.array(exp)
    stat = float(np.sum((obs - exp) ** 2 / exp)) * effective_fraction
    dof = len(exp) - 1
    return Chi2Result(stat, dof, float(scipy.stats.chi2.sf(stat, dof)), len(exp))


# ---------------------------------------------------------------------------- moments
def moment_errors(samples, model, *, exact_moments=None) -> dict:
    """Errors of sampled moments against exact enumeration (``n <= 30``), over active variables:

    ``marginal_max`` / ``marginal_rms``: of ``<x_i>``; ``correlation_max`` /
    ``correlation_rms``: of the connected correlations ``<x_i x_j> - <x_i><x_j>`` over active
    pairs ``i < j``; ``energy_error``: sampled minus exact ``<E>``. Each value has the batch
    shape. ``exact_moments``: a precomputed :func:`isingattn.exact.moments` result.
    """
    from .. import exact
    from ._observables import connected_correlation, site_magnetization

    d = as_draws(samples, model, need_energy=True)
    mo = exact_moments if exact_moments is not None else exact.moments(model)
    m_ex = np.asarray(mo.marginals, np.float64)
    C_ex = np.asarray(mo.correlations, np.float64)
    G_ex = C_ex - m_ex[..., :, None] * m_ex[..., None, :]
    dm = np.where(d.mask, site_magnetization(samples, model) - m_ex, np.nan)
    G = connected_correlation(samples, model)
    iu = np.triu(np.ones((d.n, d.n), bool), 1)
    pair = iu & d.mask[..., :, None] & d.mask[..., None, :]
    dG = np.where(pair, G - G_ex, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices: no active pair
        out = {
            "marginal_max": np.nanmax(np.abs(dm), -1),
            "marginal_rms": np.sqrt(np.nanmean(dm**2, -1)),
            "correlation_max": np.nanmax(np.abs(dG), (-2, -1)),
            "correlation_rms": np.sqrt(np.nanmean(dG**2, (-2, -1))),
            "energy_error": d.energy.mean((-2, -1)) - np.asarray(mo.mean_energy, np.float64),
        }
    return out


# ---------------------------------------------------------------------------- energy histograms
@dataclasses.dataclass
class EnergyHistogram:
    """``edges`` ``(B + 1,)``; ``density`` ``(B,)`` of sampled energies (integrates to 1);
    ``exact_density`` ``(B,)`` of the exact Boltzmann energy distribution, or None."""

    edges: np.ndarray
    density: np.ndarray
    exact_density: np.ndarray | None = None


_EXACT_HIST_MAX_N = 20


def exact_energy_distribution(model):
    """Energies and Boltzmann probabilities of all ``2^n`` states of one model (``n <= 20``)."""
    from .. import exact

    if model.n > _EXACT_HIST_MAX_N:
        raise ValueError(
            f"the exact energy distribution enumerates 2^n states; n <= {_EXACT_HIST_MAX_N} "
            f"supported, model has n = {model.n}"
        )
    states = np.asarray(exact.enumerate_states(model.n, model.vartype), np.float64)
    E = np.asarray(model.energy(states), np.float64)
    p = np.asarray(exact.probabilities(model), np.float64)
    return E, p


def _lattice_edges(e, Ex, px, rng, max_bins=120):
    """Bins centred on the energy levels when energies lie on an evenly spaced grid (integer
    couplings: a lattice's energies are multiples of 4), so no bin falls between two levels;
    None when they do not."""
    levels = np.unique(np.round(e, 9))
    if Ex is not None:
        levels = np.union1d(levels, np.unique(np.round(Ex[px > 1e-6 * px.max()], 9)))
    if levels.size < 2 or levels.size > 2000:
        return None
    d = np.diff(levels)
    step = d.min()
    if step <= 0 or np.any(np.abs(d / step - np.round(d / step)) > 1e-6):
        return None
    span = (levels[-1] - levels[0]) / step
    step *= max(1, int(np.ceil((span + 1) / max_bins)))
    lo = levels[0] - step / 2
    return lo + step * np.arange(int(np.ceil((levels[-1] - lo) / step)) + 2)


def energy_histogram(samples, model=None, *, bins="auto", index=(), exact: bool | None = None,
                     range=None) -> EnergyHistogram:
    """Histogram of sampled energies of one model, and (``exact``: default when ``model`` has
    ``n <= 20``) the exact Boltzmann probability mass in the same bins, as densities.

    ``bins="auto"``: bins centred on the energy levels when they lie on an even grid (e.g.
    integer couplings), else 40 equal bins over ``range``; an int or an array of edges as in
    ``numpy.histogram``."""
    d = as_draws(samples, model, need_energy=True)
    index = index if isinstance(index, tuple) else (index,)
    if len(index) != len(d.batch_shape):
        raise ValueError(f"index must pick one model of the batch {d.batch_shape}; got {index}")
    e = d.energy[index].reshape(-1)
    want = exact if exact is not None else (model is not None and model.n <= _EXACT_HIST_MAX_N)
    Ex = px = None
    if want:
        if model is None:
            raise ValueError("exact=True needs the model")
        m = model[index] if index else model
        Ex, px = exact_energy_distribution(m)
    if range is None:
        lo, hi = float(e.min()), float(e.max())
        if Ex is not None:
            keep = px > 1e-6 * px.max()
            lo, hi = min(lo, float(Ex[keep].min())), max(hi, float(Ex[keep].max()))
        pad = 1e-9 + 1e-6 * max(abs(lo), abs(hi), 1.0)
        range = (lo - pad, hi + pad)
    edges = _lattice_edges(e, Ex, px, range) if isinstance(bins, str) else None
    if edges is None:
        edges = np.histogram_bin_edges(e, bins=40 if bins == "auto" else bins, range=range)
    dens, _ = np.histogram(e, bins=edges, density=True)
    exd = None
    if Ex is not None:
        mass, _ = np.histogram(Ex, bins=edges, weights=px)
        exd = mass / np.diff(edges)
    return EnergyHistogram(edges, dens, exd)
