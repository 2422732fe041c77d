"""QPUSampler: a D-Wave quantum annealer through dwave-system, and its offline stand-in.

Pipeline per model: the model's SPIN form scaled by its ``beta`` becomes a dimod BQM (units of
``beta * E``; dimod's sign, equal energies) -> minor-embedded on the QPU graph (an embedding is
found once per problem structure with dwave-system's :class:`~dwave.system.EmbeddingComposite`
machinery and then reused through a cached :class:`~dwave.system.FixedEmbeddingComposite`) ->
sampled by ``DWaveSampler`` with ``answer_mode="raw"`` -> chains resolved by our chain-break
methods (seeded from the key) -> spins in the model's vartype. Energies are the model's (the
protocol recomputes them from the spins).

Units. The QPU samples roughly ``exp(-beta_qpu * E_qpu)`` with ``E_qpu = scale * beta * E`` in
its own units (``h`` within ``h_range``, ``J`` within ``j_range``). ``info["scale"]`` records
``scale``: with ``auto_scale=True`` (the QPU's default) the factor the QPU applies to fill its
ranges, computed by the QPU's rule on the embedded problem (chains included):
``scale = 1 / max(max h / max h_range, min h / min h_range, max J / max j_range,
min J / min j_range)``; with ``auto_scale=False`` ``scale = 1`` and a problem outside the ranges
is an error before anything is sent.

Offline. :meth:`QPUSampler.offline` (registered as ``BACKENDS["qpu_offline"]`` through
:class:`OfflineQPUSampler`) runs the same code on ``dwave.system.testing.MockDWaveSampler``
(Pegasus) whose substitute sampler is :class:`BoltzmannQPUEmulator`: it applies ``auto_scale``
like the hardware and anneals the embedded problem to a fixed ``beta_qpu`` (dwave-samplers'
simulated annealing), so offline draws are Boltzmann-like rather than local minima.
"""

from __future__ import annotations

import hashlib
import time
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_choice
from ..models import Vartype
from ._base import Sampler, seed_from_key

#: Chain-break resolution methods.
CHAIN_BREAK_METHODS = ("majority_vote", "discard", "weighted_random")
#: Time bounds for the SAPI client unless the configuration sets its own: (connect, read)
#: seconds per request, and seconds to wait for a submitted problem.
DEFAULT_REQUEST_TIMEOUT = (5.0, 60.0)
DEFAULT_POLLING_TIMEOUT = 900.0


class QPUConfigurationError(RuntimeError):
    """No usable D-Wave credentials (raised before any network call), or credentials or a
    solver the D-Wave API refused."""


class QPUConnectionError(RuntimeError):
    """The D-Wave API host could not be reached (name resolution, refused connection, time-out)."""


# ---------------------------------------------------------------------------------------------
# chain-break resolution (dwave-system's signature: (samples, chains) -> (unembedded, rows))
# ---------------------------------------------------------------------------------------------
def _as_array(samples, chains):
    import dimod

    arr, labels = dimod.as_samples(samples)
    if labels != range(len(labels)):
        where = {v: i for i, v in enumerate(labels)}
        chains = [[where[v] for v in c] for c in chains]
    return np.asarray(arr), [np.asarray(list(c), int) for c in chains]


class MajorityVote:
    """Majority vote over each chain with ties broken uniformly at random (dwave-system's
    ``majority_vote`` breaks ties toward +1 / 1, which biases even-length chains). SPIN samples."""

    __name__ = "majority_vote"

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def __call__(self, samples, chains):
        arr, chains = _as_array(samples, chains)
        out = np.empty((arr.shape[0], len(chains)), np.int8)
        for c, idx in enumerate(chains):
            s = arr[:, idx].sum(axis=1)
            tie = self.rng.integers(0, 2, size=s.shape, dtype=np.int8) * 2 - 1
            out[:, c] = np.where(s > 0, 1, np.where(s < 0, -1, tie))
        return out, np.arange(arr.shape[0])


