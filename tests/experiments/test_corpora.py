"""Character-level corpora: loaders on small synthetic files in each exact format, their checks
and errors, the built-in corpus (from a fixed small source set, its cache and info), and the
evaluation and training windows."""

import hashlib
import json
import os
import pathlib
import sys
import zipfile

import numpy as np
import pytest

from isingattn.experiments import _builtin_corpus
from isingattn.experiments._builtin_corpus import DocSource, cache_root, default_sources
from isingattn.experiments._corpora import (
    CORPORA,
    PTB_EOS,
    STANDARD_SIZE,
    TEXT8_VOCAB,
    eval_windows,
    load_corpus,
    normalize_text8,
    random_windows,
    split_sizes,
)

ALPHABET = np.frombuffer(b" abcdefghijklmnopqrstuvwxyz", np.uint8)


def text8_bytes(n, seed=0):
    return ALPHABET[np.random.default_rng(seed).integers(0, 27, n)].tobytes()


def enwik8_bytes(n, seed=0):
    body = "<page><title>Émile</title> ∑ café — naïve </page>\n".encode() * (n // 40 + 1)
    data = b"<mediawiki " + body
    return data[:n]


def zipped(tmp_path, name, data, member=None):
    path = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member or name, data)
    return path


def write(path, data):
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------------------------------------
# text8 and enwik8
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("packed", ["raw", "zip", "dir"])
def test_text8_splits_vocab_and_info(tmp_path, packed):
    data = text8_bytes(1003)
    raw = write(tmp_path / "text8", data)
    path = {"raw": raw, "zip": zipped(tmp_path, "text8", data), "dir": tmp_path}[packed]
    if packed == "zip":
        raw.unlink()
    corpus = load_corpus("text8", path, any_size=True)
    assert corpus.vocab == TEXT8_VOCAB and corpus.vocab_size == 27 and TEXT8_VOCAB[0] == " "
    assert corpus.info["splits"] == {"train": 903, "valid": 50, "test": 50} == split_sizes(1003)
    assert corpus.info["sha256"] == hashlib.sha256(data).hexdigest()
    assert corpus.info["size"] == 1003 and not corpus.info["standard_size"]
    assert corpus.info["format"] == ("zip" if packed == "zip" else "raw")
    pieces = [corpus.split(s) for s in ("train", "valid", "test")]
    assert all(p.dtype == np.uint8 for p in pieces)
    assert corpus.decode(np.concatenate(pieces)) == data.decode()
    assert corpus.decode(pieces[1]) == data[903:953].decode()
    json.dumps(corpus.info)  # goes into config.json


def test_text8_standard_size_is_split_90_5_5(tmp_path):
    path = write(tmp_path / "text8", b" " * STANDARD_SIZE)
    corpus = load_corpus("text8", path)
    assert corpus.info["splits"] == {"train": 90_000_000, "valid": 5_000_000, "test": 5_000_000}
    assert corpus.info["standard_size"]
    test = corpus.split("test")
    assert test.shape == (5_000_000,) and not test.any()


def test_text8_size_and_alphabet_errors(tmp_path):
    data = bytearray(text8_bytes(1000))
    path = write(tmp_path / "text8", bytes(data))
    with pytest.raises(ValueError, match=r"text8 is not text8: expected 100,000,000 bytes, got "
                                         r"1,000 \(pass any_size=True"):
        load_corpus("text8", path)
    data[17] = ord("A")
    write(path, bytes(data))
    msg = r"text8 is not text8: byte 0x41 \('A'\) at offset 17; text8 holds only a-z and space"
    with pytest.raises(ValueError, match=msg):
        load_corpus("text8", path, any_size=True)
    with pytest.raises(ValueError, match=r"\(member 'text8'\) is not text8: byte 0x41"):
        load_corpus("text8", zipped(tmp_path, "text8", bytes(data)), any_size=True)
    enwik8 = write(tmp_path / "enwik8", enwik8_bytes(1000))
    with pytest.raises(ValueError, match=r"enwik8 is not text8: byte 0x3c \('<'\) at offset 0"):
        load_corpus("text8", enwik8, any_size=True)


def test_empty_split_is_an_error(tmp_path):
    path = write(tmp_path / "text8", text8_bytes(39))
    with pytest.raises(ValueError, match=r"text8 holds 39 bytes: its valid and test splits \(1 "
                                         r"each\) would be empty or a single character"):
        load_corpus("text8", path, any_size=True)
    assert load_corpus("text8", write(path, text8_bytes(40)), any_size=True).info["splits"] == {
        "train": 36, "valid": 2, "test": 2}


