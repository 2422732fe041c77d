"""Training Boltzmann attention on sampler draws: fluctuation-dissipation gradients of every
sampled source against exact statistics, calibration, the QPU path offline, NaN propagation and
the errors a run must give before it starts.

Gradient checks: for each source, ``K`` independent keys give ``K`` estimates of the gradient of
``L = sum w * m`` (``m`` the layer's marginals; linear, so the estimator is unbiased) with
respect to the fields, the coupling parameters and beta. Each component's mean over the keys is
compared with the exact value by a t statistic (standard error from the spread over the keys);
the test fails when any ``|t|`` exceeds the Bonferroni quantile for a false-failure rate of
``ALPHA`` (1e-4) over all components. The exact value is what the source's draws should give:
autodiff through enumeration for Boltzmann samplers, and for the diabatic anneal (not a
Boltzmann sampler) the fluctuation-dissipation covariances under its exact output distribution,
with and without calibration.
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from isingattn.attention import Couplings, boltzmann_attention, sampled
from isingattn.attention._calibration import (
    Calibration,
    calibrate_model,
    fit_effective_betas,
    formula_scales,
    measure,
    updated_scales,
)
from isingattn.attention._exact import Exact
from isingattn.attention._sampled import _programmed
from isingattn.exact import probabilities
from isingattn.models import IsingModel
from isingattn.quantum import output_distribution
from isingattn.samplers import (
    DiabaticAnnealingSampler,
    ExactSampler,
    GibbsSampler,
    QPUConfigurationError,
    QPUSampler,
)

#: False-failure rate of each statistical check (as tests/_stats.py).
ALPHA = 1e-4
B, N, T = 2, 2, 5
S = T
K_KEYS = 32
BITS = ((np.arange(1 << S)[:, None] >> np.arange(S)) & 1).astype(np.float64)


def _with_params(c, params):
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(c), [params])


def _layer(seed=0, scale=1.0):
    """Fields ``(B, N, T, S)``, causal mask, banded learned couplings, beta, weights ``w``."""
    rng = np.random.default_rng(seed)
    h = jnp.asarray(rng.normal(size=(B, N, T, S)) * scale, jnp.float32)
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, S), bool)), (B, N, T, S))
    h = jnp.where(mask, h, 0.0)
    c = _with_params(Couplings.learned(N, "banded", bandwidth=2),
                     jnp.asarray([[0.8, -0.5], [0.4, 0.3]], jnp.float32) * scale)
    w = jnp.asarray(rng.normal(size=(B, N, T, S)), jnp.float32)
    return h, mask, c, jnp.float32(1.0), w


def _grads(method, h, mask, c, beta, w, key=None):
    def loss(h, c, beta):
        res = method(h, mask, c, beta, key=key, feature="marginal", causal=True)
        return jnp.sum(w * res.marginals)

    gh, gc, gb = jax.grad(loss, argnums=(0, 1, 2))(h, c, beta)
    return np.concatenate([np.asarray(gh)[np.asarray(mask)], np.asarray(gc.params).ravel(),
                           np.atleast_1d(np.asarray(gb))])


def _fdt_reference(q, h, mask, c, beta, w):
    """Expected fluctuation-dissipation gradient when the draws of every query follow ``q``
    ``(B, N, T, 2^S)`` (pattern ``k`` sets key ``i`` to bit ``i`` of ``k``)."""
    q = np.asarray(q, np.float64)
    h64, w64 = np.asarray(h, np.float64), np.asarray(w, np.float64)
    Jm = np.asarray(c.matrix(S, jnp.float32), np.float64)  # (N, S, S)
    f = np.einsum("ks,bnts->bntk", BITS, w64)
    fc = f - np.einsum("bntk,bntk->bnt", q, f)[..., None]
    qfc = q * fc
    dh = beta * np.einsum("bntk,ks->bnts", qfc, BITS)
    dJ = 0.5 * beta * np.einsum("bntk,ks,kr->nsr", qfc, BITS, BITS)
    neg_e = np.einsum("ks,bnts->bntk", BITS, h64) + 0.5 * np.einsum(
        "ks,nsr,kr->nk", BITS, Jm, BITS)[None, :, None]
    db = np.sum(qfc * neg_e)
    _, vjp = jax.vjp(lambda p: _with_params(c, p).matrix(S, jnp.float32), c.params)
    dparams = np.asarray(vjp(jnp.asarray(dJ, jnp.float32))[0])
    return np.concatenate([dh[np.asarray(mask)], dparams.ravel(), [db]])


def _boltzmann_table(h, mask, c, beta):
    Jm = np.asarray(c.matrix(S, jnp.float32))
    m = IsingModel(h=np.asarray(h), J=Jm[None, :, None], beta=float(beta), vartype="BINARY",
                   mask=np.asarray(mask))
    return np.asarray(probabilities(m), np.float64)


def _assert_unbiased(estimates, reference, *, label):
    est = np.asarray(estimates)
    K = est.shape[0]
    mean = est.mean(0)
    se = est.std(0, ddof=1) / np.sqrt(K)
    live = se > 1e-7 * max(1.0, np.abs(reference).max())
    t = (mean[live] - reference[live]) / se[live]
    C = int(live.sum())
    crit = scipy.stats.t.isf(ALPHA / (2 * C), K - 1)
    worst = int(np.argmax(np.abs(t)))
    assert np.all(np.abs(t) < crit), (
        f"{label}: |t| = {abs(t[worst]):.2f} > {crit:.2f} over {C} components (estimate "
        f"{mean[live][worst]:.4g} ± {se[live][worst]:.2g}, exact {reference[live][worst]:.4g})")
    # the check has power: the spread is small against the gradient itself
    assert np.median(se[live]) < 0.2 * np.median(np.abs(reference[live])) + 1e-3


def _estimates(method, layer, num_keys=K_KEYS):
    h, mask, c, beta, w = layer
    f = jax.jit(lambda key: _grads_arrays(method, h, mask, c, beta, w, key))
    return np.stack([np.concatenate([np.asarray(x).ravel() for x in f(jax.random.key(100 + i))])
                     for i in range(num_keys)])


def _grads_arrays(method, h, mask, c, beta, w, key):
    def loss(h, c, beta):
        res = method(h, mask, c, beta, key=key, feature="marginal", causal=True)
        return jnp.sum(w * res.marginals)

    gh, gc, gb = jax.grad(loss, argnums=(0, 1, 2))(h, c, beta)
    return gh[mask], gc.params.ravel(), jnp.atleast_1d(gb)


# --------------------------------------------------------------------------------------------
# gradients against exact statistics
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["exact", "gibbs"])
def test_boltzmann_sources_give_the_exact_gradient(source):
    layer = _layer()
    h, mask, c, beta, w = layer
    backend = ExactSampler() if source == "exact" else GibbsSampler()
    opts = {} if source == "exact" else {"num_burnin": 50, "thinning": 5}
    est = _estimates(sampled(backend, 128, **opts), layer)
    ref = _grads(Exact(), h, mask, c, beta, w)
    _assert_unbiased(est, ref, label=f"sampled:{source}")
    # with calibration (formula: scales 1 for Boltzmann samplers) nothing changes
    est = _estimates(sampled(backend, 128, calibration="formula", **opts).with_scales(
        jnp.ones((N, 2))), layer, 8)
    assert np.all(np.isfinite(est))


@pytest.mark.parametrize("calibrate", [False, True])
def test_diabatic_gradient_is_the_covariance_of_its_output(calibrate):
    """Uncalibrated and calibrated (formula scales), the diabatic source's gradient estimate is
    unbiased for the fluctuation-dissipation covariances under its own exact output
    distribution (the anneal of the programmed model); calibrated, that distribution is the
    intended one up to the short-anneal law's error."""
    layer = _layer(1, scale=0.5)
    h, mask, c, beta, w = layer
    backend = DiabaticAnnealingSampler("dwave_like", 1.0)
    method = sampled(backend, 128, calibration="formula" if calibrate else None)
    scales = None
    if calibrate:
        scales = jnp.tile(jnp.asarray(formula_scales(method, 1.0), jnp.float32), (N, 1))
        method = method.with_scales(scales)
    Jm = c.matrix(S, jnp.float32)
    hp, Jp = _programmed(h, Jm, mask, scales)
    prog = IsingModel(h=np.asarray(hp), J=np.asarray(Jp)[None, :, None], vartype="BINARY",
                      mask=np.asarray(mask))
    q = np.asarray(output_distribution(prog, "dwave_like", 1.0), np.float64)
    est = _estimates(method, layer)
    _assert_unbiased(est, _fdt_reference(q, h, mask, c, float(beta), w),
                     label=f"sampled:diabatic calibrate={calibrate}")
    # calibration moves the expected gradient toward the exact one of the intended model
    exact_grad = _grads(Exact(), h, mask, c, beta, w)
    err = np.abs(_fdt_reference(q, h, mask, c, float(beta), w) - exact_grad).max()
    if calibrate:
        q0 = np.asarray(output_distribution(IsingModel(
            h=np.asarray(h), J=np.asarray(Jm)[None, :, None], vartype="BINARY",
            mask=np.asarray(mask)), "dwave_like", 1.0), np.float64)
        err0 = np.abs(_fdt_reference(q0, h, mask, c, float(beta), w) - exact_grad).max()
        assert err < 0.5 * err0, (err, err0)