class WeightedRandom:
    """Each chain takes the value of one of its qubits picked uniformly at random, i.e. +1 with
    probability equal to the fraction of +1 qubits (dwave-system's ``weighted_random`` with a
    seeded generator)."""

    __name__ = "weighted_random"

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def __call__(self, samples, chains):
        arr, chains = _as_array(samples, chains)
        out = np.empty((arr.shape[0], len(chains)), np.int8)
        rows = np.arange(arr.shape[0])
        for c, idx in enumerate(chains):
            pick = idx[self.rng.integers(0, len(idx), size=arr.shape[0])]
            out[:, c] = arr[rows, pick]
        return out, rows


def _digest(text: str, bits: int) -> int:
    """A ``bits``-bit integer from SHA-256 of ``text`` (stable across processes, unlike hash())."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> (64 - bits)


# ---------------------------------------------------------------------------------------------
# scaling
# ---------------------------------------------------------------------------------------------
def _ranges(bqm):
    """(min h, max h, min J, max J) of a SPIN BQM (0 for empty sets)."""
    lin = np.fromiter(bqm.linear.values(), float, len(bqm.linear))
    quad = np.fromiter(bqm.quadratic.values(), float, len(bqm.quadratic))
    return (lin.min(initial=0.0), lin.max(initial=0.0), quad.min(initial=0.0),
            quad.max(initial=0.0))


def auto_scale_factor(bqm, h_range, j_range) -> float:
    """The factor the QPU multiplies an Ising problem by under ``auto_scale=True``:
    ``1 / max(max h / max h_range, min h / min h_range, max J / max j_range, min J / min j_range)``
    (each ratio counted when positive), so the biases fill the ranges; 1 for an empty problem."""
    hmin, hmax, jmin, jmax = _ranges(bqm)
    r = max(hmax / h_range[1], hmin / h_range[0], jmax / j_range[1], jmin / j_range[0], 0.0)
    return 1.0 / r if r > 0 else 1.0


# ---------------------------------------------------------------------------------------------
# the offline hardware stand-in
# ---------------------------------------------------------------------------------------------
def _emulator_class():
    import dimod

    class BoltzmannQPUEmulator(dimod.Sampler):
        """Stands in for QPU hardware behind ``MockDWaveSampler``: applies ``auto_scale`` like
        the QPU, then anneals the (embedded) problem with dwave-samplers' simulated annealing
        along a geometric schedule ending at ``beta_qpu`` (in QPU units), so each read is close
        to a draw from ``exp(-beta_qpu * E_qpu)`` rather than a local minimum. QPU-only
        parameters (``annealing_time``, ``fast_anneal``, ...) are accepted and ignored. ``seed``
        is set per call by :class:`QPUSampler` from its key; energies are the given BQM's."""

        def __init__(self, beta_qpu=3.0, num_sweeps=200, h_range=(-4.0, 4.0),
                     j_range=(-1.0, 1.0)):
            from dwave.samplers import SimulatedAnnealingSampler as _Neal

            if not (np.isfinite(beta_qpu) and beta_qpu > 0):
                raise ValueError(f"beta_qpu must be finite and > 0; got {beta_qpu!r}")
            self.beta_qpu = float(beta_qpu)
            self.num_sweeps = int(num_sweeps)
            self.h_range, self.j_range = tuple(h_range), tuple(j_range)
            self.seed = None
            self.last_scale = None
            self._neal = _Neal()

        @property
        def parameters(self):
            return {"num_reads": [], "auto_scale": [], "seed": []}

        @property
        def properties(self):
            return {"beta_qpu": self.beta_qpu, "num_sweeps": self.num_sweeps}

        def sample(self, bqm, num_reads=1, auto_scale=True, seed=None, **ignored):
            from dwave.samplers.sa.sampler import default_beta_range

            spin = bqm.spin
            scale = auto_scale_factor(spin, self.h_range, self.j_range) if auto_scale else 1.0
            self.last_scale = scale
            scaled = spin.copy()
            scaled.scale(scale)
            hot = default_beta_range(scaled)[0] if len(scaled) else 0.1
            hot = min(hot, self.beta_qpu)
            seed = self.seed if seed is None else seed
            ss = self._neal.sample(
                scaled, num_reads=num_reads, seed=seed, beta_schedule_type="geometric",
                beta_range=[hot, self.beta_qpu], num_sweeps=self.num_sweeps,
            )
            states = ss.change_vartype(bqm.vartype).record.sample
            return dimod.SampleSet.from_samples_bqm(
                (states, ss.variables), bqm, info={"emulator_scale": scale},
            )

    return BoltzmannQPUEmulator


