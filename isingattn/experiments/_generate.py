"""Text generation from a character-level language model (a ``char-lm`` run).

Sampling is autoregressive over a context of the last ``L`` characters (``L`` the training
context). While the text fits in ``L`` (the prompt, then the first new characters), each
character is one decoding step with the attention layers' key/value cache
(``TransformerLM.init_cache``, ``decode=True``): its logits are those of the causal pass at its
position. Once the context is full, each character **recomputes** one forward pass over the last
``L`` characters (the window slides, and the learned positions of the cached keys would change),
left-aligned; the model is causal, so the padding of a shorter window changes nothing at the
position read. Both paths are one compiled program each. Boltzmann attention uses the run's own
inference method with the ``marginal`` readout.
"""

from __future__ import annotations

import functools
import math
import numbers
import os

import numpy as np

from ._charlm import CharLMTask, corpus_from_description


def _load(run_dir, step):
    from ._config import TrainConfig
    from ._train import RunDirectoryError, Trainer, _read_json, load_checkpoint

    path = os.path.join(run_dir, "config.json")
    if not os.path.exists(path):
        raise RunDirectoryError(f"{run_dir!r} is not a training run (no config.json)")
    record = _read_json(path)
    config = TrainConfig.from_dict(record["config"])
    if config.task != "char-lm":
        raise ValueError(f"generation needs a language model (task 'char-lm'); the run in "
                         f"{run_dir!r} has task {config.task!r}")
    task = CharLMTask(corpus_from_description(record["task"]), config.eval_stride,
                      length=config.length)
    trainer = Trainer(config, task)
    load_checkpoint(run_dir, trainer, step)
    return trainer


def _encode_prompt(corpus, prompt: str) -> np.ndarray:
    if not isinstance(prompt, str) or not prompt:
        raise ValueError("the prompt is empty; give at least one character to continue")
    try:
        return corpus.encode(prompt)
    except ValueError:
        pass
    rest = prompt
    for sym in sorted((s for s in corpus.vocab if len(s) > 1), key=len, reverse=True):
        rest = rest.replace(sym, "")
    known = set(corpus.vocab)
    bad = sorted({c for c in rest if c not in known})
    single = "".join(s for s in corpus.vocab if len(s) == 1)
    multi = [s for s in corpus.vocab if len(s) > 1]
    hint = (" (normalize_text8 maps any text into it: lowercase, other characters become "
            "spaces)" if corpus.name in ("text8", "builtin") else "")
    raise ValueError(
        f"the prompt holds {len(bad)} character(s) outside the {corpus.name} vocabulary: "
        f"{', '.join(map(repr, bad))}; the vocabulary is {single!r}"
        + (f" and {multi}" if multi else "") + hint)


def _pick(logits, key, temperature, top_k):
    import jax
    import jax.numpy as jnp

    logits = logits.astype(jnp.float32)
    if top_k is not None:
        kth = jax.lax.top_k(logits, top_k)[0][-1]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    greedy = jnp.argmax(logits)
    drawn = jax.random.categorical(key, logits / jnp.maximum(temperature, 1e-30))
    return jnp.where(temperature > 0, drawn, greedy)


@functools.lru_cache(maxsize=16)
def _sampler(graphdef, top_k):
    """The recomputing step: the next token from a padded window of ``L`` characters. One
    compiled program per model structure and ``top_k``, kept for later calls."""
    import jax
    from flax import nnx

    def next_token(state, window, pos, key, temperature):
        model, _ = nnx.merge(graphdef, state)
        return _pick(model(window, deterministic=True)[0, pos], key, temperature, top_k)

    return jax.jit(next_token)


@functools.lru_cache(maxsize=16)
def _decoder(top_k):
    """The cached step: one token in, the next token's choice and logits' source advanced
    (compiled once per model structure and ``top_k``, kept for later calls)."""
    from flax import nnx

    def step(model, token, key, temperature):
        logits = model(token, deterministic=True, decode=True)[0, 0]
        return _pick(logits, key, temperature, top_k)

    return nnx.jit(step)


