"""Corrections: the windows of a run's recoverable late rows computed again from all their rows.

After a run's late rows are known (:mod:`watermark_ops.spark.twin_ledger`), with an allowed lateness
(:mod:`watermark_ops.core.ledger.corrections` has the meaning and the record's shape):

1. the windows of the run's recoverable late rows;
2. the files whose rows fall in them (the replay log names each batch's files and event times);
3. the job's batch twin over those files (:func:`watermark_ops.spark.twin.run_twin`): the query's own
   result, every window with every one of its rows, late ones included;
4. what the sink holds for those windows (a batch read of the job's file sink with the result's schema);
5. every group of those windows whose result differs (numbers within 1e-9, relative) or that the sink
   never held becomes a correction; it is written beside the sink (:func:`write_corrections`:
   ``<sink>_corrections/run_key=<run>/`` in the sink's format, replaced when the run is run again)
   and appended to ``<checkpoint>.corrections.jsonl`` for every face.

The result's columns are read from its schema: the window is a ``struct<start, end>`` column (what
``F.window`` makes), else its first timestamp column is the window's start; the other non-numeric
columns are the group keys; the numeric columns are the values.

Needs pyspark (imported inside the functions).
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Callable

from watermark_ops.core.ledger.corrections import corrections_log_path, files_for_windows, split_late
from watermark_ops.core.ledger.replayed import read_replay_log
from watermark_ops.spark.twin import CannotTwin, Twin

log = logging.getLogger("watermark_ops.spark")

__all__ = ["compute_corrections", "result_shape", "write_corrections"]

_WS, _WE = "_wo_window_start_ms", "_wo_window_end_ms"
_FILE_SINKS = ("parquet", "json", "csv", "orc")
_NUMERIC = ("ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType", "DecimalType")


def result_shape(schema: Any, window_ms: int | None) -> tuple[Any, Any, list[str], list[str]]:
    """``(window start column, window end column, key columns, value columns)`` of a query's result.

    :raises CannotTwin: when the result has no window (no ``struct<start, end>`` and no timestamp column).
    """
    from pyspark.sql import functions as F

    start = end = None
    window_name = None
    for field in schema.fields:
        kind = type(field.dataType).__name__
        if kind == "StructType" and {f.name for f in field.dataType.fields} >= {"start", "end"}:
            window_name = field.name
            start, end = F.col(f"`{field.name}`.start"), F.col(f"`{field.name}`.end")
            break
    if window_name is None:
        for field in schema.fields:
            if type(field.dataType).__name__ in ("TimestampType", "TimestampNTZType") and window_ms:
                window_name = field.name
                start = F.col(f"`{field.name}`")
                end = start + F.expr(f"INTERVAL {window_ms // 1000} SECONDS")
                break
    if window_name is None:
        raise CannotTwin("the query's result has no window column (a struct of start and end, or a timestamp): "
                         "its windows cannot be corrected")
    keys = [f.name for f in schema.fields if f.name != window_name and type(f.dataType).__name__ not in _NUMERIC]
    values = [f.name for f in schema.fields if type(f.dataType).__name__ in _NUMERIC]
    return start, end, keys, values


def _plain(value: Any) -> Any:
    """A collected value as JSON holds it (a decimal as a float, a date or time as ISO text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal values; numbers within 1e-9 of each other, relative."""
    for name, x in a.items():
        y = b.get(name)
        if isinstance(x, float) or isinstance(y, float):
            if x is None or y is None or abs(x - y) > 1e-9 * max(1.0, abs(x), abs(y)):
                return False
        elif x != y:
            return False
    return True


def _by_window(frame: Any, shape: tuple, windows: set[tuple[int, int]]) -> dict[tuple, dict[str, Any]]:
    """``{(start ms, end ms, keys as a tuple): {column: value}}`` of ``frame``'s rows in ``windows``."""
    from pyspark.sql import functions as F

    start, end, keys, values = shape
    starts = sorted({s for s, _ in windows})
    picked = frame.select(F.unix_millis(start).alias(_WS), F.unix_millis(end).alias(_WE),
                          *[F.col(f"`{k}`") for k in keys], *[F.col(f"`{v}`") for v in values]
                          ).where(F.col(_WS).isin(starts))
    found = {}
    for row in picked.collect():
        if (row[_WS], row[_WE]) not in windows:
            continue
        key = (row[_WS], row[_WE], tuple(_plain(row[k]) for k in keys))
        found[key] = {v: _plain(row[v]) for v in values}
    return found


def compute_corrections(spark: Any, checkpoint: str, run_records: list[dict[str, Any]], allowed_ms: int,
                        window_ms: int | None, rerun_twin: Callable[[list[str]], Twin], *, run_tag: str | None,
                        ) -> tuple[list[dict[str, Any]], Any]:
    """The corrections of one run (module docstring, steps 1–5 without the writing).

    :param run_records: the run's replay records (their ``late_rows``).
    :param rerun_twin: files → the job's batch twin over them.
    :return: ``(corrections in the log's shape without "write", the twin's query on the checkpoint)``;
        ``([], None)`` when the run has no recoverable late row.
    :raises CannotTwin: the twin over those files started no query on ``checkpoint``, or its result has no window.
    """
    late = [row for record in run_records for row in record.get("late_rows") or []]
    kept, _ = split_late(late, allowed_ms)
    windows = {(row["window_start_ms"], row["window_end_ms"]) for row in kept}
    if not windows:
        return [], None
    replays, _ = read_replay_log(checkpoint)
    files = files_for_windows(replays, windows)
    twin = rerun_twin(files)
    query = twin.query_for(checkpoint)
    if query is None:
        raise CannotTwin(f"the job's batch twin over the windows' files started no query on {checkpoint}")
    shape = result_shape(query.frame.schema, window_ms)
    keys = shape[2]
    corrected = _by_window(query.frame, shape, windows)
    emitted: dict[tuple, dict[str, Any]] | None = None
    if query.format in _FILE_SINKS and query.path:
        try:
            sink = spark.read.schema(query.frame.schema).format(query.format).load(query.path)
            emitted = _by_window(sink, shape, windows)
        except Exception as exc:  # noqa: BLE001 - an unreadable sink: what it held is unknown
            log.warning("the sink %s could not be read for the emitted values: %s", query.path, exc)
    made = []
    for key, values in sorted(corrected.items(), key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2]))):
        start_ms, end_ms, key_values = key
        named = dict(zip(keys, key_values))
        mine = [row for row in kept if (row["window_start_ms"], row["window_end_ms"]) == (start_ms, end_ms)
                and all(str(row["event"].get(k)) == str(v) for k, v in named.items() if k in row["event"])]
        before = emitted.get(key) if emitted is not None else None
        if not mine or (before is not None and _same(values, before)):
            continue
        made.append({"window_start_ms": start_ms, "window_end_ms": end_ms, "keys": named, "emitted": before,
                     "corrected": values, "late_rows": len(mine), "run": run_tag,
                     "batch_id": max(row["batch_id"] for row in mine)})
    return made, query


