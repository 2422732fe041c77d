"""Character-level corpora for language modelling: text8, enwik8, PTB-char and a built-in corpus.

Nothing is downloaded: text8, enwik8 and PTB-char are read from a local path, and the built-in
corpus is assembled from the docstrings of the installed standard library, numpy, scipy and jax
(:mod:`._builtin_corpus`). :func:`load_corpus` checks what it opens (size, alphabet, format) and
returns a :class:`CharCorpus`, whose splits load lazily, one at a time, as 1-D ``uint8`` token
arrays. :func:`eval_windows` and :func:`random_windows` cut a split into model inputs.

Splits. text8, enwik8 and the built-in corpus are one stream cut by position: the first 90% train,
the next 5% valid, the last 5% test (``valid = test = n // 20``, ``train = n - 2 * (n // 20)``),
which for the standard 100,000,000-character files is the usual 90M / 5M / 5M. PTB-char comes as
three files.
"""

from __future__ import annotations

import hashlib
import math
import os
import pathlib
import re
import string
import sys
import zipfile
from collections.abc import Callable

import numpy as np

from .._validation import check_choice, check_positive_int
from ._builtin_corpus import (
    DocSource,
    builtin_corpus_file,
    cache_root,
    default_sources,
    normalize_text8,
)

__all__ = ["CORPORA", "PTB_EOS", "SPLITS", "TEXT8_VOCAB", "CharCorpus", "DocSource",
           "EvalWindows", "cache_root", "default_sources", "eval_windows", "load_corpus",
           "normalize_text8", "random_windows", "split_sizes"]

#: Corpus names accepted by :func:`load_corpus`.
CORPORA = ("builtin", "text8", "enwik8", "ptb")
#: Split names accepted by :meth:`CharCorpus.split`.
SPLITS = ("train", "valid", "test")
#: Symbols of text8 and of the built-in corpus: space (id 0), then ``a`` .. ``z`` (ids 1 .. 26).
TEXT8_VOCAB = (" ",) + tuple(string.ascii_lowercase)
#: Bytes in the standard text8 and enwik8 files.
STANDARD_SIZE = 100_000_000
#: The first bytes of enwik8 (the Wikipedia XML dump it is cut from).
ENWIK8_HEADER = b"<mediawiki "
#: File names of the PTB-char splits, as distributed in Mikolov's ``simple-examples.tgz``.
PTB_FILES = {s: f"ptb.char.{s}.txt" for s in SPLITS}
#: The symbol that stands for a PTB line end (one per line, as in Merity et al.'s AWD-LSTM).
PTB_EOS = "<eos>"

_CHUNK = 1 << 23  # bytes per read: bounded memory while streaming a file or a zip member
_ZIP_MAGIC = b"PK\x03\x04"
_TEXT8_HINT = "text8 holds only a-z and space"


def split_sizes(n: int) -> dict[str, int]:
    """The positional 90/5/5 split of a stream of ``n`` characters:
    ``{"train": n - 2 * (n // 20), "valid": n // 20, "test": n // 20}``."""
    held = n // 20
    return {"train": n - 2 * held, "valid": held, "test": held}


# ------------------------------------------------------------------------------------------------
# the corpus object
# ------------------------------------------------------------------------------------------------