def BoltzmannQPUEmulator(*args, **kwargs):
    """Construct the offline QPU stand-in (a ``dimod.Sampler``; see :class:`QPUSampler`)."""
    return _emulator_class()(*args, **kwargs)


# ---------------------------------------------------------------------------------------------
# credentials
# ---------------------------------------------------------------------------------------------
def _check_credentials(config_file=None, profile=None, token=None):
    """Load dwave-cloud-client's configuration (files, DWAVE_* environment) and fail at once,
    without any network call, when no API token is defined."""
    from dwave.cloud.config import load_config

    try:
        cfg = load_config(config_file=config_file, profile=profile)
    except Exception as exc:  # malformed file, missing profile, ...
        raise QPUConfigurationError(
            f"could not read the D-Wave configuration (config_file={config_file!r}, "
            f"profile={profile!r}): {exc}"
        ) from exc
    if token or cfg.get("token"):
        return cfg
    raise QPUConfigurationError(
        "no D-Wave API token found: set DWAVE_API_TOKEN, run `dwave config create`, or pass "
        "token= / config_file= / profile= (dwave-cloud-client's standard configuration). "
        "For offline runs use QPUSampler.offline() (MockDWaveSampler)."
    )


def _unreachable(exc):
    """``exc`` from building a ``DWaveSampler`` as :class:`QPUConnectionError` (the host could
    not be reached: say which host and why, not only "timed out") or
    :class:`QPUConfigurationError` (token or solver refused); other errors unchanged."""
    import re
    import socket

    from dwave.cloud import exceptions as cloud

    if isinstance(exc, cloud.SolverAuthenticationError):
        return QPUConfigurationError(
            f"the D-Wave API refused the token ({exc}): check DWAVE_API_TOKEN or your D-Wave "
            "configuration (`dwave config create`)")
    if isinstance(exc, cloud.SolverNotFoundError):
        return QPUConfigurationError(f"no D-Wave solver matches the request: {exc}")
    chain, c = [], exc
    while c is not None and len(chain) < 20:
        chain.append(c)
        c = c.__cause__ or c.__context__
    if not any(isinstance(c, OSError) for c in chain):
        return exc
    names = {type(c).__name__ for c in chain}
    if names & {"NameResolutionError", "gaierror"} or any(
            isinstance(c, socket.gaierror) for c in chain):
        why = "its name could not be resolved"
    elif any(isinstance(c, ConnectionRefusedError) for c in chain):
        why = "the connection was refused"
    elif names & {"ConnectTimeout", "ReadTimeout", "ConnectTimeoutError", "TimeoutError",
                  "timeout"}:
        why = "it did not answer in time"
    else:
        why = str(chain[-1]) or type(chain[-1]).__name__
    host = None
    for c in chain:
        m = re.search(r"host='([^']+)'(?:, port=(\d+))?", str(c))
        if m:
            host = m.group(1) + (f":{m.group(2)}" if m.group(2) else "")
            break
    where = f"host {host}" if host else "host"
    return QPUConnectionError(
        f"could not reach the D-Wave API {where}: {why}. Check the network connection, any "
        "proxy, and the endpoint / region of your D-Wave configuration; for offline runs use "
        "the qpu_offline backend (QPUSampler.offline())")


