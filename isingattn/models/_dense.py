"""Dense Ising model: couplings as an ``(..., n, n)`` matrix (attention-sized models)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._validation import check_finite, is_concrete, shape_str
from ._base import ModelBase, align, float_dtype

_SYMMETRY_RTOL = 1e-5


@jax.tree_util.register_pytree_node_class
class IsingModel(ModelBase):
    """A (batch of) dense Ising model(s) with the physics sign convention.

    ``E(x) = -sum_i h_i x_i - sum_{i<j} J_ij x_i x_j - offset`` and
    ``p(x) = exp(-beta E(x)) / Z(beta)``. Positive ``J_ij`` makes ``i`` and ``j`` agree.

    Args:
      h: fields, shape ``batch + (n,)``, ``n >= 1``.
      J: symmetric couplings with zero diagonal, shape ``(..., n, n)``; its leading dimensions
        broadcast against ``h``'s, so one ``J`` can serve many fields.
      beta: inverse temperature, finite and > 0; scalar or batch-shaped.
      vartype: ``"SPIN"`` (x in {-1, +1}) or ``"BINARY"`` (x in {0, 1}).
      offset: constant energy term (scalar or batch-shaped).
      mask: boolean ``(..., n)``; ``False`` removes a variable: it contributes nothing to energies
        and is held at the low value (-1 / 0) by every sampler and exact method.
      labels: optional variable names (kept through dimod and networkx conversions).
      validate: check values (finite, symmetric, zero diagonal, beta > 0) when they are concrete.

    A JAX pytree: usable under ``jit`` and ``vmap``.

    Example:
      >>> import jax.numpy as jnp
      >>> from isingattn import IsingModel
      >>> m = IsingModel(h=jnp.zeros(2), J=jnp.array([[0., 1.], [1., 0.]]))
      >>> float(m.energy(jnp.array([1., 1.])))
      -1.0
    """

    _static_fields = ("vartype", "labels")

    def __init__(
        self, h, J, beta=1.0, vartype="SPIN", offset=0.0, mask=None, labels=None, *, validate=True
    ):
        h, J = jnp.asarray(h), jnp.asarray(J)
        dtype = float_dtype(h, J)
        self._init_common(h, beta, offset, mask, vartype, labels, dtype)
        n = self.n
        J = jnp.asarray(J, dtype)
        if J.ndim < 2 or J.shape[-2:] != (n, n):
            raise ValueError(
                f"J must have shape (..., n, n) = (..., {n}, {n}) to match h of shape "
                f"{shape_str(self.h.shape)}; got {shape_str(J.shape)}"
            )
        self.J = J
        if validate:
            self._validate_common()
            self._validate_couplings()

    def _validate_couplings(self):
        check_finite("J", self.J)
        if not is_concrete(self.J) or self.n == 0:
            return
        J = np.asarray(self.J)
        tol = _SYMMETRY_RTOL * max(1.0, float(np.max(np.abs(J))) if J.size else 1.0)
        asym = np.abs(J - np.swapaxes(J, -1, -2))
        if J.size and asym.max() > tol:
            i, j = np.unravel_index(np.argmax(asym), asym.shape)[-2:]
            raise ValueError(
                f"J must be symmetric; J[..., {i}, {j}] != J[..., {j}, {i}] "
                f"(largest difference {asym.max():.3g})"
            )
        diag = np.abs(np.diagonal(J, axis1=-2, axis2=-1))
        if J.size and diag.max() > tol:
            i = int(np.unravel_index(np.argmax(diag), diag.shape)[-1])
            raise ValueError(
                f"J must have a zero diagonal (no self-coupling); J[..., {i}, {i}] = "
                f"{diag.max():.3g}. Put constant terms in offset."
            )

    # ------------------------------------------------------------------ representation hooks
    def _constructor_kwargs(self):
        return {
            "h": self.h, "J": self.J, "beta": self.beta, "vartype": self.vartype,
            "offset": self.offset,
            "mask": self.mask, "labels": self.labels,
        }

    def _set_fields(self, fields):
        for k, v in fields.items():
            setattr(self, k, v)

    def _batched_fields(self):
        return [("h", 1), ("J", 2), ("beta", 0), ("offset", 0), ("mask", 1)]

    def _coupling_batch_shape(self):
        return self.J.shape[:-2]

    def _coupling_field(self, xm, k, s):
        J = align(self.J, 2, k, s)
        return (J @ xm[..., None])[..., 0]

    @property
    def active_J(self) -> jax.Array:
        """Couplings with every row and column of a masked variable set to zero."""
        m = self.mask
        return jnp.where(m[..., :, None] & m[..., None, :], self.J, 0)

    def _coupling_row_sums(self):
        # row and column sums averaged: equal for symmetric J, and the gradient stays symmetric
        J = self.active_J
        return 0.5 * (jnp.sum(J, axis=-1) + jnp.sum(J, axis=-2))

    def _coupling_total(self):
        return 0.5 * jnp.sum(self.active_J, axis=(-2, -1))

    def _scaled_couplings(self, factor):
        return {"J": self.active_J * factor}

    # ------------------------------------------------------------------ other forms
    def to_dense(self) -> IsingModel:
        return self

    def to_sparse(self, tol: float = 0.0):
        """The same model as a :class:`SparseIsingModel` whose edges are the pairs with
        ``|J_ij| > tol`` in any model of the batch."""
        from ._convert import dense_to_sparse

        return dense_to_sparse(self, tol)
