"""The ``file`` task: JSONL sequence labelling, its splits and its errors (file and line)."""

import json

import numpy as np
import pytest

from isingattn.experiments import DataFileError, FileTask


def write(tmp_path, lines, name="data.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return str(p)


def test_strings_build_the_vocabulary_and_explicit_splits_are_kept(tmp_path):
    path = write(tmp_path, [
        {"input": "abc", "labels": [0, None, 2], "split": "train"},
        {"input": "ca", "labels": [None, 1], "split": "valid"},
        "",
        {"input": "bb", "labels": [1, 1], "split": "test"},
    ])
    task = FileTask(path)
    assert task.vocab == ("a", "b", "c") and task.vocab_size == 3 and task.num_classes == 3
    assert {s: len(v) for s, v in task.splits.items()} == {"train": 1, "valid": 1, "test": 1}
    assert task.max_length() == 3
    b = task.train_batch(np.random.default_rng(0), 2, 5)
    assert b.inputs.tolist() == [[0, 1, 2, 0, 0]] * 2  # padded with weight 0
    assert b.weights.tolist() == [[1, 0, 1, 0, 0]] * 2
    assert b.labels[0, :3].tolist() == [0, 0, 2]
    (v,) = list(task.eval_batches("valid", 4, 3))
    assert v.inputs[0].tolist() == [2, 0, 0, 0] and v.weights.sum() == 1
    assert v.weights[1:].sum() == 0  # padding rows
    d = task.describe()
    assert d["examples"] == {"train": 1, "valid": 1, "test": 1} and len(d["sha256"]) == 64


def test_integer_inputs_and_the_deterministic_90_5_5_split(tmp_path):
    lines = [{"input": [i % 7, 3], "labels": [None, i % 2]} for i in range(40)]
    task = FileTask(write(tmp_path, lines))
    assert task.vocab is None and task.vocab_size == 7 and task.num_classes == 2
    sizes = {s: len(v) for s, v in task.splits.items()}
    assert sizes == {"train": 36, "valid": 2, "test": 2}
    again = FileTask(write(tmp_path, lines, "again.jsonl"))
    assert [e.line for e in again.splits["test"]] == [e.line for e in task.splits["test"]]


@pytest.mark.parametrize("lines,match", [
    (['{"input": "ab", "labels": [1, 0]', '{"input": "a"}'], r"line 1: not valid JSON"),
    ([{"input": "ab", "labels": [1, 0]}, {"input": "a"}], r"line 2: missing field 'labels'"),
    ([{"input": "abc", "labels": [1, 0]}], r"line 1: 'labels' has 2 entries and 'input' 3"),
    ([{"input": "ab", "labels": [1, 0]}, {"input": [1, 2], "labels": [0, 0]}],
     r"line 2: 'input' mixes strings and integer lists"),
    ([{"input": [1, -2], "labels": [0, 0]}], r"line 1: 'input' tokens must be integers >= 0"),
    ([{"input": "ab", "labels": [1, "x"]}], r"line 1: 'labels' must be a list of integers"),
    ([{"input": "ab", "labels": [1, 0], "split": "dev"}], r"line 1: 'split' must be one of"),
    ([{"input": "ab", "labels": [1, 0], "split": "train"}, {"input": "b", "labels": [0]}],
     r"line 2: no 'split' field while other lines have one"),
    ([[1, 2]], r"line 1: expected a JSON object"),
    ([{"input": "", "labels": []}], r"line 1: 'input' is empty"),
    ([{"input": "ab", "labels": [None, None]}], r"no labels"),
    ([{"input": "ab", "labels": [1, 0], "split": "train"},
      {"input": "ab", "labels": [1, 0], "split": "test"}], r"the valid split is empty"),
])
def test_malformed_files_name_file_and_line(tmp_path, lines, match):
    path = write(tmp_path, lines)
    with pytest.raises(DataFileError, match=match) as e:
        FileTask(path)
    assert path in str(e.value)


def test_missing_file_directory_and_too_long_examples(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        FileTask(str(tmp_path / "nope.jsonl"))
    with pytest.raises(DataFileError, match="is a directory"):
        FileTask(str(tmp_path))
    path = write(tmp_path, [{"input": "abcdef", "labels": [0] * 6, "split": s}
                            for s in ("train", "valid", "test")])
    with pytest.raises(ValueError, match=r"line 1: the example has 6 tokens.*--length >= 6"):
        FileTask(path).train_batch(np.random.default_rng(0), 1, 4)
