"""The training loop: a run is a directory.

``OUT/config.json`` (the :class:`TrainConfig`, the task's description, versions),
``OUT/metrics.csv`` (one row per evaluation and split, appended as it goes), ``OUT/checkpoints/``
(model and optimizer state every ``checkpoint_every`` steps and at the end) and ``OUT/final.json``
(test metrics, parameter count, steps/s, compile, wall and final-evaluation time, final
couplings, versions).

Training batches depend on ``(seed, step)`` alone and the state is restored exactly, so a run
resumed from its last checkpoint continues with the numbers the uninterrupted run would have had
(bit for bit on one machine); an interruption loses at most the steps since that checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import platform
import shutil
import sys
import time

import numpy as np

from .._io import atomic_write, write_json
from ._calibrate import CalibrationLog, calibrate_trainer, calibration_description
from ._config import TrainConfig, build_model, build_task, check_method
from ._logs import StepLog
from ._tasks import Batch, batch_rng

CHECKPOINT_DIR = "checkpoints"


class RunDirectoryError(ValueError):
    """The output directory holds a run (or other files) that this call must not replace."""


class TrainingDiverged(RuntimeError):
    """A training loss or gradient became non-finite; the message names the step and the
    parameters."""


def versions() -> dict:
    """Versions of Python and the libraries a run's numbers depend on."""
    import flax
    import jax
    import jaxlib
    import optax

    from .. import __version__

    return {"python": platform.python_version(), "isingattn": __version__,
            "jax": jax.__version__, "jaxlib": jaxlib.__version__, "flax": flax.__version__,
            "optax": optax.__version__, "numpy": np.__version__,
            "platform": platform.platform()}


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise RunDirectoryError(f"{path} is not valid JSON ({e.msg}, line {e.lineno}); the run "
                                "directory is damaged: use --force to start over") from None


# ------------------------------------------------------------------------------------------------
# optimizer, steps
# ------------------------------------------------------------------------------------------------


def learning_rate_schedule(config: TrainConfig):
    """Linear warm-up to ``lr`` over ``warmup`` steps, then constant or cosine decay to 0 at
    ``steps``."""
    return _schedule(config.lr, config.warmup, config.steps, config.schedule)


def _schedule(lr, warmup, steps, schedule):
    import optax

    warm = min(warmup, steps)
    if schedule == "constant":
        after = optax.constant_schedule(lr)
    else:
        after = optax.cosine_decay_schedule(lr, max(steps - warm, 1))
    if warm == 0:
        return after
    return optax.join_schedules([optax.linear_schedule(0.0, lr, warm), after], [warm])


def make_optimizer(config: TrainConfig):
    """AdamW with :func:`learning_rate_schedule`, after clipping the global gradient norm to
    ``clip`` (0: no clipping). Configs with the same optimizer settings get the same
    transformation object, so that their models' compiled steps are shared."""
    return _optimizer(config.lr, config.warmup, config.steps, config.schedule, config.clip,
                      config.weight_decay)


@functools.lru_cache(maxsize=64)
def _optimizer(lr, warmup, steps, schedule, clip, weight_decay):
    import optax

    parts = [optax.clip_by_global_norm(clip)] if clip > 0 else []
    parts.append(optax.adamw(_schedule(lr, warmup, steps, schedule), weight_decay=weight_decay))
    return optax.chain(*parts)


def _loss_terms(model, inputs, labels, weights, deterministic):
    import jax.numpy as jnp
    import optax

    logits = model(inputs, deterministic=deterministic).astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    total = jnp.maximum(jnp.sum(weights), 1.0)
    loss = jnp.sum(ce * weights) / total
    correct = (jnp.argmax(logits, -1) == labels).astype(jnp.float32) * weights
    return loss, (ce, correct)


class _Graph:
    """A model's graph definition as a static jit argument, its hash computed once (hashing a
    graph walks all of it; the steps are called thousands of times)."""

    __slots__ = ("_hash", "graphdef")

    def __init__(self, graphdef):
        self.graphdef = graphdef
        self._hash = hash(graphdef)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return self is other or (isinstance(other, _Graph) and self._hash == other._hash
                                 and self.graphdef == other.graphdef)