# ---------------------------------------------------------------------------------------------
# the backend
# ---------------------------------------------------------------------------------------------
def _call_options(opts):
    """``(auto_scale, chain_strength, keyword arguments of the QPU call)`` from the options of a
    sample call, as :class:`QPUSampler` and the tiled sampler read them. Raises ValueError for
    a ``chain_strength`` that is neither None nor finite and > 0."""
    auto_scale = bool(opts.get("auto_scale", True))
    chain_strength = opts.get("chain_strength")
    if chain_strength is not None and not (np.isfinite(chain_strength) and chain_strength > 0):
        raise ValueError(f"chain_strength must be finite and > 0 or None; got {chain_strength!r}")
    qpu_kw = {"answer_mode": "raw", "auto_scale": auto_scale}
    for name in ("annealing_time", "fast_anneal"):
        if opts.get(name) is not None:
            qpu_kw[name] = opts[name]
    return auto_scale, chain_strength, qpu_kw


class QPUSampler(Sampler):
    """A D-Wave QPU (dwave-system ``DWaveSampler``) as a backend, with embeddings cached per
    problem structure.

    Args:
      child: a structured dimod sampler standing for the QPU (e.g. ``DWaveSampler(...)`` or
        ``MockDWaveSampler(...)``); default: a ``DWaveSampler`` built from dwave-cloud-client's
        standard configuration (``config_file``, ``profile``, ``DWAVE_*`` environment, or
        ``token``) with time-bounded requests (``request_timeout``, ``polling_timeout``).
        Without a token, :class:`QPUConfigurationError` at once (no network call); a host
        that cannot be reached is a :class:`QPUConnectionError` saying which and why.
      solver: solver name or feature dict for ``DWaveSampler``.
      embedding_parameters: keywords for ``minorminer.find_embedding``. Its ``random_seed``
        defaults to one derived from the problem's structure, so the embedding, and with it
        the samples of a key, are the same in every instance and process.
      **defaults: preset sampling options.

    Sampling options (keywords of :meth:`sample`):

    * ``chain_strength``: float in units of ``beta * E``, or None for dwave-system's default
      (``uniform_torque_compensation``).
    * ``chain_break_method``: ``"majority_vote"`` (ties broken at random with the key;
      default), ``"discard"`` (reads with a broken chain are dropped and the QPU is asked again
      until ``num_chains * num_samples`` intact reads are in, at most ``max_discard_rounds``
      rounds), ``"weighted_random"``.
    * ``annealing_time``: microseconds (the QPU's default if None); ``fast_anneal``: the
      fast-anneal protocol (diabatic anneals, annealing times down to nanoseconds).
    * ``auto_scale``: let the QPU rescale to its ranges (default True); the factor is in
      ``info["scale"]``. With False, ``beta * E`` (and the chains) must fit the ranges.

    ``num_chains * num_samples`` reads per model (``answer_mode="raw"``, in the QPU's order;
    several QPU calls if above the solver's ``num_reads_range``). ``info``: ``scale`` and
    ``chain_strength`` (``batch``), ``chain_break_fraction`` (``batch + (chain, draw)``, the
    fraction of broken chains of each read before resolution), ``embedding`` (per model:
    ``cached``, ``find_s``, ``seed`` of the search, ``hash`` of the embedding found,
    ``num_qubits``, ``max_chain_length``), ``qpu_timing`` (per model,
    the solver's timing dicts), ``discarded`` (``batch``).

    Example (offline):
      >>> import jax
      >>> from isingattn.models import random_dense
      >>> from isingattn.samplers import QPUSampler
      >>> qpu = QPUSampler.offline(topology_shape=(3,))
      >>> s = qpu.sample(random_dense(jax.random.key(0), 6), jax.random.key(1), 10)
      >>> s.spins.shape, s.info["embedding"][0]["cached"]
      ((1, 10, 6), False)
    """

    parameters: ClassVar[dict[str, list]] = {
        "chain_strength": [],
        "chain_break_method": [],
        "annealing_time": [],
        "fast_anneal": [],
        "auto_scale": [],
        "max_discard_rounds": [],
    }

    def __init__(self, child=None, *, solver=None, config_file=None, profile=None, token=None,
                 request_timeout=DEFAULT_REQUEST_TIMEOUT,
                 polling_timeout=DEFAULT_POLLING_TIMEOUT, embedding_parameters=None,
                 **defaults):
        self._check_options(defaults)
        if child is None:
            _check_credentials(config_file, profile, token)
            from dwave.system import DWaveSampler

            kw = {"config_file": config_file, "profile": profile,
                      "request_timeout": request_timeout, "polling_timeout": polling_timeout}
            if token is not None:
                kw["token"] = token
            if solver is not None:
                kw["solver"] = solver
            try:
                child = DWaveSampler(**kw)
            except Exception as exc:
                raise _unreachable(exc) from exc
        from dwave.system import EmbeddingComposite

        self.child = child
        self.defaults = defaults
        self.embedding_parameters = dict(embedding_parameters or {})
        self._finder = EmbeddingComposite(child)
        self._cache: dict = {}
        self.embeddings_found = 0
        self._emulator = None
        props = child.properties
        self.h_range = tuple(props.get("h_range", (-np.inf, np.inf)))
        self.j_range = tuple(props.get("j_range", (-np.inf, np.inf)))
        self.max_reads = int(props.get("num_reads_range", (1, 10000))[1])

    @property
    def properties(self):
        """The child's name, its ``h_range`` / ``j_range`` and the chain-break methods."""
        return {"child": type(self.child).__name__, "h_range": self.h_range,
                "j_range": self.j_range, "chain_break_methods": CHAIN_BREAK_METHODS}

    # ------------------------------------------------------------------ offline
    @classmethod
    def offline(cls, *, topology_shape=(6,), beta_qpu=3.0, num_sweeps=200, **kwargs):
        """The same backend on ``MockDWaveSampler`` (Pegasus ``P(m)``, ``topology_shape=(m,)``)
        with :class:`BoltzmannQPUEmulator` at ``beta_qpu`` as the hardware stand-in: an
        :class:`OfflineQPUSampler`. No credentials, no network. ``kwargs`` go to the
        constructor."""
        return OfflineQPUSampler(topology_shape=topology_shape, beta_qpu=beta_qpu,
                                 num_sweeps=num_sweeps, **kwargs)

    # ------------------------------------------------------------------ embedding cache
    def _composite(self, bqm):
        """(FixedEmbeddingComposite for the BQM's structure, info dict); found once per
        structure (variables in order and edge set), then reused.

        The search is seeded from the structure (or ``embedding_parameters["random_seed"]``), not
        from the sampling key: the cache then never makes results depend on which key saw a
        structure first, and "same key, same samples" holds across instances and processes."""
        from dwave.system import FixedEmbeddingComposite

        index = {v: i for i, v in enumerate(bqm.variables)}
        edges = tuple(sorted(tuple(sorted((index[u], index[v]))) for u, v in bqm.quadratic))
        key = (tuple(bqm.variables), edges)
        hit = self._cache.get(key)
        if hit is not None:
            composite, seed = hit
            return composite, {"cached": True, "find_s": 0.0, "seed": seed,
                               **self._stats(composite)}
        t0 = time.perf_counter()
        params = dict(self.embedding_parameters)
        if params.get("random_seed") is None:
            params["random_seed"] = _digest(repr((len(index), edges)), 31)
        source = [(index[u], index[v]) for u, v in bqm.quadratic] + [(i, i) for i in index.values()]
        target = self._finder.target_structure.edgelist
        found = self._finder.find_embedding(source, target, **params)
        embedding = {v: found[index[v]] for v in bqm.variables if index[v] in found}
        if len(bqm) and len(embedding) < len(bqm):
            raise RuntimeError(
                f"no embedding found for a problem with {len(bqm)} variables and "
                f"{len(bqm.quadratic)} couplings on {type(self.child).__name__} "
                f"({len(self.child.nodelist)} qubits); use a smaller or sparser model or a "
                "larger topology"
            )
        composite = FixedEmbeddingComposite(self.child, embedding)
        find_s = time.perf_counter() - t0
        seed = int(params["random_seed"])
        self._cache[key] = (composite, seed)
        self.embeddings_found += 1
        return composite, {"cached": False, "find_s": find_s, "seed": seed,
                           **self._stats(composite)}

    @staticmethod
    def _stats(composite):
        emb = composite.embedding
        chains = list(emb.values())
        canonical = repr(sorted((repr(v), sorted(int(q) for q in c)) for v, c in emb.items()))
        return {"num_qubits": int(sum(len(c) for c in chains)),
                "max_chain_length": int(max((len(c) for c in chains), default=0)),
                "hash": format(_digest(canonical, 64), "016x")}

    # ------------------------------------------------------------------ sampling
    def _sample(self, model, key, num_samples, num_chains, **options):
        import dimod
        from dwave.embedding import discard
        from dwave.embedding.chain_strength import uniform_torque_compensation

        opts = {**self.defaults, **options}
        method = opts.get("chain_break_method", "majority_vote")
        check_choice("chain_break_method", method, CHAIN_BREAK_METHODS)
        auto_scale, chain_strength, qpu_kw = _call_options(opts)
        max_rounds = int(opts.get("max_discard_rounds", 10))

        batch, n = model.batch_shape, model.n
        total = num_chains * num_samples
        size = int(np.prod(batch, dtype=int))
        keys = jax.random.split(key, max(1, size))
        spin_model = model.to_vartype("SPIN")
        out = np.full((size, total, n), -1, np.int8)
        cbf = np.zeros((size, total))
        scales, strengths, emb_info, timing, discarded = [], [], [], [], []
        for b, idx in enumerate(np.ndindex(*batch) if batch else [()]):
            one = spin_model[idx] if batch else spin_model
            bqm = one.to_bqm()
            bqm.scale(float(np.asarray(one.beta)))  # units of beta * E
            labels = one.variable_labels
            rng = np.random.default_rng(seed_from_key(keys[b]))
            if len(bqm) == 0:
                scales.append(1.0), strengths.append(0.0), discarded.append(0)
                emb_info.append({}), timing.append([])
                continue
            composite, einfo = self._composite(bqm)
            cs = (uniform_torque_compensation(bqm, composite.embedding)
                  if chain_strength is None else float(chain_strength))
            embedded = composite.embedding.embed_bqm(bqm, chain_strength=cs,
                                                     smear_vartype=dimod.SPIN)
            if auto_scale:
                scale = auto_scale_factor(embedded, self.h_range, self.j_range)
            else:
                scale = 1.0
                self._check_ranges(embedded)
            cbm = {"majority_vote": MajorityVote(rng), "weighted_random": WeightedRandom(rng),
                   "discard": discard}[method]
            rows, fracs, calls, dropped = [], [], [], 0
            got, rounds = 0, 0
            while got < total:
                rounds += 1
                if method == "discard" and rounds > max_rounds:
                    raise RuntimeError(
                        f"chain_break_method='discard' kept {got} of {total} reads after "
                        f"{max_rounds} rounds: chains break too often; raise chain_strength "
                        f"(now {cs:.3g}) or use 'majority_vote'"
                    )
                ask = min(self.max_reads, total - got if method != "discard" else
                          max(total - got, 16))
                if self._emulator is not None:
                    self._emulator.seed = int(rng.integers(2**31 - 1))
                ss = composite.sample(
                    bqm, chain_strength=cs, chain_break_method=cbm, chain_break_fraction=True,
                    num_reads=ask, **qpu_kw,
                )
                rec = ss.record
                cols = [labels.index(v) for v in ss.variables]
                take = min(len(rec), total - got)
                if method == "discard":
                    dropped += ask - len(rec)
                block = np.full((take, n), -1, np.int8)
                block[:, cols] = rec.sample[:take]
                rows.append(block)
                fracs.append(np.asarray(rec.chain_break_fraction, float)[:take])
                calls.append(dict(ss.info.get("timing", {})))
                got += take
            out[b] = np.concatenate(rows)
            cbf[b] = np.concatenate(fracs)
            scales.append(scale)
            strengths.append(cs)
            emb_info.append(einfo)
            timing.append(calls)
            discarded.append(dropped)
        spins = out.reshape(batch + (num_chains, num_samples, n))
        if model.vartype is Vartype.BINARY:
            spins = (spins + 1) // 2
        info = {
            "scale": np.asarray(scales).reshape(batch),
            "chain_strength": np.asarray(strengths).reshape(batch),
            "chain_break_fraction": cbf.reshape(batch + (num_chains, num_samples)),
            "chain_break_method": method,
            "auto_scale": auto_scale,
            "embedding": emb_info,
            "qpu_timing": timing,
            "discarded": np.asarray(discarded).reshape(batch),
        }
        return jnp.asarray(spins), info

    def _check_ranges(self, embedded):
        hmin, hmax, jmin, jmax = _ranges(embedded)
        (h0, h1), (j0, j1) = self.h_range, self.j_range
        if hmin < h0 or hmax > h1:
            raise ValueError(
                f"with auto_scale=False the fields beta*h must lie in the QPU's h_range "
                f"[{h0}, {h1}]; this model has [{hmin:.4g}, {hmax:.4g}] (dimod sign). Use "
                "auto_scale=True or a smaller beta."
            )
        if jmin < j0 or jmax > j1:
            raise ValueError(
                f"with auto_scale=False the couplings beta*J and the chain couplings "
                f"(-chain_strength) must lie in the QPU's j_range [{j0}, {j1}]; the embedded "
                f"problem has [{jmin:.4g}, {jmax:.4g}] (dimod sign). Use auto_scale=True, a "
                "smaller beta or a smaller chain_strength."
            )

    def __repr__(self):
        return f"{type(self).__name__}(child={type(self.child).__name__})"


