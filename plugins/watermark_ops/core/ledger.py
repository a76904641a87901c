"""The late-row ledger: every row the watermark dropped, recovered from the checkpoint.

Spark counts only ``numRowsDroppedByWatermark``, and for an aggregation it counts late *groups*
after partial aggregation (48 late flights of one day showed as 8). The ledger replays each
micro-batch from what the checkpoint and the landing folder keep, without touching the job's plan:

1. the offset log: ``offsets/N`` holds the batch's watermark (``batchWatermarkMs``, the one it ran
   with), its processing time (``batchTimestampMs``) and, for a file source, the log offset it
   ended at (``{"logOffset": k}``, ``FileStreamSourceOffset``); ``offsets/N-1`` gives where it started;
2. the file source's log (``sources/<i>``, :mod:`watermark_ops.core.source_log`:
   ``FileStreamSourceLog`` / ``CompactibleFileStreamLog``): the files batch N read are those of
   the log offsets in ``(end of N-1, end of N]``;
3. the rule, from the job's progress log (``<checkpoint>.progress.jsonl``, field ``late_rule``,
   written by ``watermark_ops.spark.driver``; shape there):

   * ``window_end`` (a tumbling event-time window aggregation): a row is late when its window's
     end (``floor(event time / window_ms) * window_ms + window_ms``) is ``<=`` the watermark for
     late rows (``WatermarkSupport.watermarkExpression``: ``window.end <= watermark``);
   * ``event_time`` (deduplication, stream-stream join): late when the event time is ``<=`` that
     watermark. For the join's second input this is an approximation: Spark filters that side
     with a state watermark derived from the join's time-range condition;

   **Which watermark filters late rows** depends on the Spark version and a session conf, per
   batch (:func:`late_watermark_rule`). Spark >= 3.4 with
   ``spark.sql.streaming.statefulOperator.allowMultiple`` true (its default; SPARK-40925) evicts
   state with the batch's own watermark but filters late input rows with the *previous* batch's:
   ``IncrementalExecution`` is built with ``prevOffsetSeqMetadata =
   offsetLog.offsetSeqMetadataForBatchId(N - 1)`` (``MicroBatchExecution.runBatch``), read from
   ``offsets/N-1`` on disk, so the first batch after a restart uses ``offsets/N-1`` exactly as a
   batch inside a run does, and batch 0 (no ``offsets/-1``) uses 0; ``PropagateWatermarkSimulator
   .getInputWatermarkForLateEvents(N)`` returns batch N-1's. Before 3.4, or with
   ``allowMultiple`` false (``UseSingleWatermarkPropagator``), late rows are filtered with the
   batch's own ``batchWatermarkMs``. The offset log records neither the version nor that conf:
   the progress record of each batch carries ``spark_version`` (pyspark's version string) and
   ``requested_conf["spark.sql.streaming.statefulOperator.allowMultiple"]`` (``"true"`` /
   ``"false"``, the session's value). A record without them (written before the recorder kept
   them) is read with the Spark >= 3.4 default: the previous batch's watermark, and the batch says
   the rule was assumed (``late_watermark_assumed``). With one data batch per run under
   ``availableNow`` both watermarks are equal (the trailing no-data batch carries the run's
   watermark into the next run); with several data batches per run (``maxFilesPerTrigger``) the
   previous one is lower and Spark drops fewer rows than the batch's own watermark would;

4. every row of those files, classified as the job classifies it (``spark_jobs/flight_inputs.py``
   ``classify``): rows the job quarantines (``invalid_encoding``, ``malformed_record``,
   ``null_event_time``, ``unparseable_event_time``, ``future_event_time``, ``no_arrival``) are
   counted as quarantined, never as late; the others are late or aggregated.

The ledger knows the inputs of the example's jobs by their event-time field
(:data:`INPUT_PROFILES`: the flights' ``dep_time``, the weather's ``time_hour``; their schemas are
copies of ``flight_inputs``' DDL, a test keeps them equal). A source that is not a file source
with a ``logOffset`` (Kafka, rate, ...) is reported as *not replayable*, never guessed. A corrupt
or missing log or landing file is a :class:`~watermark_ops.core.log_formats.ReadProblem` naming
it; the batches it concerns are left out (``replayed`` false), and nothing is fixed or deleted.
The ledger reads the checkpoint and the landing files only; :func:`write_late_rows` writes the
late rows to a sink folder of its own (never into the checkpoint).

All instants are epoch milliseconds UTC; event times are compared in microseconds, Spark's
timestamp precision. Pure core: no Airflow, no Spark; results are plain data with ``to_dict()``.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable
from urllib.parse import unquote, urlsplit

from watermark_ops.core.checkpoint import MAX_CONCURRENT_READS, Checkpoint, filesystem_for, open_storage, read_checkpoint
from watermark_ops.core.log_formats import ReadProblem
from watermark_ops.core.partition_skew import PartitionSkew, partition_skew, skew_before_each_batch
from watermark_ops.core.progress import progress_log_path, read_progress_log, run_report
from watermark_ops.core.source_log import MAX_LOG_OFFSETS_PER_READ, file_source_log_offset, read_source_log
from watermark_ops.core.times import iso_utc

__all__ = [
    "ALLOW_MULTIPLE_CONF",
    "INPUT_PROFILES",
    "BatchLedger",
    "InputProfile",
    "LateLedger",
    "LateRow",
    "LateRule",
    "LedgerError",
    "LateWatermarkRule",
    "classify_line",
    "late_watermark_rule",
    "late_ledger",
    "reconcile_run",
    "write_late_rows",
]

#: The tick files the driver lands for an owed trailing batch (``watermark_ops.spark.land_tick``): empty.
TICK_PREFIX = "watermark-ops-tick-"
_HOUR_US = 3_600_000_000
_LONG = (-(2**63), 2**63 - 1)
_INT = (-(2**31), 2**31 - 1)
#: The JSON kinds a landed value is checked against (``watermark_ops.spark.schema_kinds`` of the job's DDL).
_KINDS = ("long", "int", "double", "string")
_JACKSON_MAX_STRING = 20_000_000
# flight_inputs.ISO_DATE_TIME, with its parts captured (ASCII digits, as Java's \d).
_ISO = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]{1,9}))?)?"
                  r"(Z|[+-][0-9]{2}:?[0-9]{2})$")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


#: Spark's session conf (``SQLConf.STATEFUL_OPERATOR_ALLOW_MULTIPLE``, since 3.4, default true) that
#: decides which watermark filters late rows; recorded per batch in the progress record's ``requested_conf``.
ALLOW_MULTIPLE_CONF = "spark.sql.streaming.statefulOperator.allowMultiple"
#: The Spark release that filters late rows with the previous batch's watermark (SPARK-40925).
PREVIOUS_WATERMARK_SINCE = (3, 4)
_VERSION = re.compile(r"^\s*([0-9]+)\.([0-9]+)")


class LedgerError(ValueError):
    """Bad input for the ledger as a whole (e.g. a late rule of an unknown shape): names the file or record."""


@dataclass(frozen=True)
class LateWatermarkRule:
    """Which watermark a micro-batch filtered its late input rows with (module docstring, step 3).

    :ivar basis: ``"previous"`` (``offsets/N-1``'s ``batchWatermarkMs``; 0 for batch 0) or
        ``"current"`` (``offsets/N``'s).
    :ivar spark_version: the progress record's ``spark_version``, None when it has none.
    :ivar allow_multiple: the record's ``requested_conf[ALLOW_MULTIPLE_CONF]`` as a bool, None when absent.
    :ivar assumed: True when the record names neither: the Spark >= 3.4 default was assumed.
    :ivar reason: why, in words (names the version and conf it followed).
    """

    basis: str
    spark_version: str | None
    allow_multiple: bool | None
    assumed: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields."""
        return {"basis": self.basis, "spark_version": self.spark_version, "allow_multiple": self.allow_multiple,
                "assumed": self.assumed, "reason": self.reason}


def late_watermark_rule(record: dict[str, Any] | None, where: str = "progress record") -> LateWatermarkRule:
    """The watermark a batch filtered late rows with, from its progress record.

    * ``spark_version`` below 3.4: the batch's own (``"current"``): ``allowMultiple`` does not exist there;
    * else ``requested_conf[ALLOW_MULTIPLE_CONF]`` ``"false"``: ``"current"`` (``UseSingleWatermarkPropagator``);
      ``"true"``: ``"previous"`` (``PropagateWatermarkSimulator``);
    * neither recorded (records written before the recorder kept them), or an unparseable
      version without the conf: ``"previous"``, Spark >= 3.4's default, with ``assumed`` True.

    :param record: the batch's progress record (``spark_version``, ``requested_conf``), or None.
    :raises LedgerError: naming ``where`` when the conf is recorded but is neither ``"true"`` nor
        ``"false"`` (Spark refuses any other value, so the record is corrupt).
    """
    record = record or {}
    version = record.get("spark_version")
    version = version if isinstance(version, str) else None
    conf = record.get("requested_conf")
    raw = conf.get(ALLOW_MULTIPLE_CONF) if isinstance(conf, dict) else None
    allow: bool | None = None
    if raw is not None:
        text = str(raw).strip().lower()
        if text not in ("true", "false"):
            raise LedgerError(f"{where}: requested_conf[{ALLOW_MULTIPLE_CONF!r}] must be \"true\" or \"false\" "
                              f"(a Spark boolean conf), got {json.dumps(raw)[:80]}")
        allow = text == "true"
    match = _VERSION.match(version or "")
    release = (int(match.group(1)), int(match.group(2))) if match else None
    if release is not None and release < PREVIOUS_WATERMARK_SINCE:
        return LateWatermarkRule("current", version, allow, False,
                                 f"Spark {version} (before 3.4) filters late rows with the batch's own watermark")
    if allow is False:
        return LateWatermarkRule("current", version, allow, False,
                                 f"{ALLOW_MULTIPLE_CONF}=false: late rows are filtered with the batch's own watermark")
    if allow is True:
        return LateWatermarkRule("previous", version, allow, False,
                                 f"Spark {version or '>= 3.4'} with {ALLOW_MULTIPLE_CONF}=true filters late rows "
                                 "with the previous batch's watermark")
    known = f"Spark {version}" if release is not None else "Spark >= 3.4 (assumed: the record names no version)"
    return LateWatermarkRule("previous", version, None, True,
                             f"{known}; {ALLOW_MULTIPLE_CONF} not recorded, its default true assumed: late rows "
                             "are filtered with the previous batch's watermark")


# --------------------------------------------------------------------------------------------
# What the job does with a row


@dataclass(frozen=True)
class InputProfile:
    """How the job reads one landing folder: the JSON schema and the fields a good row needs.

    :ivar schema: ``{field: "long" | "int" | "double" | "string"}``, ``flight_inputs``' DDL
        without ``_corrupt_record``.
    :ivar required: ``{reason: field}``: the row is quarantined with ``reason`` when ``field`` is null.
    """

    schema: dict[str, str]
    required: dict[str, str] = field(default_factory=dict)


#: The example's inputs by event-time field (copies of ``flight_inputs.EVENT_SCHEMA_DDL`` and
#: ``WEATHER_SCHEMA_DDL``; ``tests/watermark_ops/core/test_ledger.py`` keeps them equal).
INPUT_PROFILES: dict[str, InputProfile] = {
    "dep_time": InputProfile(
        schema={"id": "long", "origin": "string", "dest": "string", "carrier": "string", "flight": "int",
                "tailnum": "string", "status": "string", "sched_dep_time": "string", "dep_time": "string",
                "arr_time": "string", "dep_delay": "double", "arr_delay": "double", "stream_time": "string"},
        required={"no_arrival": "arr_time"},
    ),
    "time_hour": InputProfile(
        schema={"id": "long", "origin": "string", "time_hour": "string", "temp": "double", "dewp": "double",
                "humid": "double", "wind_dir": "double", "wind_speed": "double", "wind_gust": "double",
                "precip": "double", "pressure": "double", "visib": "double", "stream_time": "string"},
    ),
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")  # allowNonNumericNumbers is off in the jobs


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _fits(value: Any, kind: str) -> bool:
    """Whether Spark's JSON reader converts ``value`` to the schema type ``kind`` (else the line is malformed)."""
    if value is None:
        return True
    if kind == "string":  # any JSON value; a non-string one becomes its JSON text
        return not (isinstance(value, str) and len(value) > _JACKSON_MAX_STRING)
    if isinstance(value, bool):
        return False
    if kind in ("long", "int"):
        low, high = _LONG if kind == "long" else _INT
        return isinstance(value, int) and low <= value <= high
    if kind == "double":
        return isinstance(value, (int, float))
    return False


def _event_time_us(value: Any) -> int | None:
    """``flight_inputs.classify``'s event time: ISO-8601 date-time with a zone → epoch µs, else None."""
    if not isinstance(value, str):
        return None
    match = _ISO.match(value)
    if not match:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        if zone == "Z":
            offset = timedelta(0)
        else:
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            offset = sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        instant = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0),
                           int((fraction or "").ljust(6, "0")[:6]), tzinfo=timezone(offset))
    except ValueError:
        return None
    return (instant - _EPOCH) // timedelta(microseconds=1)


def classify_line(raw: bytes, profile: InputProfile, event_time_field: str, batch_timestamp_ms: int,
                  max_event_time_ahead_ms: int | None = None) -> list[tuple[str | None, int | None, dict | None]]:
    """The rows Spark's file source makes of one landed line, classified as the job classifies them.

    Mirrors ``flight_inputs.json_reader`` + ``classify``: a blank line is no row; only the first
    JSON value of a line is read; an array of objects is one row per object; the first reason that
    applies: ``invalid_encoding`` (not UTF-8), ``malformed_record`` (not a JSON object of the
    schema: wrong-typed field, NaN/Infinity, no schema field at all), ``null_event_time``,
    ``unparseable_event_time``, ``future_event_time`` (event time after ``batch_timestamp_ms +
    max_event_time_ahead_ms``, only when that is given), then ``profile.required``'s reasons.

    :param raw: the line's bytes, without its line break.
    :return: ``[(reason or None for a good row, event time in epoch µs or None, the JSON object or None)]``.
    """
    if not raw.strip():
        return []
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return [("invalid_encoding", None, None)]
    try:
        value, _ = _DECODER.raw_decode(text.lstrip())
    except (ValueError, RecursionError):
        return [("malformed_record", None, None)]
    if isinstance(value, list):
        if not value:
            return []
        if not all(isinstance(item, dict) for item in value):
            return [("malformed_record", None, None)]
        objects = value
    elif isinstance(value, dict):
        objects = [value]
    else:
        return [("malformed_record", None, None)]
    rows = []
    for obj in objects:
        fields = {name: obj.get(name) for name in profile.schema}
        if (not all(_fits(fields[name], kind) for name, kind in profile.schema.items())
                or all(v is None for v in fields.values())):
            rows.append(("malformed_record", None, obj))
            continue
        if fields[event_time_field] is None:
            rows.append(("null_event_time", None, obj))
            continue
        event_us = _event_time_us(fields[event_time_field])
        if event_us is None:
            rows.append(("unparseable_event_time", None, obj))
            continue
        if max_event_time_ahead_ms is not None and event_us > (batch_timestamp_ms + max_event_time_ahead_ms) * 1000:
            rows.append(("future_event_time", event_us, obj))
            continue
        reason = next((r for r, name in profile.required.items() if fields.get(name) is None), None)
        rows.append((reason, event_us, obj))
    return rows


@dataclass(frozen=True)
class LateRule:
    """Which rows a query drops as late (the ``late_rule`` of its progress records).

    :ivar kind: ``window_end`` or ``event_time`` (module docstring).
    :ivar event_time: the landed event-time field per source, in plan order.
    :ivar window_ms: the tumbling window's length (``window_end`` only).
    :ivar delay_threshold_ms: the ``withWatermark`` delay threshold per source (informative: the
        watermark itself is read from the offset log), None when unknown.
    :ivar max_event_time_ahead_ms: the job's future-time tolerance, None when off.
    :ivar inputs: how each source's landed lines are read (the rule's ``inputs``: the job's schema
        and required fields, ``watermark_ops.spark.late_rule(schema=...)``), one per source; empty
        for a rule recorded without them (then :data:`INPUT_PROFILES` is looked up by event-time field).
    """

    kind: str
    event_time: tuple[str, ...]
    window_ms: int | None = None
    delay_threshold_ms: tuple[int | None, ...] = ()
    max_event_time_ahead_ms: int | None = None
    inputs: tuple[InputProfile, ...] = ()

    @classmethod
    def from_dict(cls, value: Any, where: str) -> LateRule:
        """Parse a progress record's ``late_rule``.

        :raises LedgerError: naming ``where`` when it is not a rule of a known kind and shape.
        """
        def bad(why: str) -> LedgerError:
            return LedgerError(f"{where}: late_rule {why}; got {json.dumps(value)[:200]}")

        if not isinstance(value, dict) or value.get("kind") not in ("window_end", "event_time"):
            raise bad('must be an object with "kind" "window_end" or "event_time"')
        fields = value.get("event_time")
        fields = [fields] if isinstance(fields, str) else fields
        if not isinstance(fields, list) or not fields or not all(isinstance(f, str) for f in fields):
            raise bad('needs "event_time": a field name, or one per source')
        window = value.get("window_ms")
        if value["kind"] == "window_end" and not (isinstance(window, int) and not isinstance(window, bool) and window > 0):
            raise bad('of kind window_end needs "window_ms" > 0')
        delays = value.get("delay_threshold_ms")
        delays = delays if isinstance(delays, list) else [delays] * len(fields)
        ahead = value.get("max_event_time_ahead_ms")
        if ahead is not None and (isinstance(ahead, bool) or not isinstance(ahead, int)):
            raise bad('"max_event_time_ahead_ms" must be an integer or null')
        inputs = value.get("inputs") or []
        if not isinstance(inputs, list) or (inputs and len(inputs) != len(fields)):
            raise bad('"inputs" must be a list with one entry per event-time field')
        profiles = []
        for entry in inputs:
            schema = entry.get("schema") if isinstance(entry, dict) else None
            required = (entry.get("required") or {}) if isinstance(entry, dict) else None
            if (not isinstance(schema, dict) or not schema or not isinstance(required, dict)
                    or not all(isinstance(k, str) and v in _KINDS for k, v in schema.items())
                    or not all(isinstance(k, str) and isinstance(v, str) for k, v in required.items())):
                raise bad(f'inputs: expected {{"schema": {{field: one of {sorted(_KINDS)}}}, '
                          f'"required": {{reason: field}}}} per source')
            profiles.append(InputProfile(dict(schema), dict(required)))
        return cls(value["kind"], tuple(fields), window if value["kind"] == "window_end" else None,
                   tuple(d if isinstance(d, int) else None for d in delays), ahead, tuple(profiles))

    def profile_of(self, source_index: int) -> InputProfile | None:
        """How the source at ``source_index`` is read: the rule's own ``inputs`` entry, else the
        example's profile of its event-time field (:data:`INPUT_PROFILES`), else None."""
        if self.inputs:
            return self.inputs[0] if len(self.inputs) == 1 else (
                self.inputs[source_index] if source_index < len(self.inputs) else None)
        return INPUT_PROFILES.get(self.field_of(source_index) or "")

    def field_of(self, source_index: int) -> str | None:
        """The event-time field of the source at ``source_index`` (None: the rule names none)."""
        if len(self.event_time) == 1:
            return self.event_time[0]
        return self.event_time[source_index] if source_index < len(self.event_time) else None

    def late(self, event_us: int, watermark_ms: int) -> tuple[bool, int, int | None, int | None]:
        """Apply the rule to one good row.

        :return: ``(late, late_by_ms, window_start_ms, window_end_ms)``: ``late_by_ms`` is how far
            the rule's instant (window end, or event time) lies behind the watermark (>= 0 when late).
        """
        watermark_us = watermark_ms * 1000
        if self.kind == "window_end":
            size = self.window_ms * 1000
            start = event_us // size * size
            end = start + size
            return end <= watermark_us, (watermark_us - end) // 1000, start // 1000, end // 1000
        return event_us <= watermark_us, (watermark_us - event_us) // 1000, None, None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, the progress log's shape."""
        document = {"kind": self.kind, "event_time": list(self.event_time), "window_ms": self.window_ms,
                    "delay_threshold_ms": list(self.delay_threshold_ms),
                    "max_event_time_ahead_ms": self.max_event_time_ahead_ms}
        if self.inputs:
            document["inputs"] = [{"event_time": f, "schema": dict(p.schema), "required": dict(p.required)}
                                  for f, p in zip(self.event_time, self.inputs)]
        return document


# --------------------------------------------------------------------------------------------
# The ledger


@dataclass(frozen=True)
class LateRow:
    """One row a micro-batch dropped as late.

    :ivar batch_id: the micro-batch that read and dropped it.
    :ivar source_file: the landed file's URI (as in the file source's log).
    :ivar line: the line number in that file (1-based).
    :ivar event: the landed JSON object, as read.
    :ivar event_time_ms: its event time (epoch ms UTC).
    :ivar watermark_ms: the watermark it missed: the batch's watermark for late rows
        (:attr:`BatchLedger.late_watermark_ms`: ``offsets/N-1``'s or ``offsets/N``'s ``batchWatermarkMs``).
    :ivar late_by_ms: watermark minus the rule's instant (window end or event time), >= 0.
    :ivar window_start_ms: / window_end_ms: its window (``window_end`` rule), else None.
    """

    batch_id: int
    source_file: str
    line: int
    event: dict[str, Any]
    event_time_ms: int
    watermark_ms: int
    late_by_ms: int
    window_start_ms: int | None = None
    window_end_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields plus ``event_time`` and ``watermark`` as ISO-8601 UTC text."""
        return {
            "batch_id": self.batch_id, "source_file": self.source_file, "line": self.line, "event": self.event,
            "event_time_ms": self.event_time_ms, "event_time": iso_utc(self.event_time_ms),
            "watermark_ms": self.watermark_ms, "watermark": iso_utc(self.watermark_ms),
            "late_by_ms": self.late_by_ms, "window_start_ms": self.window_start_ms, "window_end_ms": self.window_end_ms,
        }


@dataclass(frozen=True)
class BatchLedger:
    """One micro-batch replayed (or why it could not be).

    :ivar batch_id: the batch id (``offsets/N``).
    :ivar replayed: False when something it needs could not be read (see the ledger's problems):
        its counts are then 0 and must not be used.
    :ivar watermark_ms: ``batchWatermarkMs``, the watermark the batch ran with (epoch ms UTC).
    :ivar timestamp_ms: ``batchTimestampMs``, its processing time.
    :ivar files: the landed files it read (URIs, log order; tick files left out).
    :ivar log_offsets: ``{source id: [first, last]}`` log offsets read per file source (empty
        range: ``first > last``, a no-data batch).
    :ivar rows_read: rows the file source made of those files (Spark's ``numInputRows``).
    :ivar rows_quarantined: ``{reason: rows}`` the job keeps aside.
    :ivar rows_aggregated: good rows that were not late (they reached the stateful operator).
    :ivar late_rows: every late row.
    :ivar spark_input_rows: / spark_rows_dropped: the progress log's ``input_rows`` and
        ``rows_dropped_by_watermark`` (late groups) for the batch, None without a record.
    :ivar rule: the late rule applied, None when there was none.
    :ivar late_watermark_ms: the watermark the batch filtered late rows with (epoch ms UTC):
        ``offsets/N-1``'s ``batchWatermarkMs`` (0 for batch 0) or the batch's own, per
        :attr:`late_watermark`; None when not replayed that far.
    :ivar late_watermark: the :class:`LateWatermarkRule` followed, None when there was no record.
    :ivar skew_before: the event-time skew between partitions (e.g. origins) entering the batch:
        each partition's newest event time over the batches before it, and how far it trailed the
        leader (:func:`~watermark_ops.core.partition_skew.skew_before_each_batch`); None when the
        progress log records no per-partition event times. A partition that trailed by more than
        the delay threshold is the one whose rows this batch drops.
    """

    batch_id: int
    replayed: bool
    watermark_ms: int | None = None
    timestamp_ms: int | None = None
    files: tuple[str, ...] = ()
    log_offsets: dict[str, list[int]] = field(default_factory=dict)
    rows_read: int = 0
    rows_quarantined: dict[str, int] = field(default_factory=dict)
    rows_aggregated: int = 0
    late_rows: tuple[LateRow, ...] = ()
    spark_input_rows: int | None = None
    spark_rows_dropped: int | None = None
    rule: LateRule | None = None
    skew_before: PartitionSkew | None = None
    late_watermark_ms: int | None = None
    late_watermark: LateWatermarkRule | None = None

    @property
    def rows_late(self) -> int:
        """Rows dropped as late."""
        return len(self.late_rows)

    @property
    def partition_column(self) -> str | None:
        """The job's partition column (the progress record's ``partition_column``), None when not recorded."""
        return self.skew_before.column if self.skew_before else None

    def late_by_partition(self) -> dict[str, int]:
        """Late rows per value of the job's partition column (:attr:`partition_column`); empty without one."""
        return self.late_by(self.partition_column) if self.partition_column else {}

    def late_by(self, key: str = "origin") -> dict[str, int]:
        """Late rows per value of the event's ``key`` field (``"?"`` when absent), descending."""
        counts: dict[str, int] = {}
        for row in self.late_rows:
            name = str(row.event.get(key) if row.event.get(key) is not None else "?")
            counts[name] = counts.get(name, 0) + 1
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

    def summary(self) -> dict[str, Any]:
        """JSON-ready, without the rows: ``{"batch_id", "replayed", "watermark_ms", "watermark",
        "timestamp_ms", "files", "log_offsets", "rows_read", "rows_quarantined", "rows_aggregated",
        "rows_late", "late_by_origin", "late_by_partition" (by the job's partition column), "worst_late_by_ms",
        "spark_input_rows", "spark_rows_dropped",
        "rule", "partition_column", "behind_leader_before_ms": {partition: ms} | None, "late_watermark_ms",
        "late_watermark" (ISO), "late_watermark_rule": LateWatermarkRule.to_dict() | None}`` (``partition_column``
        and ``behind_leader_before_ms`` from :attr:`skew_before`)."""
        return {
            "batch_id": self.batch_id, "replayed": self.replayed,
            "watermark_ms": self.watermark_ms, "watermark": iso_utc(self.watermark_ms),
            "timestamp_ms": self.timestamp_ms, "files": list(self.files), "log_offsets": self.log_offsets,
            "rows_read": self.rows_read, "rows_quarantined": dict(self.rows_quarantined),
            "rows_aggregated": self.rows_aggregated, "rows_late": self.rows_late,
            "late_by_origin": self.late_by("origin"), "late_by_partition": self.late_by_partition(),
            "worst_late_by_ms": max((r.late_by_ms for r in self.late_rows), default=None),
            "spark_input_rows": self.spark_input_rows, "spark_rows_dropped": self.spark_rows_dropped,
            "rule": self.rule.to_dict() if self.rule else None,
            "partition_column": self.skew_before.column if self.skew_before else None,
            "behind_leader_before_ms": ({p.partition: p.behind_leader_ms for p in self.skew_before.partitions}
                                        if self.skew_before else None),
            "late_watermark_ms": self.late_watermark_ms, "late_watermark": iso_utc(self.late_watermark_ms),
            "late_watermark_rule": self.late_watermark.to_dict() if self.late_watermark else None,
        }


@dataclass(frozen=True)
class LateLedger:
    """The late rows of a checkpoint's batches.

    :ivar checkpoint: the checkpoint location as shown.
    :ivar query_id: from ``metadata``.
    :ivar batches: one :class:`BatchLedger` per batch asked for, ascending.
    :ivar problems: files that could not be read or used (checkpoint, source log, landing, progress
        log), each naming the file and what was expected.
    :ivar not_replayable: sources that are not file sources with a ``logOffset``: ``[{"source",
        "offset", "description", "batch_ids"}]`` (their rows cannot be recovered from the checkpoint).
    :ivar found: False when there is no checkpoint folder at the location (or it is not one).
    :ivar partition_skew: each partition's newest event time through the newest batch asked for,
        how far it trails the leader, and its late rows in the replayed batches (late rows are
        counted by the event field named like the partition column); None when the progress log
        records no per-partition event times.
    """

    checkpoint: str
    query_id: str | None
    batches: tuple[BatchLedger, ...]
    problems: tuple[ReadProblem, ...] = ()
    not_replayable: tuple[dict[str, Any], ...] = ()
    found: bool = True
    partition_skew: PartitionSkew | None = None

    @property
    def complete(self) -> bool:
        """The checkpoint was found, every batch asked for was replayed and no source was unreplayable."""
        return self.found and all(b.replayed for b in self.batches) and not self.not_replayable

    @property
    def late_rows(self) -> list[LateRow]:
        """Every late row, in batch order."""
        return [row for batch in self.batches for row in batch.late_rows]

    def totals(self) -> dict[str, Any]:
        """Over the replayed batches: ``{"rows_read", "rows_aggregated", "rows_late",
        "rows_quarantined", "quarantined_by_reason", "late_by_batch": {id: rows},
        "late_by_origin": {origin: rows}, "late_by_partition": {value of the job's partition column: rows},
        "spark_rows_dropped"}``."""
        replayed = [b for b in self.batches if b.replayed]
        by_reason: dict[str, int] = {}
        by_origin: dict[str, int] = {}
        by_partition: dict[str, int] = {}
        for batch in replayed:
            for reason, rows in batch.rows_quarantined.items():
                by_reason[reason] = by_reason.get(reason, 0) + rows
            for origin, rows in batch.late_by("origin").items():
                by_origin[origin] = by_origin.get(origin, 0) + rows
            for name, rows in batch.late_by_partition().items():
                by_partition[name] = by_partition.get(name, 0) + rows
        return {
            "rows_read": sum(b.rows_read for b in replayed),
            "rows_aggregated": sum(b.rows_aggregated for b in replayed),
            "rows_late": sum(b.rows_late for b in replayed),
            "rows_quarantined": sum(by_reason.values()),
            "quarantined_by_reason": by_reason,
            "late_by_batch": {str(b.batch_id): b.rows_late for b in replayed},
            "late_by_origin": dict(sorted(by_origin.items(), key=lambda item: (-item[1], item[0]))),
            "late_by_partition": dict(sorted(by_partition.items(), key=lambda item: (-item[1], item[0]))),
            "spark_rows_dropped": sum(b.spark_rows_dropped or 0 for b in replayed),
        }

    def to_dict(self, rows: bool = False) -> dict[str, Any]:
        """JSON-ready: ``{"checkpoint", "query_id", "complete", "totals", "batches": [summary],
        "problems": [ReadProblem.to_dict()], "not_replayable", "partition_skew"}``, plus
        ``"late_rows"`` when ``rows``."""
        document = {
            "checkpoint": self.checkpoint, "query_id": self.query_id, "complete": self.complete,
            "totals": self.totals(), "batches": [b.summary() for b in self.batches],
            "problems": [p.to_dict() for p in self.problems], "not_replayable": list(self.not_replayable),
            "partition_skew": self.partition_skew.to_dict() if self.partition_skew else None,
        }
        if rows:
            document["late_rows"] = [r.to_dict() for r in self.late_rows]
        return document


def _landed_location(uri: str) -> str:
    """A file source URI → what ``open_storage`` reads: a local path for ``file:``, else an fsspec URL."""
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return unquote(parts.path)
    if parts.scheme in ("s3a", "s3n"):
        return "s3://" + uri.split("://", 1)[1]
    return uri


def _progress_records(checkpoint: str, query_id: str | None, problems: list[ReadProblem],
                      where: dict[str, Any] | None = None, log: Any = None) -> dict[int, dict]:
    """The last progress record of each batch id of the query (a re-run batch has several)."""
    if log is None:
        log = read_progress_log(progress_log_path(checkpoint), **(where or {}))
    problems.extend(ReadProblem("progress_log", log.location, message) for message in log.problems)
    records: dict[int, dict] = {}
    for record in log.records:
        if query_id is None or record.get("query_id") in (None, query_id):
            records[record["batch_id"]] = record
    return records


def late_ledger(checkpoint: Any, batch_ids: Iterable[int] | None = None, *, filesystem: Any = None,
                storage_options: dict[str, Any] | None = None, late_watermark: str | None = None) -> LateLedger:
    """Replay micro-batches of a checkpoint and list every row the watermark dropped.

    :param checkpoint: the query's checkpoint folder (local path or fsspec URL); its progress log
        ``<checkpoint>.progress.jsonl`` gives the late rule of each batch.
    :param batch_ids: the batches to replay (e.g. one run's, from ``run_report``); None: every
        batch with an offsets file.
    :param filesystem: / storage_options: as for :func:`~watermark_ops.core.checkpoint.read_checkpoint`,
        for the checkpoint, its progress log and the landed files on the same filesystem (the
        file source's ``s3a://`` URIs are read as ``s3://`` with it); other landed files are read
        from their own URIs (a ``file:`` URI locally, another scheme through fsspec).
        On object storage the batches are replayed concurrently (at most
        :data:`~watermark_ops.core.checkpoint.MAX_CONCURRENT_READS` at once), each file source
        log folder listed once.
    :param late_watermark: None (default): each batch's watermark for late rows follows its
        progress record (:func:`late_watermark_rule`); ``"previous"`` or ``"current"`` forces one
        rule on every batch (a what-if: what the other rule would have dropped).
    :return: a :class:`LateLedger`; never raises for bad or missing files: each is a problem
        naming it, and the batches it concerns have ``replayed`` False.
    :raises OSError: when the progress log exists but cannot be read.
    """
    if late_watermark not in (None, "previous", "current"):
        raise LedgerError(f"late_watermark must be None, 'previous' or 'current', got {late_watermark!r}")
    where = {"filesystem": filesystem, "storage_options": storage_options}
    storage, root = open_storage(checkpoint, **where)
    remote = storage.retry_delays != ()  # an object store (or another remote filesystem)
    if remote:  # the checkpoint and the progress log at once
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2) as pool:
            state_future = pool.submit(read_checkpoint, checkpoint, **where)
            log_future = pool.submit(read_progress_log, progress_log_path(storage.display(root)), **where)
            state = state_future.result()
            log = log_future.result()  # raises OSError here as the sequential read would
    else:
        state, log = read_checkpoint(checkpoint, **where), None
    problems: list[ReadProblem] = list(state.problems)
    records = _progress_records(state.location, state.query_id, problems, where, log)
    wanted = sorted(set(batch_ids)) if batch_ids is not None else [b.batch_id for b in state.batches
                                                                     if b.offsets_file is not None]
    unreplayable: dict[str, dict[str, Any]] = {}
    skew_before = skew_before_each_batch(records)
    listings: dict[str, Any] = {}  # each file source log folder listed once per ledger
    landed = _LandedFiles(filesystem, storage_options)

    def one(batch_id: int) -> tuple[BatchLedger, list[ReadProblem], dict[str, dict[str, Any]]]:
        own: list[ReadProblem] = []
        own_unreplayable: dict[str, dict[str, Any]] = {}
        batch = _replay(state, storage, root, batch_id, records.get(batch_id), own, own_unreplayable,
                        late_watermark, listings, landed)
        return replace(batch, skew_before=skew_before.get(batch_id)), own, own_unreplayable

    if remote and len(wanted) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(MAX_CONCURRENT_READS, len(wanted))) as pool:
            results = list(pool.map(one, wanted))
    else:
        results = [one(batch_id) for batch_id in wanted]
    batches = []
    for batch, own, own_unreplayable in results:  # in batch order, as a sequential replay adds them
        batches.append(batch)
        problems.extend(own)
        for source_id, entry in own_unreplayable.items():
            unreplayable.setdefault(source_id, {**entry, "batch_ids": []})["batch_ids"].extend(entry["batch_ids"])
    skew = None
    if wanted:  # the skew through the newest batch asked for, with the late rows of those replayed
        through = [records[k] for k in sorted(records) if k <= wanted[-1]]
        skew = partition_skew(through, watermark_ms=through[-1].get("watermark_ms") if through else None)
    if skew is not None:
        late: dict[str, int] = {}
        for batch in batches:
            if batch.replayed:
                for name, rows in batch.late_by(skew.column).items():
                    late[name] = late.get(name, 0) + rows
        skew = skew.with_late_rows(late)
    return LateLedger(checkpoint=state.location, query_id=state.query_id, batches=tuple(batches),
                      problems=tuple(problems), not_replayable=tuple(unreplayable.values()),
                      found=not any(p.kind in ("checkpoint_missing", "not_a_checkpoint") for p in state.problems),
                      partition_skew=skew)


