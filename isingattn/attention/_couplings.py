"""Couplings ``J_jk`` between keys: small parameter objects for the four-way ablation.

Kinds (what happens to the parameters): ``none`` (``J = 0``), ``fixed`` (given values, not
trained), ``random`` (drawn once from a key, frozen), ``learned`` (trained). Frozen kinds pass
their values through ``jax.lax.stop_gradient``, so no gradient reaches them even when a caller
differentiates the layer function directly.

Structures (how ``J`` depends on key positions ``j, k``), one set of parameters per head ``n``:

- ``full``: ``J^n_jk`` for absolute positions ``j, k < max_length``; parameters
  ``(N, max_length, max_length)``, symmetrized as ``(P + P^T) / 2`` with the diagonal zeroed.
- ``relative``: ``J^n_jk = w^n(min(|j - k|, max_distance))``; parameters ``(N, max_distance)``
  holding ``w(1) .. w(max_distance)``. Any sequence length (distances beyond ``max_distance``
  share its weight, as in bucketed relative positions).
- ``banded``: ``J^n_jk = w^n(|j - k|)`` for ``1 <= |j - k| <= bandwidth``, else 0; parameters
  ``(N, bandwidth)``. Any length; exact transfer-matrix inference in ``O(S 2^bandwidth)``.

Every structure is symmetric with zero diagonal by construction.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from .._validation import check_choice, check_positive_int, shape_str

KINDS = ("none", "fixed", "random", "learned")
STRUCTURES = ("full", "relative", "banded")
PRODUCTS = ("auto", "dense", "shifts", "fft")
#: Keys from which relative couplings' products run by FFT with ``product="auto"``: below, the
#: dense product is faster on the CPU (measured: docs/guide/attention.md, mean field).
FFT_MIN_KEYS = 512


def param_shape(structure, num_heads, *, max_length=None, max_distance=None, bandwidth=None):
    """Shape of the parameter array of a coupling structure."""
    check_choice("structure", structure, STRUCTURES)
    num_heads = check_positive_int("num_heads", num_heads)
    if structure == "full":
        if max_length is None:
            raise ValueError("structure='full' needs max_length (the largest sequence length)")
        L = check_positive_int("max_length", max_length)
        return (num_heads, L, L)
    if structure == "relative":
        if max_distance is None:
            raise ValueError("structure='relative' needs max_distance (>= 1)")
        return (num_heads, check_positive_int("max_distance", max_distance))
    if bandwidth is None:
        raise ValueError("structure='banded' needs bandwidth (the coupling range r >= 1)")
    return (num_heads, check_positive_int("bandwidth", bandwidth))


@jax.tree_util.register_pytree_node_class
class Couplings:
    """Couplings ``J^n_jk`` of every head ``n`` between keys ``j, k`` (physics sign: positive
    ``J`` makes two keys be attended together, negative makes them exclude each other).

    Build with :meth:`none`, :meth:`fixed`, :meth:`random` or :meth:`learned`. A JAX pytree whose
    only leaf is ``params``; ``kind``, ``structure`` and the sizes are static.

    Example:
      >>> import jax
      >>> from isingattn.attention import Couplings
      >>> c = Couplings.random(jax.random.key(0), num_heads=2, structure="banded", bandwidth=3)
      >>> c.matrix(6).shape
      (2, 6, 6)
    """

    def __init__(self, kind, structure, params, *, max_length=None, max_distance=None,
                 bandwidth=None):
        check_choice("kind", kind, KINDS)
        self.kind = kind
        self.structure = structure
        self.params = params
        self.max_length = max_length
        self.max_distance = max_distance
        self.bandwidth = bandwidth

    # --- pytree -----------------------------------------------------------------------------
    def tree_flatten(self):
        aux = (self.kind, self.structure, self.max_length, self.max_distance, self.bandwidth)
        return (self.params,), aux

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        (obj.params,) = children
        obj.kind, obj.structure, obj.max_length, obj.max_distance, obj.bandwidth = aux
        return obj

    # --- constructors -------------------------------------------------------------------------
    @classmethod
    def none(cls) -> Couplings:
        """``J = 0``: independent keys (normalized sigmoid attention)."""
        return cls("none", "banded", None, bandwidth=0)

    @classmethod
    def _make(cls, kind, structure, params, max_length, max_distance, bandwidth):
        check_choice("structure", structure, STRUCTURES)
        params = jnp.asarray(params)
        if not jnp.issubdtype(params.dtype, jnp.floating):
            params = params.astype(jnp.float32)
        if params.ndim != (3 if structure == "full" else 2):
            raise ValueError(
                f"couplings values for structure={structure!r} must have shape "
                + ("(num_heads, max_length, max_length)" if structure == "full"
                   else "(num_heads, max_distance)" if structure == "relative"
                   else "(num_heads, bandwidth)")
                + f"; got {shape_str(params.shape)}"
            )
        if structure == "full":
            if params.shape[1] != params.shape[2]:
                raise ValueError(
                    "full couplings must be square (num_heads, max_length, max_length); got "
                    f"{shape_str(params.shape)}"
                )
            max_length = params.shape[1]
        elif structure == "relative":
            max_distance = params.shape[1]
        else:
            bandwidth = params.shape[1]
        return cls(kind, structure, params, max_length=max_length, max_distance=max_distance,
                   bandwidth=bandwidth)

    @classmethod
    def fixed(cls, values, structure="banded") -> Couplings:
        """Given, untrained couplings. ``values``: ``(N, L, L)`` (full, symmetrized, diagonal
        dropped), ``(N, D)`` (relative: ``w(1..D)``) or ``(N, r)`` (banded: ``w(1..r)``)."""
        return cls._make("fixed", structure, values, None, None, None)

    @classmethod
    def random(cls, key, num_heads, structure="banded", *, strength=0.5, max_length=None,
               max_distance=None, bandwidth=None, dtype=jnp.float32) -> Couplings:
        """Couplings drawn once, i.i.d. ``Normal(0, strength^2)`` per parameter, then frozen."""
        shape = param_shape(structure, num_heads, max_length=max_length,
                            max_distance=max_distance, bandwidth=bandwidth)
        params = strength * jax.random.normal(key, shape, dtype)
        return cls._make("random", structure, params, max_length, max_distance, bandwidth)

    @classmethod
    def learned(cls, num_heads, structure="banded", *, init=0.0, key=None, strength=0.0,
                max_length=None, max_distance=None, bandwidth=None,
                dtype=jnp.float32) -> Couplings:
        """Trainable couplings, initialized to the constant ``init`` plus (when ``key`` is
        given) ``Normal(0, strength^2)`` noise."""
        shape = param_shape(structure, num_heads, max_length=max_length,
                            max_distance=max_distance, bandwidth=bandwidth)
        params = jnp.full(shape, init, dtype)
        if key is not None and strength:
            params = params + strength * jax.random.normal(key, shape, dtype)
        return cls._make("learned", structure, params, max_length, max_distance, bandwidth)

    def replace(self, params) -> Couplings:
        """The same couplings with new parameter values (same shape)."""
        return Couplings(self.kind, self.structure, params, max_length=self.max_length,
                         max_distance=self.max_distance, bandwidth=self.bandwidth)

    # --- views --------------------------------------------------------------------------------
    @property
    def is_zero(self) -> bool:
        return self.kind == "none"

    @property
    def num_heads(self) -> int | None:
        return None if self.params is None else self.params.shape[0]

    def values(self):
        """The parameters, with ``stop_gradient`` for the frozen kinds (fixed, random)."""
        if self.kind in ("fixed", "random"):
            return jax.lax.stop_gradient(self.params)
        return self.params

    def check_length(self, length: int) -> None:
        """Raise when the couplings cannot serve a sequence of ``length`` keys."""
        if self.structure == "full" and not self.is_zero and length > self.max_length:
            raise ValueError(
                f"couplings with structure='full' have max_length={self.max_length}, shorter "
                f"than the sequence of {length} keys; build them with max_length >= {length} "
                "or use structure='relative' or 'banded', which serve any length"
            )

    def band_width(self, length: int) -> int | None:
        """Coupling range for ``length`` keys (0 when ``J = 0``), or None for dense couplings."""
        if self.is_zero:
            return 0
        if self.structure == "banded":
            return min(self.bandwidth, max(length - 1, 0))
        return None

    def band(self, length: int):
        """Banded weights ``(N, r)`` with ``r = band_width(length)``: entry ``d-1`` is
        ``w(d) = J_{j, j+d}``."""
        r = self.band_width(length)
        if r is None:
            raise ValueError(
                f"couplings with structure={self.structure!r} are dense, not banded"
            )
        return self.values()[:, :r]

    def matrix(self, length: int, dtype=None):
        """Dense ``J`` of shape ``(N, length, length)``, symmetric, zero diagonal (``N = 1``
        for ``none``)."""
        self.check_length(length)
        if self.is_zero:
            return jnp.zeros((1, length, length), dtype or jnp.float32)
        p = self.values()
        if dtype is not None:
            p = p.astype(dtype)
        eye = jnp.eye(length, dtype=bool)
        if self.structure == "full":
            P = p[:, :length, :length]
            return jnp.where(eye, 0.0, 0.5 * (P + jnp.swapaxes(P, -1, -2)))
        pos = jnp.arange(length)
        dist = jnp.abs(pos[:, None] - pos[None, :])
        if self.structure == "relative":
            idx = jnp.clip(dist, 1, self.max_distance) - 1
            return jnp.where(eye, 0.0, p[:, idx])
        r = self.bandwidth
        idx = jnp.clip(dist, 1, r) - 1
        return jnp.where((dist >= 1) & (dist <= r), p[:, idx], 0.0)

    def toeplitz(self, length: int, dtype=None):
        """First row ``c (N, length)`` of the Toeplitz couplings: ``J^n_jk = c^n(|j - k|)``,
        ``c(0) = 0``. Relative and banded structures only (ValueError otherwise)."""
        if self.is_zero or self.structure == "full":
            raise ValueError(
                f"couplings with structure={self.structure!r} and kind={self.kind!r} are not "
                "Toeplitz (relative or banded, non-zero)"
            )
        p = self.values()
        if dtype is not None:
            p = p.astype(dtype)
        d = jnp.arange(length)
        if self.structure == "relative":
            return jnp.where(d == 0, 0.0, p[:, jnp.clip(d, 1, self.max_distance) - 1])
        r = self.bandwidth
        return jnp.where((d >= 1) & (d <= r), p[:, jnp.clip(d, 1, r) - 1], 0.0)

    def _shift_weights(self, length: int, dtype):
        """``(w, const)``: ``J_jk = const + w(|j-k|)`` for ``1 <= |j-k| <= w.shape[1]``,
        ``const`` beyond (relative couplings with ``max_distance < length``), ``const = None``
        when there is nothing beyond; None for full couplings."""
        if self.structure == "banded":
            return self.band(length).astype(dtype), None
        if self.structure != "relative":
            return None
        p = self.values().astype(dtype)
        D = self.max_distance
        if D <= length - 1:
            const = p[:, D - 1]
            return p[:, :D - 1] - const[:, None], const
        return p[:, :max(length - 1, 0)], None

    def _shift_width(self, length: int) -> int | None:
        if self.structure == "banded":
            return self.band_width(length)
        if self.structure == "relative":
            return min(self.max_distance - 1, max(length - 1, 0))
        return None

    def product_for(self, length: int) -> str:
        """The product :meth:`matvec` runs for ``length`` keys with ``product="auto"``:
        ``"shifts"`` when the couplings reach at most ``length / 16`` keys apart (banded, or
        relative beyond ``max_distance``), ``"fft"`` for relative couplings from
        :data:`FFT_MIN_KEYS` keys, otherwise ``"dense"`` (the fastest on the CPU, measured)."""
        width = self._shift_width(length)
        if self.is_zero:
            return "dense"
        if width is not None and length > 16 * width:
            return "shifts"
        if self.structure == "relative" and length >= FFT_MIN_KEYS:
            return "fft"
        return "dense"

    def matvec(self, m, *, squared: bool = False, product: str = "auto", head_axis: int = -3,
               dense: bool | None = None):
        """``sum_k J^n_jk m_k`` (or ``(J^n_jk)^2`` when ``squared``) over the last axis of
        ``m``, shaped ``(..., N, T, S)`` with the head axis at ``head_axis`` (``-3``; ``0`` for
        ``(N, B, T, S)``, which spares the dense product two transposes). Couplings of one head
        serve every head.

        ``product`` picks the algorithm (same numbers to float rounding):

        - ``"dense"``: a batched ``(S, S)`` matrix product (BLAS), ``O(S^2)`` per row;
        - ``"shifts"``: ``2r`` shifted sums, ``O(S r)``: banded couplings (range ``r``) and
          relative ones (``r = max_distance - 1``, plus one constant ``w(D)`` times
          ``sum(m) - m``);
        - ``"fft"``: the Toeplitz product by FFT, ``O(S log S)`` (relative and banded);
        - ``"auto"`` (default): :meth:`product_for`.

        ``dense`` is the earlier spelling (``True``: ``"dense"``; ``False``: ``"shifts"`` for
        banded couplings). Raises ValueError for an unknown product or one the structure does
        not have."""
        if dense is not None:
            product = "dense" if dense else ("shifts" if self.structure == "banded" else "auto")
        check_choice("product", product, PRODUCTS)
        if self.is_zero:
            return jnp.zeros_like(m)
        S = m.shape[-1]
        ax = head_axis % m.ndim
        if ax >= m.ndim - 2:
            raise ValueError(f"head_axis must be before the last two axes of m (T, S); got "
                             f"{head_axis} for m of shape {shape_str(m.shape)}")
        if product == "auto":
            product = self.product_for(S)
        if product in ("shifts", "fft") and self.structure == "full":
            raise ValueError(f"product={product!r} needs relative or banded couplings; "
                             "structure='full' has only the dense product")

        def heads(x):  # (N, ...) -> broadcastable against m along the head axis
            shape = [1] * m.ndim
            shape[ax] = x.shape[0]
            return x.reshape(shape[:-1] + [x.shape[-1]] if x.ndim == 2 else shape)

        if product == "shifts":
            w, const = self._shift_weights(S, m.dtype)
            if squared:
                w = (w + const[:, None]) ** 2 - const[:, None] ** 2 if const is not None else w * w
                const = None if const is None else const * const
            out = jnp.zeros_like(m)
            pad = [(0, 0)] * (m.ndim - 1)
            for d in range(1, w.shape[1] + 1):
                out = out + heads(w[:, d - 1]) * (
                    jnp.pad(m[..., d:], pad + [(0, d)]) + jnp.pad(m[..., :-d], pad + [(d, 0)])
                )
            if const is not None:
                out = out + heads(const) * (jnp.sum(m, -1, keepdims=True) - m)
            return out
        if product == "fft":
            c = self.toeplitz(S, m.dtype)
            if squared:
                c = c * c
            # the circulant of length 2S whose first S columns hold J: its spectrum is real
            kern = jnp.concatenate([c, jnp.zeros_like(c[:, :1]), c[:, :0:-1]], axis=1)
            spec = jnp.fft.rfft(kern, axis=-1).real.astype(m.dtype)
            out = jnp.fft.irfft(jnp.fft.rfft(m, n=2 * S, axis=-1) * heads(spec), n=2 * S,
                                axis=-1)
            return out[..., :S].astype(m.dtype)
        J = self.matrix(S, m.dtype)
        if squared:
            J = J * J
        J = jnp.broadcast_to(J, (m.shape[ax], S, S))  # one head's couplings may serve all
        letters = "abcdefgh"[:m.ndim]
        return jnp.einsum(f"{letters},{letters[ax]}{letters[-1]}z->{letters[:-1]}z", m, J)

    def __repr__(self):
        size = {"full": f"max_length={self.max_length}",
                "relative": f"max_distance={self.max_distance}",
                "banded": f"bandwidth={self.bandwidth}"}[self.structure]
        if self.is_zero:
            return "Couplings.none()"
        return (f"Couplings(kind={self.kind!r}, structure={self.structure!r}, "
                f"num_heads={self.num_heads}, {size})")


@dataclasses.dataclass(frozen=True)
class CouplingSpec:
    """Configuration of couplings, without the head count (modules build them with
    :meth:`build`). ``kind`` in ``none / fixed / random / learned``; ``values`` only for
    ``fixed``; ``strength`` is the std of ``random`` draws; ``init`` the constant initial
    value of ``learned`` couplings."""

    kind: str = "none"
    structure: str = "banded"
    bandwidth: int | None = None
    max_length: int | None = None
    max_distance: int | None = None
    strength: float = 0.5
    init: float = 0.0
    values: object = None

    def __post_init__(self):
        check_choice("kind", self.kind, KINDS)
        check_choice("structure", self.structure, STRUCTURES)

    def build(self, num_heads: int, key=None) -> Couplings:
        """The :class:`Couplings` of ``num_heads`` heads (``key`` for random / learned noise)."""
        sizes = {"max_length": self.max_length, "max_distance": self.max_distance,
                     "bandwidth": self.bandwidth}
        if self.kind == "none":
            return Couplings.none()
        if self.kind == "fixed":
            if self.values is None:
                raise ValueError("CouplingSpec(kind='fixed') needs values")
            c = Couplings.fixed(self.values, self.structure)
            if c.num_heads != num_heads:
                raise ValueError(
                    f"fixed coupling values have {c.num_heads} heads; the layer has {num_heads}"
                )
            return c
        if self.kind == "random":
            if key is None:
                raise ValueError("CouplingSpec(kind='random') needs a key to draw couplings")
            return Couplings.random(key, num_heads, self.structure, strength=self.strength,
                                    **sizes)
        return Couplings.learned(num_heads, self.structure, init=self.init, **sizes)