def _train_step(graph, state, inputs, labels, weights):
    import jax
    import jax.numpy as jnp
    from flax import nnx

    model, opt = nnx.merge(graph.graphdef, state)

    def loss_fn(m):
        return _loss_terms(m, inputs, labels, weights, False)

    (loss, (_, correct)), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model)
    finite = jax.tree.map(lambda g: jnp.all(jnp.isfinite(g)), grads)
    opt.update(model, grads)
    _, new_state = nnx.split((model, opt))
    return new_state, loss, jnp.sum(correct), jnp.sum(weights), finite


def _eval_step(graph, num_groups, state, inputs, labels, weights, groups):
    import jax.numpy as jnp
    from flax import nnx

    model, _ = nnx.merge(graph.graphdef, state)
    _, (ce, correct) = _loss_terms(model, inputs, labels, weights, True)
    scored = weights > 0
    wrong = jnp.sum(scored & (correct == 0), axis=1)
    has = jnp.any(scored, axis=1)
    onehot = (groups[..., None] == jnp.arange(num_groups)) & scored[..., None]
    return {"loss": jnp.sum(ce * weights), "weight": jnp.sum(weights),
            "correct": jnp.sum(correct),
            "seq_correct": jnp.sum(has & (wrong == 0)), "seq_count": jnp.sum(has),
            "group_correct": jnp.sum(onehot * correct[..., None], axis=(0, 1)),
            "group_count": jnp.sum(onehot, axis=(0, 1))}


@functools.cache
def _compiled_steps(replicated=None):
    """The jitted train and evaluation steps, the model's graph static: every :class:`Trainer`
    of one model and optimizer (another seed, a resumed run, a re-evaluation) shares one
    compiled program. ``replicated``: a sharding every result is placed on (data-parallel
    training: the batch comes split over its mesh)."""
    import jax

    out = {} if replicated is None else {"out_shardings": replicated}
    return (jax.jit(_train_step, static_argnums=0, donate_argnums=1, **out),
            jax.jit(_eval_step, static_argnums=(0, 1), **out))


def check_parallel(config: TrainConfig, parallel) -> None:
    """Raise ``ValueError`` where ``config`` cannot train data-parallel on ``parallel``: sampled
    methods draw on the host, one process at a time, and the batch must split over the
    devices."""
    if parallel is None:
        return
    if config.resolved_method.startswith("sampled:") and parallel.num_devices > 1:
        raise ValueError(
            f"method {config.resolved_method!r} cannot train data-parallel: sampled methods draw "
            "on the host of one process; train it on one device (exact, transfer, mean_field, "
            "tap and softmax run data-parallel)")
    parallel.check_rows("batch", config.batch)


