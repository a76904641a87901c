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
from typing import Any

from watermark_ops.core.ledger.corrections import corrections_log_path, split_late
from watermark_ops.spark.twin import CannotTwin

log = logging.getLogger("watermark_ops.spark")

__all__ = ["corrections_from", "result_shape", "window_parts", "window_range", "write_corrections"]

_WS, _WE = "_wo_window_start_ms", "_wo_window_end_ms"
# The twin ledger's row shape (watermark_ops.spark.twin_ledger), shared so both go in one Spark job.
_KIND, _FILE, _REASON, _START, _ROW, _ROWS = ("_wo_kind", "_wo_file", "_wo_reason", "_wo_event_us", "_wo_event",
                                              "_wo_rows")
_FILE_SINKS = ("parquet", "json", "csv", "orc")
_NUMERIC = ("ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType", "DecimalType")


def _result_columns(schema: Any, window_ms: int | None) -> tuple[str, bool, list[str], list[str]] | None:
    """``(window column, is a struct<start, end>, key columns, value columns)`` of a query's result
    (module docstring), None when it has no window."""
    name = is_struct = None
    for field in schema.fields:
        kind = type(field.dataType).__name__
        if kind == "StructType" and {f.name for f in field.dataType.fields} >= {"start", "end"}:
            name, is_struct = field.name, True
            break
    if name is None and window_ms:
        name = next((f.name for f in schema.fields
                     if type(f.dataType).__name__ in ("TimestampType", "TimestampNTZType")), None)
        is_struct = False
    if name is None:
        return None
    keys = [f.name for f in schema.fields if f.name != name and type(f.dataType).__name__ not in _NUMERIC]
    values = [f.name for f in schema.fields if type(f.dataType).__name__ in _NUMERIC]
    return name, is_struct, keys, values


def result_shape(schema: Any, window_ms: int | None) -> tuple[Any, Any, list[str], list[str]]:
    """``(window start column, window end column, key columns, value columns)`` of a query's result.

    :raises CannotTwin: when the result has no window (no ``struct<start, end>`` and no timestamp column).
    """
    from pyspark.sql import functions as F

    columns = _result_columns(schema, window_ms)
    if columns is None:
        raise CannotTwin("the query's result has no window column (a struct of start and end, or a timestamp): "
                         "its windows cannot be corrected")
    name, is_struct, keys, values = columns
    if is_struct:
        start, end = F.col(f"`{name}`.start"), F.col(f"`{name}`.end")
    else:
        start = F.col(f"`{name}`")
        end = start + F.expr(f"INTERVAL {window_ms // 1000} SECONDS")
    return start, end, keys, values


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


def window_range(plans: list[Any], allowed_ms: int, window_ms: int) -> tuple[int, int]:
    """``[lo, hi)`` (epoch ms UTC): every window a run's recoverable late rows can fall in. A row of
    batch N is recoverable when its window ends in ``(late watermark − allowed, late watermark]``."""
    return (min(p.late_watermark_ms for p in plans) - allowed_ms - window_ms, max(p.late_watermark_ms for p in plans))


def window_parts(spark: Any, query: Any, window_ms: int | None, lo: int,
                 hi: int) -> tuple[list[Any], tuple, list[dict[str, Any]]]:
    """The frames that bring back, in the run's one Spark job, the query's result computed again
    (tag ``c``) and what its sink holds (tag ``m``) for the windows starting in ``[lo, hi)``: rows of
    the twin ledger's shape (``_wo_kind``, ``_wo_event_us`` = window start ms, ``_wo_event`` = the
    window, keys and values as JSON); the result's shape (:func:`result_shape`); and the ``m`` rows
    when the driver read them itself (:func:`emitted_here`: then no frame of tag ``m``), else ``[]``.

    :raises CannotTwin: the result has no window.
    """
    from pyspark.sql import functions as F

    shape = result_shape(query.frame.schema, window_ms)
    start, end, keys, values = shape

    def part(frame: Any, tag: str) -> Any:
        ws = F.unix_millis(start)
        return frame.where((ws >= F.lit(lo)) & (ws < F.lit(hi))).select(
            F.lit(tag).alias(_KIND), F.lit(None).cast("string").alias(_FILE), F.lit(None).cast("string").alias(_REASON),
            ws.alias(_START), F.to_json(F.struct(ws.alias(_WS), F.unix_millis(end).alias(_WE),
                                                 *[F.col(f"`{c}`") for c in keys + values])).alias(_ROW),
            F.lit(None).cast("long").alias(_ROWS))

    parts: list[Any] = [part(query.frame, "c")]
    here = emitted_here(query, window_ms, lo, hi)
    if here is None and query.format in _FILE_SINKS and query.path:
        try:
            sink = spark.read.schema(query.frame.schema).format(query.format).load(query.path)
            sink.columns  # noqa: B018 - a sink not yet written fails here
            parts.append(part(sink, "m"))
        except Exception as exc:  # noqa: BLE001 - an unreadable sink: what it held is unknown
            log.warning("the sink %s could not be read for the emitted values: %s", query.path, exc)
    return parts, shape, here or []


