"""Data-parallel training: on one device it is the plain run; a run interrupted on one device
and resumed by two JAX processes on this machine (``isingattn train --resume`` with
``jax.distributed`` on localhost, gloo collectives), each with one CPU device and half of every
batch, ends with the metrics of the uninterrupted one-device run (to float rounding of the
cross-process sums), and only process 0 writes. The processes run as subprocesses: the
distributed runtime must start before JAX computes anything."""

import csv
import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

from isingattn.cli import main
from isingattn.experiments import DataParallel, TrainConfig, initialize_distributed, train
from isingattn.experiments._train import check_parallel, resolve_parallel

# transfer: the compiled kernel partitioned over the processes' devices
TINY = {"task": "pair-copy", "length": 8, "attention": "learned", "structure": "banded",
        "layers": 1, "d_model": 16, "heads": 2, "batch": 8, "steps": 6, "eval_every": 2,
        "checkpoint_every": 2, "eval_examples": 16, "test_examples": 32, "warmup": 2}
CLI_ARGS = ["--task", "pair-copy", "--length", "8", "--attention", "learned", "--structure",
            "banded", "--layers", "1", "--d-model", "16", "--heads", "2", "--batch", "8",
            "--steps", "6", "--eval-every", "2", "--checkpoint-every", "2", "--eval-examples",
            "16", "--test-examples", "32", "--warmup", "2", "--quiet"]

CLI = "import sys; from isingattn.cli import main; sys.exit(main())"


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_two(commands, timeout=240):
    """Start both processes' commands, wait for both; their outputs if both succeed."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env) for c in commands]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            p.kill()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-3000:]
    return outs


def test_a_run_interrupted_on_one_device_resumed_by_two_processes_equals_one_device(tmp_path):
    run = str(tmp_path / "dp")

    def stop(step, row):
        if step == 4:  # after the evaluation at step 4: the checkpoint of step 2 is the newest
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(TrainConfig(**TINY), run, progress=False, callback=stop)
    port = free_port()
    outs = run_two([[sys.executable, "-c", CLI, "train", *CLI_ARGS, "--out", run, "--resume",
                     "--coordinator-address", f"localhost:{port}", "--num-processes", "2",
                     "--process-id", str(i)] for i in (0, 1)])
    assert "wrote" in outs[0] and "test:" not in outs[1]  # process 1 prints nothing of its own

    one = train(TrainConfig(**TINY), str(tmp_path / "one"), progress=False)
    two = json.loads(pathlib.Path(run, "final.json").read_text())
    for k in ("loss", "metric"):
        np.testing.assert_allclose(two["test"][k], one["test"][k], rtol=1e-5, err_msg=k)
    assert two["parameters"] == one["parameters"]
    a, b = rows(os.path.join(run, "metrics.csv")), rows(tmp_path / "one" / "metrics.csv")
    assert [(r["step"], r["split"]) for r in a] == [(r["step"], r["split"]) for r in b]
    np.testing.assert_allclose([float(r["loss"]) for r in a], [float(r["loss"]) for r in b],
                               rtol=1e-5)
    assert json.loads(pathlib.Path(run, "config.json").read_text())["config"] == \
        TrainConfig(**TINY).to_dict()


def test_one_device_data_parallel_is_the_plain_run(tmp_path):
    cfg = TrainConfig(**{**TINY, "steps": 4})
    plain = train(cfg, str(tmp_path / "a"), progress=False)
    dp = train(cfg, str(tmp_path / "b"), progress=False, data_parallel=True)
    assert dp["test"] == plain["test"]
    conf = json.loads((tmp_path / "b" / "config.json").read_text())
    assert conf["data_parallel"]["processes"] == 1 and "data_parallel" not in json.loads(
        (tmp_path / "a" / "config.json").read_text())


class _TwoDevices(DataParallel):
    num_devices = 2  # what a two-device mesh reports; the checks need nothing else


def test_configs_that_cannot_train_data_parallel_are_refused():
    two = _TwoDevices()
    with pytest.raises(ValueError, match=r"batch = 7 does not split over 2 devices.*multiple "
                                         r"of 2"):
        check_parallel(TrainConfig(**{**TINY, "batch": 7}), two)
    with pytest.raises(ValueError, match="'sampled:gibbs' cannot train data-parallel"):
        check_parallel(TrainConfig(**{**TINY, "length": 6, "method": "sampled:gibbs",
                                      "num_samples": 4}), two)
    check_parallel(TrainConfig(**TINY), two)
    with pytest.raises(TypeError, match="data_parallel must be None, True, False or a "
                                        "DataParallel; got 'yes'"):
        resolve_parallel("yes")
    assert resolve_parallel(None) is None and resolve_parallel(False) is None
    assert resolve_parallel(True).num_devices == 1 and resolve_parallel(two) is two


def test_distributed_arguments_are_checked_before_the_runtime_starts():
    with pytest.raises(ValueError, match="go together.*num_processes=None"):
        initialize_distributed("localhost:1234", None, 0)
    with pytest.raises(ValueError, match="coordinator_address must be 'host:port'; got "
                                         "'localhost'"):
        initialize_distributed("localhost", 2, 0)
    with pytest.raises(ValueError, match=r"process_id must be an integer in \[0, 2\); got 2"):
        initialize_distributed("localhost:1234", 2, 2)
    with pytest.raises(ValueError, match="num_processes must be an integer >= 1; got 0"):
        initialize_distributed("localhost:1234", 0, 0)



def test_cli_refuses_distributed_with_explicit_processes(capsys):
    assert main(["train", *CLI_ARGS, "--distributed", "--process-id", "0"]) == 2
    assert "--distributed detects the cluster; it excludes" in capsys.readouterr().err
