"""The inference-method protocol and registry: a user's own method plugs in by name."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from isingattn.attention import (
    Couplings,
    Exact,
    InferenceMethod,
    MeanField,
    Transfer,
    _inference,
    boltzmann_attention,
    method_names,
    register_method,
    resolve_method,
    sampled,
)
from isingattn.samplers import ExactSampler


@dataclasses.dataclass(frozen=True)
class _Recording:
    """Exact enumeration, recording the keyword arguments the layer passes."""

    calls: list = dataclasses.field(default_factory=list, compare=False)
    name = "recording"
    stochastic = False

    def __call__(self, h, mask, couplings, beta, **kw):
        self.calls.append(kw)
        return Exact()(h, mask, couplings, beta, **kw)


@pytest.fixture
def registry():
    saved = dict(_inference._REGISTRY)
    yield
    _inference._REGISTRY.clear()
    _inference._REGISTRY.update(saved)


def _qkv(T=6):
    k = jax.random.split(jax.random.key(0), 3)
    return tuple(jax.random.normal(kk, (1, T, 2, 4)) for kk in k)


def test_builtin_names_and_objects():
    assert method_names()[:4] == ("exact", "transfer", "mean_field", "tap")
    assert isinstance(resolve_method("exact"), Exact)
    assert isinstance(resolve_method("transfer"), Transfer)
    assert resolve_method("tap") == MeanField(tap=True)
    m = MeanField(tol=1e-3)
    assert resolve_method(m) is m
    for obj in (Exact(), Transfer(), MeanField(), sampled(ExactSampler(), 4)):
        assert isinstance(obj, InferenceMethod)


def test_a_registered_method_is_used_by_name(registry):
    rec = _Recording()
    register_method("recording", lambda: rec)
    assert "recording" in method_names()
    q, k, v = _qkv()
    c = Couplings.learned(2, "banded", bandwidth=2).replace(0.4 * jnp.ones((2, 2)))
    got = boltzmann_attention(q, k, v, couplings=c, method="recording", is_causal=True)
    want = boltzmann_attention(q, k, v, couplings=c, method="exact", is_causal=True)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert rec.calls and rec.calls[0]["causal"] is True
    assert rec.calls[0]["coupling_grad"] is True  # learned couplings


def test_registry_errors(registry):
    with pytest.raises(ValueError, match="method name 'exact' is taken; pass overwrite=True"):
        register_method("exact", Exact)
    with pytest.raises(TypeError, match="factory must be callable"):
        register_method("x", 3)
    with pytest.raises(ValueError, match="method must be one of 'exact', 'transfer', "
                                         "'mean_field', 'tap'.*got 'nope'"):
        resolve_method("nope")
    with pytest.raises(ValueError, match="method='sampled' needs a backend"):
        resolve_method("sampled")
    with pytest.raises(ValueError, match="one following InferenceMethod"):
        resolve_method(object())


def test_coupling_grad_says_whether_a_gradient_can_reach_the_couplings(registry):
    """Frozen couplings at a concrete beta: False (transfer skips that part of its gradient);
    learned couplings, or a traced beta: True."""
    rec = _Recording()
    register_method("recording", lambda: rec)
    q, k, v = _qkv()
    w = 0.4 * jnp.ones((2, 2))
    frozen = Couplings.fixed(w, "banded")
    boltzmann_attention(q, k, v, couplings=frozen, method="recording")
    jax.grad(lambda b: jnp.sum(boltzmann_attention(q, k, v, couplings=frozen, beta=b,
                                                   method="recording")))(1.0)
    learned = Couplings.learned(2, "banded", bandwidth=2).replace(w)
    boltzmann_attention(q, k, v, couplings=learned, method="recording")
    assert [c["coupling_grad"] for c in rec.calls] == [False, True, True]
