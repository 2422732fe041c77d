"""The ``sampled`` method: statistics from any sampler backend, fluctuation-dissipation
gradients."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp

from .. import _vma
from .._validation import check_positive_int
from ._inference import Inference


def _features(s, feature):
    if feature == "marginal":
        return s
    return s / jnp.maximum(1.0, jnp.sum(s, axis=-1, keepdims=True))


def _programmed(h, J, mask, scales):
    """The BINARY model handed to the backend when ``scales`` ``(N, 2)`` rescale the SPIN form
    of the intended one: SPIN fields ``c_h h^spin`` and couplings ``c_J J^spin`` (per head),
    i.e. ``J' = c_J J`` and ``h' = c_h h + (c_h - c_J) sum_k J_jk / 2`` over allowed keys ``k``
    (``h^spin = h / 2 + sum_k J_jk / 4``, ``J^spin = J / 4``). ``scales=None``: unchanged."""
    if scales is None:
        return h, J
    scales = jnp.asarray(scales, h.dtype)
    ch = scales[:, 0][None, :, None, None]
    cJ = scales[:, 1]
    rows = jnp.einsum("bntk,njk->bntj", mask.astype(h.dtype), J)
    return ch * h + (ch - cJ[None, :, None, None]) * rows / 2, cJ[:, None, None] * J


def _host_backend(backend):
    """A backend that runs on the host (dwave-samplers, dwave-system, dimod): called through
    ``jax.pure_callback`` so that it works inside ``jit``."""
    from ..samplers import DimodSampler, NealSampler, QPUSampler

    return isinstance(backend, (DimodSampler, NealSampler, QPUSampler))


def _sample_host(backend, model, key, num_samples, num_chains, options):
    """Spins ``batch + (chain, draw, n)`` of a host backend, through a callback. A QPU places the
    models of the batch side by side on its graph, many per call
    (:class:`~isingattn.samplers._qpu_tiled.TiledQPUSampler`)."""
    from ..samplers import QPUSampler, host_sample_callback

    if isinstance(backend, QPUSampler):
        from ..samplers import TiledQPUSampler

        backend = TiledQPUSampler(backend)
    return host_sample_callback(backend, model, key, num_samples, num_chains=num_chains,
                                **options)


def _sample_models(backend, h, J, beta, mask, key, num_samples, num_chains, options):
    """Draws ``(..., M, n)`` of the BINARY models ``(h, J, beta, mask)``; ``J`` broadcasts
    against ``h``'s batch."""
    from ..models import IsingModel

    # NaN parameters are drawn as 0 (their rows come out NaN: Sampled.__call__), since a
    # backend that checks its model would refuse them
    h = jnp.where(mask & ~jnp.isnan(h), h, 0.0)
    J = jnp.where(jnp.isnan(J), 0.0, J)
    beta = jnp.where(jnp.isnan(beta), 1.0, beta)
    model = IsingModel(h=h, J=J, beta=beta, vartype="BINARY", mask=mask, validate=False)
    if _host_backend(backend):
        spins = _sample_host(backend, model, key, num_samples, num_chains, options)
    else:
        spins = backend.sample(model, key, num_samples, num_chains=num_chains,
                               **options).spins
    s = spins.astype(h.dtype)
    return s.reshape(s.shape[:-3] + (num_chains * num_samples, s.shape[-1]))


class _DrawConfig:
    """``cfg`` as the static argument of the compiled draw: a JAX backend is compared by its
    type and settings, so that equal backends (``sampled(ExactSampler(), M)`` built anew in a
    loop) share one program; a host backend (its callback is part of the program, and it keeps
    per-object records) by identity."""

    __slots__ = ("_key", "cfg")

    def __init__(self, cfg):
        self.cfg = cfg
        backend, rest = cfg[0], cfg[1:]
        ident = backend
        if not _host_backend(backend):
            try:
                ident = (type(backend), tuple(sorted(vars(backend).items())))
                hash(ident)
            except TypeError:  # settings that are not hashable: identity
                ident = backend
        self._key = (ident, rest)

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, _DrawConfig) and self._key == other._key


