"""The library's compiled kernels: numba code that XLA calls as typed FFI custom calls (CPU).

* :mod:`.ffi`: what every kernel shares: reading XLA's call frame, answering its metadata
  query, reporting a frame it does not expect as the API's error, registering a handler once
  per process, and the backend policy;
* :mod:`.union_find`: connected components for the cluster samplers
  (:mod:`isingattn.samplers._clusters`);
* :mod:`.transfer`: banded-chain marginals and their gradient (VJP) for ``method='transfer'``
  attention (:mod:`isingattn.attention._banded`).
* :mod:`.anneal`: the state-vector anneal of the diabatic simulator
  (:mod:`isingattn.quantum`, ``DiabaticAnnealingSampler``).
* :mod:`.chain`: log Z, marginals and mean energy of banded chains for the exact
  transfer-matrix functions (:mod:`isingattn.exact`, ``backend=``).
* :mod:`.chromatic`: chromatic Gibbs and Metropolis sweeps of sparse models
  (``GibbsSampler``/``MetropolisSampler``, ``backend=``).
* :mod:`.simulated`: simulated annealing of dense models (``anneal`` /
  ``SimulatedAnnealingSampler``, ``backend=``).
* :mod:`.swendsen_wang`: whole Swendsen–Wang steps of grid models (``SwendsenWangSampler``,
  ``components=``).

One policy decides where a kernel runs, :func:`.ffi.resolve_backend`: ``"auto"`` is the
compiled kernel where JAX runs on the CPU (and XLA accepted the kernel), else JAX; ``"numba"``
where it cannot run is a ``ValueError``; ``"jax"`` is JAX on any backend. Every user of a
kernel (``Transfer(backend=...)``, the cluster samplers' ``components=...``, the
``backend=...`` of the simulator, the exact transfer functions, the single-site samplers and
simulated annealing) calls it.
"""
