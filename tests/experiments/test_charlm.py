"""Character-level language modelling: the task's batches, whole-split evaluation against a brute
force, the run directory (corpus provenance, resume), generation, and the CLI's errors.

Corpora are small synthetic files (a text8-format file read with ``any_size=True``, a PTB-char
directory) or the built-in corpus from one injected source; models are tiny (one layer, width
16, length 8) so that each run costs about one compilation."""

import csv
import hashlib
import json
import math
import os

import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.cli import main
from isingattn.experiments import (
    CharLMTask,
    DocSource,
    TrainConfig,
    Trainer,
    _builtin_corpus,
    batch_rng,
    evaluate_run,
    generate_text,
    load_corpus,
    train,
)

ALPHABET = np.frombuffer(b" abcdefghijklmnopqrstuvwxyz", np.uint8)
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "<unk>", "N", "and"]
TINY = {"task": "char-lm", "length": 8, "layers": 1, "d_model": 16, "heads": 2, "batch": 4,
        "steps": 8, "eval_every": 4, "eval_examples": 4, "checkpoint_every": 4, "warmup": 2}


def text8_file(tmp_path, n=1000, seed=0):
    path = tmp_path / "text8"
    path.write_bytes(ALPHABET[np.random.default_rng(seed).integers(0, 27, n)].tobytes())
    return path


def ptb_dir(tmp_path, lines=(300, 30, 30), seed=0):
    """A PTB-char directory of random sentences from a small word list."""
    rng = np.random.default_rng(seed)
    folder = tmp_path / "ptb"
    folder.mkdir()
    for split, n in zip(("train", "valid", "test"), lines):
        text = []
        for _ in range(n):
            words = rng.choice(WORDS, rng.integers(3, 9))
            text.append(" _ ".join(w if w == "<unk>" else " ".join(w) for w in words))
        (folder / f"ptb.char.{split}.txt").write_text("\n".join(text) + "\n")
    return folder


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------------------
# the task
# ------------------------------------------------------------------------------------------------


def test_training_batches_are_shifted_windows_of_the_train_split_set_by_seed_and_step(tmp_path):
    corpus = load_corpus("text8", text8_file(tmp_path), any_size=True)
    task = CharLMTask(corpus)
    assert task.vocab_size == task.num_classes == 27 and task.metric == "bpc"
    b = task.train_batch(batch_rng(3, 5), 6, 16)
    assert b.inputs.shape == b.labels.shape == b.weights.shape == (6, 16)
    assert np.array_equal(b.labels[:, :-1], b.inputs[:, 1:])  # targets: the next character
    assert np.all(b.weights == 1) and np.all(b.groups == -1)
    train_text = corpus.decode(corpus.split("train"))
    for x, y in zip(b.inputs, b.labels):
        assert corpus.decode(np.append(x, y[-1])) in train_text  # a window of the train split
    again = task.train_batch(batch_rng(3, 5), 6, 16)
    assert all(np.array_equal(u, v) for u, v in zip(b, again))
    assert not np.array_equal(task.train_batch(batch_rng(3, 6), 6, 16).inputs, b.inputs)
    assert not np.array_equal(task.train_batch(batch_rng(4, 5), 6, 16).inputs, b.inputs)


def test_prefix_evaluation_and_the_stride(tmp_path):
    corpus = load_corpus("text8", text8_file(tmp_path), any_size=True)  # valid: 50 characters
    task = CharLMTask(corpus)
    assert task.stride(8) == 4 and task.stride(1) == 1 and CharLMTask(corpus, 3).stride(2) == 2
    whole = list(task.eval_batches("valid", 8, 4))
    assert sum(float(b.weights.sum()) for b in whole) == 49
    prefix = list(task.eval_batches("valid", 8, 4, 3))  # 3 windows: characters 1 .. 16
    w = np.concatenate([b.weights for b in prefix])
    assert w.sum() == 16 and w[3:].sum() == 0
    valid = corpus.split("valid")
    assert np.array_equal(prefix[0].inputs[2], valid[8:16])
    with pytest.raises(ValueError, match=r"context 50 is longer than the text8 corpus allows: "
                                         r"its valid split holds 50 characters .* at most 49"):
        list(task.eval_batches("valid", 50, 4))
    assert task.describe()["eval_stride"] is None
    assert CharLMTask(corpus, length=8).describe()["eval_stride"] == 4