def test_qpu_offline_gradient_with_calibration():
    """The offline QPU (auto_scale off) draws near exp(-beta_qpu beta E); programmed with scales
    1 / beta_qpu it gives the exact gradient of the intended model. Its emulator (simulated
    annealing, 200 sweeps) is not exactly at equilibrium, so the check allows the t statistics
    a 4-sigma systematic margin on top of the Bonferroni quantile."""
    layer = _layer(2, scale=0.5)
    h, mask, c, beta, w = layer
    qpu = QPUSampler.offline(topology_shape=(3,), beta_qpu=2.0)
    method = sampled(qpu, 64, calibration="measured", auto_scale=False).with_scales(
        jnp.full((N, 2), 0.5))
    est = _estimates(method, layer, 16)
    ref = _grads(Exact(), h, mask, c, beta, w)
    mean, se = est.mean(0), est.std(0, ddof=1) / np.sqrt(est.shape[0])
    assert np.all(np.abs(mean - ref) < 4 * se + 0.05 * np.abs(ref).max()), (
        np.abs(mean - ref).max(), se.max())


# --------------------------------------------------------------------------------------------
# calibration
# --------------------------------------------------------------------------------------------


def _probe():
    rng = np.random.default_rng(3)
    h = rng.normal(size=(4, S)) * 0.3
    J = np.zeros((S, S))
    for d, v in ((1, 0.3), (2, -0.2)):
        for i in range(S - d):
            J[i, i + d] = J[i + d, i] = v
    return h, J


