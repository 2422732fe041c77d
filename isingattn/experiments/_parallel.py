"""Data-parallel training over every device of every process (JAX's distributed runtime).

The parameters and optimizer state are replicated, each training and evaluation batch is split
along its rows over a one-axis mesh (``"data"``), and XLA's partitioner turns the loss's sums
into cross-device reductions: one step is the single-device step on the same global batch, to
float rounding. Every process builds the same global batch from the run's seed and hands its
devices their rows, so no data is sent between processes.
"""

from __future__ import annotations

import os

import numpy as np

#: Name of the mesh axis the batch is split along.
DATA_AXIS = "data"


def initialize_distributed(coordinator_address: str | None = None,
                           num_processes: int | None = None,
                           process_id: int | None = None) -> None:
    """Join JAX's distributed runtime (``jax.distributed.initialize``) before anything else
    touches a device; on CPU hosts collectives go through gloo.

    All three arguments None: the cluster is detected from the environment (SLURM, Open MPI,
    Cloud TPU, ...), as ``jax.distributed.initialize()`` does. Otherwise all three are needed:
    ``coordinator_address`` ``"host:port"`` of process 0, ``num_processes`` >= 1 and this
    process's ``process_id`` in ``[0, num_processes)``.

    Raises ``ValueError`` for an incomplete or invalid set of arguments, ``RuntimeError`` when
    JAX has already been initialized or has computed on a device (the runtime must come first).
    """
    import jax

    given = [coordinator_address is not None, num_processes is not None, process_id is not None]
    if any(given) and not all(given):
        raise ValueError(
            "coordinator_address, num_processes and process_id go together (all three, or none "
            f"to detect the cluster); got coordinator_address={coordinator_address!r}, "
            f"num_processes={num_processes!r}, process_id={process_id!r}")
    if all(given):
        host, sep, port = str(coordinator_address).rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"coordinator_address must be 'host:port'; got "
                             f"{coordinator_address!r}")
        if not isinstance(num_processes, int) or num_processes < 1:
            raise ValueError(f"num_processes must be an integer >= 1; got {num_processes!r}")
        if not isinstance(process_id, int) or not 0 <= process_id < num_processes:
            raise ValueError(f"process_id must be an integer in [0, {num_processes}); got "
                             f"{process_id!r}")
    if "JAX_CPU_COLLECTIVES_IMPLEMENTATION" not in os.environ:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(coordinator_address, num_processes, process_id)
    except RuntimeError as e:
        raise RuntimeError(
            f"jax.distributed.initialize failed ({e}); it must run once per process, before "
            "any computation on a device") from None


class DataParallel:
    """Replicated state and row-split batches on a mesh of ``devices`` (default: every device
    of every process, ``jax.devices()``).

    Batches must have a multiple of ``num_devices`` rows (:meth:`check_rows`). Only the main
    process (``jax.process_index() == 0``) writes files; every process runs every step.
    """

    def __init__(self, devices=None):
        import jax
        from jax.sharding import Mesh, NamedSharding, PartitionSpec

        devices = list(jax.devices() if devices is None else devices)
        if not devices:
            raise ValueError("devices must name at least one device")
        self.mesh = Mesh(np.array(devices), (DATA_AXIS,))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.rows = NamedSharding(self.mesh, PartitionSpec(DATA_AXIS))

    @property
    def num_devices(self) -> int:
        return self.mesh.size

    @property
    def is_main(self) -> bool:
        import jax

        return jax.process_index() == 0

    def check_rows(self, name: str, rows: int) -> None:
        """Raise ``ValueError`` unless ``rows`` splits evenly over the devices."""
        if rows % self.num_devices:
            raise ValueError(
                f"{name} = {rows} does not split over {self.num_devices} devices for "
                f"data-parallel training; use a multiple of {self.num_devices}")

    def put_state(self, state):
        """The state (an ``nnx.State`` of equal values on every process) replicated on the
        mesh."""
        import jax

        return jax.tree.map(lambda x: jax.device_put(x, self.replicated), state)

    def put_rows(self, *arrays):
        """Host arrays (the same on every process) split along their first axis; each process
        places only its own devices' rows."""
        import jax

        def put(x):
            x = np.asarray(x)
            return jax.make_array_from_callback(x.shape, self.rows, lambda index: x[index])

        return tuple(put(x) for x in arrays)

    def describe(self) -> dict:
        """What ``config.json`` records: processes, devices and their platform."""
        import jax

        return {"processes": jax.process_count(), "devices": self.num_devices,
                "platform": self.mesh.devices.flat[0].platform}
