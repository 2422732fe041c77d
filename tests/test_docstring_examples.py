"""The examples in the docstrings run and print what they say (doctest).

Every module of ``isingattn`` with a ``>>>`` example is found from the source. Examples that
compile a sampler or a network take seconds each (about a minute and a half together), so the
test suite runs the rest and leaves those to::

    ISINGATTN_DOCTESTS=all .venv/bin/python -m pytest tests/test_docstring_examples.py

(or ``.venv/bin/python -m pytest --doctest-modules isingattn``, the same examples).
"""

import doctest
import importlib
import os
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "isingattn"

# Each of these examples compiles an MCMC sampler, the state-vector simulator or a Flax model
# (3-20 s apiece on a loaded 2-core machine); the tests of those modules compile the same code.
SLOW = {
    "isingattn.attention._nnx",
    "isingattn.attention._transformer",
    "isingattn.probabilistic._distribution",
    "isingattn.quantum._evolve",
    "isingattn.samplers._annealing",
    "isingattn.samplers._diabatic",
    "isingattn.samplers._exact",
    "isingattn.samplers._gibbs",
    "isingattn.samplers._metropolis",
    "isingattn.samplers._neal",
    "isingattn.samplers._swendsen_wang",
    "isingattn.samplers._tempering",
    "isingattn.samplers._transfer",
    "isingattn.samplers._wolff",
}


def _modules_with_examples():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if ">>>" in path.read_text(encoding="utf-8"):
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


MODULES = _modules_with_examples()


def test_the_slow_list_names_modules_with_examples():
    assert SLOW <= set(MODULES), sorted(SLOW - set(MODULES))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name in SLOW and os.environ.get("ISINGATTN_DOCTESTS") != "all":
        pytest.skip("compiles a sampler or a network; ISINGATTN_DOCTESTS=all runs it")
    module = importlib.import_module(name)
    tests = [t for t in doctest.DocTestFinder().find(module, name) if t.examples]
    assert tests, f"{name} has '>>>' in its source but no docstring example was found"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
