"""``isingattn compare`` and ``isingattn demo`` write the table and plots; results are written
after each sampler, so an interrupted run keeps the finished rows."""

import csv
import io
import json

import pytest

from isingattn.cli import main
from isingattn.samplers import BACKENDS, ExactSampler

PLOTS = ["energy_histograms.png", "beta_eff.png", "distance_vs_samples.png",
         "autocorrelation.png"]


def test_compare_writes_table_and_plots(tmp_path, capsys):
    rc = main(["compare", "chain:n=6,beta=0.5", "--samplers", "exact", "--num-samples", "200",
               "--num-chains", "2", "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "beta_eff" in out and "exact" in out
    rows = list(csv.DictReader(io.StringIO((tmp_path / "compare.csv").read_text())))
    assert [r["sampler"] for r in rows] == ["exact"]
    data = json.loads((tmp_path / "compare.json").read_text())
    assert data["rows"][0]["status"] == "ok"
    for p in PLOTS:
        assert (tmp_path / p).stat().st_size > 1000


class Interrupt(ExactSampler):
    def _sample(self, *a, **k):
        raise KeyboardInterrupt


def test_interrupted_compare_keeps_finished_rows(tmp_path, monkeypatch):
    monkeypatch.setitem(BACKENDS, "interrupt", Interrupt)
    with pytest.raises(KeyboardInterrupt):
        main(["compare", "chain:n=6,beta=0.5", "--samplers", "exact,interrupt",
              "--num-samples", "200", "--num-chains", "2", "--out", str(tmp_path)])
    rows = list(csv.DictReader(io.StringIO((tmp_path / "compare.csv").read_text())))
    assert [r["sampler"] for r in rows] == ["exact"]
    assert (tmp_path / "beta_eff.png").exists()


def test_compare_bad_sampler_name(tmp_path, capsys):
    assert main(["compare", "chain:n=6", "--samplers", "exact,nonsense",
                 "--out", str(tmp_path)]) == 2
    assert "unknown sampler(s) nonsense" in capsys.readouterr().err


def test_demo_writes_json_table_and_plots(tmp_path, capsys):
    rc = main(["demo", "--out", str(tmp_path), "--samplers", "exact", "--num-samples", "200",
               "--num-chains", "2", "--n", "6"])
    assert rc == 0
    data = json.loads((tmp_path / "demo.json").read_text())
    assert data["model"]["kind"] == "attention" and data["model"]["vartype"] == "BINARY"
    assert "exact" in data["backends"] and data["backends"]["exact"]["status"] == "ok"
    for p in PLOTS + ["compare.csv"]:
        assert (tmp_path / p).exists()
    assert "Boltzmann attention" in capsys.readouterr().out
