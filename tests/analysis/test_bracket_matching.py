"""The bracket-matching sweep's quick preset: every phase, the report, the resume."""

import json

from ._scripts import read_rows, run_script


def test_bracket_matching_quick_runs_every_phase_and_resumes(tmp_path):
    out = tmp_path / "b"
    proc = run_script("bracket_matching.py", "--quick", "--out", out)
    rows = read_rows(out / "bracket_matching.csv")
    phases = [r["phase"] for r in rows]
    # quick preset: 4 variants x 1 tuning entry; lengths 8 (seeds 0, 1) and 12 (seed 0);
    # one r = 3 point and one point without position embeddings
    assert phases.count("tune") == 4 and phases.count("sweep") == 12 and phases.count("extra") == 2
    assert {r["method"] for r in rows if r["structure"] == "relative"
            and r["attention"] != "softmax"} == {"mean_field"}
    gen = [json.loads(r["gen"]) for r in rows if r["positional"] == "none"]
    assert gen and set(gen[0]) == {"16"}
    for name in ("summary.json", "summary.md", "accuracy_vs_length.png",
                 "differences_vs_length.png", "learned_couplings.png", "couplings.json"):
        assert (out / name).exists(), name
    checks = read_rows(out / "inference_check.csv")  # relative-learned at L = 12 re-evaluated
    assert sorted(r["method"] for r in checks) == ["exact", "sampled:gibbs"]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["differences"]) >= {"banded-learned - softmax", "banded-learned - none"}
    assert "Paired differences" in proc.stdout
    again = run_script("bracket_matching.py", "--quick", "--out", out)
    assert "points to run" not in again.stderr  # everything was in the table
    assert len(read_rows(out / "bracket_matching.csv")) == len(rows)
