"""compare_samplers: a correct sampler sits at the perfect-sampler TV floor and at the true beta;
a sampler at the wrong temperature is caught (beta_eff, chi^2, moment errors); a sampler that
does not apply is recorded as skipped; tables round-trip through CSV/JSON; plots are written.

False-failure rate: the beta_eff z-tests use Z_ALPHA (ALPHA = 1e-4 each)."""

import csv
import io
import math

import jax
import numpy as np
import pytest

from isingattn import diagnostics as dg
from isingattn.models import random_dense
from isingattn.samplers import ExactSampler, Sampler
from tests._stats import Z_ALPHA


class HotSampler(Sampler):
    """Exact draws at half the model's beta: a sampler with a known, wrong temperature."""

    def _sample(self, model, key, num_samples, num_chains):
        s = ExactSampler().sample(model.with_beta(model.beta * 0.5), key, num_samples,
                                  num_chains=num_chains)
        return s.spins, {"chain_break_fraction": 0.25}


class Unsupported(Sampler):
    def _sample(self, model, key, num_samples, num_chains):
        raise NotImplementedError("does not apply to dense models")


@pytest.fixture(scope="module")
def table():
    model = random_dense(jax.random.key(0), 6, J_scale=0.5, h_scale=0.4, beta=1.0)
    calls = []
    t = dg.compare_samplers(
        model, {"exact": ExactSampler(), "hot": HotSampler(), "nope": Unsupported()},
        key=jax.random.key(1), num_samples=500, num_chains=4,
        callback=lambda tab, row: calls.append((len(tab.rows), row["sampler"])))
    t.calls = calls
    return t


def test_rows_measure_quality(table):
    ex, hot = table.row("exact"), table.row("hot")
    assert table.calls == [(1, "exact"), (2, "hot"), (3, "nope")]
    assert ex["status"] == "ok" and hot["status"] == "ok"
    assert table.row("nope")["status"].startswith("skipped: NotImplementedError")
    assert abs(ex["beta_eff"] - 1.0) < Z_ALPHA * ex["beta_eff_se"]
    assert abs(hot["beta_eff"] - 0.5) < Z_ALPHA * hot["beta_eff_se"]
    assert ex["beta_method"] == "ml"
    # a perfect sampler's TV is near the expected floor; the hot one is far above it
    assert ex["tv"] < 1.5 * ex["tv_iid"] and hot["tv"] > 2 * hot["tv_iid"]
    assert hot["chi2_p"] < 1e-6 < ex["chi2_p"]
    assert hot["marginal_max"] > ex["marginal_max"]
    assert hot["chain_break_fraction"] == 0.25 and math.isnan(ex["chain_break_fraction"])
    assert ex["rhat_max"] < 1.01 and ex["ess_per_s"] > 0 and ex["kl"] >= 0
    assert 0 < ex["tau_int_energy"] < 1.5


def test_table_round_trips(table, tmp_path):
    text = table.to_csv(tmp_path / "t.csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["sampler"] for r in rows] == ["exact", "hot", "nope"]
    assert float(rows[0]["beta_eff"]) == pytest.approx(table.row("exact")["beta_eff"])
    assert (tmp_path / "t.csv").read_text() == text
    table.to_json(tmp_path / "t.json")
    back = dg.ComparisonTable.from_json(tmp_path / "t.json")
    assert back.row("hot")["tv"] == pytest.approx(table.row("hot")["tv"])
    assert math.isnan(back.row("nope")["tv"])
    assert "exact" in table.format() and "skipped" in table.format()


def test_plots_written(table, tmp_path):
    paths = dg.plot_comparison(table, tmp_path)
    assert len(paths) == 4
    for p in paths:
        with open(p, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # the plots also work from a table read back from JSON (no samples kept)
    back = dg.ComparisonTable.from_json(table.to_json())
    assert len(dg.plot_comparison(back, tmp_path / "again")) == 4


def test_reference_samples_and_batches():
    model = random_dense(jax.random.key(2), 5, J_scale=0.5, h_scale=0.4, batch_shape=(2,))
    ref = ExactSampler().sample(model, jax.random.key(3), 500, num_chains=4)
    t = dg.compare_samplers(model, ["exact"], key=jax.random.key(4), num_samples=500,
                            num_chains=4, reference=ref)
    row = t.row("exact")
    assert row["batch_size"] == 2 and row["beta_method"] == "mple"
    x = np.asarray(t.samples["exact"].spins)
    tv = np.mean([dg.total_variation(dg.EmpiricalDistribution.from_states(x[b]),
                                     dg.EmpiricalDistribution.from_states(np.asarray(ref.spins)[b]))
                  for b in range(2)])
    assert row["tv"] == pytest.approx(tv)
    with pytest.raises(ValueError, match="reference"):
        dg.compare_samplers(model, ["exact"], key=jax.random.key(0), reference="magic")
    with pytest.raises(ValueError, match="unknown sampler"):
        dg.compare_samplers(model, ["no-such-backend"], key=jax.random.key(0),
                            raise_errors=True)