def _marginal_error(scales, t_a=1.0):
    h, J = _probe()
    mask = np.ones_like(h, bool)
    target = np.asarray(probabilities(IsingModel(h=h, J=J, vartype="BINARY"))) @ BITS
    hp, Jp = _programmed(jnp.asarray(h)[None, None], jnp.asarray(J)[None], jnp.asarray(mask)[
        None, None], None if scales is None else jnp.asarray(scales)[None])
    q = np.asarray(output_distribution(IsingModel(h=np.asarray(hp)[0, 0], J=np.asarray(Jp)[0],
                                                  vartype="BINARY"), "dwave_like", t_a))
    return np.abs(q @ BITS - target).max()


def test_formula_calibration_moves_the_anneal_toward_the_intended_marginals():
    method = sampled(DiabaticAnnealingSampler("dwave_like", 1.0), 64, calibration="formula")
    ch, cJ = formula_scales(method, 1.0)
    assert ch < 1 and cJ < ch  # beta_J > beta_h > 1 at this anneal time
    off, on = _marginal_error(None), _marginal_error([ch, cJ])
    assert on < 0.25 * off, (on, off)


def test_measured_calibration_moves_the_anneal_toward_the_intended_marginals():
    """Probe draws of the layer's own models, the maximum-likelihood (gamma_h, gamma_J) and
    two fixed-point rounds starting from scales 1."""
    h, J = _probe()
    method = sampled(DiabaticAnnealingSampler("dwave_like", 1.0), 64, calibration="measured")
    hh = jnp.asarray(h, jnp.float32)[:, None, None]  # (4, 1, 1, S): 4 probes, one head
    Jm = jnp.asarray(J, jnp.float32)[None]
    problem = {"method": method, "h": hh, "mask": jnp.ones(hh.shape, bool), "J": Jm,
               "beta": jnp.float32(1.0)}
    scales, previous = np.ones((1, 2)), None
    for r in range(3):
        fits = measure(problem, jax.random.key(r), scales=scales, probes=4, num_samples=4096)
        if r == 0:  # uncalibrated: the anneal is colder than beta = 1 at t_a = 1 ns
            assert fits[0]["gamma_h"] > 1.5 and fits[0]["gamma_J"] > 1.5
        new = updated_scales(scales, fits, 1.0, previous)
        previous, scales = (scales, fits), new
    off, on = _marginal_error(None), _marginal_error(scales[0])
    assert on < 0.5 * off, (on, off, scales)


