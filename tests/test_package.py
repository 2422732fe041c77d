"""The top-level package: ``import isingattn`` shows the whole library (every subpackage and
the most used names) without importing Flax, matplotlib or numpyro until they are used."""

import subprocess
import sys

import pytest

import isingattn

_FRESH = """
import sys
import isingattn
heavy = sorted(m for m in ("flax", "matplotlib", "numpyro", "optax", "arviz") if m in sys.modules)
assert not heavy, heavy
import isingattn.testing  # the conformance suite loads ArviZ only when it measures an ESS
assert not heavy, heavy
isingattn.BoltzmannMultiHeadAttention
assert "flax" in sys.modules
print("ok")
"""


def test_import_loads_no_heavy_dependency_until_used():
    proc = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


_NO_KERNEL = """
import sys
import isingattn
from isingattn import attention, cli, diagnostics, exact, experiments, models, quantum, samplers
attention.Transfer, attention.MeanField, attention.TransformerLM, isingattn.BoltzmannMultiHeadAttention
loaded = sorted(m for m in sys.modules if m.startswith("isingattn._kernels."))
print(" ".join(loaded))
"""

#: The kernel modules whose import compiles numba code (their handlers are module-level cfuncs).
_COMPILED_AT_IMPORT = ("anneal", "chain", "chromatic", "simulated", "swendsen_wang", "transfer")


def test_import_compiles_no_kernel_until_one_is_used():
    # an import must not pay for kernels it may never use (tens of seconds with an empty cache)
    proc = subprocess.run([sys.executable, "-c", _NO_KERNEL], capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = {m.rsplit(".", 1)[1] for m in proc.stdout.split()}
    assert not loaded & set(_COMPILED_AT_IMPORT), loaded


def test_every_public_name_resolves_to_its_subpackage_object():
    import importlib

    for name in isingattn.__all__:
        obj = getattr(isingattn, name)
        if name in isingattn._LAZY_NAMES:
            sub = importlib.import_module(f"isingattn.{isingattn._LAZY_NAMES[name]}")
            assert obj is getattr(sub, name), name
    for sub in ("attention", "diagnostics", "experiments", "probabilistic", "quantum",
                "exact", "models", "samplers", "testing"):
        assert getattr(isingattn, sub) is importlib.import_module(f"isingattn.{sub}")
    assert set(isingattn.__all__) <= set(dir(isingattn))
    with pytest.raises(AttributeError, match="module 'isingattn' has no attribute 'nope'"):
        isingattn.nope  # noqa: B018