class CharCorpus:
    """A character-level corpus: a vocabulary and three splits, loaded on demand.

    Attributes:
      name: one of :data:`CORPORA`.
      vocab: tuple of symbols; the index is the token id. text8 and builtin: :data:`TEXT8_VOCAB`
        (27). enwik8: the 256 byte values, shown as ``chr(b)``. ptb: the sorted symbols of the
        training file and :data:`PTB_EOS` (50 reported for the distributed files).
      vocab_size: ``len(vocab)``.
      info: JSON-able provenance for a run's ``config.json``: ``name``, ``path``, ``sha256``
        (of the corpus bytes; for ptb of the three files concatenated in split order, each file's
        own in ``files``), ``size`` (characters, i.e. tokens, of all splits), ``splits`` (tokens
        per split), ``vocab_size``, and per corpus: ``format``/``member`` (raw file or zip),
        ``sources`` with versions (builtin).
    """

    def __init__(self, name: str, vocab: tuple[str, ...], info: dict,
                 read: Callable[[str], np.ndarray], byte_level: bool = False):
        self.name = name
        self.vocab = tuple(vocab)
        self.info = info
        self._read = read
        self._byte_level = byte_level
        self._ids = {s: i for i, s in enumerate(self.vocab)}
        multi = sorted((s for s in self.vocab if len(s) > 1), key=len, reverse=True)
        self._multi = re.compile("|".join(map(re.escape, multi))) if multi else None
        self._lut = None
        if not multi and all(s.isascii() for s in self.vocab) and len(self.vocab) < 255:
            self._lut = np.full(128, 255, np.uint8)
            self._lut[[ord(s) for s in self.vocab]] = np.arange(len(self.vocab))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __repr__(self):
        return (f"CharCorpus({self.name!r}, vocab_size={self.vocab_size}, "
                f"splits={self.info['splits']}, path={self.info['path']!r})")

    def split(self, which: str) -> np.ndarray:
        """The tokens of split ``which`` (``"train"``, ``"valid"`` or ``"test"``): a 1-D
        ``uint8`` array of ``info["splits"][which]`` ids.

        Read from disk on every call and not kept (one split in memory at a time). A raw enwik8
        file is memory-mapped (``np.memmap``, read-only, nothing read until used); text8-format
        files are translated to ids in chunks; zip members are streamed in chunks."""
        check_choice("split", which, SPLITS)
        return self._read(which)

    def encode(self, text: str) -> np.ndarray:
        """Token ids (``uint8``) of ``text``. enwik8: its UTF-8 bytes. Others: ``text`` read as a
        sequence of vocabulary symbols (multi-character symbols such as ``<unk>`` matched first).
        Raises ``ValueError`` naming the first character outside the vocabulary (for text8 and
        builtin, :func:`normalize_text8` maps any text into it)."""
        if self._byte_level:
            return np.frombuffer(text.encode("utf-8"), np.uint8).copy()
        if self._lut is not None and text.isascii():  # fast path: one-character symbols
            ids = self._lut[np.frombuffer(text.encode("ascii"), np.uint8)]
            if not (ids == 255).any():
                return ids
        ids, pos = [], 0
        while pos < len(text):
            m = self._multi.match(text, pos) if self._multi is not None else None
            sym = m.group() if m else text[pos]
            if sym not in self._ids:
                raise ValueError(
                    f"{sym!r} at position {pos} is not in the {self.name} vocabulary "
                    f"({''.join(s for s in self.vocab if len(s) == 1)!r} and "
                    f"{[s for s in self.vocab if len(s) > 1]})")
            ids.append(self._ids[sym])
            pos += len(sym)
        return np.asarray(ids, np.uint8)

    def decode(self, ids) -> str:
        """The text of token ``ids``: the symbols joined (enwik8: the bytes decoded as UTF-8,
        invalid sequences replaced by U+FFFD). ``decode(encode(s)) == s`` for any text the
        vocabulary can encode. Raises ``ValueError`` for an id outside ``0 .. vocab_size - 1``."""
        ids = np.asarray(ids).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            bad = ids[(ids < 0) | (ids >= self.vocab_size)][0]
            raise ValueError(f"token id {bad} is outside the {self.name} vocabulary "
                             f"(0 .. {self.vocab_size - 1})")
        if self._byte_level:
            return ids.astype(np.uint8).tobytes().decode("utf-8", errors="replace")
        return "".join(self.vocab[i] for i in ids.tolist())


# ------------------------------------------------------------------------------------------------
# streams: a raw file or a zip member, read in chunks
# ------------------------------------------------------------------------------------------------