@pytest.mark.parametrize("packed", ["raw", "zip"])
def test_enwik8_bytes(tmp_path, packed):
    data = enwik8_bytes(2000)
    path = write(tmp_path / "enwik8", data) if packed == "raw" else zipped(tmp_path, "enwik8",
                                                                            data)
    corpus = load_corpus("enwik8", path, any_size=True)
    assert corpus.vocab_size == 256 and corpus.vocab[60] == "<"
    assert corpus.info["splits"] == {"train": 1800, "valid": 100, "test": 100}
    assert corpus.info["sha256"] == hashlib.sha256(data).hexdigest()
    train, valid, test = (corpus.split(s) for s in ("train", "valid", "test"))
    assert isinstance(train, np.memmap) == (packed == "raw")  # a raw file is memory-mapped
    assert train.dtype == np.uint8
    assert np.concatenate([train, valid, test]).tobytes() == data
    assert corpus.decode(train[:200]) == data[:200].decode("utf-8", errors="replace")
    text = "naïve ∑ Émile"
    assert corpus.encode(text).tobytes() == text.encode() and corpus.decode(
        corpus.encode(text)) == text
    assert corpus.decode([0xE2]) == "\ufffd"  # a cut multi-byte sequence


def test_enwik8_errors(tmp_path):
    with pytest.raises(ValueError, match=r"enwik8 is not enwik8: expected 100,000,000 bytes"):
        load_corpus("enwik8", write(tmp_path / "enwik8", enwik8_bytes(500)))
    with pytest.raises(ValueError, match=r"text8 is not enwik8: it starts with b'[a-z ]{11}'; "
                                         r"enwik8 starts with b'<mediawiki '"):
        load_corpus("enwik8", write(tmp_path / "text8", text8_bytes(500)), any_size=True)


def test_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nothere/text8: no such file; text8 expects the "
                                                r"raw file 'text8' \(100,000,000 bytes\)"):
        load_corpus("text8", tmp_path / "nothere" / "text8")
    with pytest.raises(FileNotFoundError, match="holds neither 'enwik8' nor 'enwik8.zip'"):
        load_corpus("enwik8", tmp_path)
    with pytest.raises(ValueError, match=r"text8 is read from a local file \(nothing is "
                                         r"downloaded\)"):
        load_corpus("text8")
    other = zipped(tmp_path, "text8", text8_bytes(100), member="data/words.txt")
    with pytest.raises(ValueError, match=r"holds no member\(s\) named 'text8' \(members: "
                                         r"data/words.txt\)"):
        load_corpus("text8", other, any_size=True)
    bad_zip = write(tmp_path / "broken.zip", b"PK\x03\x04 not really")
    with pytest.raises(ValueError, match="starts like a zip file but cannot be read"):
        load_corpus("text8", bad_zip, any_size=True)


def test_name_option_and_split_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown corpus 'wiki'; valid: builtin, text8, enwik8, "
                                         "ptb"):
        load_corpus("wiki")
    with pytest.raises(TypeError, match=r"load_corpus\('ptb'\) got unknown option\(s\) any_size; "
                                        "it accepts none"):
        load_corpus("ptb", tmp_path, any_size=True)
    with pytest.raises(ValueError, match="the builtin corpus takes no path"):
        load_corpus("builtin", tmp_path)
    corpus = load_corpus("text8", write(tmp_path / "text8", text8_bytes(100)), any_size=True)
    with pytest.raises(ValueError, match="split must be one of 'train', 'valid', 'test'; got 'dev'"):
        corpus.split("dev")
    assert CORPORA == ("builtin", "text8", "enwik8", "ptb")


def test_encode_decode(tmp_path):
    corpus = load_corpus("text8", write(tmp_path / "text8", text8_bytes(100)), any_size=True)
    ids = corpus.encode(" the cat")
    assert ids.dtype == np.uint8 and ids.tolist() == [0, 20, 8, 5, 0, 3, 1, 20]
    assert corpus.decode(ids) == " the cat"
    with pytest.raises(ValueError, match=r"'T' at position 0 is not in the text8 vocabulary"):
        corpus.encode("The")
    assert corpus.encode(normalize_text8("The Cat, 2x!")).tolist() == corpus.encode(
        "the cat x").tolist()
    with pytest.raises(ValueError, match=r"token id 27 is outside the text8 vocabulary"):
        corpus.decode([1, 27])