def test_fit_recovers_separate_field_and_coupling_temperatures():
    h, J = _probe()
    P = h.shape[0]
    mask = np.ones((P, S), bool)
    from isingattn.attention._calibration import _spin_form

    hs, Js = _spin_form(h, np.broadcast_to(J, (P, S, S)), mask)
    # draw exactly from exp(0.7 h.z + 1.6 J-term) and fit
    Z = 2 * BITS - 1
    logw = 0.7 * Z @ hs.T + 1.6 * 0.5 * np.einsum("ks,pst,kt->kp", Z, Js, Z)
    p = np.exp(logw - logw.max(0))
    p /= p.sum(0)
    rng = np.random.default_rng(0)
    z = np.stack([Z[rng.choice(len(Z), 4000, p=p[:, i])] for i in range(P)])
    fit = fit_effective_betas(z, hs, Js, mask)
    assert abs(fit["gamma_h"] - 0.7) < 5 * fit["se_h"] and abs(fit["gamma_J"] - 1.6) < 5 * fit[
        "se_J"]
    assert fit["se_h"] < 0.1 and fit["se_J"] < 0.3
    # no couplings: gamma_J is not identifiable
    fit0 = fit_effective_betas(z, hs, 0 * Js, mask)
    assert np.isnan(fit0["gamma_J"]) and np.isfinite(fit0["gamma_h"])


def test_calibrate_model_updates_module_state_and_is_reproducible():
    from flax import nnx

    from isingattn.attention import CouplingSpec, TransformerLM

    def make():
        return TransformerLM(6, d_model=8, num_heads=2, num_layers=1, max_length=6,
                             attention={"couplings": CouplingSpec("fixed", "banded", bandwidth=2,
                                                                  values=np.full((2, 2), 0.5)),
                                        "method": sampled(DiabaticAnnealingSampler(
                                            "dwave_like", 1.0), 16, calibration=Calibration(
                                                "measured", probes=2, num_samples=256))},
                             rngs=nnx.Rngs(0))

    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 6, (3, 6)))
    runs = []
    for _ in range(2):
        lm = make()
        before = np.asarray(lm.blocks[0].attn.sampler_scales[...]).copy()
        recs = calibrate_model(lm, tokens, jax.random.key(7))
        after = np.asarray(lm.blocks[0].attn.sampler_scales[...])
        runs.append((recs, after))
        assert not np.allclose(before, after)
        state = nnx.state(lm)
        assert any("sampler_scales" in str(p) for p, _ in nnx.to_flat_state(state))
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    assert [r["gamma_h"] for r in runs[0][0]] == [r["gamma_h"] for r in runs[1][0]]


# --------------------------------------------------------------------------------------------
# the QPU path offline, NaN, errors
# --------------------------------------------------------------------------------------------


