"""Calibration of a sampled method during training: the sampler's effective temperatures
measured on probe models every ``calibrate_every`` steps (``calibration.csv`` of the run), and
for ``calibrate="measured"`` its scales moved toward the intended temperature.

Where the state lives: the scales are a :class:`~isingattn.attention._nnx.SamplerScales`
variable of each attention layer (module state, not a parameter), so they are saved in every
checkpoint and restored on ``--resume``; ``config.json`` records how the run calibrates and what
the backend's law says (``calibration``), ``calibration.csv`` every measurement. A measurement
at step ``t`` is made before the step's update, from the first ``calibrate_probes`` sequences of
step ``t``'s batch, with a key derived from ``(seed, t)`` alone: a resumed run repeats it
exactly (checkpoints hold the state before it).
"""

from __future__ import annotations

import numpy as np

from ._logs import StepLog

#: Columns of ``calibration.csv``.
CALIBRATION_FIELDS = ["step", "layer", "round", "head", "probes", "num_samples", "beta", "c_h",
                      "c_J", "gamma_h", "gamma_J", "se_h", "se_J", "new_c_h", "new_c_J",
                      "field_scale", "coupling_scale", "flip_sum", "seconds"]
_KEY_TAG = 0x0CA11B


def calibration_key(seed: int, step: int):
    """The key of the measurement at ``step`` (a function of ``(seed, step)`` alone)."""
    import jax

    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), _KEY_TAG), step)


def calibrate_trainer(trainer, batch, step: int) -> list[dict]:
    """Measure (and, for ``calibrate="measured"``, update) the sampler scales of ``trainer``'s
    model on probe models from ``batch``; returns the records (``step`` added)."""
    import time

    import jax.numpy as jnp
    from flax import nnx

    from ..attention import calibrate_model

    config = trainer.config
    t0 = time.perf_counter()
    model, opt = nnx.merge(trainer.graphdef, trainer.state)
    inputs = jnp.asarray(np.asarray(batch.inputs)[: config.calibrate_probes])
    records = calibrate_model(model, inputs, calibration_key(config.seed, step),
                              update=config.calibrate == "measured",
                              probes=config.calibrate_probes,
                              num_samples=config.calibrate_samples)
    _, trainer.state = nnx.split((model, opt))
    dt = time.perf_counter() - t0
    return [{"step": step, **r, "seconds": dt} for r in records]


def calibration_description(trainer) -> dict | None:
    """The ``calibration`` entry of ``config.json``: the mode, cadence, probes, what the
    backend's law says (effective temperatures of the anneal, formula scales) and the scales
    every layer starts from. None for a run without a sampled method."""
    from ..attention import Sampled, formula_record
    from ._config import build_method

    config = trainer.config
    method = build_method(config)
    if not isinstance(method, Sampled):
        return None
    model = trainer.model()
    layers = []
    for block in getattr(model, "blocks", []):
        var = getattr(block.attn, "sampler_scales", None)
        layers.append(None if var is None else np.asarray(var[...]).tolist())
    return {"calibrate": config.calibrate, "every": config.calibration_every,
            "probes": config.calibrate_probes, "num_samples": config.calibrate_samples,
            "backend": type(method.backend).__name__, "options": dict(method.options),
            **formula_record(method, config.beta), "initial_scales": layers}


class CalibrationLog(StepLog):
    """``calibration.csv``: one row per measurement, layer, round and head."""

    def __init__(self, path, *, enabled: bool = True):
        super().__init__(path, CALIBRATION_FIELDS, enabled=enabled)

    def truncate_from(self, step):
        """Drop rows of ``step`` and later (a resumed run measures them again)."""
        self.keep_steps_below(step)

    def append(self, records):
        self.append_rows([{k: (f"{v:.6g}" if isinstance(v, (float, np.floating)) else v)
                           for k, v in r.items()} for r in records])