def generate_text(run, prompt: str, length: int, *, temperature: float = 1.0, seed: int = 0,
                  top_k: int | None = None, step: int | None = None) -> str:
    """Continue ``prompt`` by ``length`` characters sampled from a character-level LM.

    Args:
      run: a ``char-lm`` run directory (its newest checkpoint, or ``step``'s; only
        ``config.json`` and the checkpoint are read, not the corpus) or a
        :class:`~isingattn.experiments.Trainer` of a ``char-lm`` config.
      prompt: text in the corpus's vocabulary (text8 and builtin: ``a-z`` and space; see
        :func:`~isingattn.experiments.normalize_text8`), at least one character. Only its last
        ``L`` characters (the training context) condition the first new one.
      length: characters to generate (``>= 0``).
      temperature: the logits are divided by it before sampling (``> 0``); ``0`` picks the most
        probable character (greedy).
      seed: the PRNG seed (``jax.random.key(seed)``, folded with the character's index): the
        same run, prompt, settings and seed give the same text.
      top_k: sample among the ``top_k`` most probable characters only (None: all).

    Returns the ``length`` new characters as text (the prompt not included; enwik8's bytes
    decoded as UTF-8, invalid sequences replaced). While the context fits in ``L`` a character
    costs one decoding step with the key/value cache, then one forward pass over the window of
    the last ``L`` characters (the module docstring). Raises ``ValueError`` for a prompt with
    characters outside the vocabulary (naming them and the vocabulary), an empty prompt, or
    bad settings.

    Example::

        text = generate_text("runs/char-lm_learned_banded_L128_seed0", "the function ",
                             200, temperature=0.8)
    """
    import jax
    import jax.numpy as jnp

    from ._train import Trainer

    if isinstance(length, bool) or not isinstance(length, (int, np.integer)) or length < 0:
        raise ValueError(f"length must be an integer >= 0; got {length!r}")
    if not (isinstance(temperature, numbers.Real) and math.isfinite(temperature)
            and temperature >= 0):
        raise ValueError(f"temperature must be finite and >= 0 (0: greedy); got {temperature!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an integer; got {seed!r}")
    trainer = run if isinstance(run, Trainer) else _load(os.fspath(run), step)
    task = trainer.task
    if task.name != CharLMTask.name:
        raise ValueError(f"generation needs a language model (task 'char-lm'); this trainer's "
                         f"task is {task.name!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer))
                              or not 1 <= top_k <= task.vocab_size):
        raise ValueError(f"top_k must be None or an integer in 1 .. {task.vocab_size} (the "
                         f"vocabulary); got {top_k!r}")
    ids = [int(i) for i in _encode_prompt(task.corpus, prompt)]
    L = trainer.length
    top_k = None if top_k is None else int(top_k)
    key = jax.random.key(int(seed))
    temp = jnp.float32(temperature)
    new = []
    # the first characters, while the context fits in L: decoding steps with the cache
    if length and len(ids) < L:
        model = trainer.model()
        model.init_cache(1, L)
        step = _decoder(top_k)
        for tok in ids[:-1]:  # the prompt fills the cache
            step(model, jnp.asarray([[tok]], jnp.int32), key, temp)
        tok = ids[-1]
        while len(new) < length and len(ids) < L + 1:
            tok = int(step(model, jnp.asarray([[tok]], jnp.int32),
                           jax.random.fold_in(key, len(new)), temp))
            ids.append(tok)
            new.append(tok)
    # then one pass over the sliding window of the last L characters per character
    next_token = _sampler(trainer.graphdef, top_k) if len(new) < length else None
    window = np.zeros((1, L), np.int32)
    while len(new) < length:
        ctx = ids[-L:]
        window[0, :len(ctx)] = ctx
        window[0, len(ctx):] = 0
        tok = int(next_token(trainer.state, jnp.asarray(window), len(ctx) - 1,
                             jax.random.fold_in(key, len(new)), temp))
        ids.append(tok)
        new.append(tok)
    return task.corpus.decode(np.asarray(new, np.int64))
