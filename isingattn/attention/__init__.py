"""Boltzmann attention: an attention layer whose pattern over keys is drawn from an Ising model
with data-dependent fields and (learnable) couplings.

Levels, importable separately:

- the function :func:`boltzmann_attention` (``jax.nn.dot_product_attention`` calling
  convention), with :class:`Couplings` and the inference methods (``"exact"``, ``"transfer"``,
  ``"mean_field"`` / :class:`MeanField`, :func:`sampled`; a method of one's own follows
  :class:`InferenceMethod` and may be registered under a name with :func:`register_method`);
  importing these does not import flax;
- the Flax NNX module :class:`BoltzmannMultiHeadAttention`;
- :func:`boltzmann_attention_fn`, the function as the ``attention_fn`` of Flax's own attention
  modules (``nnx.MultiHeadAttention``, ``flax.linen.MultiHeadDotProductAttention``);
- the small pre-norm transformer :class:`TransformerLM`.

The module, the ``attention_fn`` and the transformer are loaded on first access (they import
flax).
"""

from ._calibration import (
    CALIBRATION_MODES,
    MAX_PROBE_KEYS,
    Calibration,
    calibrate_model,
    fit_effective_betas,
    formula_record,
)
from ._couplings import KINDS, STRUCTURES, Couplings, CouplingSpec
from ._exact import MAX_EXACT_KEYS, Exact
from ._function import READOUTS, AttentionInfo, boltzmann_attention
from ._inference import Inference, InferenceMethod, method_names, register_method, resolve_method
from ._mean_field import MeanField
from ._rope import apply_rope
from ._sampled import Sampled, sampled
from ._transfer import Transfer

_LAZY = {
    "BoltzmannAttentionFn": "._attention_fn",
    "BoltzmannMultiHeadAttention": "._nnx",
    "SamplerScales": "._nnx",
    "TransformerLM": "._transformer",
    "TransformerBlock": "._transformer",
    "boltzmann_attention_fn": "._attention_fn",
    "POSITIONAL": "._transformer",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CALIBRATION_MODES",
    "KINDS",
    "MAX_EXACT_KEYS",
    "MAX_PROBE_KEYS",
    "POSITIONAL",
    "READOUTS",
    "STRUCTURES",
    "AttentionInfo",
    "BoltzmannAttentionFn",
    "BoltzmannMultiHeadAttention",
    "Calibration",
    "CouplingSpec",
    "Couplings",
    "Exact",
    "Inference",
    "InferenceMethod",
    "MeanField",
    "Sampled",
    "SamplerScales",
    "Transfer",
    "TransformerBlock",
    "TransformerLM",
    "apply_rope",
    "boltzmann_attention",
    "boltzmann_attention_fn",
    "calibrate_model",
    "fit_effective_betas",
    "formula_record",
    "method_names",
    "register_method",
    "resolve_method",
    "sampled",
]