class _LandedFiles:
    """Reads landed files by their file source URI: with the checkpoint's filesystem when the URI
    is on it (:func:`~watermark_ops.core.checkpoint.filesystem_for`), else by itself."""

    def __init__(self, filesystem: Any, storage_options: dict[str, Any] | None):
        self.filesystem = filesystem
        self.storage_options = storage_options

    def read(self, uri: str) -> bytes | Exception:
        location = _landed_location(uri)
        fs = filesystem_for(location, self.filesystem)
        options = self.storage_options if fs is None and "://" in location else None
        storage, path = open_storage(location, filesystem=fs, storage_options=options)
        return storage.read([path])(path)


def _replay(state: Checkpoint, storage: Any, root: str, batch_id: int, record: dict | None,
            problems: list[ReadProblem], unreplayable: dict[str, dict[str, Any]],
            force_basis: str | None = None, listings: dict[str, Any] | None = None,
            landed: _LandedFiles | None = None) -> BatchLedger:
    """One batch → :class:`BatchLedger` (``replayed`` False, with a problem, when it cannot be)."""
    batch = state.batch(batch_id)
    offsets = batch.offsets if batch else None
    spark_rows = {"spark_input_rows": int(record.get("input_rows") or 0) if record else None,
                  "spark_rows_dropped": int(record.get("rows_dropped_by_watermark") or 0) if record else None}
    if offsets is None:
        if batch is None or batch.offsets_file is None:
            problems.append(ReadProblem("missing", f"{state.location}/offsets/{batch_id}",
                                        "no offsets file for this batch (purged, or never written)", batch_id))
        return BatchLedger(batch_id, False, **spark_rows)
    previous = state.batch(batch_id - 1) if batch_id > 0 else None
    if batch_id > 0 and (previous is None or previous.offsets is None):
        problems.append(ReadProblem(
            "missing", f"{state.location}/offsets/{batch_id - 1}",
            f"batch {batch_id} cannot be replayed: the offsets of batch {batch_id - 1} (where it started reading) "
            "are not readable (purged by minBatchesToRetain, or corrupt)", batch_id))
        return BatchLedger(batch_id, False, offsets.watermark_ms, offsets.timestamp_ms, **spark_rows)
    rule = None
    where = f"{progress_log_path(state.location)} (batch {batch_id})"
    if record is None or record.get("late_rule") is None:
        problems.append(ReadProblem(
            "no_late_rule", progress_log_path(state.location),
            "no progress record with a late_rule for this batch: expected the job to record which rows it drops "
            "as late (a job older than the ledger, or a query without a watermark)", batch_id))
        return BatchLedger(batch_id, False, offsets.watermark_ms, offsets.timestamp_ms, **spark_rows)
    try:
        rule = LateRule.from_dict(record["late_rule"], where)
        which = late_watermark_rule(record, where)
    except LedgerError as err:
        problems.append(ReadProblem("bad_field", progress_log_path(state.location), str(err), batch_id))
        return BatchLedger(batch_id, False, offsets.watermark_ms, offsets.timestamp_ms, **spark_rows)
    if force_basis is not None and force_basis != which.basis:
        which = replace(which, basis=force_basis, reason=f"forced to the {force_basis} watermark (what-if); "
                                                         f"the record says: {which.reason}")
    # offsets/N-1 is readable here (checked above); batch 0 has none: Spark uses 0.
    late_ms = offsets.watermark_ms if which.basis == "current" else (previous.offsets.watermark_ms if previous else 0)
    extra = {"late_watermark_ms": late_ms, "late_watermark": which}
    ok = True
    read: list[tuple[int, str]] = []  # (source index, file URI)
    ranges: dict[str, list[int]] = {}
    for index, (source_id, end_offset) in enumerate(zip(offsets.source_ids, offsets.sources)):
        if end_offset is None:  # "-": the source has no offset yet
            continue
        end = file_source_log_offset(end_offset)
        if end is None:
            description = next((s.get("description") for s in (record.get("sources") or [])[index:index + 1]), None)
            entry = unreplayable.setdefault(source_id, {"source": source_id, "offset": end_offset,
                                                        "description": description, "batch_ids": []})
            entry["batch_ids"].append(batch_id)
            ok = False
            continue
        start = -1
        if previous is not None:
            before = dict(zip(previous.offsets.source_ids, previous.offsets.sources)).get(source_id)
            start = -1 if before is None else file_source_log_offset(before)
            if start is None:
                problems.append(ReadProblem("bad_field", previous.offsets_file or "",
                                            f"source {source_id}: expected a file source offset "
                                            f'{{"logOffset": k}}, got {json.dumps(before)[:80]}', batch_id - 1))
                ok = False
                continue
        ranges[source_id] = [start + 1, end]
        bad = _bad_log_offsets(batch_id, source_id, start, end, offsets.file)
        if bad is not None:  # a corrupt logOffset: never expanded into a huge range
            problems.append(bad)
            ok = False
            continue
        log = read_source_log(storage, f"{root}/sources/{source_id}", range(start + 1, end + 1), listings=listings)
        problems.extend(ReadProblem(p.kind, p.file, p.message, batch_id) for p in log.problems)
        if log.problems:
            ok = False
            continue
        for k in range(start + 1, end + 1):
            read.extend((index, f.path) for f in log.files[k])
    if not ok:
        return BatchLedger(batch_id, False, offsets.watermark_ms, offsets.timestamp_ms, log_offsets=ranges,
                           rule=rule, **spark_rows, **extra)
    files, rows_read, quarantined, aggregated, late = [], 0, {}, 0, []
    for index, uri in read:
        name = uri.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith(TICK_PREFIX):
            continue  # the driver's empty tick file: no rows
        files.append(uri)
        event_field = rule.field_of(index)
        profile = rule.profile_of(index)
        if profile is None:
            problems.append(ReadProblem("no_profile", uri, f"the late rule records no input schema for this source "
                                        f"(record it with watermark_ops.spark.late_rule(schema=...)) and no known "
                                        f"input has the event-time field {event_field!r}: expected one of "
                                        f"{sorted(INPUT_PROFILES)}", batch_id))
            ok = False
            continue
        raw = (landed or _LandedFiles(None, None)).read(uri)
        if isinstance(raw, Exception):
            problems.append(ReadProblem("unreadable", uri, f"cannot read the landed file the batch read: {raw!r}",
                                        batch_id))
            ok = False
            continue
        for number, line in enumerate(raw.splitlines(), start=1):
            for reason, event_us, obj in classify_line(line, profile, event_field, offsets.timestamp_ms,
                                                       rule.max_event_time_ahead_ms):
                rows_read += 1
                if reason is not None:
                    quarantined[reason] = quarantined.get(reason, 0) + 1
                    continue
                is_late, late_by, start_ms, end_ms = rule.late(event_us, late_ms)
                if not is_late:
                    aggregated += 1
                    continue
                late.append(LateRow(batch_id, uri, number, obj, event_us // 1000, late_ms, late_by, start_ms, end_ms))
    if not ok:
        return BatchLedger(batch_id, False, offsets.watermark_ms, offsets.timestamp_ms, log_offsets=ranges,
                           rule=rule, **spark_rows, **extra)
    return BatchLedger(batch_id, True, offsets.watermark_ms, offsets.timestamp_ms, tuple(files), ranges, rows_read,
                       quarantined, aggregated, tuple(late), rule=rule, **spark_rows, **extra)


def _bad_log_offsets(batch_id: int, source_id: str, start: int, end: int, file: str) -> ReadProblem | None:
    """A problem naming ``offsets/N`` when its log offset cannot follow ``offsets/N-1``'s ``start``:
    lower (a file source's log offset never decreases) or more than
    :data:`~watermark_ops.core.source_log.MAX_LOG_OFFSETS_PER_READ` ahead; None when plausible."""
    before = f"offsets/{batch_id - 1} ended at {start}" if batch_id > 0 else "the first batch starts at 0"
    if end < start:
        return ReadProblem("bad_field", file, f"source {source_id}: logOffset {end} is below where the batch started "
                           f"({before}): expected a log offset >= {start} (it never decreases)", batch_id)
    if end - start > MAX_LOG_OFFSETS_PER_READ:
        return ReadProblem("bad_field", file, f"source {source_id}: logOffset {end} is {end - start} log offsets "
                           f"ahead ({before}): expected at most {MAX_LOG_OFFSETS_PER_READ} (the file source adds one "
                           "log entry per micro-batch)", batch_id)
    return None


# --------------------------------------------------------------------------------------------
# The sink and the run's reconciliation


def write_late_rows(ledger: LateLedger, sink: Any, *, storage_options: dict[str, Any] | None = None,
                    filesystem: Any = None) -> list[str]:
    """Write the late rows to ``<sink>/batch=<N>.jsonl``, one JSON object per line (:meth:`LateRow.to_dict`).

    One file per replayed batch that read at least one landed file (an empty file when none of
    its rows was late), written atomically (a hidden ``.batch=<N>.jsonl.<uuid>.tmp`` in the same
    folder, then renamed over the old one) and idempotent: the content depends only on the
    checkpoint and the landed files, so a re-run rewrites the same bytes.

    :param sink: a folder (local path or fsspec URL), e.g. ``<output>_late``; never the checkpoint.
    :param filesystem: an fsspec filesystem to write with (``sink`` a path or URL on it);
        default: ``fsspec.core.url_to_fs(sink, **storage_options)``.
    :return: the files written, in batch order.
    :raises LedgerError: when ``sink`` lies inside the ledger's checkpoint.
    :raises OSError: when the sink cannot be written.
    """
    import fsspec

    if filesystem is not None:
        fs, folder = filesystem, filesystem._strip_protocol(os.fspath(sink))
    else:
        fs, folder = fsspec.core.url_to_fs(os.fspath(sink), **(storage_options or {}))
    folder = folder.rstrip("/")
    checkpoint = fs._strip_protocol(str(ledger.checkpoint)).rstrip("/")
    if folder == checkpoint or folder.startswith(checkpoint + "/"):
        raise LedgerError(f"{sink}: the late-rows sink must not be inside the checkpoint {ledger.checkpoint}")
    fs.makedirs(folder, exist_ok=True)
    written = []
    for batch in ledger.batches:
        if not batch.replayed or not batch.files:
            continue
        rows = sorted(batch.late_rows, key=lambda r: (r.source_file, r.line, r.event_time_ms))
        data = "".join(json.dumps(r.to_dict(), sort_keys=True) + "\n" for r in rows).encode("utf-8")
        target = f"{folder}/batch={batch.batch_id}.jsonl"
        temp = f"{folder}/.batch={batch.batch_id}.jsonl.{uuid.uuid4().hex}.tmp"
        with fs.open(temp, "wb") as handle:
            handle.write(data)
        try:
            fs.mv(temp, target)
        except Exception:
            fs.rm(temp)
            raise
        written.append(fs.unstrip_protocol(target) if "://" in os.fspath(sink) else target)
    return written


def reconcile_run(checkpoint: str, run_tag: str, quarantine_checkpoint: str | None = None,
                  sink: str | None = None, *, filesystem: Any = None,
                  storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The late rows of one run (the DAG's run id as ``--run-tag``) and its balance.

    ``rows_in`` (Spark's input rows of the run's batches, progress log) must equal
    ``rows_aggregated`` (the ledger's good rows that were not late) + ``rows_late`` (the ledger)
    + ``rows_quarantined`` (the quarantine query's ``observed_metrics["quarantine"]`` for the run).

    :param sink: when given, the late rows are written there (:func:`write_late_rows`).
    :param filesystem: / storage_options: how to reach the checkpoint, its progress logs and
        landed files, as for :func:`late_ledger`.
    :return: ``{"run_tag", "batch_ids", "rows_in", "rows_aggregated", "rows_late", "rows_quarantined",
        "balanced": bool, "rows_dropped_by_watermark_spark" (Spark's late groups), "late_by_batch",
        "late_by_origin", "late_by_partition", "worst_late_by_ms", "ledger_rows_read", "ledger_quarantined", "complete",
        "problems": [str], "not_replayable", "sink_files": [str]}``.
    :raises OSError: when a progress log or the sink cannot be read or written.
    """
    report = run_report(checkpoint, run_tag, quarantine_checkpoint, filesystem=filesystem,
                        storage_options=storage_options)
    ledger = late_ledger(checkpoint, report["batch_ids"], filesystem=filesystem, storage_options=storage_options)
    totals = ledger.totals()
    rows_in, quarantined = report["input_rows"], report["quarantined_rows"]
    return {
        "run_tag": run_tag,
        "batch_ids": report["batch_ids"],
        "rows_in": rows_in,
        "rows_aggregated": totals["rows_aggregated"],
        "rows_late": totals["rows_late"],
        "rows_quarantined": quarantined,
        "balanced": ledger.complete and rows_in == totals["rows_aggregated"] + totals["rows_late"] + quarantined,
        "rows_dropped_by_watermark_spark": report["rows_dropped_by_watermark"],
        "late_by_batch": totals["late_by_batch"],
        "late_by_origin": totals["late_by_origin"],
        "late_by_partition": totals["late_by_partition"],
        "worst_late_by_ms": max((r.late_by_ms for r in ledger.late_rows), default=None),
        "ledger_rows_read": totals["rows_read"],
        "ledger_quarantined": totals["rows_quarantined"],
        "complete": ledger.complete,
        "problems": list(dict.fromkeys([f"{p.file}: {p.message}" for p in ledger.problems]
                                       + report["progress_log_problems"])),
        "not_replayable": list(ledger.not_replayable),
        "sink_files": write_late_rows(ledger, sink, filesystem=filesystem_for(sink, filesystem),
                                      storage_options=storage_options) if sink else [],
    }
