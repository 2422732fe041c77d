"""The random streams of the MCMC moves, in one place.

Every draw is a pure function of the JAX keys the driver hands out (same keys, same samples).
What differs is how the bits are made inside a sweep, chosen by what the move needs:

* **a stream carried in the state** (single-site Gibbs/Metropolis, Swendsen–Wang): xoshiro128**
  generators (Blackman & Vigna, 2018), one per lane, seeded from the chain's key by ``init``
  (:func:`xoshiro_seed`) and re-keyed by a step's key (:func:`xoshiro_mix`: 128 threefry bits
  XORed in, a bijection per lane). A sweep needs one uniform per site and chain, and on the CPU
  threefry costs more than a whole spin update; xoshiro makes them from 4 threefry words per
  chain and step (figures in ``docs/guide/mcmc.md``).
* **a counter-based hash** (simulated annealing): :func:`threefry2x32` of (seed, sweep, index)
  makes a whole sweep's uniforms at once, off the sequential chain of updates, and needs no
  state.
* ``jax.random`` directly in the kernels that take a key every step: Wolff (the seed site and
  a uniform per candidate bond of each growth step) and parallel tempering (the exchanges; its
  replicas use their local kernel's stream).

Uniforms: :func:`bits_to_uniform` gives [0, 1) with 23 random bits (as ``jax.random``),
:func:`bits_to_open_uniform` (0, 1) with 24, for logarithms.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

# ---------------------------------------------------------------------------------------------
# xoshiro128**: a stream carried in the kernel state
# ---------------------------------------------------------------------------------------------


def _rotl(x, k):
    return (x << k) | (x >> (32 - k))


def _nonzero(s):
    # xoshiro's only bad state is all-zero (probability 2^-128 per lane); make it impossible
    s0, s1, s2, s3 = s
    zero = (s0 | s1 | s2 | s3) == 0
    return (s0, s1, s2, jnp.where(zero, jnp.uint32(1), s3))


def xoshiro_seed(key, lanes=()):
    """xoshiro128** states (a 4-tuple of uint32 arrays shaped ``lanes``) from a JAX key."""
    s = jax.random.bits(key, (4,) + tuple(lanes), jnp.uint32)
    return _nonzero(tuple(s))


def xoshiro_mix(s, key):
    """XOR 128 random bits of ``key`` into every lane of state ``s`` (a bijection per lane)."""
    k = jax.random.bits(key, (4,), jnp.uint32)
    return _nonzero(tuple(si ^ k[j] for j, si in enumerate(s)))


def xoshiro_next(s):
    """One xoshiro128** step of every lane: ``(new state, 32 random bits per lane)``."""
    s0, s1, s2, s3 = s
    r = _rotl(s1 * jnp.uint32(5), 7) * jnp.uint32(9)
    t = s1 << 9
    s2 = s2 ^ s0
    s3 = s3 ^ s1
    s1 = s1 ^ s2
    s0 = s0 ^ s3
    s2 = s2 ^ t
    s3 = _rotl(s3, 11)
    return (s0, s1, s2, s3), r


def bits_to_uniform(r):
    """Uniform float32 in [0, 1) from 32 random bits (the top 23 bits, as jax.random does)."""
    return jax.lax.bitcast_convert_type((r >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0


def bits_to_open_uniform(bits, dtype):
    """Uniform on the open interval (0, 1) from 32 random bits (the top 24), safe for ``log``."""
    return ((bits >> 8).astype(dtype) + 0.5) * (1.0 / (1 << 24))


# ---------------------------------------------------------------------------------------------
# Threefry-2x32: a counter-based hash for whole sweeps
# ---------------------------------------------------------------------------------------------
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def threefry2x32(k0, k1, c0, c1):
    """Threefry-2x32 (20 rounds; Salmon et al. 2011, the generator behind ``jax.random``'s
    default keys) on uint32 arrays, written out with jnp so XLA vectorizes it on the CPU."""
    ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(0x1BD11BDA))
    x0, x1 = c0 + k0, c1 + k1
    for r in range(20):
        rot = _ROTATIONS[(r // 4) % 2][r % 4]
        x0 = x0 + x1
        x1 = ((x1 << rot) | (x1 >> (32 - rot))) ^ x0
        if r % 4 == 3:
            i = r // 4 + 1
            x0 = x0 + ks[i % 3]
            x1 = x1 + ks[(i + 1) % 3] + jnp.uint32(i)
    return x0, x1


__all__ = ["bits_to_open_uniform", "bits_to_uniform", "threefry2x32", "xoshiro_mix",
           "xoshiro_next", "xoshiro_seed"]
