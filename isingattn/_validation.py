"""Small validation helpers shared by the package (eager checks on concrete values)."""

from __future__ import annotations

import functools
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


def normalize_key(key, name: str = "key"):
    """Return ``key`` as a typed JAX PRNG key (``jax.random.key``), or raise a ``TypeError``
    naming ``name``.

    The one place keys enter the library: typed keys pass through; raw ``uint32`` key data of the
    default implementation (``jax.random.PRNGKey(0)``, what most JAX, numpyro and flax code still
    passes) is wrapped once here, so both spellings of a seed give the same samples. Works on
    traced keys inside ``jit``. A batch of keys is refused (split it yourself).
    """
    if isinstance(key, np.ndarray) and key.dtype == np.uint32:
        key = jax.numpy.asarray(key)
    if isinstance(key, (jax.Array, np.ndarray)):
        if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
            if key.shape == ():
                return key
            raise TypeError(
                f"{name} must be a single JAX PRNG key; got a batch of keys of shape "
                f"{shape_str(key.shape)} (pass one key, e.g. keys[0])"
            )
        if key.dtype == np.uint32 and key.shape == _raw_key_shape():
            return jax.random.wrap_key_data(key)
        what = f"an array of dtype {key.dtype} and shape {shape_str(key.shape)}"
        if key.dtype == np.uint32 and key.ndim > 1 and key.shape[-1:] == _raw_key_shape()[-1:]:
            what = f"a batch of raw keys of shape {shape_str(key.shape)} (pass one key)"
    else:
        what = repr(key) if isinstance(key, (int, float, str, type(None))) else type(key).__name__
    raise TypeError(
        f"{name} must be a single JAX PRNG key, jax.random.key(seed) or raw "
        f"jax.random.PRNGKey(seed) data (uint32 of shape {shape_str(_raw_key_shape())}); "
        f"got {what}"
    )


def check_key(key):
    """Return ``key`` as a typed JAX PRNG key: typed keys pass, raw ``jax.random.PRNGKey`` data
    is wrapped; anything else is a clear ``TypeError`` (:func:`normalize_key` with the
    parameter named ``key``)."""
    return normalize_key(key)


@functools.cache
def _raw_key_shape_of(impl: str) -> tuple[int, ...]:
    return tuple(jax.random.key_data(jax.random.key(0)).shape)


def _raw_key_shape() -> tuple[int, ...]:
    """Shape of raw key data of the default PRNG implementation ((2,) for threefry)."""
    return _raw_key_shape_of(str(jax.config.jax_default_prng_impl))


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


def check_choice(name: str, value, choices):
    """Return ``value`` if it is one of ``choices``; otherwise raise ``ValueError`` naming
    ``name``, the valid values and the value given (a bool is not taken for 0 or 1)."""
    try:
        ok = value in choices
    except (TypeError, ValueError):  # unhashable, or an array
        ok = False
    if ok and isinstance(value, bool):
        ok = any(c is value for c in choices)
    if not ok:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
    return value
