"""Tasks: what a model is trained on and evaluated by.

Every task is sequence labelling: a batch holds input tokens ``(B, L)``, a class label per
position and a weight per position (0 where a position has no target, and on padding). The
training loss is the weighted mean cross-entropy; the headline metric is the task's
(:attr:`Task.metric`). Synthetic tasks draw training batches from a numpy generator seeded by
``(seed, step)``, so a batch depends on the run's seed and the step alone (the same data for every
variant at one seed, and a resumed run sees the batches it would have seen); their valid and test
sets are drawn from fixed seeds, so every run is evaluated on the same examples.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import numpy as np

from .._validation import check_positive_int

#: Seeds of the synthetic evaluation sets (entropy words of ``np.random.SeedSequence``).
SPLIT_SEEDS = {"valid": 1, "test": 2}
SPLITS = ("train", "valid", "test")


class Batch(NamedTuple):
    """One batch: ``inputs`` ``(B, L)`` int32 tokens, ``labels`` ``(B, L)`` int32 classes (any
    value where the weight is 0), ``weights`` ``(B, L)`` float32 (1 for a scored position, 0
    elsewhere) and ``groups`` ``(B, L)`` int32: the index into :attr:`Task.groups` of each scored
    position (accuracy is also reported per group), or -1."""

    inputs: np.ndarray
    labels: np.ndarray
    weights: np.ndarray
    groups: np.ndarray


def batch_rng(seed: int, step: int) -> np.random.Generator:
    """The generator of the training batch at ``step`` of a run with ``seed``."""
    return np.random.default_rng([int(seed), int(step), 7])


def pad_batch(batch: Batch, size: int) -> Batch:
    """Pad a batch to ``size`` rows with weight 0 (a fixed shape: no recompilation)."""
    n = batch.inputs.shape[0]
    if n == size:
        return batch
    pad = ((0, size - n), (0, 0))
    return Batch(np.pad(batch.inputs, pad), np.pad(batch.labels, pad),
                 np.pad(batch.weights, pad), np.pad(batch.groups, pad, constant_values=-1))


class Task:
    """A task (abstract). Subclasses set the class attributes and implement
    :meth:`train_batch` and :meth:`eval_batches`.

    Attributes:
      name: the task's name in :data:`TASKS` and in ``config.json``.
      vocab_size: input tokens ``0 .. vocab_size - 1``.
      num_classes: labels ``0 .. num_classes - 1`` (the model's outputs per position).
      metric: the headline metric's name (``"accuracy"``: scored positions predicted right).
      groups: names of the groups of scored positions reported apart (e.g. pair distances).
      sequence_metric: also report whole-sequence accuracy (every scored position of a sequence
        right, over the sequences with at least one).
    """

    name: ClassVar[str]
    metric: ClassVar[str] = "accuracy"
    sequence_metric: ClassVar[bool] = False
    groups: tuple = ()
    vocab_size: int
    num_classes: int

    def train_batch(self, rng: np.random.Generator, batch_size: int, length: int) -> Batch:
        raise NotImplementedError

    def eval_batches(self, split: str, length: int, batch_size: int, num_examples: int):
        """The evaluation examples of ``split`` (``"valid"`` or ``"test"``) in batches of
        ``batch_size`` rows (the last one padded with weight 0)."""
        raise NotImplementedError

    def max_length(self) -> int | None:
        """The longest sequence the task can produce (None: any)."""
        return None

    def final_eval_examples(self, split: str, configured: int) -> int | None:
        """The examples of ``split`` scored by the final evaluation (the end of training, and
        :func:`~isingattn.experiments.evaluate_run` by default): ``configured`` (the config's
        ``eval_examples`` or ``test_examples``), or None for the whole split (tasks whose
        :meth:`eval_batches` accept None)."""
        return configured

    def describe(self) -> dict:
        """What ``config.json`` records of the task (options, data provenance)."""
        return {"name": self.name}


#: Examples drawn per seeded chunk of a synthetic evaluation set: the set does not depend on the
#: evaluation batch size, and a smaller set is a prefix of a larger one.
EVAL_CHUNK = 64


def _synthetic_eval(task, split, length, batch_size, num_examples):
    data_seed = getattr(task, "data_seed", 0)
    chunks = []
    for i in range(-(-num_examples // EVAL_CHUNK)):
        rng = np.random.default_rng([int(data_seed), SPLIT_SEEDS[split], 11, i])
        chunks.append(task.train_batch(rng, EVAL_CHUNK, length))
    full = Batch(*(np.concatenate(x)[:num_examples] for x in zip(*chunks)))
    for start in range(0, num_examples, batch_size):
        yield pad_batch(Batch(*(x[start:start + batch_size] for x in full)), batch_size)


# ------------------------------------------------------------------------------------------------
# pair copy
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class PairCopyTask(Task):
    """Copy the symbol after a marker: random symbols ``0 .. V-1``, a ``BLANK`` (token ``V``) and
    a ``MARKER`` (``V + 1``) at a random position ``p`` (``1 <= p <= L - 3``, the blank at
    ``p - 1``), a ``QUERY`` (``V + 2``) at the end; the one scored position is the last, whose
    label is ``x_{p+1}``. Attending to the pair ``(p, p + 1)`` jointly solves it: the key at
    ``p + 1`` does not know by content that it follows the marker, so independent attention
    must learn positions while positive banded couplings ``J_{j,j+1}`` switch the neighbour on
    with the marker. Needs ``L >= 4``."""

    num_symbols: int = 6
    data_seed: int = 0
    name: ClassVar[str] = "pair-copy"

    def __post_init__(self):
        self.num_symbols = check_positive_int("num_symbols", self.num_symbols, 2)
        self.vocab_size = self.num_symbols + 3
        self.num_classes = self.num_symbols

    def train_batch(self, rng, batch_size, length):
        if length < 4:
            raise ValueError(f"pair-copy needs length >= 4; got {length}")
        V = self.num_symbols
        tokens = rng.integers(0, V, (batch_size, length))
        p = rng.integers(1, length - 2, batch_size)
        rows = np.arange(batch_size)
        tokens[rows, p - 1] = V
        tokens[rows, p] = V + 1
        tokens[:, -1] = V + 2
        labels = np.zeros((batch_size, length), np.int32)
        labels[:, -1] = tokens[rows, p + 1]
        weights = np.zeros((batch_size, length), np.float32)
        weights[:, -1] = 1.0
        groups = np.full((batch_size, length), -1, np.int32)
        return Batch(tokens.astype(np.int32), labels, weights, groups)

    def eval_batches(self, split, length, batch_size, num_examples):
        return _synthetic_eval(self, split, length, batch_size, num_examples)

    def describe(self):
        return {"name": self.name, "num_symbols": self.num_symbols, "data_seed": self.data_seed}
