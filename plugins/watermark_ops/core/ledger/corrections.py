"""Allowed lateness and corrections: the late rows a Spark append query lost, recovered as results.

Flink (``allowedLateness``) and the Dataflow model keep a fired window's state for an *allowed
lateness*: a late row within it fires the window again with a result that retracts the earlier one.
Spark's append mode emits a window once and drops every later row. The late-row ledger knows each of
those rows exactly; with an allowed lateness, after each run:

* a late row is **recoverable** when its window ended less than the allowed lateness before the
  watermark that dropped it (``late_by_ms < allowed_lateness_ms``, :func:`recoverable`); the others
  stay in the ledger as **final drops**;
* each window of a recoverable row is computed again from all its rows (the job's batch twin over
  every file whose rows fall in it: :func:`files_for_windows` reads that from the replay log), and
  every group of it whose result differs from what the sink holds becomes a **correction**
  (``watermark_ops.spark.corrections``);
* corrections are written beside the job's sink (``<sink>_corrections``, one folder per run,
  replaced when the run is run again) and, for every face, appended to
  ``<checkpoint>.corrections.jsonl`` (:func:`corrections_log_path`), one JSON line each::

      {"window_start_ms": int, "window_end_ms": int, "keys": {column: value},
       "emitted": {column: value} | null,      # what the sink holds (null: never emitted)
       "corrected": {column: value},           # the window's result over every row of it
       "late_rows": int,                       # the recoverable late rows it adds
       "run": str, "batch_id": int,            # the run (its tag) and batch that dropped them
       "window_kind": "session",               # session windows only, with "retracts":
       "retracts": [{"window_start_ms", "window_end_ms", "values"}],  # the sessions (emitted, or
                                               # corrected before) it replaces
       "write": int}                           # the write's instant (epoch ms UTC)

  A session window's correction is the session over every landed row of its keys that holds a
  recoverable late row; it **retracts** each session published before (by Spark, or by an earlier
  correction) that overlaps it: a late row can extend one session or bridge two into one. A
  consumer that applies the corrections in order (remove the retracted, add the corrected) holds
  the sessions over every landed row.

  The column names are the job's own output columns. :func:`read_corrections` keeps, per run, only
  its newest write (a rerun of a run is written again, never twice), in the order made;
  :func:`standing` is the newest correction per window and keys.

All instants epoch ms UTC. Pure core: no Airflow, no Spark.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from watermark_ops.core.ledger.rule import interval_ms

__all__ = ["allowed_lateness_ms", "corrections_log_path", "files_for_windows", "read_corrections", "recoverable",
           "split_late", "standing", "window_key"]


def allowed_lateness_ms(text: str | None) -> int | None:
    """``"6 hours"`` → 21,600,000; None for None or "".

    :raises ValueError: for text that is not a Spark interval of whole units, naming it.
    """
    if text is None or not str(text).strip():
        return None
    ms = interval_ms(text)
    if ms is None or ms <= 0:
        raise ValueError(f"allowed lateness: expected an interval such as '6 hours', got {text!r}")
    return ms


def recoverable(late_by_ms: int, window_end_ms: int | None, allowed_ms: int | None) -> bool:
    """Whether a late row can still be recovered: it has a window, and that window ended less than
    ``allowed_ms`` before the watermark that dropped it (Flink's meaning of allowed lateness)."""
    return allowed_ms is not None and window_end_ms is not None and late_by_ms < allowed_ms


def split_late(late_rows: Iterable[dict[str, Any]], allowed_ms: int | None) -> tuple[list[dict], list[dict]]:
    """``(recoverable, dropped for good)`` of late rows (``LateRow.to_dict()`` shapes)."""
    kept, dropped = [], []
    for row in late_rows:
        (kept if recoverable(int(row["late_by_ms"]), row.get("window_end_ms"), allowed_ms) else dropped).append(row)
    return kept, dropped


def window_key(correction: dict[str, Any]) -> tuple:
    """A correction's window and keys, as one hashable value."""
    keys = correction.get("keys") or {}
    return (correction["window_start_ms"], correction["window_end_ms"],
            tuple(sorted((str(k), json.dumps(v, sort_keys=True, default=str)) for k, v in keys.items())))


def files_for_windows(replays: dict[int, dict[str, Any]], windows: Iterable[tuple[int, int]]) -> list[str]:
    """The files whose rows fall in any of ``windows`` (``(start ms, end ms)``), from the replay log's
    records (``{batch id: record}``: each names its files and the event times of its rows entering
    the watermark), in batch order. A batch with a row in a window gives all its files."""
    spans = sorted(set(windows))
    found: list[str] = []
    for batch_id in sorted(replays):
        record = replays[batch_id]
        times = record.get("event_times_ms") or []
        if any(start <= t < end for t in times for start, end in spans):
            found.extend(f for f in record.get("files") or [] if f not in found)
    return found


def corrections_log_path(checkpoint: str) -> str:
    """``<checkpoint>.corrections.jsonl``: the corrections every face reads."""
    return str(checkpoint).rstrip("/") + ".corrections.jsonl"


def read_corrections(checkpoint: str, *, filesystem: Any = None,
                     storage_options: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """The corrections of ``checkpoint`` in the order they were made, each run's newest write only.

    :return: ``(corrections, problems)``: a line that is not a correction names the file and line
        in ``problems`` and is not used. A missing log is empty.
    :raises OSError: when the log exists but cannot be read.
    """
    from watermark_ops.core.ledger.replayed import read_records

    records, problems = read_records(
        corrections_log_path(checkpoint), lambda r: isinstance(r.get("window_start_ms"), int)
        and isinstance(r.get("window_end_ms"), int) and isinstance(r.get("corrected"), dict),
        "a correction with window_start_ms, window_end_ms and corrected", filesystem=filesystem,
        storage_options=storage_options)
    newest: dict[str, int] = {}
    for record in records:
        run = str(record.get("run"))
        newest[run] = max(newest.get(run, 0), int(record.get("write") or 0))
    return [r for r in records if int(r.get("write") or 0) == newest[str(r.get("run"))]], problems


def standing(corrections: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest correction of each window and keys, in the order of their windows and keys; a
    session correction's ``retracts`` removes the earlier corrections of the sessions it replaces."""
    latest: dict[tuple, dict[str, Any]] = {}
    for correction in corrections:
        for retracted in correction.get("retracts") or ():
            latest.pop(window_key({**retracted, "keys": correction.get("keys")}), None)
        latest[window_key(correction)] = correction
    return [latest[key] for key in sorted(latest, key=lambda k: (k[0], k[1], k[2]))]
