"""The configuration of a training run, and what it builds: the task, the attention, the model.

A :class:`TrainConfig` is the whole description of a run (``config.json`` of its directory):
the same config and seed give the same numbers.
"""

from __future__ import annotations

import dataclasses
import math

from .._validation import check_choice, check_positive_int

#: Tasks by name (``--task``).
TASKS = ("pair-copy", "bracket", "file", "char-lm")
#: Attention variants: softmax, and Boltzmann attention with couplings of one kind: ``none``
#: (``J = 0``: normalized sigmoid attention), ``fixed``, ``random``, ``learned``.
ATTENTIONS = ("softmax", "none", "fixed", "random", "learned")
#: Coupling structures of the experiments (``J_jk = w(|j - k|)``): ``banded`` (``|j - k| <= r``,
#: exact by ``transfer``) and long-range ``relative`` (up to ``max_distance``).
EXPERIMENT_STRUCTURES = ("banded", "relative")
#: Inference methods by name (``--method``); also ``sampled:<backend>`` with a backend of
#: :data:`isingattn.samplers.BACKENDS` (statistics from ``num_samples`` draws).
METHODS = ("exact", "transfer", "mean_field", "tap")
SAMPLED_PREFIX = "sampled:"
#: Calibrations of a sampled method (``--calibrate``): the backend's law, or measured on probe
#: models and re-estimated as training goes (see :class:`~isingattn.attention.Calibration`).
CALIBRATIONS = ("formula", "measured")
#: Steps between calibration measurements of ``calibrate="measured"`` unless given.
DEFAULT_CALIBRATE_EVERY = 50
SCHEDULES = ("constant", "cosine")
DEFAULT_METHOD = {"banded": "transfer", "relative": "mean_field"}


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run.

    Task: ``task`` (:data:`TASKS`), ``data`` (the JSONL file of ``file``; the corpus path of
    ``char-lm`` with corpus text8, enwik8 or ptb), ``length`` (the sequence length, for
    ``char-lm`` the context; None only for ``file``: its longest example), bracket options
    (``bracket_variant``, ``bracket_types``, ``max_depth``, ``regime``), ``num_symbols`` of
    pair copy, ``data_seed`` (the evaluation sets), ``corpus`` of ``char-lm`` (one of
    :data:`~isingattn.experiments.CORPORA`; ``builtin`` takes no ``data``) and its
    ``eval_stride`` (characters between evaluation windows; None: ``length // 2``).

    Attention: ``attention`` (:data:`ATTENTIONS`), ``structure`` (:data:`EXPERIMENT_STRUCTURES`),
    ``method`` (:data:`METHODS` or ``sampled:<backend>``; None: ``transfer`` for banded,
    ``mean_field`` for relative), ``num_samples`` and ``backend_options`` of a sampled method
    (options that the backend's constructor takes go there, the others to its ``sample``; an
    option it takes neither way is an error), its calibration ``calibrate`` (None,
    ``"formula"`` or ``"measured"``, :data:`CALIBRATIONS`), ``calibrate_every`` (steps between
    measurements of the sampler's effective temperatures on probe models, recorded in
    ``calibration.csv``; None: 50 for ``"measured"``, never otherwise; a number with
    ``calibrate=None`` measures without changing anything), ``calibrate_probes`` (probe models
    per head) and ``calibrate_samples`` (draws per probe model),
    ``bandwidth`` ``r`` (banded), ``max_distance`` (relative; None: ``length - 1``),
    ``coupling_scale`` ``kappa`` (fixed: ``w(d) = kappa / D`` for ``d = 1..D``; random:
    ``w(d) ~ Normal(0, kappa^2 / D)``, drawn once from the seed; ``D`` = ``r`` or
    ``max_distance``: ``sum_d w(d) = kappa`` and ``E sum_d w(d)^2 = kappa^2``; learned couplings
    start at 0),
    ``beta`` and the initial ``chemical_potential`` (learned per head).

    Model: ``positional`` (``learned``, ``rope``, ``none``), ``layers``, ``d_model``, ``heads``,
    ``mlp_ratio``, ``dropout``, ``tie_embeddings`` (the output layer reuses the token
    embeddings; ``char-lm`` only).

    Optimization: ``steps``, ``batch`` (sequences per step), ``lr`` (AdamW peak),
    ``warmup`` (linear warm-up steps), ``schedule`` (``constant`` or ``cosine`` decay to 0 after
    the warm-up), ``weight_decay``, ``clip`` (global gradient norm; 0: none), ``seed`` (model
    initialization, random couplings and the training batches).

    Bookkeeping: ``eval_every`` (steps between validation passes), ``eval_examples`` (validation
    examples; ``char-lm``: windows at the start of the valid split, scored during training,
    while the final valid and test numbers cover the whole splits), ``test_examples`` (unused
    by ``char-lm``), ``checkpoint_every``, ``keep_checkpoints``.
    """

    task: str = "bracket"
    data: str | None = None
    length: int | None = 64
    bracket_variant: str = "match"
    bracket_types: int = 4
    max_depth: int | None = None
    regime: str = "walk"
    num_symbols: int = 6
    data_seed: int = 0
    corpus: str = "builtin"
    eval_stride: int | None = None

    attention: str = "learned"
    structure: str = "banded"
    method: str | None = None
    num_samples: int = 64
    backend_options: dict = dataclasses.field(default_factory=dict)
    calibrate: str | None = None
    calibrate_every: int | None = None
    calibrate_probes: int = 8
    calibrate_samples: int = 1024
    bandwidth: int = 4
    max_distance: int | None = None
    coupling_scale: float = 1.0
    beta: float = 1.0
    chemical_potential: float = 0.0

    positional: str = "learned"
    layers: int = 2
    d_model: int = 64
    heads: int = 4
    mlp_ratio: int = 4
    dropout: float = 0.0
    tie_embeddings: bool = False

    steps: int = 2000
    batch: int = 32
    lr: float = 1e-3
    warmup: int = 100
    schedule: str = "cosine"
    weight_decay: float = 0.0
    clip: float = 1.0
    seed: int = 0

    eval_every: int = 200
    eval_examples: int = 512
    test_examples: int = 2048
    checkpoint_every: int = 500
    keep_checkpoints: int = 2

    #: Fields that may differ when a run is resumed (they change no number of the run).
    RESUMABLE_CHANGES = ("checkpoint_every", "keep_checkpoints")

    def __post_init__(self):
        from ..attention import POSITIONAL

        def choice(name, valid):
            check_choice(name, getattr(self, name), valid)

        choice("task", TASKS)
        choice("attention", ATTENTIONS)
        choice("structure", EXPERIMENT_STRUCTURES)
        choice("positional", POSITIONAL)
        choice("schedule", SCHEDULES)
        if (self.method is not None and not self.method.startswith(SAMPLED_PREFIX)
                and self.method not in METHODS):
            raise ValueError(
                    f"method must be one of {', '.join(map(repr, METHODS))} or "
                    f"'sampled:<backend>'; got {self.method!r}")
        if self.method is not None and self.method.startswith(SAMPLED_PREFIX):
            from ..samplers import BACKENDS

            name = self.method[len(SAMPLED_PREFIX):]
            if name not in BACKENDS:
                raise ValueError(f"method {self.method!r}: unknown backend {name!r}; valid: "
                                 f"{', '.join(BACKENDS)}")
        check_positive_int("num_samples", self.num_samples, 2)
        if not isinstance(self.backend_options, dict):
            raise TypeError(f"backend_options must be a dict; got "
                            f"{type(self.backend_options).__name__}")
        self._check_sampled()
        if self.task == "file" and not self.data:
            raise ValueError("task='file' needs data (the path of a JSONL file)")
        if self.task == "char-lm":
            from ._corpora import CORPORA

            choice("corpus", CORPORA)
            if self.corpus == "builtin" and self.data:
                raise ValueError("the builtin corpus takes no data (it is assembled from the "
                                 "installed docstrings); data is the corpus path of text8, "
                                 "enwik8 or ptb")
            if self.corpus != "builtin" and not self.data:
                raise ValueError(f"corpus {self.corpus!r} is read from a local path (nothing "
                                 "is downloaded): give data (--data PATH)")
        if self.tie_embeddings and self.task != "char-lm":
            raise ValueError(f"tie_embeddings needs a language model (task 'char-lm', whose "
                             f"outputs are its inputs' vocabulary); got task {self.task!r}")
        if self.task != "file" and self.length is None:
            raise ValueError(f"task={self.task!r} needs a length")
        if self.length is not None:
            check_positive_int("length", self.length, 2)
        for name in ("layers", "d_model", "heads", "mlp_ratio", "steps", "batch",
                     "eval_every", "eval_examples", "test_examples", "checkpoint_every",
                     "keep_checkpoints", "bandwidth"):
            check_positive_int(name, getattr(self, name))
        for name in ("seed", "data_seed", "warmup"):
            check_positive_int(name, getattr(self, name), 0)
        if self.max_distance is not None:
            check_positive_int("max_distance", self.max_distance)
        if self.eval_stride is not None:
            check_positive_int("eval_stride", self.eval_stride)
            if self.length is not None and self.eval_stride > self.length:
                raise ValueError(f"eval_stride must be between 1 and length = {self.length}; "
                                 f"got {self.eval_stride}")
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads "
                             f"({self.heads})")
        if self.positional == "rope" and (self.d_model // self.heads) % 2:
            raise ValueError(f"positional='rope' needs an even head dimension; d_model / heads "
                             f"= {self.d_model // self.heads}")
        for name in ("lr", "beta"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be finite and > 0; got {v}")
        for name in ("coupling_scale", "chemical_potential", "weight_decay", "clip"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite; got {getattr(self, name)}")
        if self.weight_decay < 0 or self.clip < 0:
            raise ValueError("weight_decay and clip must be >= 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1); got {self.dropout}")
        if (self.attention not in ("softmax", "none") and self.structure == "relative"
                and self.resolved_method == "transfer"):
            raise ValueError("method='transfer' needs banded couplings; relative couplings use "
                             "'mean_field', 'tap' or (short sequences) 'exact'")

    def _check_sampled(self):
        """Options of a sampled method: calibration, the backend's options, its context."""
        sampled_method = (self.method or "").startswith(SAMPLED_PREFIX)
        if self.calibrate is not None and self.calibrate not in CALIBRATIONS:
            raise ValueError(f"calibrate must be None or one of "
                             f"{', '.join(map(repr, CALIBRATIONS))}; got {self.calibrate!r}")
        if self.calibrate_every is not None:
            check_positive_int("calibrate_every", self.calibrate_every)
        check_positive_int("calibrate_probes", self.calibrate_probes)
        check_positive_int("calibrate_samples", self.calibrate_samples, 2)
        if not sampled_method:  # ignored (a sampled run evaluated with another method)
            return
        backend_option_routes(self.method[len(SAMPLED_PREFIX):], self.backend_options)
        limit = backend_key_limit(self.method[len(SAMPLED_PREFIX):])
        if limit is not None and self.length is not None and self.length > limit[0]:
            raise ValueError(
                f"method {self.method!r} takes at most {limit[0]} keys per query ({limit[1]}); "
                f"length {self.length} gives up to {self.length} keys. Use a shorter length or "
                "another backend")
        from ..attention import MAX_PROBE_KEYS

        if (self.calibration_every is not None and self.length is not None
                and self.length > MAX_PROBE_KEYS):
            raise ValueError(
                f"measuring the sampler's effective temperatures (calibrate='measured' or "
                f"calibrate_every) enumerates the 2^S patterns of probe models: length <= "
                f"{MAX_PROBE_KEYS}; got {self.length}")
        if self.calibrate == "formula":
            name = self.method[len(SAMPLED_PREFIX):]
            if name not in FORMULA_BACKENDS:
                raise ValueError(
                    f"calibrate='formula': backend {name!r} has no formula for its effective "
                    f"temperatures (those with one: {', '.join(FORMULA_BACKENDS)}); use "
                    "calibrate='measured'")

    @property
    def calibration_every(self) -> int | None:
        """Steps between calibration measurements (None: none)."""
        if self.calibrate_every is not None:
            return self.calibrate_every
        return DEFAULT_CALIBRATE_EVERY if self.calibrate == "measured" else None

    @property
    def resolved_method(self) -> str:
        return self.method or DEFAULT_METHOD[self.structure]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown config field(s) {', '.join(map(repr, unknown))}; valid: "
                             f"{', '.join(sorted(names))}")
        return cls(**d)

    def replace(self, **changes) -> TrainConfig:
        return dataclasses.replace(self, **changes)