class _Stream:
    """One corpus file: raw or a member of a zip file. ``where`` names it in messages."""

    def __init__(self, path: pathlib.Path, member: str | None, size: int):
        self.path, self.member, self.size = path, member, size
        self.where = str(path) if member is None else f"{path} (member {member!r})"

    def chunks(self, start: int, stop: int):
        """``(offset, uint8 array)`` pieces covering bytes ``start .. stop - 1``. A piece is valid
        until the next one is asked for: a raw file is read into one reused buffer (plain reads,
        not a memory map, so that a pass over the file leaves no mapped pages behind)."""
        if start >= stop:
            return
        if self.member is None:
            buf = np.empty(min(_CHUNK, stop - start), np.uint8)
            with open(self.path, "rb") as f:
                f.seek(start)
                pos = start
                while pos < stop:
                    got = f.readinto(memoryview(buf)[:min(_CHUNK, stop - pos)])
                    if not got:
                        raise ValueError(f"{self.where} ended at byte {pos:,}; expected "
                                         f"{self.size:,} bytes (did it change while read?)")
                    yield pos, buf[:got]
                    pos += got
            return
        with zipfile.ZipFile(self.path) as zf, zf.open(self.member) as f:
            pos = 0
            while pos < start:  # a zip member is read from its start
                skipped = len(f.read(min(_CHUNK, start - pos)))
                if not skipped:
                    break
                pos += skipped
            while pos < stop:
                piece = f.read(min(_CHUNK, stop - pos))
                if not piece:
                    raise ValueError(f"{self.where} ended at byte {pos:,}; its header says "
                                     f"{self.size:,} bytes (a truncated zip file)")
                yield pos, np.frombuffer(piece, np.uint8)
                pos += len(piece)

    def head(self, n: int) -> bytes:
        return b"".join(c.tobytes() for _, c in self.chunks(0, min(n, self.size)))


def _open_stream(path: pathlib.Path, corpus: str) -> _Stream:
    """A raw file, or the member named ``corpus`` of a zip file (recognised by its magic bytes,
    whatever its name)."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != _ZIP_MAGIC:
        return _Stream(path, None, path.stat().st_size)
    try:
        with zipfile.ZipFile(path) as zf:
            members = [i for i in zf.infolist()
                       if not i.is_dir() and pathlib.PurePosixPath(i.filename).name == corpus]
            names = [i.filename for i in zf.infolist()]
    except zipfile.BadZipFile as e:
        raise ValueError(f"{path} starts like a zip file but cannot be read as one ({e})") from e
    if len(members) != 1:
        raise ValueError(f"{path} holds {'no' if not members else 'several'} member(s) named "
                         f"{corpus!r} (members: {', '.join(names[:10]) or 'none'}); "
                         f"{corpus}.zip holds one file, {corpus!r}")
    return _Stream(path, members[0].filename, members[0].file_size)


def _resolve_file(name: str, path) -> pathlib.Path:
    """The corpus file for ``path``: a raw file or zip, or a directory holding
    ``<name>`` or ``<name>.zip``."""
    expected = (f"{name} expects the raw file {name!r} ({STANDARD_SIZE:,} bytes) or {name}.zip, "
                "or a directory holding one of them")
    if path is None:
        raise ValueError(f"{name} is read from a local file (nothing is downloaded): "
                         f"load_corpus({name!r}, path=...); {expected}")
    path = pathlib.Path(path).expanduser()
    if path.is_dir():
        for candidate in (path / name, path / f"{name}.zip"):
            if candidate.is_file():
                return candidate
        raise FileNotFoundError(f"{path} holds neither {name!r} nor '{name}.zip'; {expected}")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file; {expected}")
    return path


def _check_size(stream: _Stream, name: str, any_size: bool) -> dict[str, int]:
    n = stream.size
    if n != STANDARD_SIZE and not any_size:
        raise ValueError(
            f"{stream.where} is not {name}: expected {STANDARD_SIZE:,} bytes, got {n:,} (pass "
            "any_size=True to accept another size, split 90/5/5 in proportion)")
    sizes = split_sizes(n)
    if sizes["valid"] < 2:
        raise ValueError(f"{stream.where} holds {n:,} bytes: its valid and test splits "
                         f"({sizes['valid']} each) would be empty or a single character; "
                         "the 90/5/5 split needs at least 40")
    return sizes


# ------------------------------------------------------------------------------------------------
# text8 (and the built-in corpus, stored in text8 format)
# ------------------------------------------------------------------------------------------------

_TEXT8_IDS = np.full(256, 255, np.uint8)
_TEXT8_IDS[ord(" ")] = 0
_TEXT8_IDS[ord("a"):ord("z") + 1] = np.arange(1, 27)


def _byte_str(b: int) -> str:
    return f"byte 0x{b:02x} ({chr(b)!r})"


def _text8_ids(stream: _Stream, offset: int, chunk: np.ndarray, what: str) -> np.ndarray:
    """Token ids of a chunk at ``offset``; ``ValueError`` at its first byte outside text8's."""
    ids = _TEXT8_IDS[chunk]
    if ids.max() > 26:  # (max: no temporary array)
        i = int(np.argmax(ids > 26))
        raise ValueError(f"{stream.where} is not {what}: {_byte_str(int(chunk[i]))} at offset "
                         f"{offset + i}; {_TEXT8_HINT}")
    return ids


