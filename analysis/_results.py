"""Resumable result tables for the analysis scripts.

A script measures a list of points (an (L, beta) pair, an (algorithm, L) pair, a schedule and
anneal time, a training run). :class:`ResultsTable` appends each point's rows to a CSV as soon
as the point is done (flushed), so an interrupted run keeps everything it finished and a re-run
measures only the points that are missing. The settings that change what a point means (the
model's size and seed, the training length, ...; not those that only set its precision, which
its error bar reports) are kept next to the CSV (``<name>.settings.json``): resuming with other
values would mix incomparable points in one table, so it stops with a message that names the
settings that differ (use ``--fresh`` or another ``--out``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys


def _jsonable(settings):
    return json.loads(json.dumps(settings))


class ResultsTable:
    """The CSV ``path`` with columns ``fields``, one point per ``key(row)``.

    Args:
      path: the CSV file (its folder must exist).
      fields: column names, in order.
      key: ``key(row) -> hashable`` identifying the point a row belongs to (several rows may
        share one point, e.g. one per observable).
      settings: a JSON-serializable dict of the run's settings; resuming a table written with
        other settings raises ``SystemExit`` naming them. None: neither checked nor written
        (a table whose points do not depend on settings, or a run that only reads it).
      parse: ``parse(row) -> row`` converting a row read back from the CSV (strings) to values.
      fresh: start over (delete the CSV and its settings).
    """

    def __init__(self, path, fields, key, *, settings=None, parse=None, fresh=False):
        self.path = path
        self.fields = list(fields)
        self.key = key
        self.settings_path = os.path.splitext(path)[0] + ".settings.json"
        if fresh:
            for p in (path, self.settings_path):
                if os.path.exists(p):
                    os.remove(p)
        self.rows = self._read(parse or (lambda r: r))
        if settings is None:
            return
        settings = _jsonable(settings)
        if self.rows and os.path.exists(self.settings_path):
            with open(self.settings_path) as f:
                old = json.load(f)
            diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            if diff:
                shown = ", ".join(f"{k}: {old.get(k)!r} there, {settings.get(k)!r} now"
                                  for k in diff)
                raise SystemExit(
                    f"{path} holds points measured with other settings ({shown}); resuming "
                    "would mix them in one table: use --fresh, or another --out")
        with open(self.settings_path, "w") as f:
            json.dump(settings, f, indent=2)

    def _read(self, parse):
        if not os.path.exists(self.path):
            return []
        with open(self.path, newline="") as f:
            text = f.read()
        if text and not text.endswith("\n"):  # a write cut short: drop its torn line
            text = text[: text.rfind("\n") + 1]
            with open(self.path, "w", newline="") as f:
                f.write(text)
            print(f"{self.path}: dropped an incomplete last line (an interrupted write)",
                  file=sys.stderr)
        with io.StringIO(text, newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None:
                return []
            if reader.fieldnames != self.fields:
                raise SystemExit(
                    f"{self.path} has columns {reader.fieldnames}, not this script's "
                    f"{self.fields} (an older version?): move it aside, use --fresh, or "
                    "another --out")
            return [parse(dict(r)) for r in reader]

    @property
    def done(self):
        """The keys of the points already in the table."""
        return {self.key(r) for r in self.rows}

    def append(self, rows):
        """Write the rows of one finished point (a dict or a list of dicts) and flush."""
        rows = [rows] if isinstance(rows, dict) else list(rows)
        buf = io.StringIO(newline="")
        w = csv.DictWriter(buf, fieldnames=self.fields)
        if not os.path.exists(self.path) or os.path.getsize(self.path) == 0:
            w.writeheader()
        w.writerows(rows)
        with open(self.path, "a", newline="") as f:
            f.write(buf.getvalue())  # one write per point
            f.flush()
            os.fsync(f.fileno())
        self.rows += rows

    def rewrite(self, rows):
        """Replace the whole table (e.g. rows recomputed from saved raw data), atomically."""
        tmp = self.path + ".tmp"
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=self.fields)
            w.writeheader()
            w.writerows(rows)
        os.replace(tmp, self.path)
        self.rows = list(rows)
