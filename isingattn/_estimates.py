"""Result types shared by the diagnostics and the probabilistic models (private module).

:class:`TemperatureEstimate` is returned by :func:`isingattn.diagnostics.effective_beta_ml`,
:func:`~isingattn.diagnostics.effective_beta_mple` and
:func:`isingattn.probabilistic.effective_beta_bayes`; it lives here, below both packages, so
that neither imports the other's private modules. The public name is
:class:`isingattn.diagnostics.TemperatureEstimate` (the same class, re-exported).
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class TemperatureEstimate:
    """An effective inverse temperature, per model of the batch.

    Attributes:
      beta: estimate, shape ``batch``.
      stderr: its standard error (ML: delta method with the energies' ESS; MPLE: bootstrap
        standard deviation; Bayes: posterior standard deviation), shape ``batch``.
      method: ``"ml"``, ``"mple"`` or ``"nuts"``.
      num_samples: draws used per model (chains times draws).
      ess: effective sample size used for ``stderr`` (ML), or None.
      bootstrap: bootstrap estimates ``batch + (B,)`` (MPLE), or None.
      log_likelihood: maximized (pseudo-)log-likelihood, shape ``batch``, or None.
      extra: further results (Bayes: posterior draws and per-scale summaries).
    """

    beta: np.ndarray
    stderr: np.ndarray
    method: str
    num_samples: int
    ess: np.ndarray | None = None
    bootstrap: np.ndarray | None = None
    log_likelihood: np.ndarray | None = None
    extra: dict = dataclasses.field(default_factory=dict)

    def interval(self, z: float = 1.959963984540054):
        """``(beta - z stderr, beta + z stderr)`` (a 95% normal interval by default)."""
        return self.beta - z * self.stderr, self.beta + z * self.stderr

    def to_dict(self) -> dict:
        out = {"method": self.method, "beta": self.beta, "stderr": self.stderr,
               "num_samples": self.num_samples}
        if self.ess is not None:
            out["ess"] = self.ess
        return out
