"""The recorder: the driver side of any Spark job audited by watermark-ops (session, Spark trigger,
progress listener, checkpoint lock, exit path). Public names are re-exported by :mod:`watermark_ops.spark`.

What a job script does around its own pipeline, in the order of this module:

* the session (:func:`build_session`) and the Spark trigger (:func:`apply_spark_trigger`);
* the progress listener (:class:`ProgressRecorder`), which writes the progress log below, and the
  confs Spark freezes in the checkpoint (``FROZEN_CONFS``, :func:`checkpoint_watermark_policy`);
* running a job's queries once, recording their progress (:func:`run_queries`);
* the driver: the shared flags (:func:`add_run_arguments`), session, run and stop
  (:func:`execute`), and the exit path (:func:`run_driver`, :func:`exit_with_launcher`,
  :func:`exit_process`).

The driver imports it from the installed ``watermark-ops`` package (``pip install
watermark-ops[spark]`` where the driver runs, or the built wheel in spark-submit ``--py-files``).
It needs pyspark (imported inside the functions that use it), so the Airflow side of the package
never imports it: a worker that only submits jobs may not have pyspark.

The progress log
----------------
With ``Trigger.AvailableNow`` the driver exits when the run is done and Spark's own metrics vanish
with it, so every micro-batch's ``StreamingQueryProgress`` is reduced to one JSON line and
appended to ``<checkpoint>.progress.jsonl`` (beside the checkpoint). One line per batch::

    {"query_id": str, "run_id": str, "name": str, "run_tag": str | null,
     "batch_id": int, "timestamp": "ISO-8601 UTC", "timestamp_ms": int (epoch ms UTC),
     "watermark_ms": int | null,            # the watermark this batch ran with
     "event_time_min_ms": int | null, "event_time_max_ms": int | null,
     "executed": bool,     # false: a trigger that found no input and ran no batch (no offsets/N)
     "input_rows": int,
     "output_rows": int | null,   # rows the sink reports; null where it cannot tell (file sink)
     "state_rows_removed": int,   # rows leaving the state store; in append mode = windows emitted
     "rows_dropped_by_watermark": int,  # Spark's numRowsDroppedByWatermark, see below
     "state_rows": int,           # rows held in the state store after the batch
     "state_operators": [{"name": str, "rows_total": int, "rows_removed": int,  # the same, per stateful
                          "rows_dropped_by_watermark": int}],  # operator in Spark's order (= operator id)
     "duration_ms": {"triggerExecution": int, ...},
     "observed_metrics": {name: {metric: value}},  # Dataset.observe metrics of the batch
     "partition_column": str | null,  # e.g. "origin": the column event times are kept apart by, see below
     "event_time_max_ms_by_partition": {value: int | null} | null,  # newest event time per partition
     "sources": [{"description": str, "start_offset": ..., "end_offset": ..., "input_rows": int}],
     "spark_trigger": "availableNow" | "once",
     "requested_conf": {key: value},  # what this run's session asked for, of RECORDED_CONFS
     "spark_version": str,        # the driver's pyspark version (e.g. "4.2.0"): which late-row rule applies
     "late_rule": {...} | null}   # which rows this query drops as late, see below

``late_rule`` says which rows the query's stateful operator drops as late, so that a reader of the
checkpoint (``watermark_ops.core.ledger``) can recover every dropped row without guessing the plan.
The watermark a row is judged against is the one Spark filters late events with
(``IncrementalExecution.eventTimeWatermarkForLateEvents``): since Spark 3.4, with
``statefulOperator.allowMultiple`` true (the default), the previous batch's ``batchWatermarkMs``
(offsets/N-1; 0 for batch 0), else the batch's own (offsets/N); the record's ``spark_version`` and
``requested_conf`` say which. All instants epoch ms UTC::

    {"kind": "window_end",      # a tumbling event-time window aggregation: a row is late when the
     "event_time": "dep_time",  #   end of its window (start = event time floored to window_ms) is
     "window_ms": 3600000,      #   <= the watermark (WatermarkSupport: window.end <= watermark)
     "delay_threshold_ms": 7200000, "max_event_time_ahead_ms": null}
    {"kind": "event_time",      # deduplication / stream-stream join: late when event time <= watermark
     "event_time": "dep_time" | ["dep_time", "time_hour"],   # landed field, one per source in plan order
     "delay_threshold_ms": int | [int, ...], "max_event_time_ahead_ms": null}

``event_time`` names the field of the landed JSON event the query takes its event time from;
``max_event_time_ahead_ms`` is the job's ``--max-event-time-ahead`` (null: off), which decides
which rows are quarantined before they reach the watermark. A query without a watermark (the
quarantine queries) records null. :func:`late_rule` builds the dict. When the job reads its
landing folders with :func:`watermark_ops.spark.inputs.classified_json_stream` and passes the same
schema, the rule also carries ``"inputs": [{"event_time": field, "schema": {field: "long" | "int" |
"double" | "string"}, "required": {reason: field}}]`` (one per source in plan order), so the
ledger replays the landed lines with the job's own schema, whatever the job.

``event_time_max_ms_by_partition`` is the newest event time (epoch ms UTC) of the batch's rows per
value of ``partition_column`` (``{"EWR": ms, "JFK": ms, "LGA": ms}``; null: no row of it in the
batch), the skew Spark's one ``eventTime.max`` hides: all partitions share one watermark, so the
rows of a partition that trails the others are the ones dropped as late. A job records it by
wrapping its watermarked input in :func:`observe_partition_event_times` (``Dataset.observe``, no
change to the plan's output or state); :func:`progress_record` copies the metric out of the
batch's ``StreamingQueryProgress.observedMetrics``. Both fields are null for a query that does not.

``rows_dropped_by_watermark`` is Spark's own metric, counted at the stateful operator's input: for
an aggregation that input is already partially aggregated, so it counts late *groups* (one per
window, key and input partition), not late events; 48 late flights of one day showed as 8. Late
rows are filtered against the watermark of the previous batch: under ``availableNow`` the trailing
no-data batch makes that the watermark the run computed; under ``once`` it is one run older.

The shape of Spark's progress JSON is ``StreamingQueryProgress`` in
``sql/core/src/main/scala/org/apache/spark/sql/streaming/progress.scala``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import threading
import time
import traceback
import warnings
from datetime import datetime
from typing import Any, Callable

from watermark_ops.core.ledger import ALLOW_MULTIPLE_CONF
from watermark_ops.core.progress import progress_log_path
from watermark_ops.spark.lock import CheckpointInUse, checkpoint_lock

log = logging.getLogger("watermark_ops.spark")

#: The exit status of a driver that refused to start: another driver holds the checkpoint.
EXIT_CHECKPOINT_IN_USE = 3

POLICY_CONF = "spark.sql.streaming.multipleWatermarkPolicy"
# Confs that Spark freezes in the checkpoint at the first batch (offsets/N "conf") and silently
# overrides on every restart. Each run records what its session asked for, so the audit can report
# a request the checkpoint ignored (OffsetSeqMetadata.setSessionConf in OffsetSeq.scala).
FROZEN_CONFS = (POLICY_CONF, "spark.sql.shuffle.partitions")
# ALLOW_MULTIPLE_CONF (core.ledger): whether late rows are filtered against the previous batch's
# watermark (true, the Spark 3.4+ default) or the current one; a session conf the offset log does
# not record, so the recorder does.
#: The confs each progress record carries under ``requested_conf`` (the session's values).
RECORDED_CONFS = (*FROZEN_CONFS, ALLOW_MULTIPLE_CONF)
# OffsetSeqMetadata.relevantSQLConfDefaultValues: a checkpoint whose offsets conf lacks the key
# (written before Spark 2.4) runs with the default policy.
CHECKPOINT_DEFAULT_POLICY = "min"

SPARK_TRIGGERS = ("availableNow", "once")
#: Over Spark Connect: how often (seconds) a run records the finished batches of a running query.
POLL_SECONDS = 1.0
#: The exit status of a Connect driver whose server runs another Spark release (nothing was started).
EXIT_VERSION_MISMATCH = 4
#: The exit status of a Connect driver that lost (or never reached) its server: the checkpoint is
#: left as Spark left it (a batch in flight is re-run by the next run).
EXIT_SERVER_LOST = 5
#: How long (seconds) a driver waits for ``spark.stop()`` before it ends anyway.
STOP_TIMEOUT_SECONDS = 20.0


def build_session(app_name: str, master: str | None = None, shuffle_partitions: int | None = None,
                  extra_conf: dict[str, str] | None = None):
    """Build (or get) a SparkSession with settings that suit a small local machine.

    :param app_name: the Spark application name.
    :param master: ``local[2]`` etc.; ``None`` leaves it to spark-submit (or local[*]).
    :param shuffle_partitions: ``spark.sql.shuffle.partitions``; ``None`` keeps what spark-submit
        set, else 2 × the local cores. The default 200 made a small stateful job 4× slower here.
        Note that Spark freezes this value in the checkpoint at the first batch.
    :param extra_conf: further ``spark.*`` settings.
    :return: ``pyspark.sql.SparkSession``.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    conf = {
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.numRecentProgressUpdates": "1000",
    }
    if shuffle_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    conf.update(extra_conf or {})
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if shuffle_partitions is None and "spark.sql.shuffle.partitions" not in _submitted_conf(spark):
        spark.conf.set("spark.sql.shuffle.partitions", str(2 * (os.cpu_count() or 1)))
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _submitted_conf(spark) -> dict[str, str]:
    return dict(spark.sparkContext.getConf().getAll())