@pytest.mark.parametrize("attention, stride", [("softmax", 1), ("softmax", 3),
                                               ("learned", None)])
def test_whole_split_bpc_is_the_mean_over_every_character_after_the_first(tmp_path, attention,
                                                                          stride):
    """Brute force: each target scored by the first window (in order) that covers it, the model
    called on that window alone."""
    corpus = load_corpus("text8", text8_file(tmp_path), any_size=True)
    config = TrainConfig(corpus="text8", data="unused", attention=attention, method="exact",
                         eval_stride=stride, **TINY)
    task = CharLMTask(corpus, stride)
    trainer = Trainer(config, task)
    for _ in range(3):  # away from the initialization
        trainer.step(task.train_batch(batch_rng(0, 0), 4, 8))
    got = trainer.evaluate("valid", None, batch_size=3)
    tokens = corpus.split("valid")
    n, L, s = len(tokens), 8, task.stride(8)
    starts = list(range(0, n - 1 - L + 1, s))
    if starts[-1] != n - 1 - L:
        starts.append(n - 1 - L)
    model = trainer.model()
    nll, scored = 0.0, set()
    for start in starts:
        logp = np.asarray(jax_log_softmax(model(jnp.asarray(tokens[None, start:start + L],
                                                            jnp.int32), deterministic=True)))[0]
        for i in range(L):
            t = start + i + 1
            if t not in scored:
                scored.add(t)
                nll -= float(logp[i, tokens[t]])
    assert scored == set(range(1, n)) and got["characters"] == n - 1
    assert got["metric"] == pytest.approx(nll / (n - 1) / math.log(2), rel=1e-5)


def jax_log_softmax(x):
    import jax

    return jax.nn.log_softmax(x.astype(jnp.float32), axis=-1)


# ------------------------------------------------------------------------------------------------
# runs
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ptb_run(tmp_path_factory):
    """A finished tiny run on a PTB-char directory (Boltzmann attention, learned couplings)."""
    tmp = tmp_path_factory.mktemp("ptb_run")
    folder = ptb_dir(tmp)
    config = TrainConfig(corpus="ptb", data=str(folder), attention="learned", method="exact",
                         tie_embeddings=True, **TINY)
    final = train(config, str(tmp / "run"), progress=False)
    return config, tmp / "run", final, folder


def test_a_char_lm_run_records_its_corpus_scores_whole_splits_and_resumes(ptb_run, tmp_path):
    config, run, final, folder = ptb_run
    record = json.loads((run / "config.json").read_text())
    corpus = load_corpus("ptb", folder)
    info = record["task"]["corpus"]
    assert record["task"]["name"] == "char-lm" and info == json.loads(json.dumps(corpus.info))
    whole = b"".join((folder / f"ptb.char.{s}.txt").read_bytes()
                     for s in ("train", "valid", "test"))
    assert info["sha256"] == hashlib.sha256(whole).hexdigest()
    assert tuple(record["task"]["vocab"]) == corpus.vocab and record["task"]["eval_stride"] == 4
    assert record["config"]["tie_embeddings"] is True
    # final numbers over the whole splits; the periodic validation over a prefix
    assert final["test"]["characters"] == info["splits"]["test"] - 1
    assert final["valid"]["characters"] == info["splits"]["valid"] - 1
    m = rows(run / "metrics.csv")
    assert [(r["step"], r["split"]) for r in m] == [
        ("4", "train"), ("4", "valid"), ("8", "train"), ("8", "valid"), ("8", "test")]
    assert float(m[-1]["metric"]) == pytest.approx(final["test"]["metric"], abs=1e-5)
    assert final["test"]["metric"] == pytest.approx(final["test"]["loss"] / math.log(2))
    ev = evaluate_run(str(run), split="valid")
    assert ev["examples"] is None and ev["metrics"]["metric"] == pytest.approx(
        final["valid"]["metric"], rel=1e-6)

    def stop(step, row):
        if step == 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(config, str(tmp_path / "b"), progress=False, callback=stop)
    resumed = train(config, str(tmp_path / "b"), resume=True, progress=False)
    assert (tmp_path / "b" / "metrics.csv").read_text() == (run / "metrics.csv").read_text()
    assert resumed["test"] == final["test"]