def test_qpu_layer_batches_queries_into_few_calls_and_caches_the_tiles():
    qpu = QPUSampler.offline(topology_shape=(3,))
    h, mask, c, beta, _w = _layer(4)
    method = sampled(qpu, 8)
    f = jax.jit(lambda h, key: method(h, mask, c, beta, key=key, causal=True).marginals)
    m = f(h, jax.random.key(0))
    assert m.shape == (B, N, T, S) and np.all(np.isfinite(np.asarray(m)))
    info = qpu.last_tiled_info
    models = B * N * T
    assert info["calls"] == -(-models // info["tiles"]) and info["calls"] < models
    assert not info["embedding"]["cached"]
    f(h + 0.1, jax.random.key(1))
    assert qpu.last_tiled_info["embedding"]["cached"]
    assert len(qpu.last_tiled_info["call_s"]) == qpu.last_tiled_info["calls"]
    # same key, same draws
    np.testing.assert_array_equal(np.asarray(f(h, jax.random.key(0))), np.asarray(m))


@pytest.mark.parametrize("source", ["exact", "gibbs", "diabatic", "qpu_offline"])
def test_a_nan_query_gives_nan_not_zeros(source):
    backend = {"exact": ExactSampler, "gibbs": GibbsSampler,
               "diabatic": DiabaticAnnealingSampler,
               "qpu_offline": lambda: QPUSampler.offline(topology_shape=(3,))}[source]()
    q = jax.random.normal(jax.random.key(0), (2, 4, 2, 8))
    k = jax.random.normal(jax.random.key(1), (2, 4, 2, 8))
    q = q.at[0, 2, 1].set(jnp.nan)
    out = boltzmann_attention(q, k, k, is_causal=True, method=sampled(backend, 8),
                              couplings=Couplings.fixed(jnp.full((2, 1), 0.5), "banded"),
                              rng=jax.random.key(2))
    out = np.asarray(out)
    assert np.all(np.isnan(out[0, 2, 1]))
    ok = np.ones(out.shape[:3], bool)
    ok[0, 2, 1] = False
    assert np.all(np.isfinite(out[ok]))


def test_traced_anneal_draws_the_host_anneal_distribution():
    rng = np.random.default_rng(1)
    n = 5
    h = rng.normal(size=(3, n))
    J = rng.normal(size=(n, n))
    J = (J + J.T) / 2
    np.fill_diagonal(J, 0)
    mask = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 1, 1], [1, 0, 0, 0, 1]], bool)
    m = IsingModel(h=h, J=J, vartype="BINARY", mask=mask)
    s = DiabaticAnnealingSampler("dwave_like", 0.3)
    p = np.asarray(output_distribution(m, "dwave_like", 0.3))
    x = np.asarray(jax.jit(lambda m, k: s.sample(m, k, 20000).spins)(m, jax.random.key(0)))
    idx = (x[:, 0].astype(int) << np.arange(n)).sum(-1)
    for b in range(3):
        counts = np.bincount(idx[b], minlength=2**n)
        expected = counts.sum() * p[b]
        keep = expected >= 5  # pool the thin bins
        obs = np.append(counts[keep], counts[~keep].sum())
        exp = np.append(expected[keep], expected[~keep].sum())
        obs, exp = (obs, exp) if exp[-1] >= 5 else (obs[:-1], exp[:-1])
        stat = np.sum((obs - exp) ** 2 / exp)
        assert scipy.stats.chi2.sf(stat, len(exp) - 1) > ALPHA / 3


def _cfg(**kw):
    from isingattn.experiments import TrainConfig

    base = {"task": "pair-copy", "length": 8, "attention": "learned", "structure": "banded",
            "bandwidth": 2, "layers": 1, "d_model": 8, "heads": 1, "steps": 2, "batch": 4,
            "eval_every": 2, "eval_examples": 4, "test_examples": 4}
    base.update(kw)
    return TrainConfig(**base)


def test_config_errors_before_training():
    with pytest.raises(ValueError, match="at most 22 keys per query"):
        _cfg(length=23, method="sampled:diabatic")
    with pytest.raises(TypeError, match="takes no option.*anneal_time.*annealing_time"):
        _cfg(method="sampled:diabatic", backend_options={"anneal_time": 0.2})
    with pytest.raises(ValueError, match="no formula"):
        _cfg(method="sampled:qpu_offline", calibrate="formula")
    with pytest.raises(ValueError, match="length <= 16"):
        _cfg(length=18, method="sampled:gibbs", calibrate="measured")
    with pytest.raises(ValueError, match="calibrate must be"):
        _cfg(method="sampled:gibbs", calibrate="auto")
    # constructor and sample options are routed; bad values fail when the backend is built
    from isingattn.experiments._config import backend_option_routes, build_method

    init, rest = backend_option_routes("qpu_offline", {"topology_shape": [3], "auto_scale": False})
    assert init == {"topology_shape": [3]} and rest == {"auto_scale": False}
    # MCMC backends list their sample options in a property (burn-in, thinning)
    init, rest = backend_option_routes("gibbs", {"num_burnin": 50, "thinning": 2})
    assert init == {} and rest == {"num_burnin": 50, "thinning": 2}
    with pytest.raises(TypeError, match="sample options: .*num_burnin"):
        backend_option_routes("gibbs", {"burnin": 50})
    with pytest.raises(ValueError, match="annealing_time"):
        build_method(_cfg(method="sampled:diabatic", backend_options={"annealing_time": -1}))


