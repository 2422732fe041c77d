"""The isingattn command: exact, sample, errors (demo has its own test)."""

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