class OfflineQPUSampler(QPUSampler):
    """:meth:`QPUSampler.offline` as a class (``BACKENDS["qpu_offline"]``): the QPU backend on
    ``MockDWaveSampler`` (Pegasus) with :class:`BoltzmannQPUEmulator`; no credentials needed.
    Keywords: ``topology_shape`` (default ``(6,)``), ``beta_qpu`` (default 3.0),
    ``num_sweeps``, and the :class:`QPUSampler` ones."""

    def __init__(self, *, topology_shape=(6,), beta_qpu=3.0, num_sweeps=200, **kwargs):
        from dwave.system.testing import MockDWaveSampler

        mock = MockDWaveSampler(topology_type="pegasus", topology_shape=list(topology_shape),
                                parameter_warnings=False)
        emulator = BoltzmannQPUEmulator(
            beta_qpu=beta_qpu, num_sweeps=num_sweeps,
            h_range=mock.properties["h_range"], j_range=mock.properties["j_range"],
        )
        mock.substitute_sampler = emulator
        mock.exact_solver_cutoff = 0  # no exact ground state slipped into the first read
        super().__init__(mock, **kwargs)
        self._emulator = emulator


__all__ = [
    "CHAIN_BREAK_METHODS",
    "BoltzmannQPUEmulator",
    "MajorityVote",
    "OfflineQPUSampler",
    "QPUConfigurationError",
    "QPUConnectionError",
    "QPUSampler",
    "WeightedRandom",
    "auto_scale_factor",
]
