"""The late rows of a job whose parsing is its own: each batch's files replayed in Spark.

After a run's queries stop, in the same driver (no other JVM starts), for each micro-batch of the
run (:func:`replay_run`):

1. the checkpoint says what the batch read and which watermark judged its rows
   (:func:`watermark_ops.core.ledger.plan.plan_batches`: the offset log, the file source's log, the
   late rule and ``allowMultiple`` of its progress record);
2. those files are read as a Spark batch with the stream's own reader settings (format, schema,
   options, captured by the launcher, :class:`watermark_ops.spark.attach.Source`), each row tagged
   with its file (``_metadata.file_path``) and its position in the file;
3. the job's pre-watermark function turns them into the rows that enter ``withWatermark`` (its own
   parsing, any format, any event-time encoding): rows with a non-null ``reason_column`` are the ones
   the job sets aside, rows the function filters out are counted as ``filtered_by_job``;
4. the late rule is applied to the event-time column with the recorded watermark
   (:func:`watermark_ops.core.ledger.plan.tally`, the same rule as the Python replay), and the
   batch's result is appended to ``<checkpoint>.replay.jsonl``
   (:mod:`watermark_ops.core.ledger.replayed`), which the ledger, the Airflow ledger task and the CLI read.

Each batch's row count is checked against Spark's own ``numInputRows`` of the batch: a replay that
made other rows than the stream did says so in its record (and the ledger then calls the batch not
replayed) instead of passing for exact. A position is the row's line for JSON lines (and for CSV
after its header); it is kept only when the function keeps the launcher's position column (it does
when it adds columns with ``withColumn`` / ``select("*", ...)``): a function that selects other
columns gives rows with their file but no line, shown as the function made them.

Needs pyspark (imported inside the functions).
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Iterable
from urllib.parse import unquote, urlsplit

from watermark_ops.core.ledger.plan import BatchPlan, ReplayRow, plan_batches, tally
from watermark_ops.core.ledger.replayed import FILTERED_BY_JOB, replay_log_path, replay_record
from watermark_ops.spark.recorder import append_json_lines

log = logging.getLogger("watermark_ops.spark")

__all__ = ["FILE_COLUMN", "LINE_COLUMN", "STREAM_ONLY_OPTIONS", "replay_batch", "replay_run"]

#: The columns the replay adds to the raw rows before the job's function: the file and the position in it.
FILE_COLUMN = "_watermark_ops_file"
LINE_COLUMN = "_watermark_ops_line"
_ORDER = "_watermark_ops_order"
_EVENT_US = "_watermark_ops_event_us"
_EVENT = "_watermark_ops_event"
_REASON = "_watermark_ops_reason"
#: File source options that only mean something to a stream (DataSource options of FileStreamSource).
STREAM_ONLY_OPTIONS = ("maxFilesPerTrigger", "maxBytesPerTrigger", "latestFirst", "fileNameOnly", "maxFileAge",
                       "cleanSource", "sourceArchiveDir", "maxCachedFiles", "discardCachedInputRatio")


def _local(uri: str) -> str:
    """A file source URI as the batch reader takes it: a ``file:`` URI decoded to its path."""
    parts = urlsplit(uri)
    return unquote(parts.path) if parts.scheme in ("", "file") else uri


def _key(uri: str) -> str:
    """One spelling of a file's location (``file:///a`` and ``file:/a`` alike), to match the source
    log's URIs with ``_metadata.file_path``."""
    return _local(uri).rstrip("/")


