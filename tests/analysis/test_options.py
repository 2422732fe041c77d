"""Every analysis script describes itself and every option."""

import json
import os
import subprocess
import sys

from ._scripts import ANALYSIS, ROOT

#: every script of analysis/ (the helpers' modules start with "_"), so that a new one is checked
SCRIPTS = sorted(name[:-3] for name in os.listdir(ANALYSIS)
                 if name.endswith(".py") and not name.startswith("_"))

_PARSERS = """
import argparse, importlib, json, sys
sys.path.insert(0, sys.argv[1])
class Got(Exception):
    pass
def capture(self, args=None, namespace=None):
    raise Got(self)
argparse.ArgumentParser.parse_args = capture
out = {}
for name in sys.argv[2:]:
    try:
        importlib.import_module(name).main([])
    except Got as g:
        p = g.args[0]
        out[name] = {"description": p.description or "",
                     "options": {a.option_strings[-1] if a.option_strings else a.dest:
                                 a.help or "" for a in p._actions}}
print(json.dumps(out))
"""


def test_every_analysis_script_describes_every_option():
    # one process reads every script's parser (argparse's parse_args stopped before any work)
    proc = subprocess.run([sys.executable, "-c", _PARSERS, ANALYSIS, *SCRIPTS], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsers = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(parsers) == sorted(SCRIPTS)
    for name, p in parsers.items():
        assert p["description"].rstrip().endswith((".", "?", "!")), (name, p["description"])
        bare = [opt for opt, text in p["options"].items() if len(text.split()) < 3]
        assert not bare, f"{name}: options without a description: {bare}"