def _draw(cfg, h, J, beta, mask, key, scales=None):
    # one compiled program: called outside jit, a backend's sampling would otherwise run op by
    # op (hundreds of small compilations on first use)
    return _draw_compiled(_DrawConfig(cfg), h, J, beta, mask, key, scales)


@functools.partial(jax.jit, static_argnums=0)
def _draw_compiled(static, h, J, beta, mask, key, scales):
    return _draw_traced(static.cfg, h, J, beta, mask, key, scales)


def _draw_traced(cfg, h, J, beta, mask, key, scales):
    backend, num_samples, num_chains, options, _, causal = cfg
    h, J = _programmed(h, J, mask, scales)
    options = dict(options)
    B, N, T, S = h.shape
    if not (causal and backend.properties.get("exponential_cost") and S > 1):
        return _sample_models(backend, h, J[:, None], beta, mask, key, num_samples,
                              num_chains, options)
    # Causal rows: query t attends to keys k <= t only, so its model has min(t + 1, S)
    # variables. A backend whose cost grows like 2^n (enumeration, the state-vector anneal)
    # samples the query positions on smaller registers: sizes S, S - 1, S - 2, S - 4, S - 8, ...
    # (each position on the smallest that holds its keys; the keys past it are masked), about
    # sum_t 2^(t+1) instead of T 2^S amplitudes per head in a handful of calls. The draws have
    # the same distribution.
    sizes = _register_sizes(S)
    size_of = [min(b for b in sizes if b >= min(t + 1, S)) for t in range(T)]
    out = jnp.zeros((B, N, T, num_chains * num_samples, S), h.dtype)
    for i, k in enumerate(sorted(set(size_of), reverse=True)):
        ts = jnp.array([t for t in range(T) if size_of[t] == k], jnp.int32)
        s = _sample_models(backend, h[:, :, ts, :k], J[:, :k, :k][:, None], beta,
                           mask[:, :, ts, :k], jax.random.fold_in(key, i), num_samples,
                           num_chains, options)
        out = out.at[:, :, ts, :, :k].set(s)
    return out


def _register_sizes(S):
    """``S, S - 1, S - 2, S - 4, S - 8, ...`` (down to 1)."""
    sizes, d = [S], 1
    while S - d >= 1:
        sizes.append(S - d)
        d *= 2
    return sizes


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fdt_mean(cfg, h, J, beta, mask, key, scales):
    s = _draw(cfg, h, J, beta, mask, key, scales)
    return jnp.mean(_features(s, cfg[4]), axis=-2), s


def _fdt_fwd(cfg, h, J, beta, mask, key, scales):
    s = _draw(cfg, h, J, beta, mask, key, scales)
    return (jnp.mean(_features(s, cfg[4]), axis=-2), s), (h, J, beta, s)


def _fdt_bwd(cfg, res, cot):
    # d E[phi(s)] / d theta = Cov(phi(s), d(-beta E(s))/d theta): with f = g . phi(s),
    # dL/dh_k = beta Cov(f, s_k), dL/dJ_jk = beta Cov(f, s_j s_k) / 2 per matrix entry,
    # dL/dbeta = Cov(f, sum_j h_j s_j + sum_{j<k} J_jk s_j s_k). Same draws as the forward pass;
    # the 1/(M-1) covariance is unbiased for i.i.d. draws. The draws stand for the intended
    # model (beta, h, J) whatever the backend was programmed with (calibration scales), so
    # these are its gradients; the scales get none.
    g, _ = cot
    h, J, beta, s = res
    M = s.shape[-2]
    f = jnp.einsum("...ms,...s->...m", _features(s, cfg[4]), g)
    fc = (f - jnp.mean(f, axis=-1, keepdims=True)) / (M - 1)
    dh = beta * jnp.einsum("...m,...ms->...s", fc, s)
    fs = fc[..., None] * s  # (B, N, T, M, S)
    dJ = 0.5 * beta * jnp.einsum("bntmj,bntmk->njk", fs, s)
    neg_energy = jnp.einsum("...ms,...s->...m", s, h) + 0.5 * jnp.einsum(
        "bntmj,njk,bntmk->bntm", s, J, s)
    dbeta = jnp.sum(fc * neg_energy).astype(jnp.result_type(beta))
    dbeta = jnp.broadcast_to(dbeta, jnp.shape(beta))
    # inside shard_map, inputs shared by every shard get the sum of their gradients
    dh, dJ, dbeta = _vma.sum_like((dh, dJ, dbeta), (h, J, beta))
    return dh, dJ, dbeta, None, None, None


