"""The documentation builds with warnings treated as errors (Sphinx -W)."""

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("sphinx-build") is None and not (
    pathlib.Path(sys.executable).parent / "sphinx-build").exists(), reason="sphinx not installed")
def test_docs_build_without_warnings(tmp_path):
    exe = pathlib.Path(sys.executable).parent / "sphinx-build"
    cmd = [str(exe) if exe.exists() else "sphinx-build", "-W", "--keep-going", "-q", "-b", "html",
           str(ROOT / "docs"), str(tmp_path / "html")]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