def build_task(config: TrainConfig):
    """The :class:`~isingattn.experiments.Task` of a config."""
    from ._bracket import BracketTask
    from ._charlm import CharLMTask
    from ._corpora import load_corpus
    from ._jsonl import FileTask
    from ._tasks import PairCopyTask

    if config.task == "pair-copy":
        return PairCopyTask(config.num_symbols, data_seed=config.data_seed)
    if config.task == "bracket":
        return BracketTask(config.bracket_variant, config.bracket_types, config.max_depth,
                           config.regime, data_seed=config.data_seed)
    if config.task == "char-lm":
        task = CharLMTask(load_corpus(config.corpus, config.data), config.eval_stride,
                          length=config.length)
        task.check_length(config.length)
        return task
    return FileTask(config.data)


def coupling_spec(config: TrainConfig):
    """The :class:`~isingattn.attention.CouplingSpec` of a Boltzmann variant (None for
    ``softmax`` and ``none``); relative couplings reach ``max_distance`` (default: the training
    length - 1; longer distances share its weight)."""
    import numpy as np

    from ..attention import CouplingSpec

    if config.attention in ("softmax", "none"):
        return None
    banded = config.structure == "banded"
    D = config.bandwidth if banded else (config.max_distance or max(config.length - 1, 1))
    sizes = {"bandwidth": D} if banded else {"max_distance": D}
    kappa = config.coupling_scale
    if config.attention == "fixed":
        values = np.full((config.heads, D), kappa / D, np.float32)
        return CouplingSpec("fixed", config.structure, values=values, **sizes)
    if config.attention == "random":
        return CouplingSpec("random", config.structure, strength=kappa / math.sqrt(D), **sizes)
    return CouplingSpec("learned", config.structure, init=0.0, **sizes)