def _scan(stream: _Stream, check: Callable | None) -> str:
    """SHA-256 of the whole stream; ``check(offset, chunk)`` on every chunk."""
    h = hashlib.sha256()
    for offset, chunk in stream.chunks(0, stream.size):
        h.update(chunk)
        if check is not None:
            check(offset, chunk)
    return h.hexdigest()


def _text8_reader(stream: _Stream, sizes: dict, what: str):
    def read(which: str) -> np.ndarray:
        start = {"train": 0, "valid": sizes["train"],
                 "test": sizes["train"] + sizes["valid"]}[which]
        out = np.empty(sizes[which], np.uint8)
        for offset, chunk in stream.chunks(start, start + sizes[which]):
            # checked again: the file may have changed since it was opened
            out[offset - start:offset - start + len(chunk)] = _text8_ids(stream, offset, chunk,
                                                                         what)
        return out
    return read


def _stream_info(name: str, stream: _Stream, sizes: dict, sha256: str, vocab_size: int) -> dict:
    return {"name": name, "path": str(stream.path),
            "format": "raw" if stream.member is None else "zip", "member": stream.member,
            "sha256": sha256, "size": stream.size, "standard_size": stream.size == STANDARD_SIZE,
            "splits": dict(sizes), "vocab_size": vocab_size}


def _load_text8(path, any_size: bool = False) -> CharCorpus:
    stream = _open_stream(_resolve_file("text8", path), "text8")
    sizes = _check_size(stream, "text8", any_size)
    sha = _scan(stream, lambda offset, chunk: _text8_ids(stream, offset, chunk, "text8"))
    return CharCorpus("text8", TEXT8_VOCAB, _stream_info("text8", stream, sizes, sha, 27),
                      _text8_reader(stream, sizes, "text8"))


def _load_builtin(path=None, sources=None, cache_dir=None, rebuild: bool = False) -> CharCorpus:
    if path is not None:
        raise ValueError("the builtin corpus takes no path: it is assembled from the installed "
                         "docstrings (cache_dir= says where it is cached)")
    file, record = builtin_corpus_file(sources, cache_dir=cache_dir, rebuild=rebuild)
    stream = _Stream(file, None, file.stat().st_size)
    sizes = _check_size(stream, "the builtin corpus", any_size=True)
    info = {"name": "builtin", "path": str(file), "format": f"builtin-v{record['format']}",
            "sha256": record["sha256"], "size": stream.size, "splits": sizes, "vocab_size": 27,
            **{k: record[k] for k in ("sources", "duplicates_dropped", "build_seconds")}}
    return CharCorpus("builtin", TEXT8_VOCAB, info,
                      _text8_reader(stream, sizes, "the builtin corpus"))


# ------------------------------------------------------------------------------------------------
# enwik8
# ------------------------------------------------------------------------------------------------


def _load_enwik8(path, any_size: bool = False) -> CharCorpus:
    stream = _open_stream(_resolve_file("enwik8", path), "enwik8")
    head = stream.head(len(ENWIK8_HEADER))
    if head != ENWIK8_HEADER:
        raise ValueError(f"{stream.where} is not enwik8: it starts with {head!r}; enwik8 starts "
                         f"with {ENWIK8_HEADER!r} (the Wikipedia XML dump it is cut from)")
    sizes = _check_size(stream, "enwik8", any_size)
    sha = _scan(stream, None)
    starts = {"train": 0, "valid": sizes["train"], "test": sizes["train"] + sizes["valid"]}

    def read(which: str) -> np.ndarray:
        if stream.member is None:
            return np.memmap(stream.path, np.uint8, mode="r", offset=starts[which],
                             shape=(sizes[which],))
        out = np.empty(sizes[which], np.uint8)
        for offset, chunk in stream.chunks(starts[which], starts[which] + sizes[which]):
            out[offset - starts[which]:offset - starts[which] + len(chunk)] = chunk
        return out

    return CharCorpus("enwik8", tuple(chr(b) for b in range(256)),
                      _stream_info("enwik8", stream, sizes, sha, 256), read, byte_level=True)


# ------------------------------------------------------------------------------------------------
# PTB-char
# ------------------------------------------------------------------------------------------------

