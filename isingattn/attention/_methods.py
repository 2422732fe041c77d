"""Temporary: the methods moved to one module each (_inference, _exact, _transfer, _mean_field,
_sampled)."""

from ._inference import Inference  # noqa: F401