# ------------------------------------------------------------------------------------------------
# PTB-char
# ------------------------------------------------------------------------------------------------

PTB_TRAIN = ("a e r _ b a n k n o t e \n"
             "p i e r r e _ <unk> _ N _ y e a r s _ o l d \n"
             "$ _ N _ m i l l i o n _ ' s _ c o . _ t h e _ c a t \n")
PTB_VALID = "t h e _ <unk> _ y e a r \nN _ s a i d"  # no trailing space or final newline
PTB_TEST = "a _ b \n\nc a t \n"  # an empty line is a sentence of its own


def ptb_dir(tmp_path, train=PTB_TRAIN, valid=PTB_VALID, test=PTB_TEST):
    folder = tmp_path / "ptb"
    folder.mkdir(exist_ok=True)
    for split, text in (("train", train), ("valid", valid), ("test", test)):
        (folder / f"ptb.char.{split}.txt").write_bytes(text.encode())
    return folder


def test_ptb_vocab_splits_and_line_ends(tmp_path):
    folder = ptb_dir(tmp_path)
    corpus = load_corpus("ptb", folder)
    symbols = set(PTB_TRAIN.replace("<unk>", " ").split()) | {"<unk>", PTB_EOS}
    assert corpus.vocab == tuple(sorted(symbols)) and corpus.vocab_size == len(symbols)
    assert corpus.decode(corpus.split("valid")) == "the_<unk>_year<eos>N_said<eos>"
    assert corpus.decode(corpus.split("test")) == "a_b<eos><eos>cat<eos>"
    train = corpus.decode(corpus.split("train"))
    assert train.startswith("aer_banknote<eos>pierre_<unk>_N_")
    assert train.endswith("$_N_million_'s_co._the_cat<eos>")
    assert corpus.info["splits"] == {"train": len(corpus.split("train")), "valid": 18, "test": 9}
    assert corpus.info["size"] == sum(corpus.info["splits"].values())
    files = corpus.info["files"]
    assert files["valid"]["sha256"] == hashlib.sha256(PTB_VALID.encode()).hexdigest()
    whole = (PTB_TRAIN + PTB_VALID + PTB_TEST).encode()
    assert corpus.info["sha256"] == hashlib.sha256(whole).hexdigest()
    assert load_corpus("ptb", folder / "ptb.char.test.txt").info == corpus.info  # a file: its dir
    ids = corpus.encode("pierre_<unk><eos>")
    assert corpus.decode(ids) == "pierre_<unk><eos>" and len(ids) == 9
    json.dumps(corpus.info)


def test_ptb_errors(tmp_path):
    folder = ptb_dir(tmp_path)
    (folder / "ptb.char.valid.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"ptb.char.valid.txt: no such file; ptb expects "
                                                r"a directory holding ptb.char.train.txt"):
        load_corpus("ptb", folder)
    word_level = "aer banknote berlitz\n"
    with pytest.raises(ValueError, match=r"ptb.char.train.txt is not PTB-char: token 'aer' on "
                                         r"line 1; PTB-char holds single characters"):
        load_corpus("ptb", ptb_dir(tmp_path, train=word_level))
    with pytest.raises(ValueError, match=r"ptb.char.test.txt: symbol 'z' on line 2 is not in "
                                         r"the vocabulary of ptb.char.train.txt"):
        load_corpus("ptb", ptb_dir(tmp_path, test="a _ b \nz o o \n"))
    with pytest.raises(ValueError, match=r"ptb.char.valid.txt is empty"):
        load_corpus("ptb", ptb_dir(tmp_path, valid=" \n"))
    with pytest.raises(ValueError, match=r"is not PTB-char: byte 0xc3 \('Ã'\) on line 2"):
        load_corpus("ptb", ptb_dir(tmp_path, valid="a \nc a f é \n"))
    with pytest.raises(ValueError, match="ptb is read from local files"):
        load_corpus("ptb")
    corpus = load_corpus("ptb", ptb_dir(tmp_path))
    with pytest.raises(ValueError, match=r"'z' at position 2 is not in the ptb vocabulary"):
        corpus.encode("a_z")


# ------------------------------------------------------------------------------------------------
# the built-in corpus
# ------------------------------------------------------------------------------------------------