_UNK, _EOS = 1, 2  # stand-in bytes for the two multi-character symbols while parsing
_PTB_HINT = ("PTB-char holds single characters (and <unk>) separated by spaces, '_' between "
             "words, one sentence per line (ptb.char.*.txt of Mikolov's simple-examples.tgz)")


def _ptb_symbols(path: pathlib.Path) -> np.ndarray:
    """The symbol bytes of a PTB-char file, ``<unk>`` as ``_UNK`` and each line end as ``_EOS``.
    Raises ``ValueError`` naming the file and line of anything that is not the format."""
    data = path.read_bytes()
    if not data.strip():
        raise ValueError(f"{path} is empty; {_PTB_HINT}")
    if not data.endswith(b"\n"):
        data += b"\n"  # a last line without its newline still ends a sentence
    raw = np.frombuffer(data, np.uint8)
    bad = ((raw < 0x21) | (raw > 0x7E)) & ~np.isin(raw, (9, 10, 13, 32))
    if bad.any():
        i = int(np.argmax(bad))
        line = data.count(b"\n", 0, i) + 1
        raise ValueError(f"{path} is not PTB-char: {_byte_str(int(raw[i]))} on line {line}; "
                         f"{_PTB_HINT}")
    arr = np.frombuffer(data.replace(b"<unk>", bytes([_UNK])).replace(b"\n", b" \x02 "),
                        np.uint8)
    filled = (arr != 32) & (arr != 9) & (arr != 13)
    if (filled[1:] & filled[:-1]).any():
        for lineno, line in enumerate(data.split(b"\n"), 1):
            for token in line.split():
                if len(token) > 1 and token != b"<unk>":
                    raise ValueError(f"{path} is not PTB-char: token {token.decode()!r} on line "
                                     f"{lineno}; {_PTB_HINT}")
        raise AssertionError("adjacent symbols without a token longer than one")  # unreachable
    return arr[filled]


def _ptb_symbol_name(b: int) -> str:
    return {_UNK: "<unk>", _EOS: PTB_EOS}.get(b, chr(b))


def _ptb_line_of(path: pathlib.Path, symbol: str) -> int:
    for lineno, line in enumerate(path.read_text("ascii").split("\n"), 1):
        if symbol in line.split():
            return lineno
    return 0


def _load_ptb(path) -> CharCorpus:
    expected = (f"ptb expects a directory holding {', '.join(PTB_FILES.values())} (as in "
                "simple-examples/data/ of Mikolov's simple-examples.tgz)")
    if path is None:
        raise ValueError(f"ptb is read from local files (nothing is downloaded): "
                         f"load_corpus('ptb', path=...); {expected}")
    folder = pathlib.Path(path).expanduser()
    if folder.is_file() and folder.name in PTB_FILES.values():
        folder = folder.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such directory; {expected}")
    files = {s: folder / f for s, f in PTB_FILES.items()}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)}: no such file; {expected}")

    counts = np.bincount(_ptb_symbols(files["train"]), minlength=256)
    present = np.flatnonzero(counts).tolist()
    vocab = tuple(sorted(_ptb_symbol_name(b) for b in present))
    lut = np.full(256, 255, np.uint8)
    for b in present:
        lut[b] = vocab.index(_ptb_symbol_name(b))

    def read(which: str) -> np.ndarray:
        ids = lut[_ptb_symbols(files[which])]
        if (ids == 255).any():
            b = int(_ptb_symbols(files[which])[np.argmax(ids == 255)])
            sym = _ptb_symbol_name(b)
            raise ValueError(f"{files[which]}: symbol {sym!r} on line "
                             f"{_ptb_line_of(files[which], sym)} is not in the vocabulary of "
                             f"{files['train'].name} ({len(vocab)} symbols: {''.join(vocab)})")
        return ids

    sizes = {"train": int(counts.sum())}
    for which in ("valid", "test"):
        sizes[which] = len(read(which))
    whole = hashlib.sha256()
    file_info = {}
    for which, p in files.items():
        data = p.read_bytes()
        whole.update(data)
        file_info[which] = {"path": str(p), "bytes": len(data),
                            "sha256": hashlib.sha256(data).hexdigest()}
    info = {"name": "ptb", "path": str(folder), "format": "ptb-char", "files": file_info,
            "sha256": whole.hexdigest(), "size": sum(sizes.values()), "splits": sizes,
            "vocab_size": len(vocab)}
    return CharCorpus("ptb", vocab, info, read)


