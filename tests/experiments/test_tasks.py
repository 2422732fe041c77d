"""Tasks: bracket sequences checked against an independent stack-based parser, the pair-copy
labels, and the determinism of training batches and evaluation sets."""

import numpy as np
import pytest

from isingattn.experiments import (
    DISTANCE_EDGES,
    BracketTask,
    PairCopyTask,
    batch_rng,
    distance_summary,
    generate,
)


def parse_match(tokens, k):
    """Labels and pair distances of a 'match' sequence by a stack (closing token = k)."""
    stack, labels, dist, depth = [], {}, {}, 0
    max_depth = 0
    for t, tok in enumerate(tokens):
        if tok < k:
            stack.append((tok, t))
            max_depth = max(max_depth, len(stack))
        else:
            assert tok == k
            assert stack, "a closing bracket with nothing open"
            typ, pos = stack.pop()
            labels[t] = typ
            dist[t] = t - pos
    depth = len(stack)
    return labels, dist, max_depth, depth


def balanced(tokens, k):
    stack = []
    for tok in tokens:
        if tok < k:
            stack.append(tok)
        elif not stack or stack.pop() != tok - k:
            return False
    return not stack


@pytest.mark.parametrize("regime,length,max_depth", [("walk", 64, None), ("walk", 33, 3),
                                                     ("long", 128, None), ("long", 40, 5)])
def test_match_labels_agree_with_a_stack_parser(regime, length, max_depth):
    k = 3
    task = BracketTask("match", num_types=k, max_depth=max_depth, regime=regime)
    b = task.train_batch(np.random.default_rng(5), 24, length)
    assert b.inputs.shape == b.labels.shape == b.weights.shape == (24, length)
    bound = max_depth or (8 if regime == "walk" else length)
    for row in range(24):
        labels, dist, deepest, _ = parse_match(b.inputs[row], k)
        assert deepest <= bound
        scored = set(np.flatnonzero(b.weights[row]))
        assert scored == set(labels)  # exactly the closing brackets are scored
        for t, typ in labels.items():
            assert b.labels[row, t] == typ
            g = np.searchsorted(DISTANCE_EDGES, dist[t], side="right") - 1
            assert b.groups[row, t] == g
        assert np.all(b.groups[row, b.weights[row] == 0] == -1)


def test_balance_variant_positives_balance_and_negatives_have_one_changed_type():
    k = 4
    task = BracketTask("balance", num_types=k)
    assert (task.vocab_size, task.num_classes) == (2 * k, 2)
    b = task.train_batch(np.random.default_rng(1), 400, 32)
    assert np.all(b.weights[:, :-1] == 0) and np.all(b.weights[:, -1] == 1)
    for row in range(400):
        toks = b.inputs[row]
        assert balanced(toks, k) == bool(b.labels[row, -1])
        if not b.labels[row, -1]:
            # restoring one position's type makes it balanced: exactly one bracket changed
            fixes = 0
            for t in range(32):
                for typ in range(k):
                    alt = toks.copy()
                    alt[t] = typ if toks[t] < k else k + typ
                    if alt[t] != toks[t] and balanced(alt, k):
                        fixes += 1
            assert fixes >= 1
    # half positives: 400 fair coin flips fall in [160, 240] except with probability 5e-5
    assert 160 <= int(b.labels[:, -1].sum()) <= 240
    with pytest.raises(ValueError, match="even length"):
        task.train_batch(np.random.default_rng(1), 2, 31)


def test_long_regime_puts_many_pairs_far_apart():
    walk = distance_summary(BracketTask(regime="walk"), 256, 128)
    long = distance_summary(BracketTask(regime="long"), 256, 128)
    assert long["groups"]["d64-255"] > 0.2 and walk["groups"]["d64-255"] < 0.05
    assert long["p90"] > 100 and walk["p90"] < 40


def test_generate_depth_walk_is_consistent():
    types, is_open, partner, depth = generate(np.random.default_rng(0), 16, 50, num_types=2,
                                              max_depth=4, balanced=True)
    assert np.all(depth[:, -1] == 0) and np.all(depth >= 0) and np.all(depth <= 4)
    rows, cols = np.nonzero(~is_open)
    assert np.all(partner[rows, partner[rows, cols]] == cols)  # partners are mutual
    assert np.all(types[rows, cols] == types[rows, partner[rows, cols]])


def test_pair_copy_labels_the_symbol_after_the_marker():
    task = PairCopyTask(num_symbols=5)
    b = task.train_batch(np.random.default_rng(0), 64, 12)
    V = 5
    for row in range(64):
        toks = b.inputs[row]
        p = int(np.flatnonzero(toks == V + 1)[0])
        assert toks[p - 1] == V and toks[-1] == V + 2
        assert b.labels[row, -1] == toks[p + 1] and b.weights[row].sum() == 1


def test_batches_are_a_function_of_seed_and_step_and_eval_sets_of_the_split_alone():
    task = BracketTask()
    a = task.train_batch(batch_rng(3, 17), 8, 32)
    b = task.train_batch(batch_rng(3, 17), 8, 32)
    c = task.train_batch(batch_rng(4, 17), 8, 32)
    assert np.array_equal(a.inputs, b.inputs) and not np.array_equal(a.inputs, c.inputs)
    small = list(task.eval_batches("test", 32, 16, 100))
    big = list(task.eval_batches("test", 32, 64, 100))
    assert all(x.inputs.shape == (16, 32) for x in small)  # the last batch is padded
    cat = np.concatenate([x.inputs for x in small])[:100]
    assert np.array_equal(cat, np.concatenate([x.inputs for x in big])[:100])
    assert np.concatenate([x.weights for x in small])[100:].sum() == 0
    valid = np.concatenate([x.inputs for x in task.eval_batches("valid", 32, 64, 64)])
    assert not np.array_equal(valid, cat[:64])
