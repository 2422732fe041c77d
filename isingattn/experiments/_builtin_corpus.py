"""The built-in corpus: English docstrings of the installed Python, numpy, scipy and jax.

Every machine that runs the project has these packages, so the default language-modelling run
needs no download. The corpus is assembled once and cached:

1. Sources (:func:`default_sources`): the standard library directory
   (``sysconfig.get_paths()["stdlib"]``) and the package directories of numpy, scipy and jax,
   located with ``importlib.util.find_spec`` (which finds a top-level package without importing
   it). Each source is a :class:`DocSource` ``(name, root, version)``; tests pass their own.
2. Files: every ``*.py`` under a root, skipping directories named ``test``, ``tests``,
   ``site-packages``, ``dist-packages``, ``__pycache__`` or starting with a dot. They are read as
   bytes and parsed with :func:`ast.parse`, never imported (importing the standard library
   wholesale opens windows, starts servers, ...); files that do not parse are counted and skipped.
3. Order: files are sorted by the SHA-256 of ``"<source name>/<posix relative path>"``, a fixed
   pseudo-random order, so that the positional 90/5/5 split puts all four sources in every split
   (in path order the valid and test splits would be jax alone). Within a file, docstrings come in
   source order (module, then classes and functions, depth first).
4. Text: each docstring (``ast.get_docstring``, cleaned) is normalized text8-style by
   :func:`normalize_text8` (lowercase; every run of characters other than ``a-z`` becomes one
   space, so digits and punctuation are dropped); empty results and exact repeats of an earlier
   docstring are dropped (numpy and scipy repeat many docstrings, which would leak across the
   splits). The docstrings are joined by single spaces: the corpus is text8-format bytes, no
   leading or trailing space.
5. Cache: ``<cache root>/corpora/builtin-<key>.txt`` and a ``.json`` beside it holding the
   build's record; the key hashes :data:`BUILTIN_FORMAT` and every source's name, version and
   resolved root, so a new numpy version builds a new file. Both files are written atomically
   (a temporary file in the same directory, then ``os.replace``). On reuse the text's size and
   SHA-256 are checked against the record; a mismatch rebuilds it.

The cache root is ``$ISINGATTN_CACHE``, else ``$XDG_CACHE_HOME/isingattn``, else
``~/.cache/isingattn`` (:func:`cache_root`).
"""

from __future__ import annotations

import ast
import gc
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import platform
import re
import sysconfig
import time
import warnings
from typing import NamedTuple

from .._io import atomic_write

#: Version of the assembly recipe above; part of the cache key (bump it when the recipe changes).
BUILTIN_FORMAT = 1

#: Directory names never scanned.
EXCLUDED_DIRS = frozenset({"test", "tests", "site-packages", "dist-packages", "__pycache__"})

_NOT_LETTERS = re.compile(r"[^a-z]+")
_DOC_NODES = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
#: Fields holding statements (or handlers / match cases that hold statements), in source order.
_STATEMENT_LISTS = ("body", "handlers", "orelse", "finalbody", "cases")


class DocSource(NamedTuple):
    """One source of docstrings: a ``name`` (recorded, and part of the file order), the ``root``
    directory scanned for ``*.py`` files, and the ``version`` recorded in the corpus info."""

    name: str
    root: str
    version: str


def default_sources() -> tuple[DocSource, ...]:
    """The standard library, numpy, scipy and jax of this interpreter, located without importing.

    Raises ``FileNotFoundError`` naming a package that is not installed."""
    sources = [DocSource("python-stdlib", sysconfig.get_paths()["stdlib"],
                         platform.python_version())]
    for package in ("numpy", "scipy", "jax"):
        spec = importlib.util.find_spec(package)  # a top-level name: located, not imported
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(
                f"the builtin corpus reads the docstrings of {package}, which is not installed "
                "in this environment")
        root = next(iter(spec.submodule_search_locations))
        sources.append(DocSource(package, root, importlib.metadata.version(package)))
    return tuple(sources)


