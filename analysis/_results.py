"""Resumable result tables for the analysis scripts.

A script measures a list of points (an (L, beta) pair, an (algorithm, L) pair, a schedule and
anneal time, a training run). :class:`ResultsTable` appends each point's rows to a CSV as soon
as the point is done (flushed), so an interrupted run keeps everything it finished and a re-run
measures only the points that are missing. The settings that change what a point means (the
model's size and seed, the training length, ...; not those that only set its precision, which
its error bar reports) are kept next to the CSV (``<name>.settings.json``): resuming with other
values would mix incomparable points in one table, so it stops with a message that names the
settings that differ (use ``--fresh`` or another ``--out``); rows without their settings file (or
with an unreadable one) are refused too, since nothing then says what they measured.

Damage is handled where it is read: a torn or malformed last line (an interrupted write) is
dropped with a message; a malformed line before it stops the script naming the file and line.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys

from isingattn._io import atomic_write, write_json


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
      parse: ``parse(row) -> row`` converting a row read back from the CSV (strings) to values;
        rows appended are kept as they read back (their CSV text, parsed).
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
        self.parse = parse
        self.rows = self._read(parse or (lambda r: r))
        if settings is None:
            return
        settings = _jsonable(settings)
        if self.rows:
            old = self._read_settings()
            diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
            if diff:
                shown = ", ".join(f"{k}: {old.get(k)!r} there, {settings.get(k)!r} now"
                                  for k in diff)
                raise SystemExit(
                    f"{path} holds points measured with other settings ({shown}); resuming "
                    "would mix them in one table: use --fresh, or another --out")
        write_json(self.settings_path, settings)  # a cut write never leaves half a file

    def _read_settings(self):
        """The settings the rows were measured with, or ``SystemExit`` saying why not."""
        n = len(self.rows)
        if not os.path.exists(self.settings_path):
            raise SystemExit(
                f"{self.path} holds {n} row(s) but their settings file {self.settings_path} is "
                "missing, so nothing says what they measured and resuming could mix other "
                "settings into the table: restore the file, use --fresh, or another --out")
        try:
            with open(self.settings_path) as f:
                old = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SystemExit(
                f"{self.settings_path} (the settings of the {n} row(s) in {self.path}) cannot "
                f"be read as JSON ({e}): repair or restore it, use --fresh, or another "
                "--out") from None
        if not isinstance(old, dict):
            raise SystemExit(
                f"{self.settings_path} must hold a JSON object of settings; it holds a "
                f"{type(old).__name__}: repair or restore it, use --fresh, or another --out")
        return old

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
        lines = [line + "\n" for line in text.split("\n")[:-1]]  # split as written: on \n
        reader = csv.DictReader(iter(lines))
        if reader.fieldnames is None:
            return []
        if reader.fieldnames != self.fields:
            raise SystemExit(
                f"{self.path} has columns {reader.fieldnames}, not this script's "
                f"{self.fields} (an older version?): move it aside, use --fresh, or "
                "another --out")
        read = []  # (first line of the row, parsed row or None, what is wrong)
        start = reader.line_num + 1
        try:
            for r in reader:
                read.append((start, *self._parse_one(parse, r)))
                start = reader.line_num + 1
        except csv.Error as e:
            raise SystemExit(f"{self.path}, line {start}: not CSV ({e}): fix or delete the "
                             "line, use --fresh, or another --out") from None
        bad = [(line, why) for line, row, why in read if why]
        if bad and bad[-1][0] == read[-1][0]:  # the last row: an interrupted write
            line, why = bad.pop()
            read.pop()
            text = "".join(lines[: line - 1])
            with open(self.path, "w", newline="") as f:
                f.write(text)
            print(f"{self.path}: dropped a malformed last line {line} ({why}; an interrupted "
                  "write)", file=sys.stderr)
        if bad:
            line, why = bad[0]
            raise SystemExit(
                f"{self.path}, line {line}: {why}; {len(bad)} such line(s) before the last one, "
                "so this is not an interrupted write: fix or delete the line(s), use --fresh, "
                "or another --out")
        return [row for _, row, _ in read]

    def _parse_one(self, parse, r):
        """``(parsed row, None)`` or ``(None, what is wrong)`` for one row read back."""
        if None in r:
            return None, f"{len(self.fields) + len(r[None])} fields, expected {len(self.fields)}"
        missing = [k for k, v in r.items() if v is None]
        if missing:
            return None, (f"{len(self.fields) - len(missing)} fields, expected "
                          f"{len(self.fields)}")
        try:
            return parse(dict(r)), None
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            return None, f"cannot read its values ({type(e).__name__}: {e})"

    @property
    def done(self):
        """The keys of the points already in the table."""
        return {self.key(r) for r in self.rows}

    def refresh(self):
        """Read the rows again from the file (another process may have appended points to it,
        e.g. a second sweep process given other variants); returns the table."""
        self.rows = self._read(self.parse or (lambda r: r))
        return self

    def append(self, rows, *, digits=None):
        """Write the rows of one finished point (a dict or a list of dicts) and flush; returns
        True. ``digits``: floats written with this many significant digits (default ``str``).

        A point the file already holds (written since this table was read, by another process
        on the same table) is not written again: the rows are dropped with a message, the
        table is re-read, and the result is False."""
        rows = [rows] if isinstance(rows, dict) else list(rows)
        if digits is not None:
            rows = [{k: f"{v:.{digits}g}" if isinstance(v, float) else v for k, v in r.items()}
                    for r in rows]
        back = [{k: "" if r.get(k) is None else str(r[k]) for k in self.fields} for r in rows]
        parsed = [self.parse(r) for r in back] if self.parse is not None else None
        new = {self.key(r) for r in (parsed if parsed is not None else back)}
        twice = new & {self.key(r) for r in self.refresh().rows}
        if twice:
            print(f"{self.path}: point(s) {sorted(twice, key=str)} already in the file "
                  "(written by another process?); not written again", file=sys.stderr)
            return False
        buf = io.StringIO(newline="")
        w = csv.DictWriter(buf, fieldnames=self.fields)
        if not os.path.exists(self.path) or os.path.getsize(self.path) == 0:
            w.writeheader()
        w.writerows(rows)
        with open(self.path, "a", newline="") as f:
            f.write(buf.getvalue())  # one write per point
            f.flush()
            os.fsync(f.fileno())
        self.rows += parsed if parsed is not None else rows
        return True

    def rewrite(self, rows):
        """Replace the whole table (e.g. rows recomputed from saved raw data), atomically."""
        buf = io.StringIO(newline="")
        w = csv.DictWriter(buf, fieldnames=self.fields)
        w.writeheader()
        w.writerows(rows)
        atomic_write(self.path, buf.getvalue())
        self.rows = list(rows)
