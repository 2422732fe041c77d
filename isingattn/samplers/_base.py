"""The sampler protocol: ``sampler.sample(model, key, num_samples, *, num_chains=1, ...)``.

Every backend returns :class:`Samples` with ``spins`` shaped ``batch + (chain, draw, n)`` in the
model's vartype, ``energy`` shaped ``batch + (chain, draw)`` (the model's physics-sign energy,
without beta) and ``info`` with at least ``info["timing"]`` holding the same keys for every backend.
"""

from __future__ import annotations

import abc
import time
from typing import Any, ClassVar

import jax
import numpy as np

from .._validation import check_key, check_positive_int, shape_str
from ..models import ModelBase, Vartype
from ._sharding import auto_axes

#: Keys of ``Samples.info["timing"]`` (seconds), the same for every backend.
TIMING_KEYS = ("setup_s", "sampling_s", "total_s")


def seed_from_key(key) -> int:
    """The one place a host library's integer seed is derived from a JAX key (0 <= seed < 2^31)."""
    key = check_key(key)
    return int(jax.random.randint(key, (), 0, np.iinfo(np.int32).max))


def key_from_seed(seed) -> jax.Array:
    """A JAX key for a dimod-style integer ``seed`` (None: a fresh random seed)."""
    if seed is None:
        seed = int(np.random.default_rng().integers(2**31 - 1))
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer or None; got {seed!r}")
    return jax.random.key(int(seed))


@jax.tree_util.register_pytree_node_class
class Samples:
    """Draws from a sampler.

    Attributes:
      spins: ``batch + (chain, draw, n)`` in the model's vartype (-1/+1 or 0/1).
      energy: ``batch + (chain, draw)``, physics sign, without beta, in the model's dtype;
        computed from ``model`` on first access when not given (so a sampler computes nothing
        per draw that is not asked for) and kept.
      vartype: the model's :class:`~isingattn.models.Vartype`.
      info: backend information; ``info["timing"]`` holds :data:`TIMING_KEYS` in seconds.
      labels: variable labels of the model (or None for ``0..n-1``).
      model: the model sampled (set by :meth:`Sampler.sample`; None when built by hand).
    """

    def __init__(self, spins, energy, vartype, info=None, labels=None, model=None):
        if energy is None and model is None:
            raise ValueError("Samples needs the energies or the model to compute them from; "
                             "got energy=None and model=None")
        self.spins = spins
        self._energy = energy
        self.vartype = Vartype(vartype)
        self.info = {} if info is None else info
        self.labels = labels
        self.model = model

    @property
    def energy(self) -> jax.Array:
        if self._energy is None:
            self._energy = self.model.energy(self.spins)
        return self._energy

    @energy.setter
    def energy(self, value):
        self._energy = value

    def tree_flatten(self):
        return (self.spins, self._energy, self.info, self.model), (self.vartype, self.labels)

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj.spins, obj._energy, obj.info, obj.model = children
        obj.vartype, obj.labels = aux
        return obj

    @property
    def n(self) -> int:
        return self.spins.shape[-1]

    @property
    def num_chains(self) -> int:
        return self.spins.shape[-3]

    @property
    def num_draws(self) -> int:
        return self.spins.shape[-2]

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(self.spins.shape[:-3])

    def flat(self) -> jax.Array:
        """Spins with chains and draws merged: ``batch + (chain * draw, n)``."""
        return self.spins.reshape(self.batch_shape + (-1, self.n))

    def to_sampleset(self, index=(), model=None):
        """One model's draws as a ``dimod.SampleSet`` (rows in chain-major order). For a batch,
        ``index`` picks the model, e.g. ``samples.to_sampleset((0,))``.

        With the model (``self.model``, or ``model`` given here) the SampleSet agrees with
        ``model.to_bqm()``: masked variables are left out, as there, and energies are the BQM's,
        recomputed in float64 from the spins (dimod's default precision holds). Without one,
        every variable is kept and the stored energies are cast to float64.
        """
        import dimod

        index = index if isinstance(index, tuple) else (index,)
        if len(index) != len(self.batch_shape):
            raise ValueError(
                f"index must pick one model of the batch {self.batch_shape}; got {index}"
            )
        spins = np.asarray(self.spins[index]).reshape(-1, self.n).astype(np.int8)
        labels = list(self.labels) if self.labels is not None else list(range(self.n))
        info = {"timing": dict(self.info.get("timing", {}))}
        model = self.model if model is None else model
        if model is None:
            energy = np.asarray(self.energy[index], np.float64).reshape(-1)
            return dimod.SampleSet.from_samples((spins, labels), self.vartype.value,
                                                energy=energy, info=info)
        one = model[index] if model.batch_shape else model
        if one.n != self.n:
            raise ValueError(f"model has n = {one.n} variables; these samples have n = {self.n}")
        bqm = one.to_bqm()  # masked variables left out
        where = {v: i for i, v in enumerate(labels)}
        keep = [where[v] for v in bqm.variables]
        return dimod.SampleSet.from_samples_bqm(
            (spins[:, keep], list(bqm.variables)), bqm, info=info
        )

    def __repr__(self):
        return (
            f"Samples(batch_shape={self.batch_shape}, num_chains={self.num_chains}, "
            f"num_draws={self.num_draws}, n={self.n}, vartype={self.vartype.value})"
        )


