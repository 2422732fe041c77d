"""The results table every sweep appends to: resumes, refuses other settings, survives a write
cut short and a second process on the same file."""

import json
import os

import pytest

from ._scripts import ANALYSIS, read_rows


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