def emitted_here(query: Any, window_ms: int | None, lo: int, hi: int) -> list[dict[str, Any]] | None:
    """What a Parquet file sink holds for the windows starting in ``[lo, hi)`` (epoch ms UTC), read
    by the driver: the files the sink's own log names (:mod:`watermark_ops.core.sink_log`, as
    Spark's batch read of a sink does) through pyarrow, no Spark job. Rows of :func:`window_parts`'s
    ``m`` tag (dicts).

    :return: None where Spark reads it instead: another format, a partitioned sink (its keys live in
        folder names), a key that is not a string or boolean, a decimal value, a sink log with a
        problem (Spark's read then reports it), or no pyarrow.
    """
    import json

    schema = query.frame.schema
    columns = _result_columns(schema, window_ms)
    if query.format != "parquet" or not query.path or columns is None:
        return None
    name, is_struct, keys, values = columns
    kinds = {f.name: type(f.dataType).__name__ for f in schema.fields}
    if any(kinds[k] not in ("StringType", "BooleanType") for k in keys) or "DecimalType" in kinds.values():
        return None
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.dataset as ds
    except ImportError:
        return None
    from watermark_ops.core.sink_log import read_sink_log
    from watermark_ops.core.storage import open_storage

    storage, folder = open_storage(query.path)
    listed = read_sink_log(storage, folder)
    if listed.problems:
        return None
    fs, paths = _arrow_files(listed.files)
    if any("=" in p.rsplit("/", 1)[0].rsplit("/", 1)[-1] for p in paths):  # a partition folder (col=value)
        return None
    if not paths:
        return []
    start = pc.field(name, "start") if is_struct else pc.field(name)
    stamp = pa.timestamp("ms", tz="UTC")
    low, high = pa.scalar(lo, stamp), pa.scalar(hi, stamp)
    table = ds.dataset(paths, format="parquet", filesystem=fs).to_table(
        columns=[name] + keys + values, filter=(start.cast(stamp) >= low) & (start.cast(stamp) < high))

    def epoch_ms(column: Any) -> list[int]:  # INT96 (ns) or TIMESTAMP_MICROS as Spark writes them: UTC
        return pc.cast(pc.cast(column, stamp, safe=False), pa.int64()).to_pylist()

    window_column = table.column(name)
    if is_struct:
        starts = epoch_ms(pc.struct_field(window_column, [window_column.type.get_field_index("start")]))
        ends = epoch_ms(pc.struct_field(window_column, [window_column.type.get_field_index("end")]))
    else:
        starts = epoch_ms(window_column)
        ends = [s + int(window_ms or 0) for s in starts]
    rest = table.select(keys + values).to_pylist()
    return [{_KIND: "m", _FILE: None, _REASON: None, _START: begin, _ROWS: None,
             _ROW: json.dumps({_WS: begin, _WE: end, **row})} for begin, end, row in zip(starts, ends, rest)]


def _arrow_files(uris: tuple[str, ...]) -> tuple[Any, list[str]]:
    """``(filesystem for pyarrow or None, paths)`` of a file sink's file URIs
    (:func:`watermark_ops.core.storage.uri_location`: local paths, else fsspec's filesystem of the first)."""
    from watermark_ops.core.storage import uri_location

    locations = [uri_location(u) for u in uris]
    if not any("://" in location for location in locations):
        return None, locations
    import fsspec

    located = [fsspec.core.url_to_fs(location) for location in locations]
    return located[0][0], [path for _, path in located]


def _by_window(rows: list[Any], keys: list[str], values: list[str], tag: str) -> dict[tuple, dict[str, Any]]:
    """``{(start ms, end ms, keys as a tuple): {column: value}}`` of the collected rows tagged ``tag``."""
    import json

    found = {}
    for row in rows:
        if row[_KIND] != tag:
            continue
        window = json.loads(row[_ROW])
        found[(window[_WS], window[_WE], tuple(window.get(k) for k in keys))] = {v: window.get(v) for v in values}
    return found