# ------------------------------------------------------------------------------------------------
# entry point
# ------------------------------------------------------------------------------------------------

_LOADERS = {"builtin": (_load_builtin, ("sources", "cache_dir", "rebuild")),
            "text8": (_load_text8, ("any_size",)),
            "enwik8": (_load_enwik8, ("any_size",)),
            "ptb": (_load_ptb, ())}


def load_corpus(name: str, path: str | os.PathLike | None = None, **options) -> CharCorpus:
    """Open a character-level corpus, check it, and return it with its splits unread.

    Args:
      name: one of :data:`CORPORA`.
      path: text8 / enwik8: the raw file, its zip (``text8.zip`` holds ``text8``), or a directory
        holding either. ptb: the directory holding ``ptb.char.{train,valid,test}.txt`` (or one of
        those files). builtin: none.
      **options: text8, enwik8: ``any_size=False``: when True, accept a file of another size
        than 100,000,000 bytes and split it 90/5/5 in proportion (:func:`split_sizes`; small
        synthetic files in tests). builtin: ``sources`` (a list of
        :class:`~isingattn.experiments.DocSource`, default the standard library, numpy, scipy and
        jax), ``cache_dir`` (default ``$ISINGATTN_CACHE``, else ``$XDG_CACHE_HOME/isingattn``,
        else ``~/.cache/isingattn``), ``rebuild=False``.

    Checks made here, each failing with a one-line error naming the file: it exists
    (``FileNotFoundError``); its size (text8, enwik8); its alphabet, reading it once in chunks
    (text8: only ``a-z`` and space; PTB: printable ASCII, single-character tokens or ``<unk>``,
    the valid and test symbols all in the training vocabulary); enwik8's first bytes; no split
    is empty (``ValueError``). The same pass computes ``info["sha256"]``. Unknown options raise
    ``TypeError``.

    Example::

        corpus = load_corpus("text8", "~/data/text8.zip")
        train = corpus.split("train")      # uint8, 90,000,000 ids
        corpus.decode(train[:20])          # ' anarchism originate'
    """
    if name not in _LOADERS:
        raise ValueError(f"unknown corpus {name!r}; valid: {', '.join(CORPORA)}")
    loader, accepted = _LOADERS[name]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise TypeError(f"load_corpus({name!r}) got unknown option(s) {', '.join(unknown)}; "
                        f"it accepts {', '.join(accepted) or 'none'}")
    return loader(path, **options)


# ------------------------------------------------------------------------------------------------
# windows
# ------------------------------------------------------------------------------------------------


def _check_tokens(tokens) -> np.ndarray:
    if not hasattr(tokens, "dtype"):
        tokens = np.asarray(tokens)
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens must be a 1-D integer array; got shape {tokens.shape} "
                         f"dtype {tokens.dtype}")
    return tokens


class EvalWindows:
    """The batches of :func:`eval_windows`: iterable (again and again), ``len()`` = number of
    batches; ``num_windows`` windows in all."""

    def __init__(self, tokens, context: int, stride: int, batch_size: int):
        self.tokens, self.context, self.stride, self.batch_size = (
            tokens, context, stride, batch_size)
        last = len(tokens) - 1  # index of the last target
        if last <= context:
            starts = np.zeros(1, np.int64)
        else:
            starts = np.arange(0, last - context + 1, stride, dtype=np.int64)
            if starts[-1] != last - context:
                starts = np.append(starts, last - context)
        # targets up to prev_end were scored by earlier windows
        self._starts = starts
        self._prev_end = np.concatenate([[0], starts[:-1] + context])
        self.num_windows = len(starts)

    def __len__(self) -> int:
        return math.ceil(self.num_windows / self.batch_size)

    def __iter__(self):
        n, C, B = len(self.tokens), self.context, self.batch_size
        offsets = np.arange(C + 1)
        for b in range(0, self.num_windows, B):
            starts = self._starts[b:b + B]
            prev_end = self._prev_end[b:b + B]
            pos = starts[:, None] + offsets
            inside = pos <= n - 1
            window = np.asarray(self.tokens[np.minimum(pos, n - 1)], dtype=np.int32)
            window[~inside] = 0
            tpos = pos[:, 1:]
            weights = ((tpos > prev_end[:, None]) & inside[:, 1:]).astype(np.float32)
            inputs, targets = window[:, :-1], window[:, 1:]
            pad = B - len(starts)
            if pad:
                inputs, targets, weights = (np.pad(x, ((0, pad), (0, 0)))
                                            for x in (inputs, targets, weights))
            yield np.ascontiguousarray(inputs), np.ascontiguousarray(targets), weights


