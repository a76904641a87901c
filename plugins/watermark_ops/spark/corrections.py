"""Corrections: the windows of a run's recoverable late rows computed again from all their rows.

After a run's late rows are known (:mod:`watermark_ops.spark.twin_ledger`), with an allowed lateness
(:mod:`watermark_ops.core.ledger.corrections` has the meaning and the record's shape):

1. the windows of the run's recoverable late rows;
2. the files whose rows fall in them (the replay log names each batch's files and event times);
3. the job's batch twin over those files (:func:`watermark_ops.spark.twin.run_twin`): the query's own
   result, every window with every one of its rows, late ones included;
4. what the sink holds for those windows (a batch read of the job's file sink with the result's schema);
5. every group of those windows whose result differs (numbers within 1e-9, relative) or that the sink
   never held becomes a correction; it is written beside the sink
   (:func:`watermark_ops.spark.corrections_table.write_corrections`: ``<sink>_corrections/run_key=<run>/``
   in the sink's format, replaced when the run is run again) and appended to
   ``<checkpoint>.corrections.jsonl`` for every face.

Every window Spark has: a tumbling window's late row lost its one window; a sliding window's row is
judged per window, so each window it was dropped from (``windows_dropped``) is corrected; a session
window's corrections are the sessions over every landed row that hold a recoverable late row, each
retracting the published sessions it replaces (:mod:`watermark_ops.core.ledger.sessions`).

The result's columns (:func:`result_shape`): the window is a ``struct<start, end>`` column (what
``F.window`` and ``F.session_window`` make), else the columns the result's plan derives from the
window's start and end under any name (``window.start AS window_start``:
:attr:`watermark_ops.core.state.plan.QueryShape.window_columns`), else its first timestamp column is
the window's start; the other non-numeric columns are the group keys; the numeric ones the values.

Needs pyspark (imported inside the functions).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from watermark_ops.core.ledger.corrections import recoverable
from watermark_ops.spark.corrections_table import write_corrections
from watermark_ops.spark.twin import CannotTwin

log = logging.getLogger("watermark_ops.spark")

__all__ = ["ResultShape", "corrections_from", "result_shape", "window_parts", "window_range", "write_corrections"]

_WS, _WE = "_wo_window_start_ms", "_wo_window_end_ms"
# The twin ledger's row shape (watermark_ops.spark.twin_ledger), shared so both go in one Spark job.
_KIND, _FILE, _REASON, _START, _ROW, _ROWS = ("_wo_kind", "_wo_file", "_wo_reason", "_wo_event_us", "_wo_event",
                                              "_wo_rows")
_FILE_SINKS = ("parquet", "json", "csv", "orc")
_NUMERIC = ("ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType", "DecimalType")


@dataclass(frozen=True)
class ResultShape:
    """Where a query's result keeps its window, its group keys and its values (module docstring).

    :ivar window: the ``struct<start, end>`` column, or the column holding the window's start.
    :ivar is_struct: ``window`` is a struct. :ivar end: the column holding the window's end (split
        columns), None when the end is the struct's or derived (``start + window_ms``).
    :ivar keys: / values: the group key columns and the value columns, the job's names.
    :ivar window_ms: a time window's duration (ms), None for a session window or unknown.
    :ivar session: a session window's result (corrections retract the sessions they replace).
    """

    window: str
    is_struct: bool
    end: str | None
    keys: list[str]
    values: list[str]
    window_ms: int | None = None
    session: bool = False

    def columns(self) -> tuple[Any, Any]:
        """``(start, end)`` as Spark columns (timestamps)."""
        from pyspark.sql import functions as F

        if self.is_struct:
            return F.col(f"`{self.window}`.start"), F.col(f"`{self.window}`.end")
        start = F.col(f"`{self.window}`")
        if self.end is not None:
            return start, F.col(f"`{self.end}`")
        return start, start + F.expr(f"INTERVAL {int(self.window_ms or 0) // 1000} SECONDS")

    @property
    def table_names(self) -> tuple[str, str]:
        """The corrections table's window columns: the job's own split names, else ``window_start``/``window_end``."""
        if not self.is_struct and self.end is not None:
            return self.window, self.end
        return "window_start", "window_end"


def _plan_columns(frame: Any) -> dict[str, str | None]:
    """The result's columns derived from its window's start and end, read from its analyzed plan
    (empty when the plan cannot be read)."""
    from watermark_ops.core.state.plan import parse_analyzed_plan
    from watermark_ops.spark.restart import analyzed_plan_text

    try:
        return dict(parse_analyzed_plan(analyzed_plan_text(frame)).window_columns)
    except Exception as exc:  # noqa: BLE001 - the schema's reading still stands
        log.warning("the result's plan could not be read for its window columns: %s", exc)
        return {}


def _result_columns(schema: Any, window_ms: int | None, derived: dict[str, str | None] | None = None,
                    session: bool = False) -> ResultShape | None:
    """The :class:`ResultShape` of a result's ``schema`` (``derived``: :func:`_plan_columns`), None
    when it has no window."""
    names = {f.name for f in schema.fields}
    name = end = None
    is_struct = False
    for field in schema.fields:
        kind = type(field.dataType).__name__
        if kind == "StructType" and {f.name for f in field.dataType.fields} >= {"start", "end"}:
            name, is_struct = field.name, True
            break
    if name is None and derived and derived.get("start") in names:
        name = derived["start"]
        end = derived.get("end") if derived.get("end") in names else None
    if name is None and (window_ms or session) and derived and derived.get("end") in names:
        return None  # only the end is kept: the window's start is not in the result
    if name is None and window_ms:
        name = next((f.name for f in schema.fields
                     if type(f.dataType).__name__ in ("TimestampType", "TimestampNTZType")), None)
    if name is None or (not is_struct and end is None and not window_ms):
        return None
    window = {name, end}
    keys = [f.name for f in schema.fields if f.name not in window and type(f.dataType).__name__ not in _NUMERIC]
    values = [f.name for f in schema.fields if f.name not in window and type(f.dataType).__name__ in _NUMERIC]
    return ResultShape(name, is_struct, end, keys, values, window_ms, session)


def result_shape(frame: Any, rule: Any) -> ResultShape:
    """The :class:`ResultShape` of a query's result frame under its late rule (``window_ms``, session).

    :raises CannotTwin: when the result has no window (no ``struct<start, end>``, no column derived
        from the window's start, no timestamp column for a time window).
    """
    session = getattr(rule, "kind", None) == "session"
    window_ms = getattr(rule, "window_ms", None)
    shape = _result_columns(frame.schema, window_ms, _plan_columns(frame), session)
    if shape is None:
        raise CannotTwin("the query's result has no window column (a struct of start and end, the window's start "
                         "under any name, or a timestamp): its windows cannot be corrected")
    return shape


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


#: The furthest a session window's end can be from the start of the sessions read (epoch ms): no bound.
NO_BOUND_MS = 2 ** 62


def window_range(plans: list[Any], allowed_ms: int, extent_ms: int, session: bool = False) -> tuple[int, int, int]:
    """``(lo, hi, sink_hi)`` (epoch ms UTC): the windows a run's recoverable late rows can fall in
    start in ``[lo, hi)``; the sink's windows read start in ``[lo, sink_hi)``. A row of batch N is
    recoverable when its window ends in ``(late watermark − allowed, late watermark]``, so a time
    window of ``extent_ms`` starts after ``min watermark − allowed − extent``. A session holding such
    a row can begin long before it: the sessions read start at most ``2 × allowed + gap`` before
    the lowest late watermark (a longer one is named, not corrected:
    :func:`watermark_ops.core.ledger.sessions.session_corrections`), and every published session
    after that is read (a session can overlap one that starts after the watermark)."""
    low = min(p.late_watermark_ms for p in plans)
    high = max(p.late_watermark_ms for p in plans)
    if session:
        return low - 2 * allowed_ms - extent_ms, high, NO_BOUND_MS
    return low - allowed_ms - extent_ms, high, high


def window_parts(spark: Any, query: Any, rule: Any, lo: int, hi: int,
                 sink_hi: int | None = None) -> tuple[list[Any], ResultShape, list[dict[str, Any]]]:
    """The frames that bring back, in the run's one Spark job, the query's result computed again
    (tag ``c``, windows starting in ``[lo, hi)``) and what its sink holds (tag ``m``, windows
    starting in ``[lo, sink_hi)``, default ``hi``): rows of the twin ledger's shape (``_wo_kind``,
    ``_wo_event_us`` = window start ms, ``_wo_event`` = the window, keys and values as JSON); the
    result's shape (:func:`result_shape`); and the ``m`` rows when the driver read them itself
    (:func:`emitted_here`: then no frame of tag ``m``), else ``[]``.

    :param rule: the query's late rule (:class:`watermark_ops.core.ledger.rule.LateRule`).
    :raises CannotTwin: the result has no window.
    """
    from pyspark.sql import functions as F

    shape = result_shape(query.frame, rule)
    sink_hi = hi if sink_hi is None else sink_hi

    def part(frame: Any, tag: str, top: int | None) -> Any:
        start, end = shape.columns()
        ws = F.unix_millis(start)
        if top is not None:
            frame = frame.where((ws >= F.lit(lo)) & (ws < F.lit(top)))
        return frame.select(
            F.lit(tag).alias(_KIND), F.lit(None).cast("string").alias(_FILE), F.lit(None).cast("string").alias(_REASON),
            ws.alias(_START), F.to_json(F.struct(ws.alias(_WS), F.unix_millis(end).alias(_WE),
                                                 *[F.col(f"`{c}`") for c in shape.keys + shape.values])).alias(_ROW),
            F.lit(None).cast("long").alias(_ROWS))

    # A session window's result is not filtered in Spark: the optimizer pushes a filter on the
    # session_window grouping key below the aggregation, onto each row's one-row session before
    # the merge, which cuts sessions short (a row starting after the bound is dropped from the
    # session it extends). The twin read only the files of the span; the sessions are chosen after.
    parts: list[Any] = [part(query.frame, "c", None if shape.session else hi)]
    here = emitted_here(query, shape.window_ms, lo, sink_hi, shape)
    if here is None and query.format in _FILE_SINKS and query.path:
        try:
            sink = spark.read.schema(query.frame.schema).format(query.format).load(query.path)
            sink.columns  # noqa: B018 - a sink not yet written fails here
            parts.append(part(sink, "m", sink_hi))
        except Exception as exc:  # noqa: BLE001 - an unreadable sink: what it held is unknown
            log.warning("the sink %s could not be read for the emitted values: %s", query.path, exc)
    return parts, shape, here or []


def emitted_here(query: Any, window_ms: int | None, lo: int, hi: int,
                 shape: ResultShape | None = None) -> list[dict[str, Any]] | None:
    """What a Parquet file sink holds for the windows starting in ``[lo, hi)`` (epoch ms UTC), read
    by the driver: the files the sink's own log names (:mod:`watermark_ops.core.sink_log`, as
    Spark's batch read of a sink does) through pyarrow, no Spark job. Rows of :func:`window_parts`'s
    ``m`` tag (dicts).

    :param shape: the result's shape (default: read from the query's schema and plan).
    :return: None where Spark reads it instead: another format, a partitioned sink (its keys live in
        folder names), a key that is not a string or boolean, a decimal value, a sink log with a
        problem (Spark's read then reports it), or no pyarrow.
    """
    import json

    schema = query.frame.schema
    if shape is None:
        shape = _result_columns(schema, window_ms, _plan_columns(query.frame)) if query.format == "parquet" else None
    if query.format != "parquet" or not query.path or shape is None:
        return None
    name, is_struct, keys, values = shape.window, shape.is_struct, shape.keys, shape.values
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
    low, high = pa.scalar(lo, stamp), pa.scalar(min(hi, 2 ** 53), stamp)
    wanted = [name] + ([shape.end] if shape.end else []) + keys + values
    table = ds.dataset(paths, format="parquet", filesystem=fs).to_table(
        columns=wanted, filter=(start.cast(stamp) >= low) & (start.cast(stamp) < high))

    def epoch_ms(column: Any) -> list[int]:  # INT96 (ns) or TIMESTAMP_MICROS as Spark writes them: UTC
        return pc.cast(pc.cast(column, stamp, safe=False), pa.int64()).to_pylist()

    window_column = table.column(name)
    if is_struct:
        starts = epoch_ms(pc.struct_field(window_column, [window_column.type.get_field_index("start")]))
        ends = epoch_ms(pc.struct_field(window_column, [window_column.type.get_field_index("end")]))
    else:
        starts = epoch_ms(window_column)
        ends = epoch_ms(table.column(shape.end)) if shape.end else [s + int(window_ms or 0) for s in starts]
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


def _recoverable_windows(row: dict[str, Any], allowed_ms: int) -> list[tuple[int, int]]:
    """The windows a late row was dropped from that an allowed lateness recovers (each window ended
    less than ``allowed_ms`` before the watermark that dropped the row)."""
    dropped = [(w["window_start_ms"], w["window_end_ms"]) for w in row.get("windows_dropped") or ()]
    dropped = dropped or [(row.get("window_start_ms"), row.get("window_end_ms"))]
    watermark = int(row["watermark_ms"])
    return [(s, e) for s, e in dropped if e is not None and recoverable(watermark - e, e, allowed_ms)]


def corrections_from(rows: list[Any], shape: ResultShape, run_records: list[dict[str, Any]], allowed_ms: int,
                     run_tag: str | None, earlier: list[dict[str, Any]] | None = None,
                     closed_ms: int | None = None, last_batch_id: int | None = None) -> list[dict[str, Any]]:
    """The run's corrections (module docstring, step 5) from the rows :func:`window_parts` brought back.

    :param run_records: the run's replay records (their ``late_rows``).
    :param earlier: the checkpoint's corrections so far (:func:`watermark_ops.core.ledger.corrections.read_corrections`):
        a session window's corrections also retract the sessions earlier runs published.
    :param closed_ms: the run's last watermark (epoch ms UTC): a session window's sessions that end at
        or before it are written, and are corrected when Spark wrote them otherwise.
    :param last_batch_id: the run's last batch id (a session correction without a late row of its own).
    :return: corrections in the log's shape, without ``write``, by window, then keys.
    """
    keys, values = shape.keys, shape.values
    late = [row for record in run_records for row in record.get("late_rows") or []]
    if shape.session:
        return _session_corrections(rows, shape, late, allowed_ms, run_tag, earlier or [], closed_ms, last_batch_id)
    windows = {w for row in late for w in _recoverable_windows(row, allowed_ms)}
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
        mine = [row for row in late if (start_ms, end_ms) in _recoverable_windows(row, allowed_ms)
                and all(str(row["event"].get(k)) == str(v) for k, v in named.items() if k in row["event"])]
        before = emitted.get(key) if emitted is not None else None
        if not mine or (before is not None and _same(found, before)):
            continue
        made.append({"window_start_ms": start_ms, "window_end_ms": end_ms, "keys": named, "emitted": before,
                     "corrected": found, "late_rows": len(mine), "run": run_tag,
                     "batch_id": max(row["batch_id"] for row in mine)})
    return made


def _session_corrections(rows: list[Any], shape: ResultShape, late: list[dict[str, Any]], allowed_ms: int,
                         run_tag: str | None, earlier: list[dict[str, Any]],
                         closed_ms: int | None, last_batch_id: int | None) -> list[dict[str, Any]]:
    """:func:`watermark_ops.core.ledger.sessions.session_corrections` over the collected rows."""
    from watermark_ops.core.ledger.sessions import published_sessions, session_corrections

    def sessions(tag: str) -> list[dict[str, Any]]:
        return [{"start": s, "end": e, "keys": k, "values": v}
                for (s, e, k), v in _by_window(rows, shape.keys, shape.values, tag).items()]

    kept = [row for row in late if _recoverable_windows(row, allowed_ms)]
    others = [c for c in earlier if c.get("run") != run_tag]  # this run's own are replaced, not built on
    published = published_sessions(sessions("m"), others, shape.keys)
    made, problems = session_corrections(sessions("c"), published, kept, shape.keys, run_tag, _same, closed_ms,
                                         last_batch_id)
    for problem in problems:
        log.warning("corrections: %s", problem)
    return made


