"""The recorder: every micro-batch of a run's queries reduced to one line of the progress log.

With ``Trigger.AvailableNow`` the driver exits when the run is done and Spark's own metrics vanish
with it, so :class:`ProgressRecorder` keeps them: a ``StreamingQueryListener`` (classic sessions),
or polling the query (Spark Connect). The shape of a line, and of the late rule it carries:

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
     "partition_column": str | null,  # e.g. "station": the column event times are kept apart by, see below
     "event_time_max_ms_by_partition": {value: int | null} | null,  # newest event time per partition
     "sources": [{"description": str, "start_offset": ..., "end_offset": ..., "input_rows": int}],
     "spark_trigger": "availableNow" | "once",
     "requested_conf": {key: value},  # what this run's session asked for, of RECORDED_CONFS
     "spark_version": str,        # the driver's pyspark version (e.g. "4.2.0"): which late-row rule applies
     "late_rule": {...} | null,   # which rows this query drops as late, see below
     "started_with": {...} | null,  # what the run started: sources, stateful operators, watermarks,
                                    # windows (watermark_ops.core.state.plan.QueryShape.to_dict)
     "data_interval": {"start_ms": int, "end_ms": int} | null}  # the DAG run's data interval (epoch ms
                                    # UTC) when the run pattern launched the run, see below

``data_interval`` is the data interval of the Airflow run that launched this run (the run pattern
passes ``--data-interval-start/--data-interval-end``, :func:`add_data_interval_arguments`): the
stall classification judges the watermark's lag against its end (:mod:`watermark_ops.core.freshness`),
so a backfill of old data is on time for its interval. Null for a run launched otherwise.

``started_with`` is the shape of the query's analyzed plan as the run started it (the driver's
start check, :mod:`watermark_ops.spark.restart`): the next run's start check compares its own
query with it (:mod:`watermark_ops.core.state.held`).

``late_rule`` says which rows the query's stateful operator drops as late, so that a reader of the
checkpoint (``watermark_ops.core.ledger``) can recover every dropped row without guessing the plan.
The watermark a row is judged against is the one Spark filters late events with
(``IncrementalExecution.eventTimeWatermarkForLateEvents``): since Spark 3.4, with
``statefulOperator.allowMultiple`` true (the default), the previous batch's ``batchWatermarkMs``
(offsets/N-1; 0 for batch 0), else the batch's own (offsets/N); the record's ``spark_version`` and
``requested_conf`` say which. All instants epoch ms UTC::

    {"kind": "window_end",      # a tumbling event-time window aggregation: a row is late when the
     "event_time": "observed_at",  # end of its window (start = event time floored to window_ms) is
     "window_ms": 3600000,      #   <= the watermark (WatermarkSupport: window.end <= watermark)
     "delay_threshold_ms": 7200000, "max_event_time_ahead_ms": null}
    {"kind": "event_time",      # deduplication / stream-stream join: late when event time <= watermark
     "event_time": "observed_at" | ["ordered_at", "paid_at"],  # landed field, one per source in plan order
     "delay_threshold_ms": int | [int, ...], "max_event_time_ahead_ms": null}

``event_time`` names the field of the landed JSON event the query takes its event time from;
``max_event_time_ahead_ms`` is the job's ``--max-event-time-ahead`` (null: off), which decides
which rows are quarantined before they reach the watermark. A query without a watermark (the
quarantine queries) records null. :func:`late_rule` builds the dict. When the job reads its
landing folders with :func:`watermark_ops.spark.inputs.classified_json_stream` and passes the same
schema, the rule also carries ``"inputs": [{"event_time": field, "schema": {field: "long" | "int" |
"double" | "string"}, "required": {reason: field}}]`` (one per source in plan order), so the
ledger replays the landed lines with the job's own schema, whatever the job. For a job run by the
launcher (:mod:`watermark_ops.spark.launch`) each entry says what the launcher saw of the job's
reader and what the run pattern declared: ``{"event_time", "parsing": "job", "format": "csv" | ...,
"schema_ddl", "options", "pre_watermark": "module:function" | null, "reason_column", "watermark_column",
"schema": {}, "required": {}}``; such a source is replayed in Spark only (:mod:`watermark_ops.spark.replay`).

``event_time_max_ms_by_partition`` is the newest event time (epoch ms UTC) of the batch's rows per
value of ``partition_column`` (``{"north": ms, "south": ms}``; null: no row of it in the
batch), the skew Spark's one ``eventTime.max`` hides: all partitions share one watermark, so the
rows of a partition that trails the others are the ones dropped as late. A job records it by
wrapping its watermarked input in :func:`observe_partition_event_times` (``Dataset.observe``, no
change to the plan's output or state); :func:`progress_record` copies the metric out of the
batch's ``StreamingQueryProgress.observedMetrics``. Both fields are null for a query that does not.

``rows_dropped_by_watermark`` is Spark's own metric, counted at the stateful operator's input: for
an aggregation that input is already partially aggregated, so it counts late *groups* (one per
window, key and input partition), not late events; 48 late rows of one day showed as 8. Late
rows are filtered against the watermark of the previous batch: under ``availableNow`` the trailing
no-data batch makes that the watermark the run computed; under ``once`` it is one run older.

The shape of Spark's progress JSON is ``StreamingQueryProgress`` in
``sql/core/src/main/scala/org/apache/spark/sql/streaming/progress.scala``.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import datetime
from typing import Any

from watermark_ops.core.freshness import data_interval
from watermark_ops.core.ledger.rule import ALLOW_MULTIPLE_CONF
from watermark_ops.spark.trigger import FROZEN_CONFS

log = logging.getLogger("watermark_ops.spark")

__all__ = ["OTHER_PARTITION", "POLL_SECONDS", "RECORDED_CONFS", "ProgressRecorder", "add_data_interval_arguments",
           "data_interval_of", "observe_partition_event_times", "observed_metrics", "progress_record"]

# ALLOW_MULTIPLE_CONF (core.ledger.rule): whether late rows are filtered against the previous batch's
# watermark (true, the Spark 3.4+ default) or the current one; a session conf the offset log does
# not record, so the recorder does.
#: The confs each progress record carries under ``requested_conf`` (the session's values).
RECORDED_CONFS = (*FROZEN_CONFS, ALLOW_MULTIPLE_CONF)
#: Over Spark Connect: how often (seconds) a run records the finished batches of a running query.
POLL_SECONDS = 1.0


def _iso_to_ms(text: str | None) -> int | None:
    if not text:
        return None
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


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
    :param partitions: the values to keep apart (e.g. ``("north", "south", "east")``), non-empty.
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
                    late_rule: dict[str, Any] | None = None, spark_version: str | None = None,
                    started_with: dict[str, Any] | None = None,
                    data_interval: dict[str, int] | None = None) -> dict[str, Any]:
    """Reduce one ``StreamingQueryProgress`` JSON (a dict) to the progress-log line shape above;
    ``late_rule`` is the query's (:func:`late_rule`), None for a query without a watermark;
    ``started_with`` what the run started (``QueryShape.to_dict()``), None when not checked;
    ``data_interval`` the launching DAG run's ``{"start_ms", "end_ms"}`` (epoch ms UTC), or None;
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
        "started_with": started_with,
        "data_interval": dict(data_interval) if data_interval else None,
    }


