"""Small validation helpers shared by the package (eager checks on concrete values)."""

from __future__ import annotations

import numbers

import jax
import numpy as np


def is_concrete(*arrays) -> bool:
    """True when none of ``arrays`` is a JAX tracer (checks on values are possible)."""
    return not any(isinstance(a, jax.core.Tracer) for a in arrays)


def shape_str(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def check_finite(name: str, value) -> None:
    """Raise ``ValueError`` naming ``name`` when ``value`` holds NaN or inf (concrete values only)."""
    if not is_concrete(value):
        return
    arr = np.asarray(value)
    if arr.size and not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        where = f" at index {tuple(int(i) for i in bad)}" if arr.ndim else ""
        raise ValueError(
            f"{name} must be finite; found {arr[tuple(bad)] if arr.ndim else arr}{where}"
        )


def check_positive_int(name: str, value, minimum: int = 1) -> int:
    """Return ``value`` as an int, or raise naming the parameter and what is valid."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= {minimum}; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value}")
    return int(value)


def check_beta(beta) -> None:
    """beta must be finite and > 0 (every element, for batched beta)."""
    if not is_concrete(beta):
        return
    arr = np.asarray(beta)
    if arr.size and not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise ValueError(f"beta must be finite and > 0; got {arr if arr.ndim else float(arr)}")
