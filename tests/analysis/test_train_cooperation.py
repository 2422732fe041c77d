"""The cooperation-training script: the last step reported, only missing models trained."""

from ._scripts import read_rows, run_script


def test_train_cooperation_reports_the_last_step(tmp_path):
    out = tmp_path / "t"
    proc = run_script("train_cooperation.py", "--steps", 30, "--models", "none", "--out", out)
    assert [r["step"] for r in read_rows(out / "train_cooperation.csv")] == ["0", "25", "30"]
    assert "after the last step" in proc.stdout and "(step 30)" in proc.stdout
    bad = run_script("train_cooperation.py", "--steps", 0, "--out", out, check=False)
    assert bad.returncode == 2 and "--steps must be >= 1; got 0" in bad.stderr


def test_train_cooperation_script_trains_only_missing_models(tmp_path):
    out = tmp_path / "t"
    run_script("train_cooperation.py", "--steps", 2, "--models", "softmax", "--out", out)
    proc = run_script("train_cooperation.py", "--steps", 2, "--models", "softmax,learned",
                      "--out", out)
    assert "softmax: in" in proc.stdout and "learned:" in proc.stdout
    rows = read_rows(out / "train_cooperation.csv")
    # held-out evaluations at step 0 and after the last step
    assert [(r["model"], r["step"]) for r in rows] == [
        ("softmax", "0"), ("softmax", "2"), ("learned", "0"), ("learned", "2")]
    assert (out / "train_cooperation.png").exists()
    # redrawing reads the table whatever the settings, and leaves its settings alone
    settings = (out / "train_cooperation.settings.json").read_text()
    (out / "train_cooperation.png").unlink()
    run_script("train_cooperation.py", "--plot-only", "--out", out)
    assert (out / "train_cooperation.png").exists()
    assert (out / "train_cooperation.settings.json").read_text() == settings
    proc = run_script("train_cooperation.py", "--models", "bogus", "--out", out, check=False)
    assert proc.returncode != 0 and "bogus" in proc.stderr