def apply_spark_trigger(writer, spark_trigger: str):
    """Set the Spark trigger on a ``DataStreamWriter``.

    :param spark_trigger: ``"availableNow"`` (default of every job: processes all input present at
        start in one or more micro-batches, then a trailing no-data batch when the watermark moved,
        so append-mode results appear in the same run) or ``"once"`` (``Trigger.Once``, deprecated
        by Spark since 3.4: exactly one micro-batch and no trailing no-data batch, so append-mode
        results of a window appear one run later).
    :raises ValueError: for any other name.
    """
    if spark_trigger == "availableNow":
        return writer.trigger(availableNow=True)
    if spark_trigger == "once":
        warnings.warn(
            "Trigger.Once is deprecated by Spark since 3.4: use availableNow. With once, each run is "
            "exactly one micro-batch and no trailing no-data batch, so append-mode windows closed "
            "by this run's watermark are emitted only by the next run.",
            FutureWarning,
            stacklevel=2,
        )
        return writer.trigger(once=True)
    raise ValueError(f"spark trigger must be one of {SPARK_TRIGGERS}, got {spark_trigger!r}")


def _iso_to_ms(text: str | None) -> int | None:
    if not text:
        return None
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


_INTERVAL_UNIT_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000,
                     "week": 7 * 86_400_000}
_INTERVAL_PART = re.compile(r"\s*(\d+)\s+(millisecond|second|minute|hour|day|week)s?\s*", re.I)


def interval_ms(text: str | None) -> int | None:
    """A Spark interval of whole units (``"2 hours"``, ``"1 hour 30 minutes"``) in ms; None for
    None, an empty string, or any other form (Spark's interval syntax is wider than this)."""
    if not text or not text.strip():
        return None
    parts = _INTERVAL_PART.findall(text)
    if not parts or _INTERVAL_PART.sub("", text).strip():
        return None
    return sum(int(count) * _INTERVAL_UNIT_MS[unit.lower()] for count, unit in parts)