class Trainer:
    """A model, its optimizer and the compiled train and evaluation steps of one config.

    ``length``: the sequence length the model is built for (default the config's; evaluation at
    another length builds its own :class:`Trainer`). ``parallel``: a
    :class:`~isingattn.experiments.DataParallel` to train on several devices or processes (the
    state replicated, every batch split over the devices); None: the default device.
    """

    def __init__(self, config: TrainConfig, task=None, *, length: int | None = None,
                 parallel=None):
        import jax
        from flax import nnx

        check_parallel(config, parallel)
        self.config = config
        self.parallel = parallel
        self.task = task if task is not None else build_task(config)
        self.length = length or config.length
        model = build_model(config, self.task, length=self.length)
        opt = nnx.Optimizer(model, make_optimizer(config), wrt=nnx.Param)
        self.graphdef, self.state = nnx.split((model, opt))
        self.num_params = int(sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))))
        if parallel is not None:
            self.state = parallel.put_state(self.state)
        steps = _compiled_steps(None if parallel is None else parallel.replicated)
        graph = _Graph(self.graphdef)
        self._train_step = functools.partial(steps[0], graph)
        self._eval_step = functools.partial(steps[1], graph, len(self.task.groups))

    def _rows(self, *arrays):
        return arrays if self.parallel is None else self.parallel.put_rows(*arrays)

    # --- state ----------------------------------------------------------------------------------
    def model(self):
        """The model with the current state (a fresh object sharing nothing mutable)."""
        from flax import nnx

        return nnx.merge(self.graphdef, self.state)[0]

    def host_state(self) -> dict:
        """The state as a nested dict of numpy arrays (PRNG keys as their key data)."""
        import jax
        from flax import nnx

        def to_host(x):
            if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
                return np.asarray(jax.random.key_data(x))
            return np.asarray(x)

        return jax.tree.map(to_host, nnx.to_pure_dict(self.state))

    def load_host_state(self, pure: dict, *, allow_new_rngs: bool = False) -> None:
        """Restore :meth:`host_state` output (shapes and dtypes must match this config;
        ``allow_new_rngs``: random-number streams the state lacks keep their fresh values)."""
        import jax
        import jax.numpy as jnp
        from flax import nnx

        template = nnx.to_pure_dict(self.state)

        def back(t, x):
            if jax.dtypes.issubdtype(t.dtype, jax.dtypes.prng_key):
                return jax.random.wrap_key_data(jnp.asarray(x), impl=jax.random.key_impl(t))
            x = np.asarray(x)
            if x.shape != t.shape:
                raise RunDirectoryError(f"checkpoint holds an array of shape {x.shape} where the "
                                        f"config builds {t.shape}")
            return jnp.asarray(x, dtype=t.dtype)

        matched = _match_keys(template, pure, allow_new_rngs)
        restored = jax.tree.map(lambda t, x: t if x is t else back(t, x), template, matched)
        nnx.replace_by_pure_dict(self.state, restored)
        if self.parallel is not None:
            self.state = self.parallel.put_state(self.state)

    # --- steps ----------------------------------------------------------------------------------
    def step(self, batch: Batch):
        """One optimizer step (asynchronous): returns device scalars ``(loss, correct, weight)``
        and the per-parameter finiteness of the gradients."""
        self.state, loss, correct, weight, finite = self._train_step(
            self.state, *self._rows(batch.inputs, batch.labels, batch.weights))
        return loss, correct, weight, finite

    def evaluate(self, split: str, num_examples: int | None, *, length: int | None = None,
                 batch_size: int | None = None) -> dict:
        """Metrics of ``split`` (``"valid"``/``"test"``) over ``num_examples`` examples at
        ``length`` (default the trainer's; None: the whole split, for tasks that have one):
        ``loss`` (mean cross-entropy of scored positions), the task's metric, ``seq_accuracy``
        where the task has it, accuracy per group, and for ``bpc`` tasks ``characters`` (the
        number of scored characters)."""
        length = length or self.length
        bs = batch_size or self.config.batch
        if self.parallel is not None:
            self.parallel.check_rows("batch_size", bs)
        totals = None
        for b in self.task.eval_batches(split, length, bs, num_examples):
            s = self._eval_step(self.state, *self._rows(b.inputs, b.labels, b.weights,
                                                          b.groups))
            s = {k: np.asarray(v, np.float64) for k, v in s.items()}
            totals = s if totals is None else {k: totals[k] + s[k] for k in totals}
        return summarize(self.task, totals)


def _match_keys(template, pure, allow_new_rngs=False):
    """``pure`` (from msgpack: string keys) with the key types of ``template``. With
    ``allow_new_rngs``, random-number streams that the checkpoint lacks (a stochastic inference
    method evaluating a deterministically trained model) keep the template's fresh state."""
    if isinstance(template, dict):
        out = {}
        for k, v in template.items():
            src = pure.get(k, pure.get(str(k))) if isinstance(pure, dict) else None
            if src is None:
                if allow_new_rngs and k == "rngs":
                    out[k] = v
                    continue
                raise RunDirectoryError(f"checkpoint lacks the entry {k!r} that the config "
                                        "builds (another model?)")
            out[k] = _match_keys(v, src, allow_new_rngs)
        return out
    return pure


def metric_names(task) -> list[str]:
    """The metric columns of ``metrics.csv`` after ``loss`` and ``metric``."""
    names = ["seq_accuracy"] if task.sequence_metric else []
    return names + [f"acc_{g}" for g in task.groups]


