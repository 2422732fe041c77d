"""Bracket matching: finding the most recent unmatched opening bracket is attention's job.

Two variants of one generator:

- ``"match"`` (sequence labelling): ``k`` bracket types; an opening bracket shows its type
  (tokens ``0 .. k-1``), every closing bracket is one shared token ``k``. The label at a closing
  position is the type of the bracket it closes (chance ``1/k``); other positions are not scored.
  Sequences need not end balanced.
- ``"balance"`` (classification): closing brackets show their type too (tokens ``k .. 2k-1``);
  every sequence is balanced and properly nested, and half of them (the negatives) have one
  bracket's type changed. The nesting, hence every depth count, is unchanged: only the types of
  one matched pair disagree, so counting cannot tell them apart. One label at the last position:
  1 balanced, 0 not.

The generator is a random walk over the nesting depth: at each position a bracket opens (new
type uniform) with probability ``p_open``, must open at depth 0 and must close at
``max_depth``. Regimes set how far apart pairs sit:

- ``"walk"`` (default): ``p_open = 1/2``, ``max_depth = 8``; pair distances are mostly short
  (median 1, 90th percentile 13-19 at ``L = 64 .. 512``; about 2% of pairs 64 or more apart at
  ``L >= 256``).
- ``"long"``: ``p_open = 3/4`` in the first half of the sequence and ``1/4`` in the second,
  no depth bound below ``L``: the walk climbs to a depth of about ``L/4`` and comes back down, so
  brackets opened early close late and many pairs sit a sizeable fraction of ``L`` apart
  (hundreds of positions at ``L >= 256``; :func:`distance_summary` tabulates it).

Scored positions are grouped by the distance to their partner (:data:`DISTANCE_EDGES`), so
accuracy on far pairs is reported apart.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import ClassVar

import numpy as np

from .._validation import check_choice, check_positive_int
from ._tasks import Batch, Task, _synthetic_eval

VARIANTS = ("match", "balance")
REGIMES = ("walk", "long")
#: Lower edges of the pair-distance groups: 1-3, 4-15, 16-63, 64-255, 256+.
DISTANCE_EDGES = (1, 4, 16, 64, 256)


def _group_names():
    edges = DISTANCE_EDGES
    return tuple(f"d{lo}-{hi - 1}" for lo, hi in itertools.pairwise(edges)) + (f"d{edges[-1]}+",)


def open_probability(regime: str, length: int):
    """``p_open`` at each position ``(length,)`` of a regime."""
    p = np.full(length, 0.5)
    if regime == "long":
        p[: length // 2], p[length // 2:] = 0.75, 0.25
    return p


def default_max_depth(regime: str, length: int) -> int:
    """The depth bound of a regime when none is given: 8 for ``walk``, ``length`` for
    ``long``."""
    return 8 if regime == "walk" else length


def generate(rng: np.random.Generator, batch: int, length: int, *, num_types: int = 4,
             max_depth: int | None = None, regime: str = "walk", balanced: bool = False):
    """Bracket sequences by the depth walk (module notes); ``max_depth`` None: the regime's
    default (:func:`default_max_depth`).

    Returns ``types`` ``(batch, length)`` (the bracket's type), ``is_open`` (bool), ``partner``
    (the position of the matching bracket, -1 for an opening bracket left unclosed) and
    ``depth`` (the depth after the position). ``balanced=True`` closes every bracket by the end
    (``length`` must be even).
    """
    if balanced and length % 2:
        raise ValueError(f"balanced sequences need an even length; got {length}")
    B, L = batch, length
    D = default_max_depth(regime, L) if max_depth is None else max_depth
    p_open = open_probability(regime, L)
    depth = np.zeros(B, np.int64)
    stack_pos = np.zeros((B, D), np.int64)
    stack_type = np.zeros((B, D), np.int64)
    types = np.zeros((B, L), np.int64)
    is_open = np.zeros((B, L), bool)
    partner = np.full((B, L), -1, np.int64)
    depths = np.zeros((B, L), np.int64)
    rows = np.arange(B)
    for t in range(L):
        u = rng.random(B)
        new_type = rng.integers(0, num_types, B)
        remaining = L - t
        can_open = depth < D
        if balanced:
            can_open &= depth + 1 <= remaining - 1
        opening = np.where(depth == 0, True, np.where(can_open, u < p_open[t], False))
        o = rows[opening]
        stack_pos[o, depth[o]] = t
        stack_type[o, depth[o]] = new_type[o]
        types[o, t] = new_type[o]
        is_open[o, t] = True
        c = rows[~opening]
        top = depth[c] - 1
        partner[c, t] = stack_pos[c, top]
        partner[c, stack_pos[c, top]] = t
        types[c, t] = stack_type[c, top]
        depth = depth + np.where(opening, 1, -1)
        depths[:, t] = depth
    return types, is_open, partner, depths


@dataclasses.dataclass
class BracketTask(Task):
    """Bracket matching (module notes): ``variant`` ``"match"`` (label at every closing
    bracket: the type it closes) or ``"balance"`` (one label: balanced or not, hard negatives);
    ``num_types`` bracket types; nesting depth at most ``max_depth`` (None: 8 for ``walk``, the
    length for ``long``); ``regime`` ``"walk"`` or ``"long"`` (far-apart pairs)."""

    variant: str = "match"
    num_types: int = 4
    max_depth: int | None = None
    regime: str = "walk"
    data_seed: int = 0
    name: ClassVar[str] = "bracket"

    def __post_init__(self):
        check_choice("variant", self.variant, VARIANTS)
        check_choice("regime", self.regime, REGIMES)
        self.num_types = check_positive_int("num_types", self.num_types, 2)
        if self.max_depth is not None:
            self.max_depth = check_positive_int("max_depth", self.max_depth, 1)
        k = self.num_types
        if self.variant == "match":
            self.vocab_size, self.num_classes = k + 1, k
            self.groups = _group_names()
            self.sequence_metric = True
        else:
            self.vocab_size, self.num_classes = 2 * k, 2
            self.groups = ()

    def train_batch(self, rng, batch_size, length):
        if length < 2:
            raise ValueError(f"bracket sequences need length >= 2; got {length}")
        balance = self.variant == "balance"
        types, is_open, partner, _ = generate(
            rng, batch_size, length, num_types=self.num_types, max_depth=self.max_depth,
            regime=self.regime, balanced=balance)
        k = self.num_types
        if not balance:
            tokens = np.where(is_open, types, k)
            scored = ~is_open
            labels = np.where(scored, types, 0)
            dist = np.where(scored, np.arange(length)[None] - partner, 0)
            groups = np.where(scored, np.searchsorted(DISTANCE_EDGES, dist, side="right") - 1,
                              -1)
            return Batch(tokens.astype(np.int32), labels.astype(np.int32),
                         scored.astype(np.float32), groups.astype(np.int32))
        # hard negatives: one bracket of half the sequences takes another type
        negative = rng.random(batch_size) < 0.5
        pos = rng.integers(0, length, batch_size)
        shift = rng.integers(1, k, batch_size)
        rows = np.arange(batch_size)
        types = types.copy()
        types[rows, pos] = np.where(negative, (types[rows, pos] + shift) % k, types[rows, pos])
        tokens = np.where(is_open, types, k + types)
        labels = np.zeros((batch_size, length), np.int32)
        labels[:, -1] = (~negative).astype(np.int32)
        weights = np.zeros((batch_size, length), np.float32)
        weights[:, -1] = 1.0
        return Batch(tokens.astype(np.int32), labels, weights,
                     np.full((batch_size, length), -1, np.int32))

    def eval_batches(self, split, length, batch_size, num_examples):
        return _synthetic_eval(self, split, length, batch_size, num_examples)

    def describe(self):
        return {"name": self.name, "variant": self.variant, "num_types": self.num_types,
                "max_depth": self.max_depth, "regime": self.regime, "data_seed": self.data_seed}


def distance_summary(task: BracketTask, length: int, num_examples: int = 512) -> dict:
    """Pair distances of the scored positions of ``num_examples`` test sequences: median, 90th
    percentile, maximum and the fraction in each group (what the docs tabulate per length)."""
    rng = np.random.default_rng(0)
    _, is_open, partner, _ = generate(rng, num_examples, length, num_types=task.num_types,
                                      max_depth=task.max_depth, regime=task.regime)
    closers = ~is_open
    dist = (np.arange(length)[None] - partner)[closers]
    g = np.searchsorted(DISTANCE_EDGES, dist, side="right") - 1
    names = _group_names()
    return {"median": float(np.median(dist)), "p90": float(np.percentile(dist, 90)),
            "max": int(dist.max()),
            "groups": {names[i]: float(np.mean(g == i)) for i in range(len(names))}}
