"""The physics scripts: the diabatic effective temperature, the 2D Ising phase diagram and
critical slowing down."""

from ._scripts import read_rows, run_script


def test_diabatic_script_resumes_an_interrupted_run(tmp_path):
    out = tmp_path / "d"
    args = ("--n", 3, "--points", 3, "--out", out)
    run_script("diabatic_effective_beta.py", *args)
    path = out / "diabatic_effective_beta.csv"
    full = path.read_text()
    rows = read_rows(path)
    assert len(rows) == 2 * 2 * 3  # schedules x models x anneal times
    assert (out / "diabatic_effective_beta.png").exists()
    # an interruption after five points: the re-run measures the seven others, the same values
    lines = full.splitlines(keepends=True)
    path.write_text("".join(lines[:6]))
    proc = run_script("diabatic_effective_beta.py", *args)
    assert "7/7" in proc.stderr  # progress bar: seven points to measure
    assert sorted(read_rows(path), key=str) == sorted(rows, key=str)
    proc = run_script("diabatic_effective_beta.py", "--n", 3, "--points", 4, "--out", out,
                      check=False)
    assert proc.returncode != 0 and "points: 3 there, 4 now" in proc.stderr


def test_ising2d_phase_script(tmp_path):
    out = tmp_path / "p"
    run_script("ising2d_phase.py", "--sizes", 4, 6, "--betas", 0.3, 0.44, "--samples", 40,
               "--chains", 2, "--burnin", 10, "--out", out)
    rows = read_rows(out / "ising2d_phase.csv")
    assert [(r["L"], r["beta"]) for r in rows] == [
        ("4", "0.3"), ("4", "0.44"), ("6", "0.3"), ("6", "0.44")]
    assert (out / "ising2d_phase.png").exists() and (out / "ising2d_phase.json").exists()


def test_critical_slowing_down_script_and_refit(tmp_path):
    out = tmp_path / "c"
    common = ("--sizes", 4, 6, "--chains", 4, "--chunk", 100, "--target", 200,
              "--min-tau-per-chain", 5, "--max-seconds", 3, "--out", out)
    run_script("critical_slowing_down.py", "--algorithms", "swendsen_wang", "wolff", *common)
    rows = read_rows(out / "critical_slowing_down.csv")
    assert len(rows) == 2 * 2 * 3  # algorithms x sizes x observables
    assert (out / "critical_slowing_down.png").exists()
    proc = run_script("critical_slowing_down.py", "--algorithms", "swendsen_wang", "wolff",
                      "--refit", *common)
    assert "z[swendsen_wang" in proc.stdout
    refit = read_rows(out / "critical_slowing_down.csv")
    assert [(r["algorithm"], r["L"], r["observable"], r["tau_sweeps"]) for r in refit] == [
        (r["algorithm"], r["L"], r["observable"], r["tau_sweeps"]) for r in rows]
