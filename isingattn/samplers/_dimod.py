"""Bridges with dimod, both ways.

* :func:`as_dimod_sampler` turns any of our backends into a ``dimod.Sampler`` (``sample``,
  ``sample_ising``, ``sample_qubo``), so the Ocean ecosystem can call it.
* :class:`DimodSampler` wraps any Ocean sampler (dwave-neal's, dwave-samplers', ``ExactSolver``,
  composites) as one of ours, under the common protocol.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_positive_int
from ..models import from_bqm
from ._base import Sampler, key_from_seed, seed_from_key


def as_dimod_sampler(sampler: Sampler, **defaults):
    """A ``dimod.Sampler`` that samples BQMs with ``sampler``.

    ``sample(bqm, num_reads=10, seed=None, beta=1.0, num_chains=1, **options)``: the BQM
    becomes a model (dimod's sign converted) at inverse temperature ``beta``; ``seed`` (an int)
    becomes the JAX key; ``options`` go to ``sampler.sample``. Returns a ``dimod.SampleSet`` of
    exactly ``num_reads`` rows (dimod's meaning) whose energies are the BQM's: chains are an
    internal detail here, ``num_chains`` chains of ``ceil(num_reads / num_chains)`` draws, in
    chain-major order, cut to ``num_reads``. ``defaults`` preset any of these keywords.
    """
    import dimod

    class IsingattnDimodSampler(dimod.Sampler):
        def __init__(self):
            self.child = sampler
            self._defaults = dict(defaults)
            self._parameters = {"num_reads": [], "seed": [], "beta": [], "num_chains": []}
            self._parameters.update({k: list(v) for k, v in sampler.parameters.items()})
            self._properties = {"backend": type(sampler).__name__, **dict(sampler.properties)}

        def __repr__(self):
            # stable across processes: dimod's generated test names embed it
            return f"as_dimod_sampler({sampler!r})"

        @property
        def parameters(self):
            return self._parameters

        @property
        def properties(self):
            return self._properties

        def sample(self, bqm, num_reads=None, seed=None, beta=None, **options):
            opts = {**self._defaults, **options}
            num_reads = opts.pop("num_reads", 10) if num_reads is None else num_reads
            seed = opts.pop("seed", None) if seed is None else seed
            beta = opts.pop("beta", 1.0) if beta is None else beta
            num_reads = check_positive_int("num_reads", num_reads)
            num_chains = check_positive_int("num_chains", opts.pop("num_chains", 1))
            labels = list(bqm.variables)
            if not labels:
                return dimod.SampleSet.from_samples_bqm(
                    (np.zeros((num_reads, 0), np.int8), []), bqm,
                )
            model = from_bqm(bqm, beta=beta, variable_order=labels)
            draws = -(-num_reads // num_chains)
            samples = sampler.sample(model, key_from_seed(seed), draws, num_chains=num_chains,
                                     **opts)
            spins = np.asarray(samples.flat()).astype(np.int8)[:num_reads]
            info = {"timing": samples.info["timing"]}
            return dimod.SampleSet.from_samples_bqm((spins, labels), bqm, info=info)

    return IsingattnDimodSampler()


class DimodSampler(Sampler):
    """Any Ocean (dimod) sampler as one of our backends.

    Each model of the batch becomes a ``dimod.BinaryQuadraticModel`` (one host call per model).
    With ``scale_by_beta`` (default) the BQM is ``beta * E``, so a child that samples at unit
    temperature targets our Boltzmann distribution; annealers that pick their own beta range do
    not care. ``num_chains * num_samples`` reads are requested (``num_reads``) and split into
    ``(chain, draw)`` in the order returned; a child that returns another number of reads is an
    error. The child's ``seed`` parameter, if it has one, is derived from the key; masked
    variables are left out of the BQM and held at the low value.

    Example:
      >>> from dwave.samplers import SimulatedAnnealingSampler
      >>> neal = DimodSampler(SimulatedAnnealingSampler(), num_sweeps=100)  # doctest: +SKIP
    """

    def __init__(self, child, *, scale_by_beta: bool = True, **child_defaults):
        import dimod

        if not isinstance(child, dimod.Sampler):
            raise TypeError(f"child must be a dimod.Sampler; got {type(child).__name__}")
        self.child = child
        self.scale_by_beta = scale_by_beta
        child_params = set(child.parameters)
        bad = sorted(set(child_defaults) - child_params)
        if bad:
            raise TypeError(
                f"{type(child).__name__} has no parameter(s) {', '.join(bad)}; its parameters: "
                f"{', '.join(sorted(child_params))}"
            )
        self.child_defaults = child_defaults
        self.parameters = {k: [] for k in child_params if k not in ("num_reads", "seed")}
        self.properties = {"child": type(child).__name__, "child_properties": child.properties}

    def _sample(self, model, key, num_samples, num_chains, **options):
        t_setup = time.perf_counter()
        batch = model.batch_shape
        n, total = model.n, num_chains * num_samples
        low = model.vartype.low
        keys = jax.random.split(key, max(1, int(np.prod(batch, dtype=int))))
        opts = {**self.child_defaults, **options}
        takes_reads = "num_reads" in self.child.parameters
        takes_seed = "seed" in self.child.parameters
        out = np.full((int(np.prod(batch, dtype=int)), total, n), low, np.int8)
        child_info, setup = [], time.perf_counter() - t_setup
        for b, idx in enumerate(np.ndindex(*batch) if batch else [()]):
            one = model[idx] if batch else model
            bqm = one.to_bqm()
            if self.scale_by_beta:
                bqm.scale(float(one.beta))
            call = dict(opts)
            if takes_reads:
                call["num_reads"] = total
            if takes_seed:
                call["seed"] = seed_from_key(keys[b])
            ss = self.child.sample(bqm, **call)
            rec = ss.record
            reads = np.repeat(rec.sample, rec.num_occurrences, axis=0)
            if reads.shape[0] != total:
                raise RuntimeError(
                    f"{type(self.child).__name__} returned {reads.shape[0]} reads; expected "
                    f"num_chains * num_samples = {total}. Use a child that honours num_reads."
                )
            labels = one.variable_labels
            cols = [labels.index(v) for v in ss.variables]
            out[b][:, cols] = reads
            child_info.append(dict(ss.info))
        spins = jnp.asarray(out.reshape(batch + (num_chains, num_samples, n)))
        return spins, {"child_info": child_info, "timing": {"setup_s": setup}}