def summarize(task, totals) -> dict:
    """Metrics from the summed statistics of the evaluation batches."""
    if totals is None:
        raise ValueError("no evaluation examples")
    w = totals["weight"]
    out = {"loss": float(totals["loss"] / w) if w else float("nan")}
    if task.metric == "bpc":
        out["metric"] = out["loss"] / np.log(2.0)
        out["characters"] = int(w)
    else:
        out["metric"] = float(totals["correct"] / w) if w else float("nan")
    if task.sequence_metric:
        n = totals["seq_count"]
        out["seq_accuracy"] = float(totals["seq_correct"] / n) if n else float("nan")
    for i, g in enumerate(task.groups):
        n = totals["group_count"][i]
        out[f"acc_{g}"] = float(totals["group_correct"][i] / n) if n else float("nan")
        out[f"count_{g}"] = int(n)
    return out


# ------------------------------------------------------------------------------------------------
# the run directory
# ------------------------------------------------------------------------------------------------


def _checkpoints(out):
    d = os.path.join(out, CHECKPOINT_DIR)
    if not os.path.isdir(d):
        return []
    steps = []
    for name in os.listdir(d):
        if name.startswith("step_") and name.endswith(".msgpack"):
            try:
                steps.append(int(name[5:-8]))
            except ValueError:
                continue
    return sorted(steps)


def _checkpoint_path(out, step):
    return os.path.join(out, CHECKPOINT_DIR, f"step_{step:08d}.msgpack")


def save_checkpoint(out, step, trainer: Trainer, extra: dict, keep: int) -> str:
    """Write the checkpoint of ``step`` atomically and keep the newest ``keep``."""
    from flax import serialization

    os.makedirs(os.path.join(out, CHECKPOINT_DIR), exist_ok=True)
    path = _checkpoint_path(out, step)
    data = serialization.msgpack_serialize(
        {"step": int(step), "state": trainer.host_state(), "extra": json.dumps(extra)})
    atomic_write(path, data)
    for old in _checkpoints(out)[:-keep]:
        os.remove(_checkpoint_path(out, old))
    return path


def load_checkpoint(out, trainer: Trainer, step: int | None = None, *,
                    allow_new_rngs: bool = False):
    """Restore the newest checkpoint (or ``step``'s) into ``trainer``; returns ``(step,
    extra)``. ``allow_new_rngs``: see :meth:`Trainer.load_host_state`."""
    from flax import serialization

    steps = _checkpoints(out)
    if not steps:
        raise RunDirectoryError(f"{out} has no checkpoint to resume from")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise RunDirectoryError(f"{out} has no checkpoint of step {step}; it has {steps}")
    with open(_checkpoint_path(out, step), "rb") as f:
        try:
            data = serialization.msgpack_restore(f.read())
        except (ValueError, TypeError, KeyError, OSError) as e:  # a truncated/foreign file
            raise RunDirectoryError(
                f"{_checkpoint_path(out, step)} cannot be read ({type(e).__name__}); delete it "
                "to resume from the one before, or --force to start over") from None
    trainer.load_host_state(data["state"], allow_new_rngs=allow_new_rngs)
    return int(data["step"]), json.loads(data["extra"])


class MetricsLog(StepLog):
    """``metrics.csv``: step, split, loss, metric and the task's extra columns, one row per
    evaluation, appended and flushed as it goes."""

    def __init__(self, path, task, *, enabled: bool = True):
        super().__init__(path, ["step", "split", "loss", "metric"] + metric_names(task),
                         enabled=enabled)

    def truncate_after(self, step):
        """Drop rows of steps after ``step`` (a resumed run writes them again)."""
        self.keep_steps_below(step + 1)

    def append(self, step, split, metrics):
        self.append_rows([{"step": step, "split": split,
                           **{k: _fmt(v) for k, v in metrics.items()}}])


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.6g}" if np.isfinite(v) else "nan"
    return v


