"""Experiments: tasks, data, the training and evaluation loop with checkpoints.

What ``isingattn train``, the analysis scripts and ML users share. A training run is a
directory (``config.json``, ``metrics.csv``, ``checkpoints/``, ``final.json``).
"""

__all__: list[str] = []
