"""The annealer-training sweep: the quick preset resumes from its table; the full preset's
declared points, selections, failures and verdict rule (without training)."""

import json

import pytest

from ._scripts import ANALYSIS, read_rows, run_script


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


def test_annealer_training_counts_saturated_scales_probed_again(monkeypatch):
    """A measurement whose first round moves a scale by the largest factor and whose second
    returns it is a re-probe; a scale in force that returns to its value of two measurements
    before is an alternation; one whose first round measured gamma <= 0 and whose second raised
    the scale by the largest factor is a rise on noise; sources without calibration and points not in the table are left
    out."""
    monkeypatch.syspath_prepend(ANALYSIS)
    import annealer_training as at

    P = at.PRESETS["full"]

    def records(rounds):  # per measurement: (c_h, new_c_h, gamma_h) of round 0 and of round 1
        return [{"step": str(25 * i), "round": str(k), "layer": "0", "head": "0",
                 "c_h": str(c), "new_c_h": str(new), "gamma_h": str(g), "c_J": "2",
                 "new_c_J": "2", "gamma_J": "nan"}
                for i, both in enumerate(rounds) for k, (c, new, g) in enumerate(both)]

    probe = ((1, 8, 0.01), (8, 1, 0.03))  # up 8x, measured, back
    curves = {
        "bracket_L8_diabatic-t0.5-cal_M64_s0": {"calibration": records(
            [probe, probe, ((1, 2, 0.5), (2, 2, 0.9))])},  # the last moves by 2: no re-probe
        "bracket_L8_diabatic-t0.5-cal_M64_s1": {"calibration": records(  # in force 1, 8, 1
            [((1, 8, 0.1), (8, 8, 0.1)), ((8, 1, 0.1), (1, 1, 0.1)),
             ((1, 1, 0.1), (1, 1, 0.1))])},
        "bracket_L8_diabatic-t0.5-cal_M64_s2": {"calibration": records(  # gamma <= 0, then up
            [((1, 1, -1e-4), (1, 8, 1e-4))])},
        "bracket_L8_diabatic-t0.5_M64_s0": {"calibration": records([probe])},  # uncalibrated
    }
    got = at.reprobes(curves, P)
    assert set(got) == {"bracket diabatic-t0.5-cal"}
    cell = got["bracket diabatic-t0.5-cal"]
    # measurements: 3, 3 and 1 per point and component
    assert (cell["reprobes"], cell["measurements"], cell["points"]) == (2, 14, 1)
    assert cell["alternations"] == 1 and cell["noise_rises"] == 1
    assert cell["gamma_h"] == 0.03 and cell["gamma_J"] != cell["gamma_J"]  # NaN: no c_J re-probe
    row = {"task": "bracket", "length": 8, "source": "diabatic-t0.5-cal",
           "method": "sampled:diabatic", "num_samples": 64, "seed": 1}
    assert at.reprobes(curves, P, [row])["bracket diabatic-t0.5-cal"]["reprobes"] == 0
    text = at.markdown({"tasks": {}, "reprobes": got}, P)
    assert "| bracket diabatic-t0.5-cal | 2 / 14 | 1 | 0.030 | – | 1 | 1 |" in text