def run_status(out) -> str:
    """``"empty"`` (missing or empty directory), ``"finished"``, ``"unfinished"`` (a run without
    ``final.json``) or ``"foreign"`` (other files)."""
    if not os.path.exists(out):
        return "empty"
    if not os.path.isdir(out):
        raise RunDirectoryError(f"--out {out!r} is a file, not a directory")
    names = set(os.listdir(out))
    if not names:
        return "empty"
    if "final.json" in names:
        return "finished"
    if "config.json" in names:
        return "unfinished"
    return "foreign"


def _clear_run(out):
    """Remove the files a run writes (and nothing else)."""
    for name in ("config.json", "metrics.csv", "final.json", "calibration.csv"):
        p = os.path.join(out, name)
        if os.path.exists(p):
            os.remove(p)
    shutil.rmtree(os.path.join(out, CHECKPOINT_DIR), ignore_errors=True)


def _config_diff(old: dict, new: dict) -> list[str]:
    # a field added to TrainConfig after a run was made holds its default there
    old = {**{f.name: f.default for f in dataclasses.fields(TrainConfig)}, **old}
    keys = sorted(set(old) | set(new))
    return [k for k in keys if old.get(k) != new.get(k)
            and k not in TrainConfig.RESUMABLE_CHANGES]


def resolve_config(config: TrainConfig, task) -> TrainConfig:
    """The config with its length filled in (``file``: the longest example)."""
    if config.length is None:
        return config.replace(length=task.max_length())
    return config


def _progress(total, initial, enabled):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, file=sys.stderr,
                leave=True)