def add_data_interval_arguments(parser) -> None:
    """Add ``--data-interval-start`` / ``--data-interval-end`` to an ``argparse`` parser: the data
    interval of the DAG run that launched this run (ISO-8601 text, as the run pattern renders
    ``{{ data_interval_start }}``; empty or ``None``: none), read back by :func:`data_interval_of`."""
    for edge in ("start", "end"):
        parser.add_argument(f"--data-interval-{edge}", metavar="ISO-8601",
                            help=f"the {edge} of the launching DAG run's data interval: stamped on every progress "
                                 "record, the watermark's lag is judged against its end")


def data_interval_of(args: Any) -> dict[str, int] | None:
    """The parsed flags of :func:`add_data_interval_arguments` → ``{"start_ms", "end_ms"}`` (epoch ms
    UTC), None when either is absent (a parser without them, or a run without a data interval).

    :raises ValueError: for text that is not an instant, or an end before the start.
    """
    return data_interval(getattr(args, "data_interval_start", None), getattr(args, "data_interval_end", None))


def _progress_dict(progress: Any) -> dict[str, Any]:
    """A ``StreamingQuery.recentProgress`` entry as plain JSON values: pyspark 4 gives
    ``StreamingQueryProgress`` objects (a ``dict`` subclass whose nested values are ``Row`` and
    ``uuid`` objects: their ``json`` is the plain form), 3.5 the parsed dicts themselves."""
    return json.loads(progress.json) if hasattr(progress, "json") else progress


