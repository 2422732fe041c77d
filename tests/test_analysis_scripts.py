"""The analysis scripts run as a user runs them (a subprocess, tiny settings), and their result
tables are resumable: an interrupted run keeps its finished points, a re-run measures only the
missing ones, and resuming with other settings stops with a message naming them."""

import csv
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANALYSIS = os.path.join(ROOT, "analysis")


def run_script(name, *args, check=True):
    proc = subprocess.run([sys.executable, os.path.join(ANALYSIS, name), *map(str, args)],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture
def results_table(monkeypatch):
    monkeypatch.syspath_prepend(ANALYSIS)
    from _results import ResultsTable

    return ResultsTable


def test_results_table_appends_resumes_and_refuses_other_settings(tmp_path, results_table):
    path = str(tmp_path / "t.csv")
    key = lambda r: (r["a"],)
    parse = lambda r: {"a": int(r["a"]), "b": float(r["b"])}
    t = results_table(path, ["a", "b"], key, settings={"n": 3}, parse=parse)
    assert t.rows == [] and t.done == set()
    t.append({"a": 1, "b": 0.5})
    t.append([{"a": 2, "b": 1.5}, {"a": 2, "b": 2.5}])  # one point, two rows
    t2 = results_table(path, ["a", "b"], key, settings={"n": 3}, parse=parse)
    assert t2.rows == [{"a": 1, "b": 0.5}, {"a": 2, "b": 1.5}, {"a": 2, "b": 2.5}]
    assert t2.done == {(1,), (2,)}
    with pytest.raises(SystemExit, match=r"n: 3 there, 4 now"):
        results_table(path, ["a", "b"], key, settings={"n": 4}, parse=parse)
    with pytest.raises(SystemExit, match="columns"):
        results_table(path, ["a", "c"], key, settings={"n": 3})
    with open(path, "a") as f:  # a write cut short
        f.write("3,0.")
    t4 = results_table(path, ["a", "b"], key, settings={"n": 3}, parse=parse)
    assert t4.done == {(1,), (2,)}
    t4.append({"a": 3, "b": 0.25})
    assert read_rows(path)[-1] == {"a": "3", "b": "0.25"} and len(read_rows(path)) == 4
    t2.rewrite([{"a": 7, "b": 1.0}])
    assert read_rows(path) == [{"a": "7", "b": "1.0"}]
    assert results_table(path, ["a", "b"], key).rows == [{"a": "7", "b": "1.0"}]  # unchecked
    t3 = results_table(path, ["a", "b"], key, settings={"n": 4}, fresh=True)
    assert t3.rows == [] and not os.path.exists(path)


def test_a_point_written_by_another_process_is_not_written_twice(tmp_path, results_table,
                                                                  capsys):
    # two sweep processes on one table: the second finds the first one's point on disk
    path = str(tmp_path / "t.csv")
    key = lambda r: (r["a"],)
    parse = lambda r: {"a": int(r["a"]), "b": float(r["b"])}
    first = results_table(path, ["a", "b"], key, settings={"n": 3}, parse=parse)
    second = results_table(path, ["a", "b"], key, settings={"n": 3}, parse=parse)
    assert first.append({"a": 1, "b": 0.5}) is True
    assert second.done == set() and second.refresh().done == {(1,)}
    second = results_table(path, ["a", "b"], key, settings={"n": 3}, parse=parse)
    assert first.append([{"a": 2, "b": 1.5}, {"a": 2, "b": 2.5}]) is True
    assert second.append({"a": 2, "b": 9.0}) is False  # the same point, run again
    assert "point(s) [(2,)] already in the file" in capsys.readouterr().err
    assert second.rows == first.rows == [{"a": 1, "b": 0.5}, {"a": 2, "b": 1.5},
                                         {"a": 2, "b": 2.5}]
    assert second.append({"a": 3, "b": 0.25}) is True
    assert [r["a"] for r in read_rows(path)] == ["1", "2", "2", "3"]


@pytest.mark.parametrize("last", ["garbage,x\n", "3\n", "3,0.5,9\n", "\x00\x01\n"])
def test_malformed_last_line_is_dropped_with_a_message(tmp_path, results_table, capsys, last):
    path = str(tmp_path / "t.csv")
    key = lambda r: (r["a"],)
    parse = lambda r: {"a": int(r["a"]), "b": float(r["b"])}
    t = results_table(path, ["a", "b"], key, settings={"n": 3}, parse=parse)
    t.append([{"a": 1, "b": 0.5}, {"a": 2, "b": 1.5}])
    with open(path, "a") as f:  # a last line ended by a newline but not a row
        f.write(last)
    t2 = results_table(path, ["a", "b"], key, settings={"n": 3}, parse=parse)
    assert t2.rows == [{"a": 1, "b": 0.5}, {"a": 2, "b": 1.5}]
    err = capsys.readouterr().err
    assert f"{path}: dropped a malformed last line 4" in err
    assert len(read_rows(path)) == 2  # gone from the file too
    t2.append({"a": 3, "b": 2.5})
    assert len(results_table(path, ["a", "b"], key, settings={"n": 3}, parse=parse).rows) == 3


def test_malformed_line_before_the_last_names_file_and_line(tmp_path, results_table):
    path = tmp_path / "t.csv"
    path.write_text("a,b\r\n1,0.5\r\nnot,a number\r\n2,1.5\r\n")
    (tmp_path / "t.settings.json").write_text('{"n": 3}')
    parse = lambda r: {"a": int(r["a"]), "b": float(r["b"])}
    with pytest.raises(SystemExit, match=rf"{path}, line 3: cannot read its values"):
        results_table(str(path), ["a", "b"], lambda r: r["a"], settings={"n": 3}, parse=parse)
    path.write_text("a,b\r\n1\r\n2,1.5\r\n")
    with pytest.raises(SystemExit, match=r"line 2: 1 fields, expected 2"):
        results_table(str(path), ["a", "b"], lambda r: r["a"], settings={"n": 3}, parse=parse)


def test_rows_without_readable_settings_are_refused(tmp_path, results_table):
    path = str(tmp_path / "t.csv")
    settings_path = tmp_path / "t.settings.json"
    t = results_table(path, ["a"], lambda r: r["a"], settings={"n": 3})
    t.append({"a": 1})
    settings_path.unlink()  # deleted: old rows must not be adopted under new settings
    with pytest.raises(SystemExit, match=r"holds 1 row\(s\) but their settings file .* missing"):
        results_table(path, ["a"], lambda r: r["a"], settings={"n": 4})
    assert results_table(path, ["a"], lambda r: r["a"]).rows == [{"a": "1"}]  # reading: fine
    for text in ('{"n": 3', "[3]", "\xff\xfe"):
        settings_path.write_text(text, encoding="latin-1")
        with pytest.raises(SystemExit, match=r"t.settings.json"):
            results_table(path, ["a"], lambda r: r["a"], settings={"n": 3})
    t = results_table(path, ["a"], lambda r: r["a"], settings={"n": 3}, fresh=True)
    assert t.rows == [] and json.loads(settings_path.read_text()) == {"n": 3}


#: every script of analysis/ (the helpers' modules start with "_"), so that a new one is checked
SCRIPTS = sorted(name[:-3] for name in os.listdir(ANALYSIS)
                 if name.endswith(".py") and not name.startswith("_"))

_PARSERS = """
import argparse, importlib, json, sys
sys.path.insert(0, sys.argv[1])
class Got(Exception):
    pass
def capture(self, args=None, namespace=None):
    raise Got(self)
argparse.ArgumentParser.parse_args = capture
out = {}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name).main([])
    except Got as g:
        p = g.args[0]
        out[name] = {"description": p.description or "",
                     "options": {a.option_strings[-1] if a.option_strings else a.dest:
                                 a.help or "" for a in p._actions}}
print(json.dumps(out))
"""


def test_every_analysis_script_describes_every_option():
    # one process reads every script's parser (argparse's parse_args stopped before any work)
    proc = subprocess.run([sys.executable, "-c", _PARSERS, ANALYSIS, *SCRIPTS], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsers = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(parsers) == sorted(SCRIPTS)
    for name, p in parsers.items():
        assert p["description"].rstrip().endswith((".", "?", "!")), (name, p["description"])
        bare = [opt for opt, text in p["options"].items() if len(text.split()) < 3]
        assert not bare, f"{name}: options without a description: {bare}"


def test_train_cooperation_reports_the_last_step(tmp_path):
    out = tmp_path / "t"
    proc = run_script("train_cooperation.py", "--steps", 30, "--models", "none", "--out", out)
    assert [r["step"] for r in read_rows(out / "train_cooperation.csv")] == ["0", "25", "30"]
    assert "after the last step" in proc.stdout and "(step 30)" in proc.stdout
    bad = run_script("train_cooperation.py", "--steps", 0, "--out", out, check=False)
    assert bad.returncode == 2 and "--steps must be >= 1; got 0" in bad.stderr


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


def test_annealer_training_quick_resumes_from_its_table(tmp_path):
    """Quick preset: the exact reference and sampled:exact (M = 8) on pair-copy L = 6. A session
    stopped after one point (--max-points 1) is continued by the next, which runs only the
    missing point; every sampled run records its sampler's measured effective temperatures and
    is evaluated with exact inference too."""
    out = tmp_path / "a"
    first = run_script("annealer_training.py", "--quick", "--out", out, "--max-points", "1",
                       "--task", "pair-copy")
    assert "2 of 2 points to run on pair-copy" in first.stderr
    assert [r["source"] for r in read_rows(out / "annealer_training.csv")] == ["exact"]
    proc = run_script("annealer_training.py", "--quick", "--out", out)
    assert "1 of 2 points to run" in proc.stderr
    rows = read_rows(out / "annealer_training.csv")
    assert [r["source"] for r in rows] == ["exact", "sampled-exact"]
    sampled = rows[1]
    assert sampled["method"] == "sampled:exact" and int(sampled["num_samples"]) == 8
    # exact draws at beta = 1: the fitted field temperature is near 1 (64 draws x 2 probes)
    gamma_h = float(sampled["gamma_h_first"])
    assert 0.5 < gamma_h < 2.0, gamma_h
    for k in ("test_accuracy", "exact_test_accuracy", "seconds_per_step"):
        assert 0 <= float(sampled[k]) < float("inf"), k
    curves = json.loads((out / "curves.json").read_text())
    name = "pair-copy_L6_sampled-exact_M8_s0"
    assert curves[name]["calibration"] and curves[name]["metrics"]
    for f in ("summary.json", "summary.md", "gap_vs_samples.png", "learning_curves.png",
              "effective_temperatures.png"):
        assert (out / f).exists(), f
    assert "gap to exact" in proc.stdout
    again = run_script("annealer_training.py", "--quick", "--out", out)
    assert "points to run" not in again.stderr
    assert len(read_rows(out / "annealer_training.csv")) == 2
    # --fresh starts the sweep over: the table, the curves and the stopped runs go
    (out / "stopped.csv").write_text("task,source,num_samples,seed,last_step,valid_accuracy,"
                                     "reason\n")
    run_script("annealer_training.py", "--quick", "--out", out, "--fresh", "--report")
    assert not (out / "stopped.csv").exists() and not (out / "curves.json").exists()
    table = out / "annealer_training.csv"
    assert not table.exists() or read_rows(table) == []


@pytest.mark.parametrize("args, message", [
    (["--task", "bracket"], "--task 'bracket' is not a task of this sweep; valid: pair-copy"),
    (["--source", "gibbs"], ("--source 'gibbs' is not a source of this sweep; valid: exact, "
                             "sampled-exact")),
    (["--seed", "7"], "--seed 7 is not a seed of this sweep; valid: 0"),
    (["--max-points", "0"], "--max-points must be >= 1; got 0"),
])
def test_annealer_training_selections_name_the_valid_values(monkeypatch, capsys, tmp_path,
                                                            args, message):
    # checked before the table is opened: nothing is written
    monkeypatch.syspath_prepend(ANALYSIS)
    import annealer_training as at

    with pytest.raises(SystemExit) as exc:
        at.main(["--quick", "--out", str(tmp_path / "a"), *args])
    assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "a").exists()


def test_annealer_training_full_preset_runs_the_declared_points_comparison_first(monkeypatch):
    """The full preset's order (no training): the 126 declared points once each; the controls
    first; then, at the headline M, each annealer source complete over tasks and seeds before
    the next (the M-sweep sources first), so that a sweep spread over sessions decides one
    comparison before starting the next; the slow sources last."""
    monkeypatch.syspath_prepend(ANALYSIS)
    import annealer_training as at

    P = at.PRESETS["full"]
    pts = at.points(P)
    assert len(pts) == len({p.key for p in pts}) == 126
    sim = [at._simulated(p.source) for p in pts]
    first_sim = sim.index(True)
    assert all(sim[first_sim:]) and not any(sim[:first_sim])
    headline = [p for p in pts[first_sim:]
                if p.num_samples == P["num_samples"][0] and not at._slow(p.source, P)]
    assert pts[first_sim:first_sim + len(headline)] == headline
    names = [p.source.name for p in headline]
    blocks = [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]
    assert len(blocks) == len(set(blocks))  # each source one contiguous block
    per_block = len(P["tasks"]) * len(P["seeds"])
    assert all(names.count(n) == per_block for n in blocks)
    assert blocks[0] == next(n for n in P["m_sweep"] if n in blocks)
    slow = [at._slow(p.source, P) for p in pts]
    assert all(slow[-sum(slow):])


def test_annealer_training_goes_on_past_a_failing_point(monkeypatch, capsys, tmp_path):
    """A point that raises is left out and retried; one the QPU path refuses (trained fields
    beyond its range) is recorded in stopped.csv, listed by the report, and not run again."""
    monkeypatch.syspath_prepend(ANALYSIS)
    import annealer_training as at

    P = at.PRESETS["full"]  # measure is replaced: nothing is trained
    todo = at.points(P)[:3]
    refused = ("INTERNAL: CpuCallback error calling callback: Traceback\n  File x\n"
               "ValueError: with auto_scale=False the fields beta*h must lie in the QPU's "
               "h_range [-4.0, 4.0]; this model has [-4.055, 2.667] (dimod sign).")
    (tmp_path / "runs" / todo[1].name).mkdir(parents=True)
    (tmp_path / "runs" / todo[1].name / "metrics.csv").write_text(
        "step,split,loss,metric\n100,train,0.1,0.96\n100,valid,0.07,0.9787\n")

    class Table:
        done, rows = set(), []

        def refresh(self):
            return self

        def append(self, row, digits=None):
            self.rows.append(row)

    calls = []

    def measure(p, P, runs, curves_path):
        calls.append(p.name)
        if p is todo[0]:
            raise ValueError("INTERNAL: callback failed\nValueError: fields beyond h_range")
        if p is todo[1]:
            raise ValueError(refused)
        return {"test_accuracy": 0.5, "exact_test_accuracy": 0.5, "seconds_per_step": 0.1,
                "name": p.name}

    monkeypatch.setattr(at, "measure", measure)
    args = type("Args", (), {"task": None, "source": None, "seed": None, "max_points": None,
                             "out": str(tmp_path),
                             "runs": str(tmp_path / "runs")})()
    table = Table()
    failed = at.run_points(todo, table, P, args)
    assert failed == [todo[0].name]
    assert [r["name"] for r in table.rows] == [todo[2].name]
    err = capsys.readouterr().err
    assert f"{todo[0].name}: FAILED" in err and "fields beyond h_range" in err
    assert f"{todo[1].name}: STOPPED after step 100" in err
    stopped = at.read_stopped(str(tmp_path))
    assert list(stopped) == [todo[1].key]
    row = stopped[todo[1].key]
    assert row["last_step"] == "100" and float(row["valid_accuracy"]) == 0.9787
    assert row["reason"].startswith("with auto_scale=False the fields beta*h must lie")
    # on resume the stopped point is an outcome (not run again); the failed one is retried
    calls.clear()
    table.done = {todo[2].key}
    at.run_points(todo, table, P, args)
    assert calls == [todo[0].name]
    calls.clear()  # --source: only that source's points
    table.done, args.source = set(), [todo[2].source.name]
    at.run_points(todo, table, P, args)
    assert calls == [todo[2].name] and todo[2].source.name != todo[0].source.name
    calls.clear()  # --seed: only that seed's points (of that source here)
    args.seed = [todo[2].seed + 1]
    at.run_points(todo, table, P, args)
    assert calls == []
    args.seed = [todo[2].seed]
    at.run_points(todo, table, P, args)
    assert calls == [todo[2].name]
    text = at.markdown(at.summarize([], P, stopped.values()), P)
    assert "Stopped runs" in text and f"| {todo[1].source.name} | " in text
    assert "not competitive (a run stopped)" in text  # its cell, though no seed finished
    assert at.refusal(ValueError("J out of range")) is None


def test_annealer_training_verdict_is_the_declared_rule(monkeypatch):
    """Competitive: the paired gap's interval above -0.05; not competitive: below 0 (both can
    hold); otherwise not decided; fewer seeds than declared: pending; a stopped run: not
    competitive."""
    monkeypatch.syspath_prepend(ANALYSIS)
    import annealer_training as at

    from isingattn.experiments._stats import Interval, paired_difference

    assert at.verdict(Interval(-0.02, -0.04, 0.0, 3), 3) == "competitive"
    assert at.verdict(Interval(-0.02, -0.06, 0.02, 3), 3) == "not decided"
    assert at.verdict(Interval(-0.10, -0.15, -0.01, 3), 3) == "not competitive"
    assert at.verdict(Interval(-0.10, -0.15, -0.01, 2), 3) == "pending (2 of 3 seeds)"
    assert at.verdict(Interval(0.0, 0.0, 0.0, 3), 3, stopped=1) == "not competitive (a run stopped)"
    # from the seeds: gaps -0.01, -0.02, -0.03 (mean -0.02, t interval -0.02 +- 0.0248)
    gap = paired_difference({0: 0.97, 1: 0.96, 2: 0.95}, {0: 0.98, 1: 0.98, 2: 0.98})
    assert at.verdict(gap, 3) == "competitive"
    # both conditions hold: a loss under 5 points, significantly below 0
    assert at.verdict(Interval(-0.013, -0.025, -0.001, 3), 3) == "competitive (a loss: below 0)"
