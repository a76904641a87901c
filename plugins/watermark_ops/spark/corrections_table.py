"""The corrections table beside a job's sink, and the corrections log every face reads.

:func:`write_corrections` appends a run's corrections to ``<checkpoint>.corrections.jsonl``
(:mod:`watermark_ops.core.ledger.corrections` has the record's shape) and writes them as a table in
the sink's format, ``<sink>_corrections/run_key=<run>/``, replaced when the run is run again. Its
columns: the window's start and end as timestamps (the job's own column names when its result splits
them, else ``window_start``/``window_end``), the keys, the corrected values under the job's own names,
``emitted_<name>`` (null: never emitted), ``late_rows``, ``run``, ``batch_id``; a session window's
table also has ``correction``: ``"retraction"`` for each session a correction retracts (its values
as published) before ``"replacement"`` for the session that replaces them, so a consumer that applies
the rows in order (delete the retracted, insert the replacement) holds the sessions over every
landed row.

Needs pyspark for formats other than Parquet and JSON (imported inside the functions).
"""

from __future__ import annotations

import re
import time
from typing import Any

from watermark_ops.core.ledger.corrections import corrections_log_path

__all__ = ["table_rows", "write_corrections"]

_FILE_SINKS = ("parquet", "json", "csv", "orc")
_NUMERIC = ("ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType", "DecimalType")


def _safe(run_tag: str | None) -> str:
    """A run tag as a folder name (``scheduled__2013-01-02T00:00:00+00:00`` → ``scheduled__2013-01-02T00_00_00_00_00``)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(run_tag or "manual"))


def write_corrections(spark: Any, corrections: list[dict[str, Any]], query: Any, checkpoint: str,
                      path: str | None = None, names: tuple[str, str] = ("window_start", "window_end")) -> str | None:
    """Write one run's corrections (module docstring, step 5): the log, then the table.

    The table's columns are the module docstring's; its folder ``<path>/run_key=<run>/`` is replaced
    when the run is written again. A Parquet or JSON sink's table is written by the driver itself
    (pyarrow, fsspec: one small file, no Spark job); other formats, or a driver without pyarrow,
    through Spark.

    :param query: the twin's query (its sink path and format; the result's column types).
    :param path: the corrections table's folder (default ``<sink>_corrections``).
    :param names: the table's window start and end columns
        (:attr:`watermark_ops.spark.corrections.ResultShape.table_names`).
    :return: the folder written (``.../run_key=<run>``), None when there is nothing to write or no sink path.
    """
    if not corrections:
        return None
    from watermark_ops.spark.recorder import append_json_lines

    written_at = int(time.time() * 1000)
    append_json_lines(corrections_log_path(checkpoint), [{**c, "write": written_at} for c in corrections])
    base = path or (f"{str(query.path).rstrip('/')}_corrections" if query.path else None)
    if base is None:
        return None
    folder = f"{base}/run_key={_safe(corrections[0]['run'])}"
    types = {f.name: type(f.dataType).__name__ for f in query.frame.schema.fields}
    fmt = query.format if query.format in _FILE_SINKS else "parquet"
    rows = table_rows(corrections)
    if fmt in ("parquet", "json") and "DecimalType" not in types.values():
        try:
            _write_here(rows, types, folder, fmt, names)
            return folder
        except ImportError:  # no pyarrow where the driver runs: Spark writes it
            pass
    _write_spark(spark, rows, query, folder, fmt, names)
    return folder


def table_rows(corrections: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows of corrections, in order: a session correction's retractions (``correction``
    ``"retraction"``, the retracted session's window and values, ``emitted`` its values) before its
    replacement (``"replacement"``); a time window's correction is one row with no ``correction``.

    :return: ``[{"window_start_ms", "window_end_ms", "keys", "corrected", "emitted", "late_rows", "run",
        "batch_id", "correction": str | None}]``.
    """
    rows = []
    for c in corrections:
        common = {"keys": c["keys"], "run": c["run"], "batch_id": c["batch_id"]}
        session = c.get("window_kind") == "session"
        if session:
            for gone in c.get("retracts") or ():
                rows.append({**common, "window_start_ms": gone["window_start_ms"], "window_end_ms": gone["window_end_ms"],
                             "corrected": gone["values"], "emitted": gone["values"], "late_rows": 0,
                             "correction": "retraction"})
        rows.append({**common, "window_start_ms": c["window_start_ms"], "window_end_ms": c["window_end_ms"],
                     "corrected": c["corrected"], "emitted": c["emitted"], "late_rows": c["late_rows"],
                     "correction": "replacement" if session else None})
    return rows


