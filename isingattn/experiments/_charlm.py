"""Character-level language modelling as a :class:`~isingattn.experiments.Task`.

Every position of a window is scored: the input is ``L`` characters, the label at position ``t``
is the character after it, and the metric is bits per character (``bpc``: the mean
cross-entropy over the scored characters divided by ``ln 2``).

Training batches are windows of ``L + 1`` characters at uniformly random positions of the train
split (:func:`~isingattn.experiments.random_windows`), drawn from the numpy generator the
harness passes (``batch_rng(seed, step)``), so a batch depends on the run's seed and the step
alone. Evaluation covers a split with :func:`~isingattn.experiments.eval_windows`: windows of
``L`` inputs every ``stride`` characters (default ``L // 2``), each character after the first
scored exactly once, with at least ``L - stride`` characters of left context in its window.
The periodic validation during training reads the first ``eval_examples`` windows of the valid
split (cheap, the same characters at every evaluation); the final valid and test numbers
(``final.json``, and ``isingattn evaluate`` by default) cover the whole splits.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from .._validation import check_positive_int
from ._corpora import CharCorpus, eval_windows, random_windows
from ._tasks import Batch, Task


@dataclasses.dataclass(eq=False)
class CharLMTask(Task):
    """Next-character prediction on a :class:`~isingattn.experiments.CharCorpus`.

    Args:
      corpus: the corpus (:func:`~isingattn.experiments.load_corpus`); its splits are read when
        needed: the train split at the first training batch, kept until a whole-split
        evaluation (the end of training) lets it go; valid and test at every evaluation, not
        kept (the periodic validation keeps only the prefix it scores).
      eval_stride: characters between evaluation windows (``1 <= stride <= L``); None:
        ``L // 2`` (at least 1) for windows of ``L`` characters. Every scored character sees at
        least ``L - stride`` characters of context; evaluation costs about ``L / stride``
        forward passes per character.
      length: the training context ``L``, when known (``describe`` then states the stride).

    ``vocab_size = num_classes`` is the corpus's. :meth:`eval_batches` with
    ``num_examples=None`` covers the whole split; with a number ``n``, the first ``n`` windows
    (the characters ``1 .. (n - 1) * stride + L`` of the split).
    """

    corpus: CharCorpus
    eval_stride: int | None = None
    length: int | None = None
    name: ClassVar[str] = "char-lm"
    metric: ClassVar[str] = "bpc"

    def __post_init__(self):
        if self.eval_stride is not None:
            self.eval_stride = check_positive_int("eval_stride", self.eval_stride)
        self.vocab_size = self.num_classes = self.corpus.vocab_size
        self._train = None
        self._prefix = {}  # (split, number of tokens) -> the prefix of a split, kept

    def stride(self, length: int) -> int:
        """The evaluation stride for windows of ``length`` characters."""
        if self.eval_stride is None:
            return max(1, length // 2)
        return min(self.eval_stride, length)

    def check_length(self, length: int) -> None:
        """Raise ``ValueError`` when windows of ``length`` characters do not fit every split
        (a window needs ``length + 1`` characters)."""
        splits = self.corpus.info["splits"]
        short = {s: n for s, n in splits.items() if n < length + 1}
        if short:
            s, n = min(short.items(), key=lambda x: x[1])
            raise ValueError(
                f"context {length} is longer than the {self.corpus.name} corpus allows: its "
                f"{s} split holds {n:,} characters and a window needs {length + 1}; use a "
                f"--length of at most {min(splits.values()) - 1}")

    def _train_tokens(self):
        if self._train is None:
            self._train = self.corpus.split("train")
        return self._train

    def train_batch(self, rng, batch_size, length):
        inputs, labels = random_windows(self._train_tokens(), rng, batch_size, length)
        return Batch(inputs, labels, np.ones(inputs.shape, np.float32),
                     np.full(inputs.shape, -1, np.int32))

    def _tokens(self, split, length, num_examples):
        if num_examples is None:
            self._train = None  # one large split in memory at a time (read again if needed)
            return self.corpus.split(split)
        n = check_positive_int("num_examples", num_examples)
        size = (n - 1) * self.stride(length) + length + 1
        key = (split, size)
        if key not in self._prefix:
            self._prefix[key] = np.array(self.corpus.split(split)[:size])  # a copy: no view
        return self._prefix[key]

    def eval_batches(self, split, length, batch_size, num_examples=None):
        """Batches of :func:`~isingattn.experiments.eval_windows` over ``split`` (the whole
        split for ``num_examples=None``, else its first ``num_examples`` windows), with stride
        :meth:`stride`; rows that pad the last batch have weight 0."""
        if split not in ("train", "valid", "test"):
            raise ValueError(f"split must be 'train', 'valid' or 'test'; got {split!r}")
        self.check_length(length)
        tokens = self._tokens(split, length, num_examples)
        for inputs, labels, weights in eval_windows(tokens, length, self.stride(length),
                                                    batch_size):
            yield Batch(inputs, labels, weights, np.full(inputs.shape, -1, np.int32))

    def final_eval_examples(self, split, configured):
        return None  # the whole split

    def describe(self):
        return {"name": self.name, "corpus": self.corpus.info, "vocab": list(self.corpus.vocab),
                "eval_stride": self.stride(self.length) if self.length else self.eval_stride}


def corpus_from_description(task: dict) -> CharCorpus:
    """A :class:`CharCorpus` with the vocabulary and ``info`` that a char-lm run recorded in its
    ``config.json`` (``task``), and no data: enough to encode prompts and decode generated text
    without the corpus files. Reading a split raises ``ValueError``."""
    info = task["corpus"]

    def no_data(which):
        raise ValueError(f"the {info['name']} corpus of this run was not loaded (only its "
                         "vocabulary, from config.json)")

    return CharCorpus(info["name"], tuple(task["vocab"]), info, no_data,
                      byte_level=info["name"] == "enwik8")
