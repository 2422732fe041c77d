"""The CSV logs of a training run (``metrics.csv``, ``calibration.csv``): rows keyed by
``step``, appended and flushed as they are written, cut back to a step when a run resumes."""

from __future__ import annotations

import csv
import io
import os

from .._io import atomic_write


def keep_steps_below(path, fields, stop):
    """Rewrite the CSV log ``path`` (columns ``fields``) keeping the complete rows whose
    ``step`` is below ``stop`` (a half-written last line is dropped); atomic. No file: nothing."""
    if not os.path.exists(path):
        return
    with open(path, newline="") as f:
        text = f.read()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    rows = list(csv.DictReader(io.StringIO(text)))
    keep = [r for r in rows if r.get("step", "").isdigit() and int(r["step"]) < stop]
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    w.writerows(keep)
    atomic_write(path, buf.getvalue())


class StepLog:
    """A CSV log at ``path`` with the columns ``fields`` (one of them ``step``): rows are
    appended and flushed as they come, so an interrupted run keeps every row it wrote.
    ``enabled=False`` writes nothing (a data-parallel run's other processes)."""

    def __init__(self, path, fields, *, enabled: bool = True):
        self.path = path
        self.fields = list(fields)
        self.enabled = enabled

    def append_rows(self, rows):
        """Append the dicts ``rows`` (keys beyond ``fields`` ignored; the header first if the
        file is new or empty)."""
        if not self.enabled:
            return
        new = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        buf = io.StringIO(newline="")
        w = csv.DictWriter(buf, fieldnames=self.fields, extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerows(rows)
        with open(self.path, "a", newline="") as f:
            f.write(buf.getvalue())
            f.flush()

    def keep_steps_below(self, stop):
        """Drop the rows of step ``stop`` and later (a resumed run writes them again)."""
        if self.enabled:
            keep_steps_below(self.path, self.fields, stop)

    def read(self):
        """The rows as dicts of strings; ``[]`` if there is no file yet."""
        if not os.path.exists(self.path):
            return []
        with open(self.path, newline="") as f:
            return list(csv.DictReader(f))
