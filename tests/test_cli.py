"""The isingattn command: exact, sample, errors (demo has its own test). Whatever a careless
user gives (folders for files, garbage files, missing credentials, an unreachable host, outputs
that exist or cannot be written) ends in one line on stderr and exit status 2, checked before
any work, with no stray temporary file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from isingattn import exact
from isingattn.cli import main
from isingattn.models import model_from_spec


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in ("demo", "exact", "sample"):
        assert cmd in out


def test_exact_writes_what_the_library_computes(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["exact", "lattice:L=3,beta=0.3,h=0.1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    mo = exact.moments(model_from_spec("lattice:L=3,beta=0.3,h=0.1"))
    assert data["log_partition"] == pytest.approx(float(mo.log_partition), rel=1e-6)
    np.testing.assert_allclose(data["marginals"], mo.marginals, atol=1e-6)
    assert data["mean_energy"] == pytest.approx(float(mo.mean_energy), rel=1e-6)
    assert "log Z" in capsys.readouterr().out


def test_sample_writes_npz(tmp_path):
    out = tmp_path / "s.npz"
    assert main(["sample", "chain:n=6,beta=0.5", "--num-samples", "20", "--num-chains", "2",
                 "--out", str(out)]) == 0
    with np.load(out) as f:
        assert f["spins"].shape == (2, 20, 6)
        assert f["energy"].shape == (2, 20)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["exact", "grid:L=3"], "unknown model 'grid'; valid: chain, lattice"),
        (["exact", "lattice:M=3"], "unknown parameter 'M' for model 'lattice'; valid: L"),
        (["exact", "chain:n=40"], "n <= 30"),
        (["exact", "nowhere/m.npz"], "does not exist"),
    ],
)
def test_bad_specs_exit_2_with_a_clear_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_unknown_sampler_is_rejected_by_argparse(capsys):
    with pytest.raises(SystemExit) as e:
        main(["sample", "chain:n=4", "--sampler", "nope"])
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def _tree(path):
    return sorted(p.name for p in path.iterdir())


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    (tmp_path / "garbage.npz").write_bytes(b"\x00garbage")
    (tmp_path / "json.npz").write_text('{"h": [0, 1], "J": [[0, 1], [1, 0]]}')
    (tmp_path / "broken.json").write_text('{"h": [0, 1], "J": [[0, 1], [1, 0]]')
    (tmp_path / "list.json").write_text("[1, 2]")
    np.save(tmp_path / "one.npy", np.zeros(3))
    (tmp_path / "one.npz").write_bytes((tmp_path / "one.npy").read_bytes())
    np.savez(tmp_path / "pickled.npz", h=np.array([None, 1.0], dtype=object), J=np.zeros((2, 2)))
    return tmp_path


@pytest.mark.parametrize(
    "argv, message",
    [
        (["exact", "adir"], "model file 'adir' is a directory; give PATH.json"),
        (["exact", "./adir"], "model file './adir' is a directory"),
        (["exact", "garbage.npz"], "'garbage.npz' is not an .npz archive; model files are PATH"),
        (["exact", "json.npz"], "'json.npz' is JSON text, not an .npz archive (rename it to json"),
        (["exact", "one.npz"], "'one.npz' is a single .npy array, not an .npz archive"),
        (["exact", "pickled.npz"], "holds pickled Python objects, which are never loaded"),
        (["exact", "broken.json"], "model file 'broken.json' is not valid JSON (Expecting"),
        (["exact", "list.json"], "model file 'list.json' must hold a JSON object"),
        (["exact", "chain:n=4", "--out", "adir"], "--out 'adir' is a folder; give a file name"),
        (["sample", "chain:n=4", "--out", "adir"], "file name inside it, e.g. adir/samples.npz"),
        (["exact", "chain:n=4", "--out", "afile"], "--out 'afile' exists; use --force"),
        (["sample", "chain:n=4", "--out", "afile"], "--out 'afile' exists; use --force"),
        (["compare", "chain:n=4", "--out", "afile"], "--out 'afile' is a file, not a folder"),
        (["demo", "--out", "afile"], "--out 'afile' is a file, not a folder"),
        # checked before any work: n = 40 would fail in the computation, the output first
        (["exact", "chain:n=40", "--out", "afile/r.json"], "cannot write --out 'afile/r.json'"),
        (["sample", "chain:n=40", "--out", "afile/s.npz"], "cannot write --out 'afile/s.npz'"),
        (["compare", "chain:n=40", "--out", "afile/c"], "cannot write into --out 'afile/c'"),
    ],
)
def test_user_errors_are_one_line_exit_2_and_leave_nothing(files, argv, message, capsys):
    before = _tree(files)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert _tree(files) == before  # no stray *.tmp, nothing half-written


@pytest.mark.parametrize(
    "argv, message",
    [
        (["demo", "--d", "0"], "argument --d: must be an integer >= 1; got 0"),
        (["compare", "chain:n=4", "--num-samples", "0"],
         "argument --num-samples: must be an integer >= 1; got 0"),
        (["sample", "chain:n=4", "--num-chains", "x"], "must be an integer >= 1; got 'x'"),
    ],
)
def test_bad_numbers_are_argparse_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_qpu_without_token_and_with_an_unreachable_host(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DWAVE_API_TOKEN", raising=False)
    monkeypatch.delenv("DWAVE_API_ENDPOINT", raising=False)
    conf = tmp_path / "dwave.conf"
    conf.write_text("[defaults]\n")
    monkeypatch.setenv("DWAVE_CONFIG_FILE", str(conf))
    argv = ["sample", "chain:n=4", "--sampler", "qpu", "--out", str(tmp_path / "q.npz")]
    assert main(argv) == 2
    assert "no D-Wave API token found" in capsys.readouterr().err
    # a bogus token for a host that refuses the connection (port 9, no retries: fast, offline)
    conf.write_text("[defaults]\ntoken = bogus\nendpoint = http://127.0.0.1:9/sapi/\n"
                    "http_retry_total = 0\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "could not reach the D-Wave API host 127.0.0.1:9: the connection was refused" in err
    assert err.count("\n") == 1 and not (tmp_path / "q.npz").exists()


def test_outputs_are_replaced_only_with_force(tmp_path, capsys):
    out = tmp_path / "r.json"
    out.write_text("earlier")
    assert main(["exact", "chain:n=4", "--out", str(out)]) == 2
    assert out.read_text() == "earlier"
    assert main(["exact", "chain:n=4", "--out", str(out), "--force"]) == 0
    assert json.loads(out.read_text())["n"] == 4
    s = tmp_path / "s.npz"
    assert main(["sample", "chain:n=4", "--num-samples", "3", "--out", str(s)]) == 0
    assert main(["sample", "chain:n=4", "--num-samples", "3", "--out", str(s)]) == 2
    assert main(["sample", "chain:n=4", "--num-samples", "5", "--out", str(s), "--force"]) == 0
    with np.load(s) as f:
        assert f["spins"].shape == (1, 5, 4)


def test_exact_on_a_batch_of_models(tmp_path, capsys):
    m = model_from_spec("random:n=4,seed=1")
    h = np.stack([np.asarray(m.h), -np.asarray(m.h), 0 * np.asarray(m.h)])
    path = tmp_path / "batch.npz"
    np.savez(path, h=h, J=np.asarray(m.J), beta=0.5)
    out = tmp_path / "r.json"
    assert main(["exact", str(path), "--out", str(out)]) == 0
    assert "log Z: 3 models, mean" in capsys.readouterr().out
    data = json.loads(out.read_text())
    batch = model_from_spec(str(path))
    assert data["batch_shape"] == [3]
    np.testing.assert_allclose(data["log_partition"], exact.log_partition(batch), rtol=1e-6)
    assert np.asarray(data["ground_state"]).shape == (3, 4)
    assert main(["exact", str(path), "--method", "transfer", "--out", str(out), "--force"]) == 0
    np.testing.assert_allclose(json.loads(out.read_text())["marginals"],
                               exact.marginals(batch), atol=1e-5)