#: Backends with a formula for their effective temperatures (``calibrate="formula"``).
FORMULA_BACKENDS = ("exact", "diabatic", "gibbs", "metropolis", "parallel_tempering",
                    "swendsen_wang", "transfer", "wolff")


def backend_key_limit(name: str):
    """``(largest number of keys per query, why)`` of a backend, or None."""
    if name == "diabatic":
        from ..quantum import MAX_QUBITS

        return MAX_QUBITS, (f"the state-vector simulator holds 2^{MAX_QUBITS} amplitudes per "
                            "query")
    if name == "exact":
        from ..exact import MAX_ENUMERATION_N

        return MAX_ENUMERATION_N, "exact sampling enumerates 2^S patterns per query"
    return None


def _constructor_names(cls) -> set:
    """Keyword names a backend's constructor takes, following ``**kwargs`` up the MRO."""
    import inspect

    names = set()
    for c in cls.__mro__:
        if c is object or "__init__" not in vars(c):
            continue
        params = inspect.signature(vars(c)["__init__"]).parameters
        names |= {n for n, p in params.items() if n != "self"
                  and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            break
    if dataclasses.is_dataclass(cls):
        names |= {f.name for f in dataclasses.fields(cls)}
    return names


def _sample_parameters(cls) -> dict:
    """The ``parameters`` (options of ``sample``) of backend class ``cls``, read without
    building a backend (a QPU client needs credentials): a class attribute, or a property that
    does not read the instance (the MCMC backends')."""
    params = getattr(cls, "parameters", None)
    if isinstance(params, property):
        try:
            params = params.fget(object.__new__(cls))
        except Exception:  # noqa: BLE001 -- a property that needs a built backend: no options known
            params = None
    return params if isinstance(params, dict) else {}


def backend_option_routes(name: str, options: dict) -> tuple[dict, dict]:
    """``(constructor options, sample options)`` of backend ``name``: an option its constructor
    names goes there, one of its ``parameters`` to ``sample``; anything else is a ``TypeError``
    naming both lists."""
    from ..samplers import BACKENDS

    cls = BACKENDS[name]
    ctor = _constructor_names(cls) - {"child"}
    params = set(_sample_parameters(cls))
    unknown = sorted(k for k in options if k not in ctor and k not in params)
    if unknown:
        raise TypeError(
            f"backend {name!r} ({cls.__name__}) takes no option(s) {', '.join(unknown)}; "
            f"constructor options: {', '.join(sorted(ctor)) or 'none'}; sample options: "
            f"{', '.join(sorted(params)) or 'none'}")
    init = {k: v for k, v in options.items() if k in ctor}
    rest = {k: v for k, v in options.items() if k not in ctor}
    return init, rest


_METHOD_CACHE: dict = {}


def check_method(config: TrainConfig) -> None:
    """Build the config's inference method once, so that a backend that cannot run stops a run
    before it starts: options it does not take, missing QPU credentials
    (:class:`~isingattn.samplers.QPUConfigurationError`, raised before any network call), a
    context whose query models do not embed on the QPU."""
    method = build_method(config)
    if not isinstance(method, str) and config.length is not None:
        from ..samplers import QPUSampler

        if isinstance(method.backend, QPUSampler):
            from ..samplers import find_tiles

            L = config.length
            D = config.bandwidth if config.structure == "banded" else L - 1
            edges = [(i, j) for i in range(L) for j in range(i + 1, min(L, i + D + 1))]
            if config.attention in ("none",):
                edges = []
            find_tiles(method.backend, L, edges, max_tiles=1)


def build_method(config: TrainConfig):
    """The inference method of a config: a name of :data:`METHODS`, or for
    ``sampled:<backend>`` a :func:`~isingattn.attention.sampled` method whose backend is built
    with the ``backend_options`` its constructor takes (the others go to its ``sample``), and
    with the config's calibration. Building a QPU backend without credentials raises
    :class:`~isingattn.samplers.QPUConfigurationError` at once."""
    method = config.resolved_method
    if not method.startswith(SAMPLED_PREFIX):
        return method
    from ..attention import Calibration, sampled
    from ..samplers import BACKENDS

    name = method[len(SAMPLED_PREFIX):]
    import json

    # one backend per configuration in a process: a QPU client (and its embedding cache) is made
    # once, not for every Trainer of a run
    cache_key = json.dumps([name, config.backend_options, config.num_samples, config.calibrate,
                            config.calibration_every, config.calibrate_probes,
                            config.calibrate_samples], sort_keys=True, default=repr)
    if cache_key in _METHOD_CACHE:
        return _METHOD_CACHE[cache_key]
    init, rest = backend_option_routes(name, config.backend_options)
    calibration = None
    if config.calibrate is not None:
        calibration = Calibration(config.calibrate, config.calibration_every or
                                  DEFAULT_CALIBRATE_EVERY, config.calibrate_probes,
                                  config.calibrate_samples)
    out = sampled(BACKENDS[name](**init), config.num_samples, calibration=calibration, **rest)
    if len(_METHOD_CACHE) >= 16:
        _METHOD_CACHE.pop(next(iter(_METHOD_CACHE)))
    _METHOD_CACHE[cache_key] = out
    return out


def attention_options(config: TrainConfig, length: int):
    """The ``attention`` argument of :class:`~isingattn.attention.TransformerLM`."""
    if config.attention == "softmax":
        return "softmax"
    method = build_method(config)
    if method == "exact" and length > 16:
        raise ValueError(f"method='exact' enumerates 2^S patterns and supports length <= 16; "
                         f"got length {length}")
    return {"couplings": coupling_spec(config), "method": method, "beta": config.beta,
            "chemical_potential": config.chemical_potential}


def build_model(config: TrainConfig, task, *, length: int | None = None):
    """The model of a config: a :class:`~isingattn.attention.TransformerLM` with
    ``task.num_classes`` outputs per position, initialized from ``config.seed``. ``length``: the
    sequence length it is built for (default the config's; position embeddings need it)."""
    from flax import nnx

    from ..attention import TransformerLM

    L = length or config.length
    rngs = nnx.Rngs(params=config.seed, dropout=config.seed + 1, attention=config.seed + 2)
    return TransformerLM(
        task.vocab_size, d_model=config.d_model, num_heads=config.heads,
        num_layers=config.layers, max_length=config.length, mlp_ratio=config.mlp_ratio,
        attention=attention_options(config, L), positional=config.positional,
        num_outputs=task.num_classes, causal=True, dropout=config.dropout,
        tie_embeddings=config.tie_embeddings, rngs=rngs)