def test_qpu_without_token_fails_fast_before_any_step(tmp_path, monkeypatch):
    from isingattn.experiments import train

    for k in list(os.environ):
        if k.startswith("DWAVE_"):
            monkeypatch.delenv(k)
    empty = tmp_path / "dwave.conf"
    empty.write_text("")
    monkeypatch.setenv("DWAVE_CONFIG_FILE", str(empty))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    config = _cfg(method="sampled:qpu")
    t0 = time.perf_counter()
    with pytest.raises(QPUConfigurationError, match="no D-Wave API token"):
        train(config, str(tmp_path / "run"), progress=False)
    assert time.perf_counter() - t0 < 1.0
    assert not (tmp_path / "run").exists()


def test_cli_backend_options_and_errors(tmp_path):
    from isingattn.cli._train import parse_backend_options

    assert parse_backend_options(["annealing_time=0.2", "schedule=dwave_like", "x=[6]",
                                  "flag=true"]) == {"annealing_time": 0.2,
                                                    "schedule": "dwave_like", "x": [6],
                                                    "flag": True}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_backend_options(["annealing_time"])
    from isingattn.cli import main

    rc = main(["train", "--task", "pair-copy", "--length", "8", "--method", "sampled:diabatic",
               "--backend-opt", "anneal_time=0.2", "--out", str(tmp_path / "r"), "--quiet"])
    assert rc == 2 and not (tmp_path / "r").exists()


def test_calibrated_run_resumes_with_the_same_numbers(tmp_path):
    """A run with measured calibration every 2 steps, interrupted after its checkpoint at
    step 2 and resumed, writes the same calibration.csv and metrics as an uninterrupted run."""
    from isingattn.experiments import train

    config = _cfg(method="sampled:exact", num_samples=8, steps=4, checkpoint_every=2,
                  eval_every=2, calibrate="measured", calibrate_every=2, calibrate_probes=2,
                  calibrate_samples=64)
    a = tmp_path / "a"
    final = train(config, str(a), progress=False)
    assert final["attention"][0]["sampler_scales"] is not None
    b = tmp_path / "b"

    def stop(step, row):
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(config, str(b), progress=False, callback=stop)
    train(config, str(b), progress=False, resume=True)
    for name in ("calibration.csv", "metrics.csv"):
        ra = [line.rsplit(",", 1)[0] for line in (a / name).read_text().splitlines()]
        rb = [line.rsplit(",", 1)[0] for line in (b / name).read_text().splitlines()]
        if name == "metrics.csv":
            ra, rb = (a / name).read_text(), (b / name).read_text()
        assert ra == rb, name
    import json

    cal = json.loads((a / "config.json").read_text())["calibration"]
    assert cal["calibrate"] == "measured" and cal["formula_scales"] == [1.0, 1.0]