def append_json_lines(location: str, records: list[dict[str, Any]]) -> None:
    """Append ``records`` to the JSON-lines file at ``location`` (a path or fsspec URL; its folder is
    made when missing): the progress log's and the replay log's way of writing."""
    import fsspec

    fs, path = fsspec.core.url_to_fs(location)
    parent = fs._parent(path)
    if parent:
        fs.makedirs(parent, exist_ok=True)
    with fs.open(path, "a") as handle:
        handle.write("".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in records))


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

    def __init__(self, spark, run_tag: str | None, spark_trigger: str, listen: bool = True,
                 data_interval: dict[str, int] | None = None):
        """:param data_interval: the launching DAG run's ``{"start_ms", "end_ms"}`` (epoch ms UTC,
        :func:`data_interval_of`), stamped on every record; None: not stamped."""
        self._spark = spark
        self._listen = listen
        self._run_tag = run_tag
        self._data_interval = data_interval
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
        self._rules: dict[str, Any] = {}  # query id -> late rule, or a function of the first progress JSON
        self._triggers: dict[str, str] = {}  # query id -> its Spark trigger, when not the recorder's
        self._started: dict[str, dict[str, Any] | None] = {}  # query id -> what it started with
        self._written: set[tuple[str, str, int]] = set()
        self._lock = threading.Lock()
        self._listener = None

    @property
    def listens(self) -> bool:
        """True when a listener records each batch as it completes; False: the caller polls :meth:`flush`."""
        return self._listen

    def register(self, query, log_path: str, late_rule: Any = None, spark_trigger: str | None = None,
                 started_with: dict[str, Any] | None = None) -> None:
        """Record the batches of ``query`` (a ``StreamingQuery``) into ``log_path``.

        :param late_rule: the query's late rule (a dict), or a function that returns it from the
            query's first progress JSON (called once: the launcher matches its sources then).
        :param spark_trigger: the query's Spark trigger when it is not the recorder's own.
        :param started_with: what the query started with (its start check's shape), recorded on
            every batch.
        """
        self._logs[str(query.id)] = log_path
        self._rules[str(query.id)] = late_rule
        self._started[str(query.id)] = started_with
        if spark_trigger:
            self._triggers[str(query.id)] = spark_trigger
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
        query_id = str(progress.get("id"))
        path = self._logs.get(query_id)
        if path is None:
            return
        key = (query_id, str(progress.get("runId")), int(progress["batchId"]))
        with self._lock:
            if key in self._written:
                return
            self._written.add(key)
            record = progress_record(progress, self._run_tag, self._triggers.get(query_id, self._spark_trigger),
                                     self._requested_conf, self._rule(query_id, progress), self._spark_version,
                                     self._started.get(query_id), self._data_interval)
            append_json_lines(path, [record])

    def _rule(self, query_id: str, progress: dict[str, Any]) -> dict[str, Any] | None:
        """The query's late rule, built from ``progress`` the first time when given as a function."""
        rule = self._rules.get(query_id)
        if callable(rule):
            try:
                rule = rule(progress)
            except Exception:  # noqa: BLE001 - a rule that cannot be built must not lose the batch
                log.exception("could not build the late rule of query %s: recorded without one", query_id)
                rule = None
            self._rules[query_id] = rule
        return rule

    def flush(self, query) -> None:
        """Write the batches of ``query`` that the listener has not written yet."""
        for progress in query.recentProgress:
            self._write(_progress_dict(progress))

    def records(self, query) -> list[dict[str, Any]]:
        """This run's batches of ``query`` as progress-log records, oldest first."""
        query_id = str(query.id)
        return [
            progress_record(progress, self._run_tag, self._triggers.get(query_id, self._spark_trigger),
                            self._requested_conf, self._rule(query_id, progress), self._spark_version,
                            self._started.get(query_id), self._data_interval)
            for progress in (_progress_dict(p) for p in query.recentProgress)
        ]

    def close(self) -> None:
        """Unregister the listener."""
        if self._listener is not None:
            self._spark.streams.removeListener(self._listener)
            self._listener = None
