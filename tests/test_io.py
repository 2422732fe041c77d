"""Atomic writes and JSON conversion (isingattn._io), the one path every result file takes."""

import json
import math
import os
from typing import NamedTuple

import numpy as np
import pytest

from isingattn._io import atomic_write, to_jsonable, write_json


def test_text_bytes_and_writer_functions(tmp_path):
    p = tmp_path / "sub" / "a.txt"  # the folder is created
    atomic_write(p, "héllo\n")
    assert p.read_text(encoding="utf-8") == "héllo\n"
    atomic_write(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    q = tmp_path / "b.npz"
    atomic_write(q, lambda tmp: np.savez(open(tmp, "wb"), x=np.arange(3)))  # noqa: SIM115
    np.testing.assert_array_equal(np.load(q)["x"], np.arange(3))
    assert sorted(os.listdir(tmp_path)) == ["b.npz", "sub"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "keep.json"
    p.write_text("old")

    def broken(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(p, broken)
    assert p.read_text() == "old"
    assert os.listdir(tmp_path) == ["keep.json"]
    with pytest.raises(TypeError, match="data must be str, bytes or a function"):
        atomic_write(p, 3)
    assert p.read_text() == "old"


class _Pair(NamedTuple):
    a: int
    b: tuple


def test_to_jsonable():
    obj = {1: _Pair(np.int64(2), (np.float32(0.5), np.arange(2))), "x": [np.array([[1, 2]])],
           "nan": float("nan")}
    got = to_jsonable(obj)
    assert got["1"] == {"a": 2, "b": [0.5, [0, 1]]}
    assert got["x"] == [[[1, 2]]]
    assert type(got["1"]["a"]) is int
    assert math.isnan(got["nan"])
    assert to_jsonable(obj, nonfinite="null")["nan"] is None
    assert to_jsonable([np.float64("inf")], nonfinite="null") == [None]
    with pytest.raises(ValueError, match="nonfinite must be 'keep' or 'null'; got 'drop'"):
        to_jsonable(obj, nonfinite="drop")


def test_write_json_round_trip(tmp_path):
    p = tmp_path / "r.json"
    write_json(p, {"v": np.arange(3), "m": float("nan")}, indent=1)
    back = json.loads(p.read_text())
    assert back["v"] == [0, 1, 2] and math.isnan(back["m"])
    write_json(p, {"m": float("nan")}, nonfinite="null")
    assert json.loads(p.read_text()) == {"m": None}
