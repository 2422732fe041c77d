"""The character-level language-model sweep's quick preset: every phase, the report, the resume."""

import json

from ._scripts import read_rows, run_script


def test_char_lm_quick_runs_every_phase_reports_and_resumes(tmp_path):
    out = tmp_path / "c"
    proc = run_script("char_lm.py", "--quick", "--out", out)
    rows = read_rows(out / "char_lm.csv")
    phases = [r["phase"] for r in rows]
    # quick preset: 3 variants x 1 tuning entry; contexts 8 and 12 (seed 0); one r = 3 point
    assert phases.count("tune") == 3 and phases.count("sweep") == 6 and phases.count("extra") == 1
    assert all(float(r["test_bpc"]) > 0 and int(r["test_characters"]) > 0 for r in rows)
    for name in ("summary.json", "summary.md", "bpc_vs_context.png", "differences_vs_context.png",
                 "learning_curves.png", "learned_couplings.png", "couplings.json", "curves.json",
                 "samples.json"):
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["differences"]) == {"banded-learned - softmax",
                                           "relative-learned - softmax"}
    assert set(summary["samples"]) == {"softmax", "banded-learned", "relative-learned"}
    sample = summary["samples"]["softmax"]
    assert sample["prompt"] == "the_" and sample["text"]
    assert "Paired differences" in proc.stdout and "Samples" in proc.stdout
    again = run_script("char_lm.py", "--quick", "--out", out)
    assert "points to run" not in again.stderr  # everything was in the table
    assert len(read_rows(out / "char_lm.csv")) == len(rows)
    assert json.loads((out / "samples.json").read_text()) == summary["samples"]
