"""What dense and sparse Ising models share: fields, beta, offset, mask, vartype and the energy.

Energy, physics sign: ``E(x) = -sum_i h_i x_i - sum_{i<j} J_ij x_i x_j - offset``. Masked
variables (``mask[i] == False``) contribute nothing to the energy, whatever their value, and are
held at the vartype's low value (-1 / 0) by every sampler and exact method.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_beta, check_finite, is_concrete, shape_str
from ._vartype import Vartype, as_vartype


def default_float_dtype():
    return jnp.result_type(float)


def float_dtype(*arrays):
    """Common floating dtype of ``arrays`` (integers promote to the default float); complex
    values are a ``TypeError`` (an Ising model's parameters are real)."""
    dt = jnp.result_type(*arrays)
    if jnp.issubdtype(dt, jnp.complexfloating):
        raise TypeError(f"an Ising model's h and J must be real numbers; got dtype {dt}")
    return dt if jnp.issubdtype(dt, jnp.inexact) else default_float_dtype()


def align(arr, event_ndim: int, batch_ndim: int, sample_ndim: int):
    """Reshape ``arr`` (own batch dims + event dims) to ``batch_ndim`` leading dims, then
    ``sample_ndim`` singleton sample dims, then the event dims, so it broadcasts against
    ``batch + samples + event`` arrays."""
    b = arr.ndim - event_ndim
    lead = (1,) * (batch_ndim - b)
    return arr.reshape(lead + arr.shape[:b] + (1,) * sample_ndim + arr.shape[b:])


class ModelBase:
    """Common behaviour; subclasses define the coupling representation."""

    # Subclasses: _coupling_event_ndim, _coupling_batch_shape, _coupling_field(xm, k, s),
    # _scaled_couplings(factor), _coupling_row_sums(), _coupling_total(), _coupling_leaves()

    h: jax.Array
    beta: jax.Array
    offset: jax.Array
    mask: jax.Array
    vartype: Vartype
    labels: tuple | None

    def _init_common(self, h, beta, offset, mask, vartype, labels, dtype):
        self.vartype = as_vartype(vartype)
        h = jnp.asarray(h, dtype)
        if h.ndim < 1:
            raise ValueError(f"h must have shape (..., n) with n >= 1 variables; got a scalar {h}")
        n = h.shape[-1]
        if n == 0:
            # one state and no observables: every sampler, exact method and diagnostic would need
            # a special case, and an empty h is far likelier an upstream slip than intended
            raise ValueError(
                f"an Ising model needs n >= 1 variables; got h of shape {shape_str(h.shape)}. "
                "To leave variables out of a model, keep them and set mask=False."
            )
        self.h = h
        for name, value in (("beta", beta), ("offset", offset)):
            if np.iscomplexobj(value):
                raise TypeError(f"{name} must be real; got a complex value {value!r}")
        self.beta = jnp.asarray(beta, dtype)
        self.offset = jnp.asarray(offset, dtype)
        if mask is None:
            mask = jnp.ones((n,), bool)
        else:
            if is_concrete(mask):
                m = np.asarray(mask)
                if m.dtype != np.bool_:
                    raise TypeError(
                        f"mask must be a boolean array of shape (..., n) = (..., {n}); "
                        f"got dtype {m.dtype}"
                    )
            mask = jnp.asarray(mask)
            if mask.dtype != jnp.bool_:
                raise TypeError(f"mask must be boolean; got dtype {mask.dtype}")
            if mask.ndim < 1 or mask.shape[-1] != n:
                raise ValueError(
                    f"mask must have shape (..., n) = (..., {n}) to match h of shape "
                    f"{shape_str(h.shape)}; got {shape_str(mask.shape)}"
                )
        self.mask = mask
        if labels is not None:
            labels = tuple(labels)
            if len(labels) != n:
                raise ValueError(f"labels must name the n = {n} variables; got {len(labels)} labels")
            if len(set(labels)) != n:
                raise ValueError("labels must be unique")
        self.labels = labels

    def _validate_common(self):
        check_finite("h", self.h)
        check_finite("offset", self.offset)
        check_beta(self.beta)
        try:
            self._batch_shape()
        except ValueError:
            raise ValueError(
                "batch dimensions do not broadcast: h "
                f"{shape_str(self.h.shape)} (batch {shape_str(self.h.shape[:-1])}), couplings "
                f"batch {shape_str(self._coupling_batch_shape())}, mask "
                f"{shape_str(self.mask.shape)}, beta {shape_str(self.beta.shape)}, offset "
                f"{shape_str(self.offset.shape)}"
            ) from None

    # ------------------------------------------------------------------ shape facts
    @property
    def n(self) -> int:
        """Number of variables (masked ones included)."""
        return self.h.shape[-1]

    def _batch_shape(self):
        return tuple(
            np.broadcast_shapes(
                self.h.shape[:-1],
                self._coupling_batch_shape(),
                self.mask.shape[:-1],
                self.beta.shape,
                self.offset.shape,
            )
        )

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """Broadcast batch shape of all parameters (``()`` for a single model)."""
        return self._batch_shape()

    @property
    def dtype(self):
        return self.h.dtype

    @property
    def num_active(self) -> jax.Array:
        """Number of unmasked variables, shaped like the mask's batch dims."""
        return jnp.sum(self.mask, axis=-1)

    @property
    def variable_labels(self) -> tuple:
        return self.labels if self.labels is not None else tuple(range(self.n))

    @property
    def active_h(self) -> jax.Array:
        """Fields with masked variables' entries set to zero."""
        return jnp.where(self.mask, self.h, 0)

    # ------------------------------------------------------------------ energies
    def _prepare(self, x, name="x"):
        x = jnp.asarray(x, self.dtype)
        if x.ndim < 1 or x.shape[-1] != self.n:
            raise ValueError(
                f"{name} must have shape batch + sample + (n,) with n = {self.n}; "
                f"got {shape_str(x.shape)}"
            )
        k = len(self.batch_shape)
        if x.ndim - 1 < k:
            x = x.reshape((1,) * (k + 1 - x.ndim) + x.shape)
        s = x.ndim - 1 - k
        mask = align(self.mask, 1, k, s)
        return jnp.where(mask, x, 0), mask, k, s

    def energy(self, x) -> jax.Array:
        """Energy ``E(x) = -sum_i h_i x_i - sum_{i<j} J_ij x_i x_j - offset`` (no beta).

        ``x`` has shape ``batch + sample + (n,)``: its leading dimensions align with the model's
        batch shape (missing ones broadcast), any dimensions between those and the last are
        sample dimensions (e.g. ``(chain, draw)``). Masked variables contribute nothing.
        Returns shape ``batch + sample``.
        """
        xm, _, k, s = self._prepare(x)
        h = align(self.h, 1, k, s)
        lin = jnp.sum(h * xm, axis=-1)
        quad = 0.5 * jnp.sum(xm * self._coupling_field(xm, k, s), axis=-1)
        return -(lin + quad) - align(self.offset, 0, k, s)

    def local_fields(self, x) -> jax.Array:
        """Field felt by each variable, ``f_i = h_i + sum_j J_ij x_j`` (zero where masked).

        ``E`` changes by ``2 x_i f_i`` when SPIN variable ``i`` flips, and by ``-f_i`` when
        BINARY variable ``i`` goes from 0 to 1. Shapes as in :meth:`energy`, plus ``(n,)``.
        """
        xm, mask, k, s = self._prepare(x)
        f = align(self.h, 1, k, s) + self._coupling_field(xm, k, s)
        return jnp.where(mask, f, 0)

    def reduced_energy(self, x) -> jax.Array:
        """``beta * E(x)``, the dimensionless energy of the Boltzmann weight ``exp(-beta E)``."""
        e = self.energy(x)
        k = len(self.batch_shape)
        return align(self.beta, 0, k, e.ndim - k) * e

    # ------------------------------------------------------------------ transformations
    def replace(self, **changes):
        """A copy with some attributes replaced (validated like the constructor)."""
        kwargs = self._constructor_kwargs()
        kwargs.update(changes)
        return type(self)(**kwargs)

    def with_beta(self, beta):
        """The same model at inverse temperature ``beta`` (scalar or batch-shaped)."""
        return self.replace(beta=beta)

    def to_vartype(self, vartype):
        """The equivalent model in another vartype: corresponding states (``s = (1 + x) / 2``)
        have equal energies. Fields, couplings and offset change; masks and beta are kept."""
        vartype = as_vartype(vartype)
        if vartype is self.vartype:
            return self
        rows = self._coupling_row_sums()  # sum_j J_ij over active j, zero for masked i
        total = self._coupling_total()  # sum_{i<j} J_ij over active pairs
        hsum = jnp.sum(self.active_h, axis=-1)
        h = self.active_h
        if vartype is Vartype.BINARY:  # x = 2 s - 1
            new_h = 2 * h - 2 * rows
            new_offset = self.offset - hsum + total
            factor = 4.0
        else:  # s = (1 + x) / 2
            new_h = h / 2 + rows / 4
            new_offset = self.offset + hsum / 2 + total / 4
            factor = 0.25
        kwargs = self._constructor_kwargs()
        kwargs.update(
            h=new_h, offset=new_offset, vartype=vartype, **self._scaled_couplings(factor)
        )
        return type(self)(**kwargs)

    # ------------------------------------------------------------------ conversions
    def to_bqm(self):
        """``dimod.BinaryQuadraticModel`` with dimod's sign (``linear = -h``, ``quadratic = -J``,
        ``offset = -offset``), so every state has the same energy on both sides. One model only;
        masked variables are left out; beta is not part of a BQM."""
        from ._convert import to_bqm

        return to_bqm(self)

    def to_networkx(self):
        """``networkx.Graph`` with node attribute ``h`` and edge attribute ``J`` (physics sign)."""
        from ._convert import to_networkx

        return to_networkx(self)

    # ------------------------------------------------------------------ indexing
    def __getitem__(self, index):
        """Index the batch dimensions: ``model[i]`` is the i-th model of a batch."""
        if not self.batch_shape:
            raise IndexError("a single model (batch_shape ()) cannot be indexed")
        index = index if isinstance(index, tuple) else (index,)
        kwargs = self._constructor_kwargs()
        batch = self.batch_shape
        for name, event in self._batched_fields():
            arr = kwargs[name]
            arr = jnp.broadcast_to(arr, batch + arr.shape[arr.ndim - event :])
            kwargs[name] = arr[index]
        return type(self)(**kwargs)

    def flatten_batch(self):
        """The same models with every parameter broadcast to the full batch and the batch
        flattened to one leading axis of size ``prod(batch_shape)`` (1 for a single model), ready
        for ``jax.vmap``. Costs a copy of ``J`` per model when ``J`` was shared."""
        batch = self.batch_shape
        size = int(np.prod(batch, dtype=int))
        kwargs = self._constructor_kwargs()
        for name, event in self._batched_fields():
            arr = kwargs[name]
            ev = arr.shape[arr.ndim - event :]
            kwargs[name] = jnp.broadcast_to(arr, batch + ev).reshape((size,) + ev)
        return type(self)(**kwargs, validate=False)

    def __len__(self):
        if not self.batch_shape:
            raise TypeError("len() of a single model (batch_shape ())")
        return self.batch_shape[0]

    # ------------------------------------------------------------------ pytree
    def tree_flatten(self):
        children, names = [], []
        for name, value in self._constructor_kwargs().items():
            if name in self._static_fields:
                continue
            children.append(value)
            names.append(name)
        static = tuple((k, self._constructor_kwargs()[k]) for k in self._static_fields)
        return tuple(children), (tuple(names), static)

    @classmethod
    def tree_unflatten(cls, aux, children):
        # No validation: under vmap/jit the leaves may be tracers or placeholders.
        names, static = aux
        obj = object.__new__(cls)
        obj._set_fields(dict(zip(names, children)) | dict(static))
        return obj

    def __repr__(self):
        return (
            f"{type(self).__name__}(n={self.n}, batch_shape={self.batch_shape}, "
            f"vartype={self.vartype.value}, dtype={self.dtype})"
        )


__all__ = ["ModelBase", "align", "default_float_dtype", "float_dtype"]
