"""Annealing schedules: constructors, the CSV table layout, and bad input."""

import numpy as np
import pytest

from isingattn.quantum import (
    AnnealingSchedule,
    as_schedule,
    dwave_like_schedule,
    example_schedule_csv,
    linear_schedule,
    load_schedule_csv,
    save_schedule_csv,
    schedule_from_table,
)


def test_linear_schedule_values():
    s = linear_schedule(2.0, 3.0)
    A, B = s(np.array([0.0, 0.25, 1.0]))
    np.testing.assert_allclose(A, [2.0, 1.5, 0.0])
    np.testing.assert_allclose(B, [0.0, 0.75, 3.0])


def test_dwave_like_shape():
    s = dwave_like_schedule()
    A, B = s(s.s)
    assert A[0] == pytest.approx(6.0) and A[-1] == 0.0
    assert B[0] == pytest.approx(0.2) and B[-1] == pytest.approx(11.0)
    assert np.all(np.diff(A) <= 0) and np.all(np.diff(B) >= 0)
    cross = s.s[np.argmax(B >= A)]
    assert 0.15 < cross < 0.45  # A and B cross early, as on D-Wave hardware


def test_csv_round_trip(tmp_path):
    path = example_schedule_csv(tmp_path / "example.csv", knots=101)
    s = load_schedule_csv(path)
    ref = dwave_like_schedule(knots=101)
    np.testing.assert_allclose(s.s, ref.s, rtol=1e-9)
    np.testing.assert_allclose(s.A, ref.A, rtol=1e-9)
    np.testing.assert_allclose(s.B, ref.B, rtol=1e-9)
    assert s.name == "example"
    assert as_schedule(str(path)).knots == 101


def test_csv_dwave_layout_with_extra_column(tmp_path):
    # D-Wave's per-solver tables: s, A(s) (GHz), B(s) (GHz), C (normalized)
    p = tmp_path / "solver.csv"
    p.write_text("s,A(s) (GHz),B(s) (GHz),C (normalized)\n0,5,0.1,0\n0.5,1,4,0.5\n1,0,9,1\n")
    s = load_schedule_csv(p)
    np.testing.assert_allclose(s(0.25), [3.0, 2.05])


def test_save_load(tmp_path):
    ref = linear_schedule(1.5, 2.5)
    save_schedule_csv(ref, tmp_path / "lin.csv")
    s = load_schedule_csv(tmp_path / "lin.csv")
    np.testing.assert_allclose(s.A, ref.A)
    np.testing.assert_allclose(s.B, ref.B)


@pytest.mark.parametrize(
    "s,A,B,match",
    [
        ([0, 0.6, 0.4, 1], [1, 1, 1, 0], [0, 1, 1, 1], "strictly increasing"),
        ([0, 0.5, 0.5, 1], [1, 1, 1, 0], [0, 1, 1, 1], "strictly increasing"),
        ([0, 0.5, 1.2], [1, 1, 0], [0, 1, 1], r"in \[0, 1\]"),
        ([-0.1, 0.5, 1], [1, 1, 0], [0, 1, 1], r"in \[0, 1\]"),
        ([0.1, 0.5, 1], [1, 1, 0], [0, 1, 1], "from s = 0 to s = 1"),
        ([0, 0.5, 1], [1, -1, 0], [0, 1, 1], r"A\(s\) must be >= 0"),
        ([0, 0.5, 1], [1, 1, 0], [0, np.nan, 1], "B must be finite"),
        ([0, 1], [1, 1, 0], [0, 1], "equal lengths"),
    ],
)
def test_bad_tables(s, A, B, match):
    with pytest.raises(ValueError, match=match):
        schedule_from_table(s, A, B)


def test_bad_csv(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("s,A,B\n0,1,0\n0.5,x,1\n1,0,1\n")
    with pytest.raises(ValueError, match="expected three numbers"):
        load_schedule_csv(p)
    p.write_text("s,A,B\n0,1,0\n0.7,1,1\n0.3,0,1\n1,0,1\n")
    with pytest.raises(ValueError, match="strictly increasing"):
        load_schedule_csv(p)


def test_bad_schedule_names():
    with pytest.raises(ValueError, match="schedule must be"):
        as_schedule("geometric")
    with pytest.raises(ValueError, match="A0 must be"):
        linear_schedule(-1.0, 1.0)
    assert isinstance(as_schedule("linear"), AnnealingSchedule)