class Sampler(abc.ABC):
    """Base class of every backend.

    Subclasses implement :meth:`_sample` returning ``(spins, info)`` with spins shaped
    ``batch + (chain, draw, n)``; this class validates the common arguments, rejects unknown
    options by name, computes energies and records timings.

    ``parameters`` lists the backend's options (dimod style: name -> list of related
    properties); ``properties`` describes the backend.
    """

    #: Options accepted by :meth:`sample` beyond ``num_chains``.
    parameters: ClassVar[dict[str, list]] = {}
    properties: ClassVar[dict[str, Any]] = {}

    def sample(self, model: ModelBase, key, num_samples: int, *, num_chains: int = 1,
               **options) -> Samples:
        """Draw ``num_samples`` per chain from each model of the batch.

        Args:
          model: an :class:`~isingattn.IsingModel` or :class:`~isingattn.SparseIsingModel`
            (any batch shape).
          key: a JAX PRNG key; same key, same samples.
          num_samples: draws per chain (>= 1).
          num_chains: independent chains per model (>= 1).
          **options: backend options, see ``parameters``.

        Returns:
          :class:`Samples` with spins ``batch + (num_chains, num_samples, n)``.
        """
        if not isinstance(model, ModelBase):
            raise TypeError(
                f"model must be an IsingModel or SparseIsingModel; got {type(model).__name__}"
            )
        key = check_key(key)
        num_samples = check_positive_int("num_samples", num_samples)
        num_chains = check_positive_int("num_chains", num_chains)
        self._check_options(options, "sample")
        model = auto_axes(model)
        t0 = time.perf_counter()
        spins, info = self._sample(model, key, num_samples, num_chains, **options)
        spins = jax.block_until_ready(spins)
        t1 = time.perf_counter()
        expected = model.batch_shape + (num_chains, num_samples, model.n)
        if tuple(spins.shape) != expected:
            raise RuntimeError(
                f"{type(self).__name__} returned spins of shape {shape_str(spins.shape)}; "
                f"expected {shape_str(expected)}"
            )
        spins = spins.astype(model.dtype)
        t2 = time.perf_counter()
        info = dict(info)
        timing = dict(info.pop("timing", {}))
        timing.setdefault("setup_s", 0.0)
        timing.setdefault("sampling_s", t1 - t0 - timing["setup_s"])
        timing["total_s"] = t2 - t0
        info["timing"] = timing
        return Samples(spins, None, model.vartype, info, model.labels, model)

    def _check_options(self, options, where="__init__") -> dict:
        """Return ``options`` if every name is in :attr:`parameters`; else a ``TypeError`` that
        names the unknown ones and lists the valid ones (used by ``sample`` and by backends
        whose constructors take default options)."""
        unknown = sorted(set(options) - set(self.parameters))
        if unknown:
            valid = ", ".join(sorted(self.parameters)) or "none"
            extra = "num_chains, " if where == "sample" else ""
            raise TypeError(
                f"{type(self).__name__}.{where} got unknown option(s) {', '.join(unknown)}; "
                f"valid options: {extra}{valid}"
            )
        return dict(options)

    @abc.abstractmethod
    def _sample(self, model, key, num_samples, num_chains, **options):
        """Return ``(spins batch + (chain, draw, n), info dict)``."""

    def as_dimod(self, **defaults):
        """This backend as a ``dimod.Sampler`` (see :func:`as_dimod_sampler`)."""
        from ._dimod import as_dimod_sampler

        return as_dimod_sampler(self, **defaults)

    def __repr__(self):
        return f"{type(self).__name__}()"
