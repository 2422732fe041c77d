"""A batch of models split over devices: every device runs its own models' chains.

A model whose arrays are placed with their leading batch axis split over a mesh axis
(``jax.device_put(model, NamedSharding(mesh, P("data")))`` leaf by leaf) is sampled by
``shard_map`` over that axis: each device runs the kernel on its own models, with the per-model
keys the unsplit call derives (so the draws equal the one-device draws), and nothing is gathered.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec


class BatchSplit(NamedTuple):
    """The mesh and the mesh axes (a name or a tuple of names) the batch axis is split over."""

    mesh: Mesh
    axes: object

    @property
    def spec(self) -> PartitionSpec:
        return PartitionSpec(self.axes)


def _named(x):
    s = getattr(x, "sharding", None)
    return s if isinstance(s, NamedSharding) else None


def _size(mesh, axes):
    names = axes if isinstance(axes, tuple) else (axes,)
    return int(np.prod([mesh.shape[a] for a in names]))


def num_shards(split: BatchSplit | None) -> int:
    """Devices the batch is split over (1 without a split)."""
    return 1 if split is None else _size(split.mesh, split.axes)


def batch_split(model) -> BatchSplit | None:
    """How ``model``'s leading batch axis is split over devices, or None (a single model, a batch
    not split along its first axis or not evenly, arrays on one device, inside a trace)."""
    batch = model.batch_shape
    if not batch:
        return None
    for leaf in jax.tree_util.tree_leaves(model):
        s = _named(leaf)
        if (s is None or isinstance(leaf, jax.core.Tracer)
                or tuple(leaf.shape[:len(batch)]) != batch):
            continue
        spec = tuple(s.spec) + (None,) * (leaf.ndim - len(s.spec))
        if spec[0] is None:
            continue
        size = _size(s.mesh, spec[0])
        if size > 1 and batch[0] % size == 0 and all(a is None for a in spec[1:len(batch)]):
            return BatchSplit(s.mesh, spec[0])
    return None


def auto_axes(model):
    """``model`` with arrays on meshes of Explicit axes moved to the same devices and
    layout on the mesh's Auto twin: the samplers' shape-changing steps (flattening the batch,
    broadcasting shared couplings) then need no sharding annotations; results are unchanged."""
    def move(x):
        s = _named(x)
        if s is None or isinstance(x, jax.core.Tracer) or all(
                t != AxisType.Explicit for t in s.mesh.axis_types):
            return x
        mesh = Mesh(s.mesh.devices, s.mesh.axis_names,
                    axis_types=(AxisType.Auto,) * len(s.mesh.axis_names))
        return jax.device_put(x, NamedSharding(mesh, s.spec))

    return jax.tree_util.tree_map(move, model)


def map_models(fn, split: BatchSplit | None, *args, shared=()):
    """``fn(*args)`` for a function of batch-leading arguments (but those at the positions in
    ``shared``, the same for every model) and batch-leading results; with ``split``, run on
    each device's slice of the batch (the arguments placed there first, a no-op for those
    already split so) and the results left split."""
    if split is None:
        return fn(*args)
    spec = split.spec
    in_specs = tuple(PartitionSpec() if i in shared else spec for i in range(len(args)))
    # fn holds each model's chains to itself (no cross-model reduction), so every shard's
    # result is the one-device result's slice; the loop carries are not typed for shard_map
    return jax.shard_map(fn, mesh=split.mesh, in_specs=in_specs, out_specs=spec,
                         check_vma=False)(*args)
