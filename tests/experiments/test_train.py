"""The training loop: run directories, exact resume, refusals, divergence, evaluation, CLI.

Models are tiny (one layer, width 16) so that each run costs about one compilation."""

import csv
import json
import os

import numpy as np
import pytest

from isingattn.cli import main
from isingattn.experiments import (
    RunDirectoryError,
    TrainConfig,
    TrainingDiverged,
    evaluate_run,
    load_run,
    train,
)

TINY = {"task": "bracket", "length": 16, "layers": 1, "d_model": 16, "heads": 2, "batch": 8,
        "steps": 12, "eval_every": 4, "eval_examples": 16, "test_examples": 16,
        "checkpoint_every": 4, "warmup": 2}


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_run_directory_and_an_interrupted_run_resumed_bit_for_bit(tmp_path):
    cfg = TrainConfig(attention="none", **TINY)
    full = train(cfg, str(tmp_path / "a"), progress=False)
    a = tmp_path / "a"
    assert sorted(os.listdir(a)) == ["checkpoints", "config.json", "final.json", "metrics.csv"]
    conf = json.loads((a / "config.json").read_text())
    assert conf["config"] == cfg.to_dict() and conf["task"]["name"] == "bracket"
    assert conf["parameters"] == full["parameters"] > 0 and "jax" in conf["versions"]
    m = rows(a / "metrics.csv")
    assert [(r["step"], r["split"]) for r in m] == [
        (str(s), sp) for s in (4, 8, 12) for sp in ("train", "valid")] + [("12", "test")]
    assert set(m[0]) >= {"step", "split", "loss", "metric", "seq_accuracy", "acc_d1-3"}
    assert sorted(os.listdir(a / "checkpoints")) == ["step_00000008.msgpack",
                                                     "step_00000012.msgpack"]
    assert full["steps_per_second"] > 0 and full["wall_seconds"] > 0
    assert full["test"]["metric"] == pytest.approx(float(m[-1]["metric"]), abs=1e-6)

    def stop(step, row):
        if step == 8:  # after the evaluation at step 8, before its checkpoint
            raise KeyboardInterrupt

    b = tmp_path / "b"
    with pytest.raises(KeyboardInterrupt):
        train(cfg, str(b), progress=False, callback=stop)
    assert not (b / "final.json").exists()
    with pytest.raises(RunDirectoryError, match="holds an unfinished run; use --resume"):
        train(cfg, str(b), progress=False)
    with pytest.raises(RunDirectoryError, match=r"another config \(lr: 0.001 there, 0.002 now\)"):
        train(cfg.replace(lr=2e-3), str(b), resume=True, progress=False)
    # a run made before a config field existed resumes (the field takes its default)
    conf_b = json.loads((b / "config.json").read_text())
    del conf_b["config"]["tie_embeddings"]
    (b / "config.json").write_text(json.dumps(conf_b))
    resumed = train(cfg, str(b), resume=True, progress=False)  # from step 4's checkpoint
    assert (b / "metrics.csv").read_text() == (a / "metrics.csv").read_text()  # bit for bit
    assert resumed["test"]["loss"] == full["test"]["loss"]
    assert train(cfg, str(b), resume=True, progress=False)["test"]["loss"] == resumed["test"]["loss"]
    with pytest.raises(RunDirectoryError, match="holds a finished run"):
        train(cfg, str(b), progress=False)

    # --force removes the run's own files only; a directory of other files is refused
    (b / "notes.txt").write_text("mine")
    train(cfg.replace(steps=4), str(b), force=True, progress=False)
    assert (b / "notes.txt").read_text() == "mine"
    c = tmp_path / "c"
    c.mkdir()
    (c / "data.csv").write_text("x")
    with pytest.raises(RunDirectoryError, match="not a training run"):
        train(cfg, str(c), progress=False)

    # evaluation of the checkpoint reproduces the test metrics; other lengths need positions
    ev = evaluate_run(str(a))
    assert ev["metrics"]["loss"] == pytest.approx(full["test"]["loss"], rel=1e-6)
    assert (a / "eval_test_L16.json").exists()
    with pytest.raises(ValueError, match="learned absolute positions for length 16"):
        load_run(str(a), length=32)


def test_learned_couplings_train_and_rope_models_evaluate_at_other_lengths(tmp_path):
    cfg = TrainConfig(attention="learned", structure="relative", positional="rope",
                      **{**TINY, "steps": 6})
    final = train(cfg, str(tmp_path / "r"), progress=False)
    (layer,) = final["attention"]
    w = np.asarray(layer["couplings"])
    assert w.shape == (2, 15) and np.any(w != 0)  # learned couplings moved from 0
    assert np.asarray(layer["chemical_potential"]).shape == (2,)
    ev = evaluate_run(str(tmp_path / "r"), length=48, num_examples=8)
    assert ev["length"] == 48 and 0 <= ev["metrics"]["metric"] <= 1


def test_a_non_finite_loss_stops_training_naming_step_and_parameters(tmp_path):
    cfg = TrainConfig(attention="softmax", **{**TINY, "lr": 1e30, "clip": 0.0, "warmup": 0})
    with pytest.raises(TrainingDiverged, match=r"training stopped at step \d+: .*(nan|inf)"
                                               r".*gradients of .*kernel.*checkpoint"):
        train(cfg, str(tmp_path / "d"), progress=False)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="attention must be one of"):
        TrainConfig(attention="sparse")
    with pytest.raises(ValueError, match="d_model .* divisible by heads"):
        TrainConfig(d_model=10, heads=4)
    with pytest.raises(ValueError, match="method='transfer' needs banded couplings"):
        TrainConfig(structure="relative", method="transfer")
    with pytest.raises(ValueError, match="task='file' needs data"):
        TrainConfig(task="file")
    with pytest.raises(ValueError, match="unknown config field"):
        TrainConfig.from_dict({"lenght": 3})


def test_cli_train_and_evaluate(tmp_path, capsys):
    out = str(tmp_path / "cli")
    args = ["train", "--task", "pair-copy", "--length", "8", "--attention", "none",
            "--layers", "1", "--d-model", "8", "--heads", "2", "--steps", "4",
            "--eval-every", "2", "--eval-examples", "8", "--test-examples", "8", "--batch", "4",
            "--out", out, "--quiet"]
    assert main(args) == 0
    assert "test: loss" in capsys.readouterr().out
    assert main(args) == 2
    assert "holds a finished run" in capsys.readouterr().err
    assert main(["evaluate", out, "--split", "valid"]) == 0
    assert "valid at length 8" in capsys.readouterr().out
    assert main(["evaluate", str(tmp_path)]) == 2
    assert "not a training run" in capsys.readouterr().err
    assert main(["train", "--length", "1", "--out", str(tmp_path / "x")]) == 2
    assert "length must be an integer >= 2" in capsys.readouterr().err