def replay_batch(spark, plan: BatchPlan, source, pre_watermark: Callable[[Any], Any], watermark_column: str,
                 reason_column: str | None = None) -> tuple[Any, list[int], list[str]]:
    """Replay one batch (module docstring, steps 2–4).

    :param plan: the batch's plan (``ok``, with its rule and late watermark).
    :param source: the stream's reader settings (``format``, ``schema``, ``options``, ``path``).
    :param pre_watermark: the job's function: raw rows → the rows that enter ``withWatermark``.
    :param watermark_column: the column ``withWatermark`` is called on (a timestamp).
    :param reason_column: the function's column naming why a row is set aside (null: kept), or None.
    :return: ``(BatchLedger, event times ms of the rows entering the watermark in arrival order, problems)``.
    :raises ValueError: when the function's output lacks ``watermark_column`` or ``reason_column``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    files = [uri for _, uri in plan.files]
    if not files:
        return tally(plan, [], "spark", rows_read=0), [], []
    reader = spark.read.format(source.format)
    if source.schema is not None:
        reader = reader.schema(source.schema)
    options = {k: v for k, v in source.options.items() if k not in STREAM_ONLY_OPTIONS}
    base = _key(source.path) if source.path and not any(c in source.path for c in "*?[{") else None
    if base and "basePath" not in options and all(_key(uri).startswith(base + "/") for uri in files):
        options["basePath"] = base  # the partition columns of a partitioned landing folder, as the stream has them
    raw = reader.options(**options).load([_local(uri) for uri in files])
    landed = raw.columns
    indexed = (raw.withColumn(FILE_COLUMN, F.col("_metadata.file_path"))
               .withColumn(_ORDER, F.monotonically_increasing_id()))
    indexed = indexed.withColumn(LINE_COLUMN, F.row_number().over(Window.partitionBy(FILE_COLUMN).orderBy(_ORDER))
                                 ).drop(_ORDER)
    out = pre_watermark(indexed)
    for column in (watermark_column, reason_column):
        if column is not None and column not in out.columns:
            raise ValueError(f"the pre-watermark function's rows have no column {column!r} (columns: {out.columns}): "
                             "expected the frame that enters withWatermark")
    positioned = LINE_COLUMN in out.columns and FILE_COLUMN in out.columns
    if FILE_COLUMN not in out.columns:
        out = out.withColumn(FILE_COLUMN, F.col("_metadata.file_path"))
    late = _late_predicate(plan, F.col(_EVENT_US))
    reason = F.col(reason_column) if reason_column else F.lit(None).cast("string")
    shown = [c for c in out.columns if c not in (FILE_COLUMN, LINE_COLUMN)]
    rows = out.select(F.col(FILE_COLUMN), F.col(LINE_COLUMN) if positioned else F.lit(None).cast("long").alias(LINE_COLUMN),
                      reason.cast("string").alias(_REASON),
                      F.unix_micros(F.col(watermark_column)).alias(_EVENT_US),
                      F.to_json(F.struct(*[F.col(f"`{c}`") for c in shown])).alias(_EVENT))
    wanted = F.col(_REASON).isNotNull() | late
    rows = rows.withColumn(_EVENT, F.when(wanted, F.col(_EVENT)))
    if positioned:  # show the row as it landed, not as the function made it
        landed_rows = indexed.select(FILE_COLUMN, LINE_COLUMN,
                                     F.to_json(F.struct(*[F.col(f"`{c}`") for c in landed])).alias("_landed"))
        rows = rows.join(landed_rows, [FILE_COLUMN, LINE_COLUMN], "left").withColumn(
            _EVENT, F.when(wanted, F.col("_landed"))).drop("_landed")
    collected = rows.collect()
    rows_read = raw.count()
    order = {_key(uri): i for i, uri in enumerate(files)}
    uri_of = {_key(uri): uri for uri in files}
    header = 1 if source.format == "csv" and str(options.get("header", "false")).lower() == "true" else 0
    made, counted, entering = [], {}, []
    for row in sorted(collected, key=lambda r: (order.get(_key(r[FILE_COLUMN]), len(order)), r[LINE_COLUMN] or 0)):
        file = uri_of.get(_key(row[FILE_COLUMN]), row[FILE_COLUMN])
        line = row[LINE_COLUMN] + header if row[LINE_COLUMN] is not None else None
        event = json.loads(row[_EVENT]) if row[_EVENT] is not None else None
        if row[_REASON] is not None:
            first = row[_REASON] not in counted
            counted[row[_REASON]] = counted.get(row[_REASON], 0) + 1
            if first:
                made.append(ReplayRow(file, line, row[_REASON], row[_EVENT_US], event))
            continue
        if row[_EVENT_US] is None:
            raise ValueError(f"{file}: a row entering the watermark has a null {watermark_column!r}: expected the "
                             "pre-watermark function to set such rows aside (reason_column) or filter them out")
        entering.append(row[_EVENT_US] // 1000)
        made.append(ReplayRow(file, line, None, row[_EVENT_US], event))
    filtered = rows_read - len(collected)
    problems = []
    if filtered < 0:
        problems.append(f"the pre-watermark function made {len(collected)} rows of {rows_read}: expected a function "
                        "that maps or filters rows (one row in, at most one out)")
    elif filtered:
        counted[FILTERED_BY_JOB] = filtered
        example = _filtered_example(indexed, out, landed, files, header) if positioned else None
        if example is not None:
            made.append(ReplayRow(example[0], example[1], FILTERED_BY_JOB, None, example[2]))
    spark_rows = plan.spark_rows()["spark_input_rows"]
    if spark_rows is not None and spark_rows != rows_read:
        problems.append(f"the replay read {rows_read} rows from the batch's {len(files)} files, the stream read "
                        f"{spark_rows} (numInputRows): expected the same reader settings")
    return tally(plan, made, "spark", rows_read=rows_read, set_aside=counted), entering, problems


def _late_predicate(plan: BatchPlan, event_us):
    """The late rule as a Spark column (window end, or event time, ``<=`` the watermark; integer µs),
    only to choose which rows' content to bring back: the rule itself is applied by ``tally``."""
    from pyspark.sql import functions as F

    from watermark_ops.spark.twin_ledger import late_expression

    return late_expression(plan.rule, event_us, F.lit(plan.late_watermark_ms * 1000))