_fdt_mean.defvjp(_fdt_fwd, _fdt_bwd)


@dataclasses.dataclass(frozen=True)
class Sampled:
    """Statistics from ``num_chains * num_samples`` draws of a sampler backend (any
    :class:`isingattn.samplers.Sampler`), with fluctuation-dissipation gradients.

    The readout's expectation ``E[phi(s)]`` (``phi(s) = s`` for the marginal readout,
    ``s / max(1, sum_j s_j)`` for the sample readout) is estimated by the sample mean; its
    gradients come from a ``custom_vjp`` that reuses the forward draws:
    ``dL/dh_k = beta Cov(g.phi(s), s_k)``, ``dL/dJ_jk = beta Cov(g.phi(s), s_j s_k)``, so the
    sampler itself need not be differentiable. Needs a PRNG key (``rng=`` of the layer) and at
    least two draws per query. Under ``jit`` pure-JAX backends are traced into the program (the
    diabatic simulator included: all queries of the call in one compiled program), host backends
    (dwave-samplers, dimod, the QPU) are called back (``jax.pure_callback``); a QPU receives the
    queries' models side by side on its graph, as many per call as fit
    (:mod:`isingattn.samplers._qpu_tiled`). With ``is_causal`` a backend whose cost grows
    like ``2^n`` (``properties["exponential_cost"]``: exact, diabatic) samples each query
    position on a register of its ``t + 1`` allowed keys.

    ``calibration``: a :class:`~isingattn.attention.Calibration`: the backend is programmed with
    SPIN fields and couplings rescaled by ``scales`` ``(N, 2)`` = ``(c_h, c_J)`` per head
    (:meth:`with_scales`; a :class:`~isingattn.attention.BoltzmannMultiHeadAttention` keeps them
    in its state), so that a sampler that sees fields at ``beta_h`` and couplings at ``beta_J``
    (a short anneal: ``beta_J ~ 2 beta_h``) draws from the intended Boltzmann distribution.
    The gradients are those of the intended model. See docs/guide/annealer-training.md.

    A row whose fields, couplings or ``beta`` hold a NaN gives NaN statistics (the sampler's
    draws of a NaN model are meaningless), as the other methods do.

    Diagnostics (``AttentionInfo.extra``): ``draws`` ``(B, N, T, M, S)`` and ``empty_rows``
    ``(B, N, T)``, True where no draw attended any key (those rows' weights are 0: likely at
    strongly negative chemical potentials, where ``sampled`` needs more draws or ``exact`` /
    ``transfer`` give the softmax limit).
    """

    backend: Any
    num_samples: int = 64
    num_chains: int = 1
    options: tuple = ()
    calibration: Any = None
    scales: Any = dataclasses.field(default=None, compare=False, repr=False)

    name = "sampled"
    stochastic = True

    def __post_init__(self):
        from ..samplers import Sampler

        if not isinstance(self.backend, Sampler):
            raise TypeError(
                "sampled(backend, ...) needs a sampler instance from isingattn.samplers, e.g. "
                f"ExactSampler(); got {self.backend!r}"
            )
        check_positive_int("num_samples", self.num_samples)
        check_positive_int("num_chains", self.num_chains)
        if self.num_samples * self.num_chains < 2:
            raise ValueError(
                "sampled needs num_samples * num_chains >= 2 draws per query (covariances for "
                f"the gradients); got {self.num_samples * self.num_chains}"
            )
        if self.calibration is not None:
            from ._calibration import Calibration

            if not isinstance(self.calibration, Calibration):
                raise TypeError(f"calibration must be a Calibration or None; got "
                                f"{self.calibration!r}")

    def __hash__(self):
        return hash((id(self.backend), self.num_samples, self.num_chains, self.options,
                     self.calibration))

    def __eq__(self, other):
        return (isinstance(other, Sampled) and other.backend is self.backend
                and (other.num_samples, other.num_chains, other.options, other.calibration)
                == (self.num_samples, self.num_chains, self.options, self.calibration))

    def with_scales(self, scales) -> Sampled:
        """The same method programming the backend with calibration ``scales`` ``(N, 2)``
        (``(c_h, c_J)`` per head; may be traced)."""
        return dataclasses.replace(self, scales=scales)

    def draw(self, h, mask, couplings_matrix, beta, key, num_samples, *, scales=None):
        """Draws ``(B, N, T, num_samples, S)`` of the intended BINARY models (fields ``h``
        ``(B, N, T, S)``, couplings ``(N, S, S)``) from the backend programmed with ``scales``:
        what the layer's forward pass uses, for measuring the backend (calibration probes)."""
        cfg = (self.backend, num_samples, 1, self.options, "marginal", False)
        return _draw(cfg, h, couplings_matrix, jnp.asarray(beta, h.dtype), mask, key, scales)

    def __call__(self, h, mask, couplings, beta, *, key=None, feature="marginal", causal=False,
                 log_partition=False, coupling_grad=True):
        if key is None:
            raise ValueError(
                "method=sampled(...) is stochastic and needs a PRNG key: pass rng=jax.random.key(...)"
            )
        _B, N, _T, S = h.shape
        if couplings is None or couplings.is_zero:
            J = jnp.zeros((N, S, S), h.dtype)
        else:
            J = jnp.broadcast_to(couplings.matrix(S, h.dtype), (N, S, S))
        mask = jnp.broadcast_to(mask, h.shape)
        beta = jnp.asarray(beta, h.dtype)
        from ._calibration import record_problem

        record_problem(self, h, mask, J, beta)
        scales = self.scales
        if scales is not None:
            scales = jax.lax.stop_gradient(jnp.broadcast_to(jnp.asarray(scales, h.dtype),
                                                            (N, 2)))
        cfg = (self.backend, self.num_samples, self.num_chains, self.options, feature,
               bool(causal))
        mean, s = _fdt_mean(cfg, h, J, beta, mask, key, scales)
        marg = jnp.mean(jax.lax.stop_gradient(s), axis=-2) if feature != "marginal" else mean
        # a NaN in a row's model (a NaN query, key, coupling or beta) makes the row NaN, as in
        # the other methods: the draws of a NaN model are meaningless, not zeros
        bad = (jnp.isnan(jnp.sum(jnp.where(mask, h, 0.0), axis=-1, keepdims=True))
               | jnp.isnan(jnp.sum(J, axis=(-2, -1)))[None, :, None, None] | jnp.isnan(beta))
        mean = jnp.where(bad, jnp.nan, mean)
        marg = jnp.where(bad, jnp.nan, marg)
        s = jax.lax.stop_gradient(s)
        # rows where no draw attended any key: their weights are 0 (all-masked rows included)
        return Inference(mean, mean, marg, None, {"draws": s, "empty_rows": ~jnp.any(s > 0, (-2, -1))})


def sampled(backend, num_samples: int = 64, *, num_chains: int = 1, calibration=None,
            **options) -> Sampled:
    """``method=sampled(ExactSampler(), 256)``: statistics from a sampler backend (see
    :class:`Sampled`); ``options`` are passed to ``backend.sample``; ``calibration``: a
    :class:`~isingattn.attention.Calibration` (or its mode, ``"formula"`` / ``"measured"``)."""
    if isinstance(calibration, str):
        from ._calibration import Calibration

        calibration = Calibration(calibration)
    return Sampled(backend, num_samples, num_chains, tuple(sorted(options.items())),
                   calibration)
