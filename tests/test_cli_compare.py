"""``isingattn compare`` and ``isingattn demo`` write the table and plots; results are written
after each sampler, so an interrupted run keeps the finished rows, and a run into the same
folder resumes (finished samplers kept, settings checked); a sampler's error is exit status 1."""

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


def _samplers(path):
    return [(r["sampler"], r["status"]) for r in
            csv.DictReader(io.StringIO((path / "compare.csv").read_text()))]


class Broken(ExactSampler):
    def _sample(self, *a, **k):
        raise RuntimeError("the backend broke")


COMMON = ["chain:n=5,beta=0.5", "--num-samples", "50", "--num-chains", "2", "--no-plots"]


def test_compare_resumes_keeps_rows_and_checks_settings(tmp_path, capsys):
    out = str(tmp_path)
    assert main(["compare", *COMMON, "--samplers", "exact,gibbs", "--out", out]) == 0
    first = (tmp_path / "compare.csv").read_text().splitlines()
    # another run into the same folder: gibbs and exact kept (not run again), metropolis added
    assert main(["compare", *COMMON, "--samplers", "metropolis,exact", "--out", out]) == 0
    assert "keeping 2 finished sampler(s) (exact, gibbs); to run: metropolis" in \
        capsys.readouterr().out
    assert _samplers(tmp_path) == [("metropolis", "ok"), ("exact", "ok"), ("gibbs", "ok")]
    rows = (tmp_path / "compare.csv").read_text().splitlines()
    assert rows[2] == first[1] and rows[3] == first[2]  # the same numbers, kept
    # other settings: refused, nothing changed
    assert main(["compare", *COMMON[:2], "60", *COMMON[3:], "--samplers", "exact",
                 "--out", out]) == 2
    assert "num_samples: 50 there, 60 now" in capsys.readouterr().err
    assert (tmp_path / "compare.csv").read_text().splitlines() == rows
    # without its settings file a comparison is not resumed
    (tmp_path / "compare.settings.json").unlink()
    assert main(["compare", *COMMON, "--samplers", "exact", "--out", out]) == 2
    assert "without its settings file" in capsys.readouterr().err
    # --force starts over
    assert main(["compare", *COMMON, "--samplers", "exact", "--out", out, "--force"]) == 0
    assert _samplers(tmp_path) == [("exact", "ok")]


def test_compare_exits_1_when_a_sampler_errored(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(BACKENDS, "broken", Broken)
    out = str(tmp_path)
    assert main(["compare", *COMMON, "--samplers", "exact,broken", "--out", out]) == 1
    assert "1 sampler(s) ended in an error: broken" in capsys.readouterr().err
    assert _samplers(tmp_path)[1][1].startswith("error: RuntimeError: the backend broke")
    # the errored sampler is run again on resume; --allow-errors exits 0
    assert main(["compare", *COMMON, "--samplers", "exact,broken", "--out", out,
                 "--allow-errors"]) == 0
    assert "to run: broken" in capsys.readouterr().out
    # a backend that does not apply (Wolff with fields) is skipped, not an error
    assert main(["compare", "random:n=4", "--num-samples", "20", "--num-chains", "2",
                 "--no-plots", "--samplers", "wolff", "--out", str(tmp_path / "w")]) == 0


def test_compare_help_states_the_exit_status(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = capsys.readouterr().out
    assert "--allow-errors" in text and "1 when a sampler ended in an error" in text


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