def _columns(corrections: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    return list(corrections[0]["keys"]), list(corrections[0]["corrected"])


def _write_here(corrections: list[dict[str, Any]], types: dict[str, str], folder: str, fmt: str,
                names: tuple[str, str]) -> None:
    """The table as one file written by the driver (pyarrow for Parquet, JSON lines as Spark writes them)."""
    import json

    import fsspec

    keys, values = _columns(corrections)
    fs, where = fsspec.core.url_to_fs(folder)
    if fs.exists(where):
        fs.rm(where, recursive=True)  # this run's own earlier corrections: replaced, never added to
    fs.makedirs(where, exist_ok=True)
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        arrow = {"LongType": pa.int64(), "IntegerType": pa.int32(), "ShortType": pa.int16(), "ByteType": pa.int8(),
                 "DoubleType": pa.float64(), "FloatType": pa.float32()}
        stamp = pa.timestamp("ms", tz="UTC")
        data = {names[0]: pa.array([c["window_start_ms"] for c in corrections], stamp),
                names[1]: pa.array([c["window_end_ms"] for c in corrections], stamp)}
        for k in keys:
            data[k] = pa.array([c["keys"][k] for c in corrections], arrow.get(types.get(k), pa.string()))
        for v in values:
            data[v] = pa.array([c["corrected"][v] for c in corrections], arrow[types[v]])
        for v in values:
            data[f"emitted_{v}"] = pa.array([(c["emitted"] or {}).get(v) for c in corrections], arrow[types[v]])
        data["late_rows"] = pa.array([c["late_rows"] for c in corrections], pa.int64())
        data["run"] = pa.array([c["run"] for c in corrections], pa.string())
        data["batch_id"] = pa.array([c["batch_id"] for c in corrections], pa.int64())
        if any(c["correction"] for c in corrections):
            data["correction"] = pa.array([c["correction"] for c in corrections], pa.string())
        with fs.open(f"{where}/part-00000.parquet", "wb") as out:
            pq.write_table(pa.table(data), out)
    else:
        from watermark_ops.core.times import iso_utc

        with fs.open(f"{where}/part-00000.json", "w") as out:
            for c in corrections:
                row = {names[0]: iso_utc(c["window_start_ms"]), names[1]: iso_utc(c["window_end_ms"]),
                       **c["keys"], **c["corrected"], **{f"emitted_{v}": (c["emitted"] or {}).get(v) for v in values},
                       "late_rows": c["late_rows"], "run": c["run"], "batch_id": c["batch_id"],
                       **({"correction": c["correction"]} if c["correction"] else {})}
                out.write(json.dumps(row, default=str) + "\n")
    with fs.open(f"{where}/_SUCCESS", "wb"):
        pass


def _write_spark(spark: Any, corrections: list[dict[str, Any]], query: Any, folder: str, fmt: str,
                 names: tuple[str, str]) -> None:
    """The table written by Spark (any filesystem Spark reaches, any file format)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    types = {f.name: f.dataType for f in query.frame.schema.fields}
    keys, values = _columns(corrections)
    fields = [StructField("window_start_ms", LongType()), StructField("window_end_ms", LongType())]
    fields += [StructField(k, StringType() if type(types[k]).__name__ not in _NUMERIC else types[k]) for k in keys]
    fields += [StructField(v, types[v]) for v in values]
    fields += [StructField(f"emitted_{v}", types[v]) for v in values]
    fields += [StructField("late_rows", LongType()), StructField("run", StringType()), StructField("batch_id", LongType()),
               StructField("correction", StringType())]
    rows = []
    for c in corrections:
        emitted = c["emitted"] or {}
        rows.append([c["window_start_ms"], c["window_end_ms"], *[_typed(c["keys"][k], types[k]) for k in keys],
                     *[_typed(c["corrected"][v], types[v]) for v in values],
                     *[_typed(emitted.get(v), types[v]) for v in values], c["late_rows"], c["run"], c["batch_id"],
                     c["correction"]])
    frame = spark.createDataFrame(rows, StructType(fields))
    frame = frame.select(F.timestamp_millis("window_start_ms").alias(names[0]),
                         F.timestamp_millis("window_end_ms").alias(names[1]), "*").drop("window_start_ms",
                                                                                         "window_end_ms")
    if not any(c["correction"] for c in corrections):
        frame = frame.drop("correction")
    frame.coalesce(1).write.mode("overwrite").format(fmt).save(folder)


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
