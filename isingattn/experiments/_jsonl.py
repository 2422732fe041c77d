"""The ``file`` task: sequence labelling from a JSONL file.

One example a line: ``{"input": [int, ...] or "string", "labels": [int or null, ...]}`` with
``labels`` as long as ``input`` (``null``: no target at that position). Strings are split into
characters and the vocabulary is the sorted set of characters of the whole file; integer inputs
use their values as tokens (vocabulary ``max + 1``). All lines use one kind of input. Labels are
classes ``0 .. max``. An optional ``"split"`` field (``"train"``, ``"valid"``, ``"test"``) assigns
an example; without it on every line, a fixed permutation splits the file 90/5/5 (the same for
every run). Blank lines are skipped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import ClassVar

import numpy as np

from ._tasks import SPLITS, Batch, Task, pad_batch


class DataFileError(ValueError):
    """A data file that is not what the loader expects (the message names file and line)."""


@dataclasses.dataclass
class _Example:
    line: int
    tokens: list
    labels: list


def _fail(path, line, msg):
    raise DataFileError(f"{path}, line {line}: {msg}")


def _read_jsonl(path):
    if not os.path.exists(path):
        raise FileNotFoundError(f"data file {path!r} does not exist")
    if os.path.isdir(path):
        raise DataFileError(f"data file {path!r} is a directory; give a JSONL file")
    examples, splits, kinds = [], [], set()
    with open(path, encoding="utf-8") as f:
        for no, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as e:
                _fail(path, no, f"not valid JSON ({e.msg} at column {e.colno})")
            if not isinstance(obj, dict):
                _fail(path, no, f"expected a JSON object with 'input' and 'labels'; got "
                                f"{type(obj).__name__}")
            missing = [k for k in ("input", "labels") if k not in obj]
            if missing:
                _fail(path, no, f"missing field {', '.join(map(repr, missing))}")
            inp, labels = obj["input"], obj["labels"]
            if isinstance(inp, str):
                kinds.add("string")
                tokens = list(inp)
            elif isinstance(inp, list) and all(
                    isinstance(t, int) and not isinstance(t, bool) for t in inp):
                kinds.add("integers")
                tokens = inp
                if any(t < 0 for t in tokens):
                    _fail(path, no, "'input' tokens must be integers >= 0")
            else:
                _fail(path, no, "'input' must be a string or a list of integers")
            if len(kinds) > 1:
                _fail(path, no, "'input' mixes strings and integer lists across lines; use one "
                                "kind for the whole file")
            if not tokens:
                _fail(path, no, "'input' is empty")
            if not isinstance(labels, list) or not all(
                    lab is None or (isinstance(lab, int) and not isinstance(lab, bool)
                                    and lab >= 0) for lab in labels):
                _fail(path, no, "'labels' must be a list of integers >= 0 or null")
            if len(labels) != len(tokens):
                _fail(path, no, f"'labels' has {len(labels)} entries and 'input' "
                                f"{len(tokens)}; they must have the same length")
            split = obj.get("split")
            if split is not None and split not in SPLITS:
                _fail(path, no, f"'split' must be one of {', '.join(map(repr, SPLITS))}; got "
                                f"{split!r}")
            splits.append(split)
            examples.append(_Example(no, tokens, labels))
    if not examples:
        raise DataFileError(f"{path}: no examples (every line blank?)")
    given = [s is not None for s in splits]
    if any(given) and not all(given):
        first = examples[given.index(False)].line
        _fail(path, first, "no 'split' field while other lines have one; give every line a "
                           "split, or none (a fixed 90/5/5 split is made)")
    return examples, (splits if all(given) else None), kinds.pop()


@dataclasses.dataclass
class FileTask(Task):
    """Sequence labelling from the JSONL file ``path`` (module notes). ``length`` of the
    training run pads every sequence on the right (weight 0); a longer example is an error."""

    path: str = ""
    name: ClassVar[str] = "file"

    def __post_init__(self):
        examples, splits, kind = _read_jsonl(self.path)
        with open(self.path, "rb") as f:
            self.sha256 = hashlib.sha256(f.read()).hexdigest()
        self.input_kind = kind
        if kind == "string":
            chars = sorted({c for e in examples for c in e.tokens})
            self.vocab = tuple(chars)
            index = {c: i for i, c in enumerate(chars)}
            for e in examples:
                e.tokens = [index[c] for c in e.tokens]
        else:
            self.vocab = None
        self.vocab_size = 1 + max(max(e.tokens) for e in examples)
        scored = [lab for e in examples for lab in e.labels if lab is not None]
        if not scored:
            raise DataFileError(f"{self.path}: no labels (every label is null)")
        self.num_classes = max(2, 1 + max(scored))
        if splits is None:
            order = np.random.default_rng(0).permutation(len(examples))
            n_train = round(0.9 * len(examples))
            n_valid = round(0.05 * len(examples))
            splits = [""] * len(examples)
            for rank, i in enumerate(order):
                splits[i] = ("train" if rank < n_train else "valid" if rank < n_train + n_valid
                             else "test")
        self.splits = {s: [e for e, t in zip(examples, splits) if t == s] for s in SPLITS}
        for s in SPLITS:
            if not self.splits[s]:
                raise DataFileError(
                    f"{self.path}: the {s} split is empty ({len(examples)} examples in all); "
                    "give every split at least one example ('split' fields), or enough lines "
                    "for the 90/5/5 split (at least 20)")
        self._max_len = max(len(e.tokens) for e in examples)

    def max_length(self):
        return self._max_len

    def _check_length(self, length):
        if length < self._max_len:
            longest = max((e for s in SPLITS for e in self.splits[s]), key=lambda e: len(e.tokens))
            raise ValueError(
                f"{self.path}, line {longest.line}: the example has {len(longest.tokens)} tokens, "
                f"longer than the length {length}; use --length >= {self._max_len}")

    def _batch(self, examples, length):
        n = len(examples)
        inputs = np.zeros((n, length), np.int32)
        labels = np.zeros((n, length), np.int32)
        weights = np.zeros((n, length), np.float32)
        for i, e in enumerate(examples):
            m = len(e.tokens)
            inputs[i, :m] = e.tokens
            lab = np.array([-1 if v is None else v for v in e.labels])
            labels[i, :m] = np.maximum(lab, 0)
            weights[i, :m] = lab >= 0
        return Batch(inputs, labels, weights, np.full((n, length), -1, np.int32))

    def train_batch(self, rng, batch_size, length):
        self._check_length(length)
        train = self.splits["train"]
        idx = rng.integers(0, len(train), batch_size)
        return self._batch([train[i] for i in idx], length)

    def eval_batches(self, split, length, batch_size, num_examples=None):
        """Every example of ``split`` (``num_examples`` is ignored: the split is the set)."""
        self._check_length(length)
        ex = self.splits[split]
        for start in range(0, len(ex), batch_size):
            yield pad_batch(self._batch(ex[start:start + batch_size], length), batch_size)

    def describe(self):
        return {"name": self.name, "path": os.path.abspath(self.path), "sha256": self.sha256,
                "input": self.input_kind, "vocab_size": self.vocab_size,
                "num_classes": self.num_classes,
                "examples": {s: len(v) for s, v in self.splits.items()}}