def test_updated_scales_follow_the_measured_response_and_stop_at_saturation():
    fit = {"head": 0, "gamma_h": 0.5, "gamma_J": 2.0, "se_h": 0.01, "se_J": 0.01}
    # first round: gamma proportional to c (k = 1): c_h doubles, c_J halves
    c = updated_scales(np.ones((1, 2)), [fit], 1.0)
    np.testing.assert_allclose(c, [[2.0, 0.5]])
    # second round: gamma_h responded with slope 0.5 (0.5 -> 0.5 * 2^0.5); the step divides the
    # remaining log-distance by that slope
    g = 0.5 * 2 ** 0.5
    fit2 = {"head": 0, "gamma_h": g, "gamma_J": 1.0, "se_h": 0.01, "se_J": 0.01}
    c2 = updated_scales(c, [fit2], 1.0, (np.ones((1, 2)), [fit]))
    np.testing.assert_allclose(c2[0, 0], 2.0 * np.exp(-np.log(g) / 0.5))
    np.testing.assert_allclose(c2[0, 1], 0.5)  # gamma_J = beta: no change
    # saturation (a short anneal's fields): gamma_h barely moved when c_h grew 4x: kept
    fit3 = {"head": 0, "gamma_h": 0.52, "gamma_J": 2.0, "se_h": 0.01, "se_J": 0.01}
    c3 = updated_scales(np.array([[4.0, 1.0]]), [fit3], 1.0, (np.ones((1, 2)), [fit]))
    assert c3[0, 0] == 4.0 and c3[0, 1] == 0.5
    # past the peak (a 0.5 ns anneal whose fields grew so strong that it stays near |+>):
    # gamma_h fell when c_h grew 8x: back to the previous scale, whose gamma was nearer beta
    fit4 = {"head": 0, "gamma_h": 0.05, "gamma_J": 2.0, "se_h": 0.01, "se_J": 0.01}
    c4 = updated_scales(np.array([[8.0, 1.0]]), [fit4], 1.0, (np.ones((1, 2)), [fit]))
    assert c4[0, 0] == 1.0 and c4[0, 1] == 0.5
    # no response left at all (the fit's gamma_h at or below 0, standard error small): back too
    fit5 = {"head": 0, "gamma_h": -1e-5, "gamma_J": 2.0, "se_h": 1e-5, "se_J": 0.01}
    c5 = updated_scales(np.array([[8.0, 1.0]]), [fit5], 1.0, (np.ones((1, 2)), [fit]))
    assert c5[0, 0] == 1.0 and c5[0, 1] == 0.5
    # a component measured worse than 20% keeps its value
    bad = {"head": 0, "gamma_h": 0.5, "gamma_J": 2.0, "se_h": 0.2, "se_J": 0.01}
    np.testing.assert_allclose(updated_scales(np.ones((1, 2)), [bad], 1.0), [[1.0, 0.5]])
    # past the peak gamma is 0 within its noise: a round at or below 0 and then a small positive
    # one (1.3 standard errors) keep the scale, instead of raising it 8x on noise
    zero = {"head": 0, "gamma_h": -9e-5, "gamma_J": 1.0, "se_h": 1.1e-4, "se_J": 0.01}
    noise = {"head": 0, "gamma_h": 1.47e-4, "gamma_J": 1.0, "se_h": 1.1e-4, "se_J": 0.01}
    c6 = updated_scales(np.array([[69.0, 1.0]]), [zero], 1.0)
    np.testing.assert_array_equal(c6, [[69.0, 1.0]])
    np.testing.assert_array_equal(updated_scales(c6, [noise], 1.0, (c6, [zero])), [[69.0, 1.0]])
    # after a round that responded, a gamma within two standard errors of 0 (1.7 here) at the
    # scale it moved to is no response left: back to the previous scale
    moved = {"head": 0, "gamma_h": 0.0366, "gamma_J": 1.0, "se_h": 0.0023, "se_J": 0.01}
    faint = {"head": 0, "gamma_h": 0.00369, "gamma_J": 1.0, "se_h": 0.0022, "se_J": 0.01}
    np.testing.assert_array_equal(
        updated_scales(np.array([[802.0, 1.0]]), [faint], 1.0,
                       (np.array([[100.0, 1.0]]), [moved])), [[100.0, 1.0]])
    # two standard errors above 0 is a response: followed (by the largest factor here)
    clear = dict(noise, gamma_h=2.2e-4)
    np.testing.assert_allclose(updated_scales(c6, [clear], 1.0, (c6, [zero])), [[552.0, 1.0]])


def test_qpu_offline_run_records_its_calls(tmp_path):
    """A short sampled:qpu_offline run writes the QPU calls and the last call's record (tiles,
    embedding, per-call timing) into final.json."""
    from isingattn.experiments import train

    config = _cfg(method="sampled:qpu_offline", num_samples=4, steps=1, eval_every=1,
                  backend_options={"topology_shape": [3], "auto_scale": False})
    final = train(config, str(tmp_path / "q"), progress=False)
    qpu = final["qpu"]
    assert qpu["calls"] >= 1 and qpu["problems"] >= qpu["calls"]
    last = qpu["last"]
    assert last["tiles"] >= 1 and len(last["call_s"]) == last["calls"]
    assert last["embedding"]["qubits"] >= 1 and last["auto_scale"] is False
