"""Helpers of the analysis-script tests: run a script as a user runs it (a subprocess, from the
repository root) and read its result tables."""

import csv
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANALYSIS = os.path.join(ROOT, "analysis")


def run_script(name, *args, check=True):
    proc = subprocess.run([sys.executable, os.path.join(ANALYSIS, name), *map(str, args)],
                          check=False, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