#: Spark SQL DDL types → the JSON kinds the ledger checks a landed value against.
_DDL_KINDS = {"BIGINT": "long", "LONG": "long", "INT": "int", "INTEGER": "int", "DOUBLE": "double",
              "STRING": "string"}


def schema_kinds(schema_ddl: str) -> dict[str, str]:
    """``"id BIGINT, origin STRING, temp DOUBLE, _corrupt_record STRING"`` → ``{"id": "long",
    "origin": "string", "temp": "double"}`` (``_corrupt_record`` left out).

    :raises ValueError: for a type other than BIGINT/LONG, INT/INTEGER, DOUBLE or STRING (the ledger
        could not replay Spark's JSON conversion of it), naming the field.
    """
    kinds = {}
    for part in schema_ddl.split(","):
        name, _, kind = part.strip().partition(" ")
        if not name or name == "_corrupt_record":
            continue
        if kind.strip().upper() not in _DDL_KINDS:
            raise ValueError(f"field {name!r}: type {kind.strip()!r} is not one the late-row ledger replays "
                             f"(expected one of {sorted(_DDL_KINDS)})")
        kinds[name] = _DDL_KINDS[kind.strip().upper()]
    return kinds


def late_rule(kind: str, event_time: str | list[str], delay_threshold: str | list[str],
              window: str | None = None, max_event_time_ahead: str | None = None,
              schema: str | list[str] | None = None,
              required_fields: dict[str, str] | list[dict[str, str]] | None = None) -> dict[str, Any]:
    """The ``late_rule`` of a progress record (shape in the module docstring).

    :param kind: ``"window_end"`` (tumbling window aggregation, ``window`` required) or ``"event_time"``
        (deduplication or stream-stream join).
    :param event_time: the landed field the event time comes from (a list: one per source).
    :param delay_threshold: the ``withWatermark`` delay threshold(s), Spark intervals.
    :param window: the tumbling window duration (``"1 hour"``).
    :param max_event_time_ahead: the job's future-time tolerance, None when off.
    :param schema: the DDL each source is read with (:func:`watermark_ops.spark.inputs.classified_json_stream`;
        a list: one per source); recorded as ``inputs`` so the ledger can replay any job's lines.
    :param required_fields: ``{reason: field}`` quarantine rules of each source (a list: one per source).
    :raises ValueError: for another kind, a window_end rule without a window of whole units, or a
        schema type the ledger cannot replay.
    """
    if kind not in ("window_end", "event_time"):
        raise ValueError(f"late rule kind must be window_end or event_time, got {kind!r}")
    rule: dict[str, Any] = {"kind": kind, "event_time": event_time}
    if kind == "window_end":
        rule["window_ms"] = interval_ms(window)
        if rule["window_ms"] is None:
            raise ValueError(f"a window_end late rule needs a window such as '1 hour', got {window!r}")
    rule["delay_threshold_ms"] = ([interval_ms(d) for d in delay_threshold] if isinstance(delay_threshold, list)
                                  else interval_ms(delay_threshold))
    rule["max_event_time_ahead_ms"] = interval_ms(max_event_time_ahead)
    if schema is not None:
        fields = event_time if isinstance(event_time, list) else [event_time]
        schemas = schema if isinstance(schema, list) else [schema]
        required = required_fields if isinstance(required_fields, list) else [required_fields or {}] * len(fields)
        if not (len(fields) == len(schemas) == len(required)):
            raise ValueError(f"one schema and one required_fields per event-time field: {len(fields)} fields, "
                             f"{len(schemas)} schemas, {len(required)} required_fields")
        rule["inputs"] = [{"event_time": f, "schema": schema_kinds(d), "required": dict(r or {})}
                          for f, d, r in zip(fields, schemas, required)]
    return rule


#: ``Dataset.observe`` name prefix of :func:`observe_partition_event_times`: ``event_time_max_ms_by_<column>``.
PARTITION_METRICS_PREFIX = "event_time_max_ms_by_"
#: The partition under which rows of a value not named to :func:`observe_partition_event_times` are observed.
OTHER_PARTITION = "(other)"


def observe_partition_event_times(frame, column: str, partitions, event_time: str = "event_time"):
    """``frame`` with the newest event time per value of ``column`` observed in every micro-batch.

    ``Dataset.observe(f"event_time_max_ms_by_{column}", ...)`` with one aggregate per partition,
    ``max(unix_millis(event_time))`` over the batch's rows whose ``column`` equals it (a long,
    epoch ms UTC; null when the batch has no such row), plus :data:`OTHER_PARTITION` for rows of
    any other non-null value, so a partition nobody named is not hidden. Spark reports the values
    after each micro-batch in ``StreamingQueryProgress.observedMetrics``, which
    :func:`progress_record` turns into the progress log's ``event_time_max_ms_by_partition``.

    ``observe`` adds a pass-through node (``CollectMetrics``): rows, output, watermark and state
    are those of the plan without it. Put it before ``withWatermark`` so that it sees every row
    the watermark operator sees, late rows included (as Spark's own ``eventTime.max``).

    :param frame: a streaming DataFrame with ``column`` and ``event_time`` (a timestamp column).
    :param partitions: the values to keep apart (e.g. ``("EWR", "JFK", "LGA")``), non-empty.
    :raises ValueError: for no partitions, or a partition named like :data:`OTHER_PARTITION`.
    """
    from pyspark.sql import functions as F

    partitions = list(partitions)
    if not partitions or OTHER_PARTITION in partitions:
        raise ValueError(f"expected partition values (not {OTHER_PARTITION!r}), got {partitions!r}")
    millis = F.unix_millis(F.col(event_time))
    metrics = [F.max(F.when(F.col(column) == value, millis)).alias(value) for value in partitions]
    metrics.append(F.max(F.when(~F.col(column).isin(partitions), millis)).alias(OTHER_PARTITION))
    return frame.observe(PARTITION_METRICS_PREFIX + column, *metrics)