def eval_windows(tokens, context: int, stride: int, batch_size: int) -> EvalWindows:
    """Evaluation batches over a whole split: every character after the first predicted once.

    Windows of ``context`` inputs ``tokens[s : s + context]`` with targets
    ``tokens[s + 1 : s + context + 1]`` start at ``s = 0, stride, 2 * stride, ...``, and a last
    window ends at the last token. A window scores (weight 1) only the targets no earlier window
    scored: the first window all of them, later ones their last ``stride`` (the final one fewer),
    so every scored target sees at least ``context - stride`` characters of left context in its
    window (all of them, near the start). Summing ``weights * log p(targets)`` over the batches
    gives the split's log-likelihood of ``tokens[1:]``; ``weights.sum()`` over all batches is
    ``len(tokens) - 1``. The cost is about ``context / stride`` forward passes per character.

    Args:
      tokens: 1-D integer array (a split), at least 2 long.
      context: the model's input length ``L``.
      stride: ``1 <= stride <= context``; ``stride = context`` gives disjoint windows.
      batch_size: rows ``B`` per batch; the last batch is padded with rows of weight 0, and a
        split shorter than ``context + 1`` gives one window padded with weight 0.

    Returns an iterable of ``(inputs, targets, weights)``: ``(B, L)`` int32, ``(B, L)`` int32,
    ``(B, L)`` float32; ``len()`` is the number of batches.
    """
    tokens = _check_tokens(tokens)
    context = check_positive_int("context", context)
    stride = check_positive_int("stride", stride)
    batch_size = check_positive_int("batch_size", batch_size)
    if stride > context:
        raise ValueError(f"stride must be between 1 and context = {context}; got {stride}")
    if len(tokens) < 2:
        raise ValueError(f"tokens has {len(tokens)} element(s); evaluation needs at least 2 "
                         "(a character to predict and one before it)")
    return EvalWindows(tokens, context, stride, batch_size)


def _generator(rng_or_key) -> np.random.Generator:
    if isinstance(rng_or_key, np.random.Generator):
        return rng_or_key
    if isinstance(rng_or_key, (int, np.integer)) and not isinstance(rng_or_key, bool):
        return np.random.default_rng(int(rng_or_key))
    jax = sys.modules.get("jax")
    if jax is not None and isinstance(rng_or_key, jax.Array):
        from ..samplers import seed_from_key  # the project's one key -> seed helper

        return np.random.default_rng(seed_from_key(rng_or_key))
    raise TypeError("rng_or_key must be a numpy Generator, an integer seed or a JAX PRNG key; "
                    f"got {rng_or_key!r}")


def random_windows(tokens, rng_or_key, batch_size: int, context: int):
    """A training batch of ``batch_size`` windows at uniformly random positions of ``tokens``.

    Row ``b`` is ``inputs[b] = tokens[s_b : s_b + context]`` and ``targets[b] =
    tokens[s_b + 1 : s_b + context + 1]`` with ``s_b`` uniform in ``0 .. len(tokens) - context -
    1`` (independent draws, with replacement). The same numpy ``Generator`` state, integer seed
    or JAX key (turned into a seed by the project's one helper) gives the same batch.

    Returns ``(inputs, targets)``, both ``(batch_size, context)`` int32. Raises ``ValueError``
    when ``tokens`` is shorter than ``context + 1``."""
    tokens = _check_tokens(tokens)
    batch_size = check_positive_int("batch_size", batch_size)
    context = check_positive_int("context", context)
    if len(tokens) < context + 1:
        raise ValueError(f"tokens has {len(tokens)} element(s); a window of context {context} "
                         f"needs at least {context + 1}")
    starts = _generator(rng_or_key).integers(0, len(tokens) - context, batch_size)
    window = np.asarray(tokens[starts[:, None] + np.arange(context + 1)], dtype=np.int32)
    return np.ascontiguousarray(window[:, :-1]), np.ascontiguousarray(window[:, 1:])
