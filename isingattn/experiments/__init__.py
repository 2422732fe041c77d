"""Experiments: tasks, data, the training and evaluation loop with checkpoints.

What ``isingattn train``, the analysis scripts and ML users share. A training run is a
directory (``config.json``, ``metrics.csv``, ``checkpoints/``, ``final.json``): see
:func:`train`. Tasks are sequence labelling (:class:`Task`): pair copy, bracket matching, a
JSONL file.
"""

from ._bracket import DISTANCE_EDGES, REGIMES, VARIANTS, BracketTask, distance_summary, generate
from ._config import (
    ATTENTIONS,
    EXPERIMENT_STRUCTURES,
    METHODS,
    TASKS,
    TrainConfig,
    attention_options,
    build_model,
    build_task,
    coupling_spec,
)
from ._jsonl import DataFileError, FileTask
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
    "DISTANCE_EDGES",
    "EXPERIMENT_STRUCTURES",
    "METHODS",
    "REGIMES",
    "TASKS",
    "VARIANTS",
    "Batch",
    "BracketTask",
    "DataFileError",
    "FileTask",
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
    "coupling_spec",
    "distance_summary",
    "evaluate_run",
    "generate",
    "load_run",
    "make_optimizer",
    "train",
]