MODULE_A = '''"""Module A: Hello, World! 42 times."""


class Thing:
    """A thing -- with 3 parts."""

    def run(self):
        """Run it.   Twice?"""


def helper():
    """Return None."""
'''
MODULE_B = '''"""Module B, café."""


def helper():
    """Return None."""
'''


@pytest.fixture
def doc_source(tmp_path):
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / ".hidden").mkdir()
    (root / "a.py").write_text(MODULE_A)
    (root / "sub" / "b.py").write_text(MODULE_B)
    (root / "broken.py").write_text("def f(:\n")
    (root / "notes.txt").write_text('"""not python"""')
    (root / "tests" / "test_x.py").write_text('"""Excluded tests."""')
    (root / ".hidden" / "h.py").write_text('"""Excluded hidden."""')
    return DocSource("pkg", str(root), "1.2.3")


def test_builtin_from_injected_sources(tmp_path, doc_source):
    cache = tmp_path / "cache"
    corpus = load_corpus("builtin", sources=[doc_source], cache_dir=cache)
    text = corpus.decode(np.concatenate([corpus.split(s) for s in ("train", "valid", "test")]))
    a, b, repeat = "module a hello world times a thing with parts run it twice", "module b caf", \
        "return none"  # in both files: kept in the first only (file order: by hash of the path)
    assert text in (f"{a} {repeat} {b}", f"{b} {repeat} {a}")
    assert "excluded" not in text and "python" not in text
    info = corpus.info
    assert info["name"] == "builtin" and info["vocab_size"] == 27 and corpus.vocab == TEXT8_VOCAB
    assert info["sources"] == [{"name": "pkg", "version": "1.2.3", "root": doc_source.root,
                                "files": 3, "unparsable": 1, "docstrings": 5,
                                "characters": len(text) - 4}]
    assert info["duplicates_dropped"] == 1
    path = cache / "corpora" / os.path.basename(info["path"])
    assert info["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info["size"] == len(text) == path.stat().st_size
    assert info["splits"] == split_sizes(len(text))
    assert json.loads(path.with_suffix(".json").read_text())["sha256"] == info["sha256"]
    json.dumps(info)


def test_builtin_cache_reuse_and_rebuild(tmp_path, doc_source, monkeypatch):
    cache = tmp_path / "cache"
    first = load_corpus("builtin", sources=[doc_source], cache_dir=cache)
    path = first.info["path"]

    def no_build(sources):
        raise AssertionError("rebuilt although cached")

    monkeypatch.setattr(_builtin_corpus, "build_text", no_build)
    again = load_corpus("builtin", sources=[doc_source], cache_dir=cache)
    assert again.info == first.info
    with pytest.raises(AssertionError, match="rebuilt"):
        load_corpus("builtin", sources=[doc_source], cache_dir=cache, rebuild=True)
    monkeypatch.undo()
    with open(path, "r+b") as f:  # a damaged cache file is rebuilt
        f.write(b"zzzz")
    rebuilt = load_corpus("builtin", sources=[doc_source], cache_dir=cache).info
    assert rebuilt.pop("build_seconds") >= 0 and first.info.pop("build_seconds") >= 0
    assert rebuilt == first.info
    other = DocSource(doc_source.name, doc_source.root, "9.9")  # a new version: a new file
    assert load_corpus("builtin", sources=[other], cache_dir=cache).info["path"] != path
    assert sorted(p.suffix for p in (cache / "corpora").iterdir()) == [".json"] * 2 + [".txt"] * 2


def test_cache_root_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ISINGATTN_CACHE", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "a"
    monkeypatch.delenv("ISINGATTN_CACHE")
    assert cache_root() == tmp_path / "x" / "isingattn"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == tmp_path / "home" / ".cache" / "isingattn"


def test_builtin_from_a_real_stdlib_package(tmp_path):
    """A real source (the standard library's json package): deterministic, parsed, English."""
    root = os.path.join(os.path.dirname(json.__file__))
    source = DocSource("json", root, sys.version.split()[0])
    a = load_corpus("builtin", sources=[source], cache_dir=tmp_path / "a")
    b = load_corpus("builtin", sources=[source], cache_dir=tmp_path / "b")
    assert a.info["sha256"] == b.info["sha256"] and a.info["size"] > 5_000
    assert a.info["sources"][0]["unparsable"] == 0
    assert " the " in a.decode(a.split("train"))


def test_default_sources_are_located_without_import():
    sources = default_sources()
    assert [s.name for s in sources] == ["python-stdlib", "numpy", "scipy", "jax"]
    assert all(os.path.isdir(s.root) for s in sources)
    import numpy
    import scipy

    assert sources[1].version == numpy.__version__ and sources[2].version == scipy.__version__


def test_builtin_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="docstring source 'x': .* is not a directory"):
        load_corpus("builtin", sources=[DocSource("x", str(tmp_path / "no"), "1")],
                    cache_dir=tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"the docstring sources \['e'\] hold no docstring"):
        load_corpus("builtin", sources=[DocSource("e", str(tmp_path / "empty"), "1")],
                    cache_dir=tmp_path)