def train(config: TrainConfig, out: str, *, resume: bool = False, force: bool = False,
          progress: bool = True, callback=None, data_parallel=None) -> dict:
    """Train ``config`` into the run directory ``out``; returns the contents of ``final.json``.

    ``resume``: continue the run in ``out`` from its newest checkpoint (the config must match,
    but for :attr:`TrainConfig.RESUMABLE_CHANGES`; a finished run is returned as it is).
    ``force``: delete the run in ``out`` (its files only: other files stay) and start over.
    Without either, a directory that holds a run or other files is refused
    (:class:`RunDirectoryError`).
    ``progress``: a tqdm bar with the training loss and the latest validation metric.
    ``callback(step, row)``: called after each evaluation with the split's metrics (a
    ``KeyboardInterrupt`` raised there stops the run as an interruption would).
    ``data_parallel``: True trains on every device of every process (state replicated, each
    batch split over the devices: :class:`~isingattn.experiments.DataParallel`, or pass one);
    None (default) does so when JAX runs several processes (:func:`initialize_distributed`).
    Every process calls ``train`` with the same arguments and ``out`` on a filesystem they all
    see; only process 0 writes, and all return the same dict.

    Raises :class:`TrainingDiverged` when a loss or gradient becomes non-finite (the message
    names the step and the parameters; the last checkpoint is kept).
    """
    task = build_task(config)
    config = resolve_config(config, task)
    if task.max_length() is not None and config.length < task.max_length():
        task.train_batch(np.random.default_rng(0), 1, config.length)  # raises, naming the line
    check_method(config)  # a backend that cannot run (options, credentials, context) stops here
    parallel = resolve_parallel(data_parallel)
    check_parallel(config, parallel)
    main = parallel is None or parallel.is_main
    status = run_status(out)
    if parallel is not None:
        same_status(parallel, out, status)
    if status != "empty" and force:
        if main:
            _clear_run(out)
        status = "empty"  # files that are not the run's stay where they are
    if status == "foreign":
        raise RunDirectoryError(
            f"--out {out!r} holds files that are not a training run; choose an empty or new "
            "directory, or --force to write the run beside them")
    if status in ("finished", "unfinished") and not resume:
        what = "a finished run" if status == "finished" else "an unfinished run"
        raise RunDirectoryError(
            f"--out {out!r} holds {what}; use --resume to continue it"
            f"{' (nothing to do: it is finished)' if status == 'finished' else ''}, "
            "--force to start over, or another --out")
    config_path = os.path.join(out, "config.json")
    if status in ("finished", "unfinished"):
        # fields added to TrainConfig since the run was made take their defaults
        old = TrainConfig.from_dict(_read_json(config_path)["config"]).to_dict()
        diff = _config_diff(old, config.to_dict())
        if diff:
            shown = ", ".join(f"{k}: {old.get(k)!r} there, {config.to_dict().get(k)!r} now"
                              for k in diff)
            raise RunDirectoryError(f"--resume: the run in {out!r} has another config ({shown});"
                                    " use the same settings, --force, or another --out")
        if status == "finished":
            return _read_json(os.path.join(out, "final.json"))

    if main:
        os.makedirs(out, exist_ok=True)
    trainer = Trainer(config, task, parallel=parallel)
    log = MetricsLog(os.path.join(out, "metrics.csv"), task, enabled=main)
    cal_log = CalibrationLog(os.path.join(out, "calibration.csv"), enabled=main)
    cal_every = config.calibration_every
    start, clock = 0, {"wall": 0.0, "train": 0.0, "timed_steps": 0, "compile": None,
                       "acc": [0.0, 0.0, 0.0, 0]}
    if status == "unfinished" and _checkpoints(out):
        start, clock = load_checkpoint(out, trainer)
        log.truncate_after(start)
        cal_log.truncate_from(start)
    else:
        log.truncate_after(-1)
        cal_log.truncate_from(0)
        record = {"config": config.to_dict(), "task": task.describe(),
                  "parameters": trainer.num_params, "versions": versions(),
                  "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        calibration = calibration_description(trainer)
        if calibration is not None:
            record["calibration"] = calibration
        if parallel is not None:
            record["data_parallel"] = parallel.describe()
        if main:
            write_json(config_path, record)
            save_checkpoint(out, 0, trainer, clock, config.keep_checkpoints)

    bar = _progress(config.steps, start, progress and main)
    t_session = time.perf_counter()
    wall0 = clock["wall"]
    acc = clock["acc"]  # train loss sum, correct, weight, steps since the last evaluation
    last_valid = valid = None
    first = True  # this session's first step compiles
    try:
        batch = task.train_batch(batch_rng(config.seed, start), config.batch, config.length)
        for step in range(start, config.steps):
            if cal_every and step % cal_every == 0:  # before the step, from its batch
                t_cal = time.perf_counter()
                cal_log.append(calibrate_trainer(trainer, batch, step))
                clock["calibration"] = (clock.get("calibration", 0.0)
                                        + time.perf_counter() - t_cal)
            t0 = time.perf_counter()
            loss, correct, weight, finite = trainer.step(batch)
            if step + 1 < config.steps:  # prepared while the step runs
                batch = task.train_batch(batch_rng(config.seed, step + 1), config.batch,
                                         config.length)
            loss = float(loss)
            dt = time.perf_counter() - t0
            if first:
                first = False
                if clock["compile"] is None:
                    clock["compile"] = dt
            else:
                clock["train"] += dt
                clock["timed_steps"] += 1
            if not np.isfinite(loss) or not _all_true(finite):
                raise TrainingDiverged(_divergence_message(step + 1, loss, finite, out))
            acc = [acc[0] + loss, acc[1] + float(correct), acc[2] + float(weight), acc[3] + 1]
            done = step + 1
            if bar is not None:
                bar.update(1)
                post = {"loss": f"{loss:.3f}"}
                if last_valid is not None:
                    post[f"valid_{task.metric}"] = f"{last_valid:.3f}"
                bar.set_postfix(post, refresh=False)
            if done % config.eval_every == 0 or done == config.steps:
                train_row = {"loss": acc[0] / max(acc[3], 1),
                             "metric": (acc[1] / acc[2]) if acc[2] else float("nan")}
                if task.metric == "bpc":
                    train_row["metric"] = train_row["loss"] / np.log(2.0)
                log.append(done, "train", train_row)
                valid = trainer.evaluate("valid", config.eval_examples)
                log.append(done, "valid", valid)
                last_valid = valid["metric"]
                acc = [0.0, 0.0, 0.0, 0]
                if callback is not None:
                    callback(done, valid)
            if done % config.checkpoint_every == 0 or done == config.steps:
                clock["acc"] = acc
                clock["wall"] = wall0 + time.perf_counter() - t_session
                if main:
                    save_checkpoint(out, done, trainer, clock, config.keep_checkpoints)
    finally:
        if bar is not None:
            bar.close()

    t_eval = time.perf_counter()
    test = trainer.evaluate("test", task.final_eval_examples("test", config.test_examples))
    log.append(config.steps, "test", test)
    n_valid = task.final_eval_examples("valid", config.eval_examples)
    if valid is None or n_valid != config.eval_examples:  # e.g. char-lm: the whole split
        valid = trainer.evaluate("valid", n_valid)
    wall = wall0 + time.perf_counter() - t_session
    final = {"test": test, "valid": valid,
             "parameters": trainer.num_params,
             "steps_per_second": (clock["timed_steps"] / clock["train"]) if clock["train"]
             else None,
             "compile_seconds": clock["compile"], "wall_seconds": wall,
             "calibration_seconds": clock.get("calibration", 0.0),
             "final_eval_seconds": time.perf_counter() - t_eval,
             "attention": attention_summary(trainer.model()), "versions": versions()}
    qpu = qpu_summary(config)
    if qpu is not None:
        final["qpu"] = qpu
    if main:
        write_json(os.path.join(out, "final.json"), final)
    return final


def resolve_parallel(data_parallel):
    """The :class:`DataParallel` of ``train(data_parallel=...)``: an instance as it is, True for
    every device of every process, None for that when JAX runs several processes; False: none
    (refused with several processes, which would each train the whole model alone)."""
    import jax

    from ._parallel import DataParallel

    if isinstance(data_parallel, DataParallel):
        return data_parallel
    if data_parallel not in (None, True, False):
        raise TypeError(f"data_parallel must be None, True, False or a DataParallel; got "
                        f"{data_parallel!r}")
    several = jax.process_count() > 1
    if data_parallel is False and several:
        raise ValueError(f"data_parallel=False with {jax.process_count()} JAX processes: each "
                         "would train alone into the same run directory; use True or None")
    return DataParallel() if (data_parallel or several) else None


#: Codes of :func:`run_status` exchanged between processes.
_STATUS_CODES = ("empty", "finished", "unfinished", "foreign")


def same_status(parallel, out, status):
    """Raise :class:`RunDirectoryError` on every process unless all see ``out`` alike (a run
    directory on a filesystem that not every process sees would have them resume differently).
    """
    import jax

    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    codes = np.asarray(multihost_utils.process_allgather(
        np.array([_STATUS_CODES.index(status)], np.int32))).reshape(-1)
    if len(set(codes.tolist())) > 1:
        seen = ", ".join(f"process {i}: {_STATUS_CODES[c]}" for i, c in enumerate(codes))
        raise RunDirectoryError(
            f"the processes see --out {out!r} differently ({seen}); put the run directory on a "
            "filesystem that every process sees")


def _all_true(tree) -> bool:
    import jax

    return all(bool(x) for x in jax.tree.leaves(tree))


def _divergence_message(step, loss, finite, out):
    import jax

    bad = ["/".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
           for path, ok in jax.tree_util.tree_flatten_with_path(finite)[0] if not bool(ok)]
    what = f"the loss is {loss}" if not np.isfinite(loss) else "the loss is finite"
    grads = (f"; non-finite gradients of {', '.join(bad[:8])}"
             + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")) if bad else ""
    steps = _checkpoints(out)
    last = f"; the last checkpoint (step {steps[-1]}) is kept" if steps else ""
    return (f"training stopped at step {step}: {what}{grads}{last}. Lower the learning rate or "
            "beta, or clip gradients (--clip)")


def qpu_summary(config) -> dict | None:
    """For a ``sampled:qpu`` / ``sampled:qpu_offline`` run: the QPU calls this process made for
    the run's method (``calls``, ``problems``: one per query model) and the record of the last
    call (problems per call ``tiles``, the embedding's ``qubits``, ``max_chain_length`` and
    search time, the solver's ``qpu_timing`` and the wall time ``call_s`` of its calls). None for
    other methods."""
    from ..samplers import QPUSampler
    from ._config import build_method

    method = build_method(config)
    backend = getattr(method, "backend", None)
    if not isinstance(backend, QPUSampler):
        return None
    last = backend.__dict__.get("last_tiled_info") or {}
    return {"calls": backend.__dict__.get("tiled_calls", 0),
            "problems": backend.__dict__.get("tiled_problems", 0),
            "last": {k: last[k] for k in ("tiles", "calls", "embedding", "qpu_timing", "call_s",
                                          "chain_break_method", "auto_scale") if k in last}}


def attention_summary(model) -> list[dict]:
    """Per layer: the attention's couplings ``w(d)`` per head (None for softmax / J = 0) and
    chemical potentials."""
    out = []
    for block in model.blocks:
        attn = block.attn
        c = getattr(attn, "couplings", None)
        b = getattr(attn, "chemical_potential", None)
        s = getattr(attn, "sampler_scales", None)
        row = {
            "couplings": None if c is None else np.asarray(c[...]).tolist(),
            "chemical_potential": None if b is None else np.asarray(
                b[...] if hasattr(b, "__getitem__") else b).tolist()}
        if s is not None:  # calibration scales (c_h, c_J) per head of a sampled method
            row["sampler_scales"] = np.asarray(s[...]).tolist()
        out.append(row)
    return out


# ------------------------------------------------------------------------------------------------
# reading runs back
# ------------------------------------------------------------------------------------------------


#: Config fields that :func:`load_run` may override: they change how the trained model is
#: evaluated, not its parameters (e.g. mean-field couplings evaluated by exact enumeration).
EVAL_OVERRIDES = ("method", "num_samples", "backend_options", "eval_examples",
                  "test_examples", "batch", "calibrate", "calibrate_every")


def load_run(out: str, *, length: int | None = None, step: int | None = None,
             overrides: dict | None = None):
    """The :class:`Trainer` of the run in ``out`` with its newest (or ``step``'s) checkpoint
    restored; ``length`` builds it for another sequence length (position embeddings permitting);
    ``overrides``: config fields of :data:`EVAL_OVERRIDES` to change (e.g. another inference
    method)."""
    path = os.path.join(out, "config.json")
    if not os.path.exists(path):
        raise RunDirectoryError(f"{out!r} is not a training run (no config.json)")
    config = TrainConfig.from_dict(_read_json(path)["config"])
    if overrides:
        bad = sorted(set(overrides) - set(EVAL_OVERRIDES))
        if bad:
            raise ValueError(f"overrides may change {', '.join(EVAL_OVERRIDES)}; got {bad}")
        config = config.replace(**overrides)
    if length is not None and length != config.length and config.positional == "learned":
        raise ValueError(
            f"the run in {out!r} has learned absolute positions for length {config.length}; it "
            f"cannot be evaluated at length {length} (rope and none positions can)")
    trainer = Trainer(config, length=length)
    load_checkpoint(out, trainer, step, allow_new_rngs=bool(overrides))
    return trainer


def evaluate_run(out: str, *, length: int | None = None, split: str = "test",
                 num_examples: int | None = None, step: int | None = None,
                 overrides: dict | None = None) -> dict:
    """Metrics of the run in ``out`` (its newest checkpoint) on ``split`` at ``length`` (default
    the training length) over ``num_examples`` (default: those of the run's final evaluation,
    :meth:`Task.final_eval_examples`; None there means the whole split); also written to
    ``out/eval_<split>_L<length>.json`` (``..._<method>.json`` when ``overrides`` changes the
    inference method, :func:`load_run`)."""
    trainer = load_run(out, length=length, step=step, overrides=overrides)
    L = length or trainer.config.length
    n = num_examples or trainer.task.final_eval_examples(
        split, trainer.config.test_examples if split == "test" else trainer.config.eval_examples)
    metrics = trainer.evaluate(split, n, length=L)
    result = {"split": split, "length": L, "examples": n, "step": _checkpoints(out)[-1]
              if step is None else step, "metrics": metrics}
    tag = ""
    if overrides and "method" in overrides:
        tag = "_" + trainer.config.resolved_method.replace(":", "-")
        result["method"] = trainer.config.resolved_method
    write_json(os.path.join(out, f"eval_{split}_L{L}{tag}.json"), result)
    return result