def corrections_from(rows: list[Any], shape: tuple, run_records: list[dict[str, Any]], allowed_ms: int,
                     run_tag: str | None) -> list[dict[str, Any]]:
    """The run's corrections (module docstring, step 5) from the rows :func:`window_parts` brought back.

    :param run_records: the run's replay records (their ``late_rows``).
    :return: corrections in the log's shape, without ``write``, by window, then keys.
    """
    _, _, keys, values = shape
    late = [row for record in run_records for row in record.get("late_rows") or []]
    kept, _ = split_late(late, allowed_ms)
    windows = {(row["window_start_ms"], row["window_end_ms"]) for row in kept}
    if not windows:
        return []
    corrected = _by_window(rows, keys, values, "c")
    emitted = _by_window(rows, keys, values, "m") if any(r[_KIND] == "m" for r in rows) else None
    made = []
    for key, found in sorted(corrected.items(), key=lambda kv: (kv[0][0], kv[0][1], str(kv[0][2]))):
        start_ms, end_ms, key_values = key
        if (start_ms, end_ms) not in windows:
            continue
        named = dict(zip(keys, key_values))
        mine = [row for row in kept if (row["window_start_ms"], row["window_end_ms"]) == (start_ms, end_ms)
                and all(str(row["event"].get(k)) == str(v) for k, v in named.items() if k in row["event"])]
        before = emitted.get(key) if emitted is not None else None
        if not mine or (before is not None and _same(found, before)):
            continue
        made.append({"window_start_ms": start_ms, "window_end_ms": end_ms, "keys": named, "emitted": before,
                     "corrected": found, "late_rows": len(mine), "run": run_tag,
                     "batch_id": max(row["batch_id"] for row in mine)})
    return made


def _safe(run_tag: str | None) -> str:
    """A run tag as a folder name (``scheduled__2013-01-02T00:00:00+00:00`` → ``scheduled__2013-01-02T00_00_00_00_00``)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(run_tag or "manual"))


def write_corrections(spark: Any, corrections: list[dict[str, Any]], query: Any, checkpoint: str,
                      path: str | None = None) -> str | None:
    """Write one run's corrections (module docstring, step 5): the log, then the table.

    The table's columns: ``window_start``, ``window_end`` (timestamps), the keys, the corrected
    values under the job's own names, ``emitted_<name>`` (null: never emitted), ``late_rows``, ``run``,
    ``batch_id``; its folder ``<path>/run_key=<run>/`` is replaced when the run is written again. A
    Parquet or JSON sink's table is written by the driver itself (pyarrow, fsspec: one small file,
    no Spark job); other formats, or a driver without pyarrow, through Spark.

    :param query: the twin's query (its sink path and format; the result's column types).
    :param path: the corrections table's folder (default ``<sink>_corrections``).
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
    if fmt in ("parquet", "json") and "DecimalType" not in types.values():
        try:
            _write_here(corrections, types, folder, fmt)
            return folder
        except ImportError:  # no pyarrow where the driver runs: Spark writes it
            pass
    _write_spark(spark, corrections, query, folder, fmt)
    return folder


def _columns(corrections: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    return list(corrections[0]["keys"]), list(corrections[0]["corrected"])


def _write_here(corrections: list[dict[str, Any]], types: dict[str, str], folder: str, fmt: str) -> None:
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
        data = {"window_start": pa.array([c["window_start_ms"] for c in corrections], stamp),
                "window_end": pa.array([c["window_end_ms"] for c in corrections], stamp)}
        for k in keys:
            data[k] = pa.array([c["keys"][k] for c in corrections], arrow.get(types.get(k), pa.string()))
        for v in values:
            data[v] = pa.array([c["corrected"][v] for c in corrections], arrow[types[v]])
        for v in values:
            data[f"emitted_{v}"] = pa.array([(c["emitted"] or {}).get(v) for c in corrections], arrow[types[v]])
        data["late_rows"] = pa.array([c["late_rows"] for c in corrections], pa.int64())
        data["run"] = pa.array([c["run"] for c in corrections], pa.string())
        data["batch_id"] = pa.array([c["batch_id"] for c in corrections], pa.int64())
        with fs.open(f"{where}/part-00000.parquet", "wb") as out:
            pq.write_table(pa.table(data), out)
    else:
        from watermark_ops.core.times import iso_utc

        with fs.open(f"{where}/part-00000.json", "w") as out:
            for c in corrections:
                row = {"window_start": iso_utc(c["window_start_ms"]), "window_end": iso_utc(c["window_end_ms"]),
                       **c["keys"], **c["corrected"], **{f"emitted_{v}": (c["emitted"] or {}).get(v) for v in values},
                       "late_rows": c["late_rows"], "run": c["run"], "batch_id": c["batch_id"]}
                out.write(json.dumps(row, default=str) + "\n")
    with fs.open(f"{where}/_SUCCESS", "wb"):
        pass


def _write_spark(spark: Any, corrections: list[dict[str, Any]], query: Any, folder: str, fmt: str) -> None:
    """The table written by Spark (any filesystem Spark reaches, any file format)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    types = {f.name: f.dataType for f in query.frame.schema.fields}
    keys, values = _columns(corrections)
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