def cache_root() -> pathlib.Path:
    """The project's cache directory: ``$ISINGATTN_CACHE``, else ``$XDG_CACHE_HOME/isingattn``,
    else ``~/.cache/isingattn`` (not created here)."""
    if os.environ.get("ISINGATTN_CACHE"):
        return pathlib.Path(os.environ["ISINGATTN_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return pathlib.Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "isingattn"
    return pathlib.Path.home() / ".cache" / "isingattn"


def normalize_text8(text: str) -> str:
    """Lowercase ``text`` and turn every run of characters other than ``a-z`` into one space,
    stripped at both ends: the alphabet of text8 (digits and punctuation become spaces).

    >>> normalize_text8("Return the N-th  value (0 <= n).")
    'return the n th value n'
    """
    return _NOT_LETTERS.sub(" ", text.lower()).strip()


def _python_files(source: DocSource):
    root = pathlib.Path(source.root)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if d not in EXCLUDED_DIRS and not d.startswith("."))
        for name in filenames:
            if name.endswith(".py"):
                path = pathlib.Path(dirpath) / name
                yield path, path.relative_to(root).as_posix()


def _docstrings(tree):
    """Docstrings of the module, classes and functions of ``tree``, in source order.

    Only statement lists are walked (a definition cannot sit inside an expression), a fraction
    of the nodes of a whole walk."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, _DOC_NODES):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                yield doc
        children = []
        for field in _STATEMENT_LISTS:
            value = getattr(node, field, None)
            if isinstance(value, list):  # Lambda.body and IfExp.body are expressions
                children.extend(value)
        stack.extend(reversed(children))


def _file_docstrings(path: pathlib.Path) -> list[str] | None:
    """The docstrings of one file, or None when it does not parse."""
    try:
        with warnings.catch_warnings():  # invalid escapes in old sources warn on parse
            warnings.simplefilter("ignore")
            return list(_docstrings(ast.parse(path.read_bytes(), filename=str(path))))
    except (SyntaxError, ValueError, RecursionError, OSError):
        return None


def build_text(sources) -> tuple[bytes, dict]:
    """Assemble the corpus text from ``sources`` (recipe in the module docstring).

    Returns ``(text, record)``: ``text`` bytes over ``a-z`` and space; ``record`` a JSON-able
    dict with per-source counts (files, unparsable files, docstrings kept, their characters
    without the separating spaces) and the
    number of repeated docstrings dropped. Raises ``FileNotFoundError`` for a root that is not a
    directory and ``ValueError`` when the sources hold no docstring at all."""
    sources = [DocSource(*s) for s in sources]
    files = []
    for i, source in enumerate(sources):
        if not pathlib.Path(source.root).is_dir():
            raise FileNotFoundError(
                f"docstring source {source.name!r}: {source.root} is not a directory")
        files.extend((hashlib.sha256(f"{source.name}/{rel}".encode()).hexdigest(), i, path)
                     for path, rel in _python_files(source))
    files.sort()
    stats = [{"name": s.name, "version": s.version, "root": str(s.root), "files": 0,
              "unparsable": 0, "docstrings": 0, "characters": 0} for s in sources]
    seen: set[bytes] = set()
    parts: list[str] = []
    duplicates = 0
    gc_was_enabled = gc.isenabled()
    gc.disable()  # parsing allocates millions of acyclic nodes: collections cost ~40% of the time
    try:
        for _, i, path in files:
            stats[i]["files"] += 1
            docs = _file_docstrings(path)
            if docs is None:
                stats[i]["unparsable"] += 1
                continue
            for doc in docs:
                text = normalize_text8(doc)
                if not text:
                    continue
                digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
                if digest in seen:
                    duplicates += 1
                    continue
                seen.add(digest)
                parts.append(text)
                stats[i]["docstrings"] += 1
                stats[i]["characters"] += len(text)
    finally:
        if gc_was_enabled:
            gc.enable()
    if not parts:
        raise ValueError(f"the docstring sources {[s.name for s in sources]} hold no docstring")
    text = " ".join(parts).encode("ascii")
    return text, {"sources": stats, "duplicates_dropped": duplicates}


def _cache_key(sources) -> str:
    spec = {"format": BUILTIN_FORMAT,
            "sources": [[s.name, s.version, str(pathlib.Path(s.root).resolve())]
                        for s in sources]}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _sha256_file(path: pathlib.Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _cached(text_path: pathlib.Path, json_path: pathlib.Path) -> dict | None:
    """The cached record when both files exist and the text matches it, else None."""
    try:
        record = json.loads(json_path.read_text())
        if (record.get("format") == BUILTIN_FORMAT
                and text_path.stat().st_size == record["size"]
                and _sha256_file(text_path) == record["sha256"]):
            return record
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def builtin_corpus_file(sources=None, cache_dir=None, rebuild: bool = False):
    """The cached built-in corpus file, built first if needed.

    Args:
      sources: :class:`DocSource` s (default :func:`default_sources`).
      cache_dir: the cache root (default :func:`cache_root`); files go under ``corpora/``.
      rebuild: build even when a valid cached file exists.

    Returns ``(path, record)``: the text8-format file and its record (``format``, ``sha256``,
    ``size``, ``sources`` with versions and counts, ``duplicates_dropped``, ``build_seconds``).
    Raises ``OSError`` naming the directory when the cache cannot be written."""
    sources = default_sources() if sources is None else tuple(DocSource(*s) for s in sources)
    folder = (cache_root() if cache_dir is None else pathlib.Path(cache_dir)) / "corpora"
    stem = f"builtin-{_cache_key(sources)}"
    text_path, json_path = folder / f"{stem}.txt", folder / f"{stem}.json"
    if not rebuild:
        record = _cached(text_path, json_path)
        if record is not None:
            return text_path, record
    t0 = time.perf_counter()
    text, record = build_text(sources)
    record = {"format": BUILTIN_FORMAT, "sha256": hashlib.sha256(text).hexdigest(),
              "size": len(text), **record, "build_seconds": round(time.perf_counter() - t0, 2)}
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(text_path, text)
        atomic_write(json_path, (json.dumps(record, indent=1) + "\n").encode())
    except OSError as e:
        raise OSError(f"cannot write the builtin corpus cache in {folder} ({e}); set "
                      "ISINGATTN_CACHE to a writable directory") from e
    return text_path, record
