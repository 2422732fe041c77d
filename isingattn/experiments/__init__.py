"""Experiments: tasks, data, the training and evaluation loop with checkpoints.

What ``isingattn train``, the analysis scripts and ML users share. A training run is a
directory (``config.json``, ``metrics.csv``, ``checkpoints/``, ``final.json``): see
:func:`train`. Tasks are sequence labelling (:class:`Task`): pair copy, bracket matching, a
JSONL file; character-level language modelling (:class:`CharLMTask`) on the corpora of
:func:`load_corpus`, and text generation from its runs (:func:`generate_text`).
"""

from ._bracket import DISTANCE_EDGES, REGIMES, VARIANTS, BracketTask, distance_summary, generate
from ._charlm import CharLMTask
from ._config import (
    ATTENTIONS,
    CALIBRATIONS,
    EXPERIMENT_STRUCTURES,
    METHODS,
    SCHEDULES,
    TASKS,
    TrainConfig,
    attention_options,
    build_model,
    build_task,
    coupling_spec,
)
from ._corpora import (
    CORPORA,
    PTB_EOS,
    TEXT8_VOCAB,
    CharCorpus,
    DocSource,
    EvalWindows,
    cache_root,
    default_sources,
    eval_windows,
    load_corpus,
    normalize_text8,
    random_windows,
    split_sizes,
)
from ._generate import generate_text
from ._jsonl import DataFileError, FileTask
from ._parallel import DataParallel, initialize_distributed
from ._stats import Interval, mean_interval, paired_difference, slope_interval
from ._tasks import Batch, PairCopyTask, Task, batch_rng
from ._train import (
    RunDirectoryError,
    Trainer,
    TrainingDiverged,
    evaluate_run,
    load_run,
    make_optimizer,
    train,
)

__all__ = [
    "ATTENTIONS",
    "CALIBRATIONS",
    "CORPORA",
    "DISTANCE_EDGES",
    "EXPERIMENT_STRUCTURES",
    "METHODS",
    "PTB_EOS",
    "REGIMES",
    "SCHEDULES",
    "TASKS",
    "TEXT8_VOCAB",
    "VARIANTS",
    "Batch",
    "BracketTask",
    "CharCorpus",
    "CharLMTask",
    "DataFileError",
    "DataParallel",
    "DocSource",
    "EvalWindows",
    "FileTask",
    "Interval",
    "PairCopyTask",
    "RunDirectoryError",
    "Task",
    "TrainConfig",
    "Trainer",
    "TrainingDiverged",
    "attention_options",
    "batch_rng",
    "build_model",
    "build_task",
    "cache_root",
    "coupling_spec",
    "default_sources",
    "distance_summary",
    "eval_windows",
    "evaluate_run",
    "generate",
    "generate_text",
    "initialize_distributed",
    "load_corpus",
    "load_run",
    "make_optimizer",
    "mean_interval",
    "normalize_text8",
    "paired_difference",
    "random_windows",
    "slope_interval",
    "split_sizes",
    "train",
]