def test_config_json_of_the_builtin_corpus_names_sources_and_versions(tmp_path, monkeypatch):
    root = os.path.dirname(json.__file__)  # the standard library's json package
    source = DocSource("json", root, "9.9.9")
    monkeypatch.setattr(_builtin_corpus, "default_sources", lambda: (source,))
    monkeypatch.setenv("ISINGATTN_CACHE", str(tmp_path / "cache"))
    config = TrainConfig(attention="softmax", **{**TINY, "steps": 2, "eval_every": 2})
    train(config, str(tmp_path / "run"), progress=False)
    info = json.loads((tmp_path / "run" / "config.json").read_text())["task"]["corpus"]
    corpus = load_corpus("builtin")
    assert info["name"] == "builtin" and info["sha256"] == corpus.info["sha256"]
    assert info["size"] == corpus.info["size"] > 1000
    assert [(s["name"], s["version"], s["root"]) for s in info["sources"]] == [
        ("json", "9.9.9", root)]


# ------------------------------------------------------------------------------------------------
# generation
# ------------------------------------------------------------------------------------------------


def test_generate_is_deterministic_per_seed_windows_the_prompt_and_needs_no_corpus(ptb_run,
                                                                                   tmp_path):
    _, run, _, folder = ptb_run
    os.rename(folder, tmp_path / "moved")  # generation reads config.json and the checkpoint
    try:
        a = generate_text(run, "the", 12, seed=1)
        assert a == generate_text(run, "the", 12, seed=1)
        assert len(load_corpus("ptb", tmp_path / "moved").encode(a)) == 12
        assert generate_text(run, "the", 30, seed=2) != generate_text(run, "the", 30, seed=3)
    finally:
        os.rename(tmp_path / "moved", folder)
    assert generate_text(run, "t", 0) == ""
    assert generate_text(run, "t", 10, top_k=1, seed=5) == generate_text(
        run, "t", 10, temperature=0)  # top-1 sampling is greedy
    # the compiled steps are kept per model structure: a later call (the run loaded again)
    # compiles nothing new
    from isingattn.experiments._generate import _decoder, _sampler

    before = _decoder.cache_info().misses, _sampler.cache_info().misses
    generate_text(run, "the", 12, seed=4)
    assert (_decoder.cache_info().misses, _sampler.cache_info().misses) == before
    # greedy decoding against the model called on the exact window (prompt longer than L)
    from isingattn.experiments._generate import _load

    trainer = _load(str(run), None)
    corpus = trainer.task.corpus
    prompt = "cat_sat_on<unk>"  # 11 symbols > L = 8
    ids = list(corpus.encode(prompt))
    model = trainer.model()
    for _ in range(4):
        logits = model(jnp.asarray([ids[-8:]], jnp.int32), deterministic=True)[0, -1]
        ids.append(int(jnp.argmax(logits)))
    assert generate_text(trainer, prompt, 4, temperature=0) == corpus.decode(ids[-4:])
    # a short prompt decodes with the key/value cache until the context is full, then slides
    # the window: the same characters as the model on the exact windows
    ids = list(corpus.encode("cat"))
    for _ in range(9):
        logits = model(jnp.asarray([ids[-8:]], jnp.int32), deterministic=True)[0, -1]
        ids.append(int(jnp.argmax(logits)))
    assert generate_text(trainer, "cat", 9, temperature=0) == corpus.decode(ids[-9:])