def _partition_event_times(observed: dict[str, Any]) -> tuple[str | None, dict[str, int | None] | None]:
    """``(partition column, {partition: newest event time ms or None})`` of a batch's observed
    metrics (:func:`observe_partition_event_times`), ``(None, None)`` without them; the
    :data:`OTHER_PARTITION` entry only when some row had another value."""
    for name, values in sorted(observed.items()):
        if name.startswith(PARTITION_METRICS_PREFIX) and isinstance(values, dict):
            times = {str(k): (None if v is None else int(v)) for k, v in values.items()
                     if not (k == OTHER_PARTITION and v is None)}
            return name[len(PARTITION_METRICS_PREFIX):], times
    return None, None


def observed_metrics(progress: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{observation name: {metric: value}}`` of a ``StreamingQueryProgress`` JSON, in either shape
    Spark writes it: a row object per name (``progress.json`` of a classic session), or, over Spark
    Connect, ``{"values": [...], "schema": {"fields": [{"name": ...}, ...]}}`` per name (the server
    ships the row with its schema so that the client can rebuild it). Any other entry is kept as is."""
    metrics = {}
    for name, row in (progress.get("observedMetrics") or {}).items():
        if (isinstance(row, dict) and set(row) == {"values", "schema"} and isinstance(row["values"], list)
                and isinstance(row["schema"], dict)):
            names = [f.get("name") for f in row["schema"].get("fields") or []]
            if len(names) == len(row["values"]):
                row = dict(zip(names, row["values"]))
        metrics[name] = row
    return metrics


def _offset(value: Any) -> Any:
    """A source offset as Spark's classic progress JSON has it (a JSON value, ``{"logOffset": 0}``);
    over Spark Connect the same offset arrives as its JSON text, which is parsed here."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _input_rows(progress: dict[str, Any]) -> int:
    """``numInputRows``, or where the JSON lacks it (the progress a Spark Connect server returns for
    ``recentProgress``) the sum of the sources' ``numInputRows``, as pyspark's own property does."""
    if progress.get("numInputRows") is not None:
        return int(progress["numInputRows"])
    return sum(int(s.get("numInputRows") or 0) for s in progress.get("sources") or [])


def progress_record(progress: dict[str, Any], run_tag: str | None, spark_trigger: str,
                    requested_conf: dict[str, str] | None = None,
                    late_rule: dict[str, Any] | None = None, spark_version: str | None = None) -> dict[str, Any]:
    """Reduce one ``StreamingQueryProgress`` JSON (a dict) to the progress-log line shape above;
    ``late_rule`` is the query's (:func:`late_rule`), None for a query without a watermark;
    ``event_time_max_ms_by_partition`` comes from ``observedMetrics`` (:func:`observe_partition_event_times`)."""
    event_time = progress.get("eventTime") or {}
    operators = progress.get("stateOperators") or []
    sink = progress.get("sink") or {}
    observed = observed_metrics(progress)
    partition_column, partition_times = _partition_event_times(observed)
    return {
        "query_id": str(progress.get("id")),
        "run_id": str(progress.get("runId")),
        "name": progress.get("name"),
        "run_tag": run_tag,
        "batch_id": int(progress["batchId"]),
        "timestamp": progress.get("timestamp"),
        "timestamp_ms": _iso_to_ms(progress.get("timestamp")),
        "watermark_ms": _iso_to_ms(event_time.get("watermark")),
        "event_time_min_ms": _iso_to_ms(event_time.get("min")),
        "event_time_max_ms": _iso_to_ms(event_time.get("max")),
        "input_rows": _input_rows(progress),
        "executed": "addBatch" in (progress.get("durationMs") or {}),
        "output_rows": None if (sink.get("numOutputRows") in (None, -1)) else int(sink["numOutputRows"]),
        "state_rows_removed": sum(int(op.get("numRowsRemoved") or 0) for op in operators),
        "rows_dropped_by_watermark": sum(int(op.get("numRowsDroppedByWatermark") or 0) for op in operators),
        "state_rows": sum(int(op.get("numRowsTotal") or 0) for op in operators),
        "state_operators": [{"name": op.get("operatorName"), "rows_total": int(op.get("numRowsTotal") or 0),
                             "rows_removed": int(op.get("numRowsRemoved") or 0),
                             "rows_dropped_by_watermark": int(op.get("numRowsDroppedByWatermark") or 0)}
                            for op in operators],
        "duration_ms": progress.get("durationMs") or {},
        "observed_metrics": observed,
        "partition_column": partition_column,
        "event_time_max_ms_by_partition": partition_times,
        "sources": [
            {
                "description": s.get("description"),
                "start_offset": _offset(s.get("startOffset")),
                "end_offset": _offset(s.get("endOffset")),
                "input_rows": int(s.get("numInputRows") or 0),
            }
            for s in progress.get("sources") or []
        ],
        "spark_trigger": spark_trigger,
        "requested_conf": dict(requested_conf or {}),
        "spark_version": spark_version,
        "late_rule": late_rule,
    }


class ProgressRecorder:
    """Append every micro-batch of the registered queries to their progress logs, exactly once.

    Live: a ``StreamingQueryListener`` (Python listeners exist since Spark 3.4) writes each batch
    as it completes, so a killed driver still leaves the batches it finished. With ``listen=False``
    (a Spark Connect session) no listener is added: the caller polls :meth:`flush` while the query
    runs instead. Over Connect a Python listener runs client-side on a stream of events the server
    sends back (SPARK-47233); on 4.2 a client with one never exited after its query stopped, and
    ``removeListener`` then ``spark.stop()`` hung, while ``query.recentProgress`` carries the same
    progress JSON (``eventTime`` and ``observedMetrics`` included). At the end,
    :meth:`flush` reconciles with ``query.recentProgress`` (listener events are asynchronous and
    may trail the query's termination). Files are appended through fsspec (local by default).
    """

    def __init__(self, spark, run_tag: str | None, spark_trigger: str, listen: bool = True):
        self._spark = spark
        self._listen = listen
        self._run_tag = run_tag
        self._spark_trigger = spark_trigger
        self._requested_conf = {
            key: value for key in RECORDED_CONFS if (value := spark.conf.get(key, None)) is not None
        }
        if ALLOW_MULTIPLE_CONF not in self._requested_conf:  # not set: record the session's effective value
            try:
                self._requested_conf[ALLOW_MULTIPLE_CONF] = str(spark.conf.get(ALLOW_MULTIPLE_CONF))
            except Exception:  # noqa: BLE001 - a Spark without the conf (before 3.4): the ledger knows by version
                pass
        self._spark_version = spark.version
        self._logs: dict[str, str] = {}          # query id -> progress log location
        self._rules: dict[str, dict[str, Any] | None] = {}  # query id -> late rule
        self._written: set[tuple[str, str, int]] = set()
        self._lock = threading.Lock()
        self._listener = None

    def register(self, query, log_path: str, late_rule: dict[str, Any] | None = None) -> None:
        """Record the batches of ``query`` (a ``StreamingQuery``) into ``log_path``, each with ``late_rule``."""
        self._logs[str(query.id)] = log_path
        self._rules[str(query.id)] = late_rule
        self._ensure_listener()
        self.flush(query)  # batches that completed before the listener knew the query

    def _ensure_listener(self) -> None:
        if self._listener is not None or not self._listen:
            return
        from pyspark.sql.streaming import StreamingQueryListener

        recorder = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryProgress(self, event):
                try:
                    recorder._write(json.loads(event.progress.json))
                except Exception:  # a listener must never break the query
                    log.exception("could not record streaming progress")

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

        self._listener = _Listener()
        self._spark.streams.addListener(self._listener)

    def _write(self, progress: dict[str, Any]) -> None:
        import fsspec

        query_id = str(progress.get("id"))
        path = self._logs.get(query_id)
        if path is None:
            return
        key = (query_id, str(progress.get("runId")), int(progress["batchId"]))
        with self._lock:
            if key in self._written:
                return
            self._written.add(key)
            record = progress_record(progress, self._run_tag, self._spark_trigger, self._requested_conf,
                                     self._rules.get(query_id), self._spark_version)
            fs, fs_path = fsspec.core.url_to_fs(path)
            parent = fs._parent(fs_path)
            if parent:
                fs.makedirs(parent, exist_ok=True)
            with fs.open(fs_path, "a") as handle:
                handle.write(json.dumps(record, sort_keys=True) + "\n")

    def flush(self, query) -> None:
        """Write the batches of ``query`` that the listener has not written yet."""
        for progress in query.recentProgress:
            self._write(json.loads(progress.json))

    def records(self, query) -> list[dict[str, Any]]:
        """This run's batches of ``query`` as progress-log records, oldest first."""
        return [
            progress_record(json.loads(p.json), self._run_tag, self._spark_trigger, self._requested_conf,
                            self._rules.get(str(query.id)), self._spark_version)
            for p in query.recentProgress
        ]

    def close(self) -> None:
        """Unregister the listener."""
        if self._listener is not None:
            self._spark.streams.removeListener(self._listener)
            self._listener = None


def _head_offsets(checkpoint: str) -> tuple[Any, str, int, dict[str, Any]] | None:
    """``(filesystem, checkpoint root, head batch id, offsets metadata)`` of the newest ``offsets/N``.

    Reads line 2 (``OffsetSeqMetadata``, ``OffsetSeq.scala``) of ``<checkpoint>/offsets/<N>`` for
    the highest decimal N (other names, e.g. ``.N.crc`` and temp files, are ignored). None for a
    new checkpoint (no offsets file yet).

    :raises ValueError: naming the file when it is not ``v<N>`` followed by a JSON object line
        (Spark would refuse to restart from it as well).
    """
    import fsspec

    fs, root = fsspec.core.url_to_fs(str(checkpoint))
    root = root.rstrip("/")
    folder = root + "/offsets"
    if not fs.isdir(folder):
        return None
    ids = [int(name) for name in (p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(folder, detail=False))
           if name.isdigit()]
    if not ids:
        return None
    path = f"{folder}/{max(ids)}"
    lines = fs.cat_file(path).decode("utf-8", errors="replace").split("\n")
    try:
        if not lines[0].startswith("v"):
            raise ValueError("no version line")
        metadata = json.loads(lines[1]) if lines[1].strip() else {}
        if not isinstance(metadata, dict):
            raise ValueError("metadata is not a JSON object")
    except (IndexError, ValueError) as exc:
        raise ValueError(f"{path}: expected an offset log file ('v<N>' then a metadata JSON object) ({exc})") from exc
    return fs, root, max(ids), metadata


def checkpoint_watermark_policy(checkpoint: str) -> str | None:
    """The ``multipleWatermarkPolicy`` a checkpoint is frozen with, from its latest offsets file.

    :param checkpoint: checkpoint location (local path or fsspec URL).
    :return: ``"min"`` or ``"max"``; ``"min"`` when the conf lacks the key (Spark's default for
        old checkpoints); None for a new checkpoint (no offsets file yet).
    :raises ValueError: naming the file when the latest offsets file cannot be read (see :func:`_head_offsets`).
    """
    head = _head_offsets(checkpoint)
    if head is None:
        return None
    return str((head[3].get("conf") or {}).get(POLICY_CONF, CHECKPOINT_DEFAULT_POLICY))


def owed_trailing_batch(checkpoint: str) -> int | None:
    """The head batch id when its trailing no-data batch is owed, else None.

    Owed: ``commits/N`` of the head batch N exists and its ``nextBatchWatermarkMs`` is above the
    ``batchWatermarkMs`` N ran with (``CommitLog.scala``, ``OffsetSeq.scala``): the watermark moved
    and the windows it closes have not been emitted. Under availableNow Spark runs that batch right
    after N, so it is owed only when the driver died between the two. A batch the progress log
    records as run by Trigger.Once owes nothing: ``once`` emits its windows one run later by design.
    Spark does not run it on a restart without new input (``MicroBatchExecution`` decides on the
    *previous execution* of this process, which a restarted driver lacks).

    :raises ValueError: naming the file when the head offsets file cannot be read.
    """
    head = _head_offsets(checkpoint)
    if head is None:
        return None
    fs, root, batch_id, metadata = head
    commit = f"{root}/commits/{batch_id}"
    if not fs.exists(commit):
        return None  # in flight: Spark re-runs it, and its trailing batch follows
    lines = fs.cat_file(commit).decode("utf-8", errors="replace").split("\n")
    try:
        next_watermark = json.loads(lines[1]).get("nextBatchWatermarkMs")
    except (IndexError, ValueError, AttributeError):
        return None  # not ours to judge: Spark reports a corrupt commit when it restarts
    current = metadata.get("batchWatermarkMs")
    if not (isinstance(next_watermark, int) and isinstance(current, int) and next_watermark > current):
        return None
    if _run_by_once_trigger(checkpoint, batch_id):
        return None  # Trigger.Once never runs it: its windows appear one run later, by design
    return batch_id


def _run_by_once_trigger(checkpoint: str, batch_id: int) -> bool:
    """True when the progress log records ``batch_id`` as run by Trigger.Once (the newest record wins)."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(progress_log_path(checkpoint))
    if not fs.exists(path):
        return False
    trigger = None
    for line in fs.cat_file(path).decode("utf-8", errors="replace").splitlines():
        if str(batch_id) not in line:  # cheap filter before parsing
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("batch_id") == batch_id:
            trigger = record.get("spark_trigger")
    return trigger == "once"


def land_tick(landing: str, checkpoint: str, batch_id: int) -> str:
    """Land an empty JSON-lines file so that a restart without new input runs the owed batch.

    The file source sees a new file, so Spark runs batch ``batch_id + 1`` (zero rows) with the
    restored watermark: it emits the closed windows and evicts their state, as the trailing
    no-data batch would have. The name (``watermark-ops-tick-<checkpoint name>-<batch id>.jsonl``,
    never starting with ``_`` or ``.``, which the file source ignores) says why it is there.

    :return: the path of the tick file.
    """
    import fsspec

    fs, folder = fsspec.core.url_to_fs(str(landing))
    fs.makedirs(folder, exist_ok=True)
    name = str(checkpoint).rstrip("/").rsplit("/", 1)[-1]
    path = f"{folder.rstrip('/')}/watermark-ops-tick-{name}-{batch_id}.jsonl"
    fs.touch(path)
    return path


def run_queries(spark, plans, spark_trigger: str, run_tag: str | None,
                tick_landing: str | None = None,
                late_rules: dict[str, dict[str, Any] | None] | None = None) -> list[tuple[Any, list[dict[str, Any]]]]:
    """Run (restart) streaming queries once with one Spark trigger, recording progress.

    :param plans: ``(name, streaming DataFrame, checkpoint, output)`` per query; each is started
        with ``queryName(name)`` and its checkpoint, and its batches are appended to
        ``<checkpoint>.progress.jsonl``. ``output`` is a path (an append-mode Parquet sink) or a
        function that takes that ``DataStreamWriter`` and returns it with its output mode and sink
        set (e.g. update mode through ``foreachBatch``).
    :param spark_trigger: ``"availableNow"`` or ``"once"`` (see :func:`apply_spark_trigger`).
    :param run_tag: stamped on every progress record (the DAG's run id).
    :param tick_landing: a folder every query reads; under availableNow, when a checkpoint's
        trailing no-data batch is owed (:func:`owed_trailing_batch`: the last driver died between
        a batch's commit and that batch), an empty tick file is landed there first
        (:func:`land_tick`), so that this run emits what the dead run did not.
    :param late_rules: ``{query name: late rule}`` (:func:`late_rule`) stamped on the query's
        progress records; a query not named gets null.
    :return: ``[(StreamingQuery, this run's progress records)]`` in the order of ``plans``.
    :raises checkpoint_lock.CheckpointInUse: when another driver holds a checkpoint's lock
        (``<checkpoint>.lock``, held for the whole run); no query is started then.
    :raises pyspark.errors.StreamingQueryException: when a query failed, after the other queries
        were stopped and every finished batch was recorded.
    """
    remote = getattr(spark, "_watermark_ops_remote", None)  # {"url", "session_id"} of a Connect client
    holder = {"spark_connect": remote} if remote else None
    with contextlib.ExitStack() as locks:
        for _, _, checkpoint, _ in plans:
            locks.enter_context(checkpoint_lock(checkpoint, holder, on_takeover=_stop_orphans))
        if tick_landing and spark_trigger == "availableNow":
            for _, _, checkpoint, _ in plans:
                owed = owed_trailing_batch(checkpoint)
                if owed is not None:
                    path = land_tick(tick_landing, checkpoint, owed)
                    log.warning("checkpoint %s: batch %d was committed but the trailing no-data batch after it never "
                                "ran (its driver died); landed %s so that this run emits the windows it closes",
                                checkpoint, owed, path)
        return _run_locked(spark, plans, spark_trigger, run_tag, late_rules or {})


def _stop_orphans(previous: dict[str, Any]) -> None:
    """On taking over the lock of a dead driver that ran on a Spark Connect server: stop the queries it
    left running in its server-side session (its task was killed with no chance to stop them), so
    that Spark does not refuse this run as a second active run of the checkpoint."""
    remote = previous.get("spark_connect")
    if not (isinstance(remote, dict) and remote.get("url") and remote.get("session_id")):
        return
    from watermark_ops.spark.connect import stop_session_queries

    try:
        stopped = stop_session_queries(remote["url"], remote["session_id"])
    except Exception as exc:  # noqa: BLE001 - a server that is gone holds no query
        log.warning("could not stop the queries of the dead driver's session %s: %s", remote["session_id"], exc)
        return
    if stopped:
        log.warning("stopped %d queries the dead driver left on %s (session %s): %s", len(stopped), remote["url"],
                    remote["session_id"], stopped)


def _run_locked(spark, plans, spark_trigger: str, run_tag: str | None,
                late_rules: dict[str, dict[str, Any] | None]) -> list[tuple[Any, list[dict[str, Any]]]]:
    from watermark_ops.spark.connect import is_connect_session

    remote = is_connect_session(spark)
    recorder = ProgressRecorder(spark, run_tag, spark_trigger, listen=not remote)
    queries = []
    try:
        for name, frame, checkpoint, output in plans:
            writer = frame.writeStream.queryName(name).option("checkpointLocation", checkpoint)
            if callable(output):  # the job sets the output mode and sink itself (e.g. foreachBatch)
                writer = output(writer)
            else:
                writer = writer.format("parquet").outputMode("append").option("path", output)
            query = apply_spark_trigger(writer, spark_trigger).start()
            recorder.register(query, progress_log_path(checkpoint), late_rules.get(name))
            queries.append(query)
        if remote:  # poll: each finished batch is recorded while the query runs, as the listener does
            for query in queries:
                while not query.awaitTermination(POLL_SECONDS):
                    recorder.flush(query)
        else:
            for query in queries:
                query.awaitTermination()
    except Exception as exc:
        if remote and _server_lost(exc):
            queries = []  # nothing left to stop or read on a server that is gone
        raise
    finally:
        for query in queries:
            try:
                if query.isActive:
                    query.stop()
                recorder.flush(query)
            except Exception as exc:  # a lost Connect server: the query's own error is the one raised
                if not remote:
                    raise
                log.warning("query %s: could not stop it or read its last progress (%s)", query.id, exc)
        recorder.close()
    return [(query, recorder.records(query)) for query in queries]


def _optional_count(text: str) -> int | None:
    """A positive whole number, or None for ``""``/``"None"`` (what an unset DAG Param renders)."""
    if text.strip() in ("", "None", "null"):
        return None
    value = int(text)
    if value < 1:
        raise ValueError(f"expected a positive count, got {text!r}")
    return value


def add_run_arguments(parser) -> None:
    """The command-line flags every job shares, which the run pattern
    (``watermark_ops.airflow.run.watermarked_run``) passes: ``--checkpoint`` (required),
    ``--trigger`` (dest ``spark_trigger``), ``--run-tag``, and ``--max-files-per-trigger``,
    ``--master``, ``--shuffle-partitions``; for the Connect launch ``--remote`` (``sc://`` URL),
    ``--session-id`` and ``--conf KEY=VALUE`` (dest ``spark_conf``)."""
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint location (local path or URI)")
    parser.add_argument("--trigger", dest="spark_trigger", choices=list(SPARK_TRIGGERS), default="availableNow",
                        help="Spark trigger: availableNow (default) or the deprecated once")
    parser.add_argument("--run-tag", help="stamped on every progress record (the DAG passes its run id)")
    parser.add_argument("--max-files-per-trigger", type=_optional_count,
                        help="the file source's maxFilesPerTrigger: several micro-batches per run "
                             "(empty or None: all new files in one)")
    parser.add_argument("--master", help="Spark master when not launched by spark-submit (e.g. local[2])")
    parser.add_argument("--shuffle-partitions", type=int,
                        help="spark.sql.shuffle.partitions (default: 2 per local core; frozen in the checkpoint)")
    parser.add_argument("--remote", metavar="URL",
                        help="run on a Spark Connect server (sc://host:port) instead of a Spark application of its own")
    parser.add_argument("--session-id", metavar="UUID",
                        help="with --remote: the server-side session to use (a supervisor stops its queries "
                             "when it kills this driver)")
    parser.add_argument("--conf", dest="spark_conf", action="append", default=[], metavar="KEY=VALUE",
                        help="with --remote: a session conf (repeatable), as spark-submit's --conf")


def _session(app_name: str, args):
    """The session the flags ask for: a Spark Connect client with ``--remote``, else a classic one."""
    remote = getattr(args, "remote", None)
    if not remote:
        return build_session(app_name, master=args.master, shuffle_partitions=args.shuffle_partitions)
    from watermark_ops.spark.connect import connect_session

    conf = {}
    for item in getattr(args, "spark_conf", None) or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--conf expects KEY=VALUE, got {item!r}")
        conf[key.strip()] = value
    if args.shuffle_partitions is not None:
        conf["spark.sql.shuffle.partitions"] = str(args.shuffle_partitions)
    conf.setdefault("spark.sql.session.timeZone", "UTC")
    from watermark_ops.spark.connect import new_session_id

    session_id = getattr(args, "session_id", None) or new_session_id()
    spark = connect_session(remote, session_id, conf)
    # Recorded in the checkpoint's lock, so that a later driver can stop what this one leaves behind.
    spark._watermark_ops_remote = {"url": remote, "session_id": session_id}
    return spark


def _server_lost(exc: BaseException) -> bool:
    """True when ``exc`` says the Spark Connect server is unreachable or lost this client's state
    (gRPC UNAVAILABLE, a closed channel, a session or operation the restarted server does not know)."""
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in (
        "StatusCode.UNAVAILABLE", "UNAVAILABLE", "failed to connect", "Connection refused", "Socket closed",
        "INVALID_HANDLE", "SESSION_CHANGED", "SESSION_NOT_FOUND", "OPERATION_NOT_FOUND", "Channel closed",
        "RetriesExceeded"))


def stop_session(spark, timeout_seconds: float = STOP_TIMEOUT_SECONDS) -> bool:
    """``spark.stop()`` in a daemon thread, waited for at most ``timeout_seconds``.

    Over Spark Connect a stop can hang (a client-side listener's event stream on 4.2); the driver
    then ends anyway (:func:`exit_process` does not wait for threads).

    :return: True when the stop returned in time.
    """
    done = threading.Event()

    def stop() -> None:
        try:
            spark.stop()
        except Exception as exc:  # noqa: BLE001 - a lost server cannot be stopped; the run's outcome stands
            log.warning("spark.stop() failed: %s", exc)
        finally:
            done.set()

    threading.Thread(target=stop, name="spark-stop", daemon=True).start()
    if not done.wait(timeout_seconds):
        log.warning("spark.stop() did not return within %.0f s: ending the driver without it", timeout_seconds)
        return False
    return True


def execute(app_name: str, args, run: Callable[[Any], dict]) -> tuple[int, dict | None]:
    """Build the session from the shared flags, call ``run(spark)``, stop the session.

    With ``--remote`` the session is a Spark Connect client (:func:`watermark_ops.spark.connect.connect_session`,
    versions checked first); otherwise a Spark application of its own (:func:`build_session`). The
    stop is bounded (:func:`stop_session`).

    :param run: returns ``{query name: {"query_id", "batches", ...}}`` (logged per query).
    :return: ``(0, result)``; ``(1, None)`` after logging the query's exception;
        ``(EXIT_CHECKPOINT_IN_USE, None)`` when another driver holds the checkpoint (logged);
        ``(EXIT_VERSION_MISMATCH, None)`` when the Connect server runs another Spark release;
        ``(EXIT_SERVER_LOST, None)`` when the Connect server cannot be reached or was lost mid-run.
    """
    from watermark_ops.spark.connect import ConnectVersionMismatch

    remote = getattr(args, "remote", None)
    try:
        spark = _session(app_name, args)
    except ConnectVersionMismatch as exc:
        log.error("not started: %s", exc)
        return EXIT_VERSION_MISMATCH, None
    except Exception as exc:
        if remote and _server_lost(exc):
            log.error("not started: the Spark Connect server %s cannot be reached: %s", remote, exc)
            return EXIT_SERVER_LOST, None
        raise
    lost = False
    try:
        result = run(spark)
    except CheckpointInUse as exc:
        log.error("not started: %s", exc)
        return EXIT_CHECKPOINT_IN_USE, None
    except Exception as exc:  # the query's exception, then a non-zero exit
        if remote and _server_lost(exc):
            lost = True
            log.error("the Spark Connect server %s was lost during the run (down or restarted): %s. The checkpoint "
                      "is restartable: the next run re-runs the batch in flight", remote, exc)
            return EXIT_SERVER_LOST, None
        log.error("streaming query failed: %s", exc)
        return 1, None
    finally:
        if not lost:
            stop_session(spark)
    for name, info in result.items():
        log.info("%s (query %s): %d micro-batches this run", name, info["query_id"], len(info["batches"]))
    return 0, result


def run_driver(main: Callable[[], int]) -> None:
    """The entry point of every job script: ``run_driver(main)`` under ``if __name__ == "__main__"``.

    Sets up the driver's logging, starts :func:`exit_with_launcher`, runs ``main`` (which returns the exit status), prints any
    exception that escapes it, and always ends with :func:`exit_process`. Letting an exception
    reach the interpreter's own exit is what hung drivers whose JVM was killed: finalization stops
    the daemon threads (the watchdog among them) and then deadlocks in py4j's ``__del__``. Even
    reporting can raise then (stderr is a broken pipe once the JVM is gone), hence the ``finally``.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.captureWarnings(True)  # the Trigger.Once deprecation goes to the driver log
    exit_with_launcher()
    code = 1
    try:
        code = main()
    except BaseException:  # noqa: BLE001 - reported here, then the process ends with status 1
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001 - stderr is a broken pipe once the JVM is gone
            pass
    finally:
        exit_process(code)


def exit_with_launcher(poll_seconds: float = 1.0) -> bool:
    """Under spark-submit, end this Python driver as soon as the JVM that launched it is gone.

    spark-submit's JVM (``PythonRunner``) starts the Python driver as its child. Airflow's
    SparkSubmitOperator.on_kill kills that JVM; the Python process would then be left behind,
    sometimes for good (py4j threads keep it alive). A daemon thread polls ``os.getppid()`` and
    exits the process with status 143 when the parent changes. Without spark-submit (plain
    ``python job.py``, where Python is the JVM's parent) it does nothing.

    :param poll_seconds: how often the parent is checked.
    :return: True when the watchdog was started.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return False
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent:
                # No logging here: a logging lock may be held by a thread that will never run again.
                os.write(2, f"spark-submit JVM (pid {parent}) is gone: stopping this driver\n".encode())
                os._exit(143)

    threading.Thread(target=watch, name="exit-with-launcher", daemon=True).start()
    return True


def exit_process(code: int) -> None:
    """Flush stdout/stderr and end the driver process now with ``code``, skipping interpreter
    finalization.

    After the spark-submit JVM died, normal finalization deadlocked here: py4j's ``__del__`` logs,
    and the logging lock was held by a daemon thread that finalization had frozen. Everything the
    job writes (sinks, checkpoint, progress log) is closed before this is called.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed or broken pipe must not stop the exit
            pass
    os._exit(code)