def _safe(run_tag: str | None) -> str:
    """A run tag as a folder name (``scheduled__2013-01-02T00:00:00+00:00`` → ``scheduled__2013-01-02T00_00_00_00_00``)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(run_tag or "manual"))


def write_corrections(spark: Any, corrections: list[dict[str, Any]], query: Any, checkpoint: str,
                      path: str | None = None) -> str | None:
    """Write one run's corrections (module docstring, step 5): the table and the log.

    :param query: the twin's query (its sink path and format; the result's column types).
    :param path: the corrections table's folder (default ``<sink>_corrections``).
    :return: the folder written (``.../run_key=<run>``), None when there is nothing to write or no sink path.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    if not corrections:
        return None
    from watermark_ops.spark.recorder import append_json_lines

    written_at = int(time.time() * 1000)
    append_json_lines(corrections_log_path(checkpoint), [{**c, "write": written_at} for c in corrections])
    base = path or (f"{str(query.path).rstrip('/')}_corrections" if query.path else None)
    if base is None:
        return None
    types = {f.name: f.dataType for f in query.frame.schema.fields}
    keys, values = list(corrections[0]["keys"]), list(corrections[0]["corrected"])
    fields = [StructField("window_start_ms", LongType()), StructField("window_end_ms", LongType())]
    fields += [StructField(k, StringType() if type(types[k]).__name__ not in _NUMERIC else types[k]) for k in keys]
    fields += [StructField(v, types[v]) for v in values]
    fields += [StructField(f"emitted_{v}", types[v]) for v in values]
    fields += [StructField("late_rows", LongType()), StructField("run", StringType()), StructField("batch_id", LongType())]
    rows = []
    for c in corrections:
        emitted = c["emitted"] or {}
        rows.append([c["window_start_ms"], c["window_end_ms"], *[_typed(c["keys"][k], types[k]) for k in keys],
                     *[_typed(c["corrected"][v], types[v]) for v in values],
                     *[_typed(emitted.get(v), types[v]) for v in values], c["late_rows"], c["run"], c["batch_id"]])
    frame = spark.createDataFrame(rows, StructType(fields))
    frame = frame.select(F.timestamp_millis("window_start_ms").alias("window_start"),
                         F.timestamp_millis("window_end_ms").alias("window_end"), "*").drop("window_start_ms",
                                                                                             "window_end_ms")
    folder = f"{base}/run_key={_safe(corrections[0]['run'])}"
    fmt = query.format if query.format in _FILE_SINKS else "parquet"
    frame.coalesce(1).write.mode("overwrite").format(fmt).save(folder)
    return folder


def _typed(value: Any, data_type: Any) -> Any:
    """A JSON value back in the column's Python type (an integer column's value as int)."""
    if value is None:
        return None
    kind = type(data_type).__name__
    if kind in ("ByteType", "ShortType", "IntegerType", "LongType"):
        return int(value)
    if kind in ("FloatType", "DoubleType"):
        return float(value)
    if kind == "DecimalType":
        from decimal import Decimal

        return Decimal(str(value))
    return str(value) if kind not in _NUMERIC else value