def test_generate_errors(ptb_run):
    _, run, _, _ = ptb_run
    with pytest.raises(ValueError, match=r"2 character\(s\) outside the ptb vocabulary: "
                                         r"'!', 'Z'; the vocabulary is '.*' and \['<eos>', "):
        generate_text(run, "theZ!<unk>", 3)
    with pytest.raises(ValueError, match="the prompt is empty"):
        generate_text(run, "", 3)
    with pytest.raises(ValueError, match="temperature must be finite and >= 0"):
        generate_text(run, "t", 3, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k must be None or an integer in 1 .. "):
        generate_text(run, "t", 3, top_k=0)
    with pytest.raises(ValueError, match="length must be an integer >= 0"):
        generate_text(run, "t", -1)
    other = Trainer(TrainConfig(task="pair-copy", length=8, layers=1, d_model=16, heads=2))
    with pytest.raises(ValueError, match="needs a language model .* 'pair-copy'"):
        generate_text(other, "t", 3)


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------


def error_line(capsys, command):
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err)
    assert err[-1].startswith(f"isingattn {command}: error: "), err
    return err[-1]


def test_cli_generate_and_evaluate(ptb_run, capsys):
    _, run, _, _ = ptb_run
    assert main(["generate", str(run), "--prompt", "dog", "--length", "6", "--seed", "4"]) == 0
    out = capsys.readouterr().out.strip()
    assert out == "dog" + generate_text(run, "dog", 6, seed=4)
    assert main(["generate", str(run), "--prompt", "DOG", "--length", "3"]) == 2
    assert "outside the ptb vocabulary: 'D', 'G', 'O'" in error_line(capsys, "generate")
    assert main(["generate", str(run.parent), "--prompt", "d"]) == 2
    assert "is not a training run" in error_line(capsys, "generate")
    assert main(["evaluate", str(run)]) == 0
    assert "test at length 8 (the whole split" in capsys.readouterr().out
    assert main(["evaluate", str(run), "--length", "16"]) == 2  # learned positions: L = 8
    assert "learned absolute positions for length 8" in error_line(capsys, "evaluate")


def test_cli_train_errors_are_one_line(tmp_path, capsys):
    base = ["train", "--task", "char-lm", "--layers", "1", "--d-model", "16", "--heads", "2",
            "--steps", "2", "--quiet", "--out", str(tmp_path / "out")]
    folder = ptb_dir(tmp_path)
    small = text8_file(tmp_path, 200)
    cases = [
        (["--corpus", "text8", "--data", str(tmp_path / "missing")], "no such file"),
        (["--corpus", "text8"], "corpus 'text8' is read from a local path"),
        (["--corpus", "builtin", "--data", str(small)], "the builtin corpus takes no data"),
        (["--corpus", "text8", "--data", str(small)], "is not text8: expected 100,000,000 bytes"),
        (["--corpus", "enwik8", "--data", str(small)], "is not enwik8: it starts with"),
        (["--corpus", "ptb", "--data", str(small)], "no such directory"),
        (["--corpus", "ptb", "--data", str(folder), "--length", "100000"],
         "context 100000 is longer than the ptb corpus allows"),
        (["--corpus", "ptb", "--data", str(folder), "--length", "8", "--eval-stride", "9"],
         "eval_stride must be between 1 and length = 8"),
        (["--task", "bracket", "--tie-embeddings"], "tie_embeddings needs a language model"),
    ]
    for extra, message in cases:
        assert main(base + extra) == 2, extra
        assert message in error_line(capsys, "train"), extra
    (folder / "ptb.char.valid.txt").write_text("")
    assert main(base + ["--corpus", "ptb", "--data", str(folder)]) == 2
    assert "ptb.char.valid.txt is empty" in error_line(capsys, "train")