def _filtered_example(indexed, out, landed: list[str], files: list[str], header: int):
    """``(file, line, row as landed)`` of the first row the function filtered out, None when none."""
    from pyspark.sql import functions as F

    gone = indexed.join(out.select(FILE_COLUMN, LINE_COLUMN), [FILE_COLUMN, LINE_COLUMN], "left_anti")
    first = gone.orderBy(FILE_COLUMN, LINE_COLUMN).select(
        FILE_COLUMN, LINE_COLUMN, F.to_json(F.struct(*[F.col(f"`{c}`") for c in landed])).alias(_EVENT)).first()
    if first is None:
        return None
    uri = next((u for u in files if _key(u) == _key(first[FILE_COLUMN])), first[FILE_COLUMN])
    return uri, first[LINE_COLUMN] + header, json.loads(first[_EVENT])


def replay_run(spark, checkpoint: str, batch_ids: Iterable[int], source, pre_watermark: Callable[[Any], Any],
               watermark_column: str, reason_column: str | None = None, *, query_id: str | None = None,
               run_tag: str | None = None) -> list[dict[str, Any]]:
    """Replay the batches ``batch_ids`` of ``checkpoint`` and append their records to its replay log.

    :return: the records appended (``watermark_ops.core.ledger.replayed`` shape); a batch the
        checkpoint cannot plan (purged offsets, no late rule, a source log problem) is logged and left
        out (the ledger then names it as not replayed).
    :raises ValueError: see :func:`replay_batch`.
    :raises OSError: when the replay log cannot be written.
    """
    state, plans, problems = plan_batches(checkpoint, batch_ids)
    for problem in problems:
        log.warning("replay of %s: %s: %s", checkpoint, problem.file, problem.message)
    records = []
    for plan in plans:
        if not plan.ok:
            continue
        batch, event_times, own = replay_batch(spark, plan, source, pre_watermark, watermark_column, reason_column)
        records.append(replay_record(batch, query_id or state.query_id, run_tag, event_times, own))
        log.info("batch %d replayed in Spark: %d rows read, %d set aside, %d aggregated, %d late (watermark %s)%s",
                 plan.batch_id, batch.rows_read, sum(batch.rows_quarantined.values()), batch.rows_aggregated,
                 batch.rows_late, plan.late_watermark_ms, f"; NOT EXACT: {'; '.join(own)}" if own else "")
    if records:
        append_json_lines(replay_log_path(checkpoint), records)
    return records