@pytest.mark.slow
def test_builtin_real_build(tmp_path):
    """The real corpus (standard library, numpy, scipy, jax): about 15 s on two cores."""
    corpus = load_corpus("builtin", cache_dir=tmp_path)
    info = corpus.info
    assert info["size"] > 5_000_000
    assert all(s["docstrings"] > 500 for s in info["sources"])
    assert info["sha256"] == hashlib.sha256(pathlib.Path(info["path"]).read_bytes()).hexdigest()
    assert info["splits"] == split_sizes(info["size"])


# ------------------------------------------------------------------------------------------------
# windows
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, context, stride, batch", [
    (2, 4, 2, 3), (9, 8, 8, 1), (10, 4, 4, 2), (100, 8, 3, 5), (101, 16, 1, 64), (50, 7, 5, 4),
    (1000, 32, 16, 7)])
def test_eval_windows_score_every_target_once(n, context, stride, batch):
    tokens = np.arange(n)  # a token is its own position
    windows = eval_windows(tokens, context, stride, batch)
    batches = list(windows)
    assert len(batches) == len(windows) == -(-windows.num_windows // batch)
    scored = []
    total = 0.0
    for inputs, targets, weights in batches:
        assert inputs.shape == targets.shape == weights.shape == (batch, context)
        assert inputs.dtype == targets.dtype == np.int32 and weights.dtype == np.float32
        total += weights.sum()
        for row in range(batch):
            for j in np.flatnonzero(weights[row]):
                t = targets[row, j]
                assert inputs[row, : j + 1].tolist() == list(range(t - j - 1, t))  # its history
                assert j + 1 >= min(t, context - stride)
                scored.append(t)
    assert total == n - 1
    assert sorted(scored) == list(range(1, n))


def test_eval_windows_errors():
    with pytest.raises(ValueError, match="stride must be between 1 and context = 4; got 5"):
        eval_windows(np.arange(10), 4, 5, 2)
    with pytest.raises(ValueError, match=r"tokens has 1 element\(s\); evaluation needs at least 2"):
        eval_windows(np.arange(1), 4, 2, 2)
    with pytest.raises(ValueError, match=r"tokens must be a 1-D integer array; got shape \(2, 5\)"):
        eval_windows(np.zeros((2, 5), int), 4, 2, 2)
    with pytest.raises(ValueError, match="context must be an integer >= 1; got 0"):
        eval_windows(np.arange(10), 0, 1, 2)


def test_random_windows_deterministic():
    import jax

    tokens = np.arange(500).astype(np.uint16)
    inputs, targets = random_windows(tokens, 3, 8, 16)
    assert inputs.shape == targets.shape == (8, 16) and inputs.dtype == targets.dtype == np.int32
    assert (targets[:, :-1] == inputs[:, 1:]).all() and (np.diff(inputs, axis=1) == 1).all()
    assert (inputs[:, 0] <= 500 - 17).all()
    again = random_windows(tokens, 3, 8, 16)
    assert all((x == y).all() for x, y in zip((inputs, targets), again))
    same_rng = random_windows(tokens, np.random.default_rng(3), 8, 16)
    assert (same_rng[0] == inputs).all()
    assert not (random_windows(tokens, 4, 8, 16)[0] == inputs).all()
    k1 = random_windows(tokens, jax.random.key(1), 8, 16)[0]
    assert (k1 == random_windows(tokens, jax.random.key(1), 8, 16)[0]).all()
    assert not (k1 == random_windows(tokens, jax.random.key(2), 8, 16)[0]).all()
    with pytest.raises(ValueError, match=r"tokens has 16 element\(s\); a window of context 16 "
                                         "needs at least 17"):
        random_windows(tokens[:16], 0, 2, 16)
    with pytest.raises(TypeError, match="rng_or_key must be a numpy Generator, an integer seed"):
        random_windows(tokens, 1.5, 2, 4)
