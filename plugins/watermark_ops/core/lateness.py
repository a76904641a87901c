"""Late-data accounting and advice: how large should the watermark delay threshold be?

Two views of lateness, both in epoch milliseconds UTC (durations in ms, or ``timedelta``):

* **What Spark dropped**, per run, from the job's progress log (``<checkpoint>.progress.jsonl``,
  written by ``watermark_ops.spark.ProgressRecorder``; one line per micro-batch):
  ``rows_dropped_by_watermark`` / ``input_rows`` over the run's batches. A run is one start of
  the query (Spark's ``run_id``, new at each restart; ``run_tag`` is the Airflow run id the job
  was given). Spark's ``numRowsDroppedByWatermark`` is counted at each stateful operator's input:
  for an aggregation that input is already partially aggregated, so it counts late *groups*
  and the rate is a lower bound of the share of late events; for ``dropDuplicatesWithinWatermark``
  and a stream-stream join it counts raw rows (measured in ``tests/spark_jobs/test_flight_weather_join.py``).
  Which watermark those rows missed follows the Spark version and a session conf, per batch
  (:func:`watermark_ops.core.ledger.late_watermark_rule`): Spark >= 3.4 with
  ``spark.sql.streaming.statefulOperator.allowMultiple`` true (the default) filters late rows with
  the *previous* batch's watermark (``offsets/N-1``; 0 for batch 0), before 3.4 or with it false
  with the batch's own. Each run says which (:attr:`RunDrops.late_watermark`); records that name
  neither the version nor the conf (written before the recorder kept them) are read with the
  Spark >= 3.4 default, and the run says it was assumed.
* **How late the data itself is**, from the landing folder the stream reads: in arrival order
  (``stream_time``), each event's *lateness* is how far its event time lies behind the maximum
  event time seen so far (that event included, so lateness >= 0). With delay threshold ``D`` the
  watermark is ``max event time - D`` and Spark drops an event whose event time is ``<=`` the
  watermark, i.e. whose lateness is ``>= D``. :func:`smallest_delay_threshold` gives the smallest
  ``D`` that keeps the share of such events below a target (1 % and 0.1 % by default).

The advice models a watermark that follows every single event. Spark moves it once per
micro-batch (from the previous batch's maximum), and since 3.4 (``allowMultiple`` true, the
default) filters late rows with the watermark of the batch before that, one more batch behind;
both only let the watermark that drops rows lag further behind the model, so the advice is
conservative under either rule: a threshold it gives drops at most the share it promises. It is per input:
a query with several watermarked inputs under the ``max`` policy also drops an input's rows
behind the *other* input's watermark, which no threshold on this input alone can prevent.

Pure core: no Airflow, no Spark; :func:`lateness_report` returns a :class:`LatenessReport` (plain
data). ``watermark_ops.render`` draws it; ``watermark-ops lateness`` is its terminal face.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Sequence

from watermark_ops.core.jsontext import loads
from watermark_ops.core.progress import progress_log_path, read_progress_log

__all__ = [
    "ARRIVAL_FIELD",
    "DEFAULT_TARGETS",
    "EVENT_TIME_FIELDS",
    "Advice",
    "LandedLateness",
    "LatenessError",
    "LatenessReport",
    "RunDrops",
    "advise",
    "drops_per_run",
    "landed_lateness",
    "lateness_report",
    "observed_lateness",
    "smallest_delay_threshold",
    "spark_interval",
]

#: Drop-rate targets of the advice: 1 % and 0.1 %.
DEFAULT_TARGETS = (0.01, 0.001)
#: Event-time fields recognised in landed events, in order: the flights' and the weather's.
EVENT_TIME_FIELDS = ("dep_time", "time_hour")
#: The field telling when an event reached the stream (the arrival order).
ARRIVAL_FIELD = "stream_time"
#: Problems kept per landing folder (the count is always complete).
_MAX_PROBLEMS = 20


class LatenessError(ValueError):
    """Bad input for the lateness report: names the file, line or value and what was expected."""


# --------------------------------------------------------------------------------------------
# What Spark dropped, per run (progress log)


@dataclass(frozen=True)
class RunDrops:
    """Rows dropped by the watermark during one run of a query.

    :ivar query_id: the query's id (the checkpoint's ``metadata``).
    :ivar run_id: Spark's run id, new at every (re)start of the query.
    :ivar run_tag: the tag the job was started with (the Airflow run id), or None.
    :ivar batch_ids: the micro-batches the run executed, ascending.
    :ivar started_ms: timestamp of the run's first progress record (epoch ms UTC), or None.
    :ivar input_rows: rows read by the run, all sources together.
    :ivar rows_dropped_by_watermark: Spark's ``numRowsDroppedByWatermark`` summed over the run's
        batches and stateful operators (late groups for an aggregation, raw rows for
        deduplication and stream-stream joins).
    :ivar late_watermark: which watermark the run's batches filtered late rows with:
        ``"previous"`` (the previous batch's), ``"current"`` (each batch's own), ``"mixed"``, or
        None when no record of the run has a ``late_rule`` (a query without a watermark).
    :ivar late_watermark_assumed: True when a record named neither ``spark_version`` nor
        ``allowMultiple`` and Spark >= 3.4's default was assumed for it.
    """

    query_id: str | None
    run_id: str
    run_tag: str | None
    batch_ids: tuple[int, ...]
    started_ms: int | None
    input_rows: int
    rows_dropped_by_watermark: int
    late_watermark: str | None = None
    late_watermark_assumed: bool = False

    @property
    def drop_rate(self) -> float | None:
        """``rows_dropped_by_watermark / input_rows`` (0..1), None for a run that read nothing."""
        return self.rows_dropped_by_watermark / self.input_rows if self.input_rows else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field plus ``drop_rate``."""
        return {
            "query_id": self.query_id, "run_id": self.run_id, "run_tag": self.run_tag,
            "batch_ids": list(self.batch_ids), "started_ms": self.started_ms,
            "input_rows": self.input_rows, "rows_dropped_by_watermark": self.rows_dropped_by_watermark,
            "drop_rate": self.drop_rate, "late_watermark": self.late_watermark,
            "late_watermark_assumed": self.late_watermark_assumed,
        }


def drops_per_run(records: Iterable[dict[str, Any]]) -> list[RunDrops]:
    """Group progress-log records (shape in ``watermark_ops.spark.recorder``) by run.

    :param records: progress-log records of one checkpoint, any order.
    :return: one :class:`RunDrops` per ``(query_id, run_id)``, in the order the runs started
        (first ``timestamp_ms``). Records of triggers that ran no batch (``executed`` false)
        count no rows and add no batch id. A record whose ``allowMultiple`` value is corrupt
        adds nothing to ``late_watermark`` (the ledger names it).
    """
    from watermark_ops.core.ledger.rule import LedgerError, late_watermark_rule

    runs: dict[tuple[Any, Any], dict[str, Any]] = {}
    for record in records:
        key = (record.get("query_id"), record.get("run_id"))
        run = runs.setdefault(key, {"run_tag": record.get("run_tag"), "batch_ids": set(), "started_ms": None,
                                    "input_rows": 0, "dropped": 0, "bases": set(), "assumed": False})
        stamp = record.get("timestamp_ms")
        if stamp is not None and (run["started_ms"] is None or stamp < run["started_ms"]):
            run["started_ms"] = stamp
        if record.get("executed", True) is False:
            continue
        run["batch_ids"].add(int(record["batch_id"]))
        run["input_rows"] += int(record.get("input_rows") or 0)
        run["dropped"] += int(record.get("rows_dropped_by_watermark") or 0)
        if record.get("late_rule") is not None:
            try:
                which = late_watermark_rule(record)
            except LedgerError:
                continue
            run["bases"].add(which.basis)
            run["assumed"] = run["assumed"] or which.assumed
    result = [
        RunDrops(query_id=q, run_id=str(r), run_tag=run["run_tag"], batch_ids=tuple(sorted(run["batch_ids"])),
                 started_ms=run["started_ms"], input_rows=run["input_rows"],
                 rows_dropped_by_watermark=run["dropped"],
                 late_watermark=(None if not run["bases"] else next(iter(run["bases"])) if len(run["bases"]) == 1
                                 else "mixed"),
                 late_watermark_assumed=run["assumed"])
        for (q, r), run in runs.items()
    ]
    return sorted(result, key=lambda run: (run.started_ms is None, run.started_ms or 0))


# --------------------------------------------------------------------------------------------
# How late the data is (observed lateness) and the advice


def observed_lateness(event_times_ms: Iterable[int]) -> list[int]:
    """Lateness of each event, in arrival order.

    :param event_times_ms: event times (epoch ms UTC) in the order the events reached the stream.
    :return: for each event, ``max(event times so far, itself included) - its event time`` in ms
        (>= 0; 0 for an event that is the newest so far).
    """
    result = []
    newest = None
    for event_time in event_times_ms:
        newest = event_time if newest is None else max(newest, event_time)
        result.append(newest - event_time)
    return result


def smallest_delay_threshold(lateness_ms: Sequence[int], max_drop_rate: float) -> int:
    """The smallest delay threshold (ms) that drops fewer than ``max_drop_rate`` of the events.

    An event is dropped by threshold ``D`` when its lateness is ``>= D`` (its event time is at or
    behind ``max so far - D``, Spark's ``<=`` watermark test).

    :param lateness_ms: per-event lateness in ms (see :func:`observed_lateness`), any order.
    :param max_drop_rate: the share to stay strictly below, in (0, 1].
    :return: ``D`` in ms (>= 1): one more than the lateness of the event with the (m+1)-th
        largest lateness, where ``m`` is the most drops allowed (the largest integer
        ``< max_drop_rate × events``); 0 when there are no events.
    :raises LatenessError: when ``max_drop_rate`` is not in (0, 1] or a lateness is negative.
    """
    if not 0 < max_drop_rate <= 1:
        raise LatenessError(f"max_drop_rate must be in (0, 1], got {max_drop_rate!r}")
    if not lateness_ms:
        return 0
    ordered = sorted(lateness_ms, reverse=True)
    if ordered[-1] < 0:
        raise LatenessError(f"lateness must be >= 0 ms, got {ordered[-1]}")
    allowed = math.ceil(max_drop_rate * len(ordered)) - 1  # largest integer < rate × n
    if allowed >= len(ordered):
        return 0
    return ordered[allowed] + 1


def spark_interval(duration_ms: int) -> str:
    """A duration in ms as a Spark interval string for ``withWatermark``, e.g. ``"2 hours 5 minutes"``.

    Zero units are left out; 0 ms is ``"0 seconds"``.
    """
    parts = []
    remaining = int(duration_ms)
    for unit, size in (("hours", 3_600_000), ("minutes", 60_000), ("seconds", 1000), ("milliseconds", 1)):
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count} {unit}")
    return " ".join(parts) or "0 seconds"


@dataclass(frozen=True)
class Advice:
    """The smallest delay threshold keeping the drop rate under a target.

    :ivar target_drop_rate: the share to stay strictly below (0.01 = 1 %).
    :ivar delay_threshold_ms: the threshold, in ms.
    :ivar events_dropped: events the threshold would still drop (lateness >= threshold).
    :ivar drop_rate: ``events_dropped / events`` (0..1).
    """

    target_drop_rate: float
    delay_threshold_ms: int
    events_dropped: int
    drop_rate: float

    @property
    def delay_threshold(self) -> timedelta:
        """The threshold as a ``timedelta``."""
        return timedelta(milliseconds=self.delay_threshold_ms)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields plus ``spark_interval`` (usable as ``--delay-threshold``)."""
        return {
            "target_drop_rate": self.target_drop_rate, "delay_threshold_ms": self.delay_threshold_ms,
            "spark_interval": spark_interval(self.delay_threshold_ms),
            "events_dropped": self.events_dropped, "drop_rate": self.drop_rate,
        }


def advise(lateness_ms: Sequence[int], targets: Iterable[float] = DEFAULT_TARGETS) -> list[Advice]:
    """One :class:`Advice` per target drop rate (see :func:`smallest_delay_threshold`).

    :raises LatenessError: for a target outside (0, 1].
    """
    advice = []
    for target in targets:
        threshold = smallest_delay_threshold(lateness_ms, target)
        dropped = sum(1 for value in lateness_ms if value >= threshold) if threshold else len(lateness_ms)
        advice.append(Advice(target, threshold, dropped, dropped / len(lateness_ms) if lateness_ms else 0.0))
    return advice


@dataclass
class LandedLateness:
    """The observed lateness of the events in one landing folder.

    :ivar landing: the folder read.
    :ivar event_time_field: the field used as event time (``dep_time``, ``time_hour``, ...).
    :ivar files: JSON-lines files read (hidden names, Spark's in-progress files, are skipped).
    :ivar lateness_ms: per event with an event time, in arrival order, ms.
    :ivar no_event_time: events whose event time is null (e.g. cancelled flights): bad input the
        job quarantines, not lateness; counted, not listed.
    :ivar malformed: lines that are not JSON objects, or whose times are not ISO-8601 instants
        with a zone: counted, and the first ones named in ``problems``.
    :ivar problems: the first messages naming file, line and what was expected.
    """

    landing: str
    event_time_field: str | None
    files: int = 0
    lateness_ms: list[int] = field(default_factory=list)
    no_event_time: int = 0
    malformed: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self, targets: Iterable[float] = DEFAULT_TARGETS) -> dict[str, Any]:
        """JSON-ready: ``{"landing", "event_time_field", "files", "events", "no_event_time", "malformed",
        "late_events" (lateness > 0), "p50_ms", "p99_ms", "max_lateness_ms", "advice": [...],
        "problems"}`` (quantiles are nearest-rank; None without events)."""
        ordered = sorted(self.lateness_ms)

        def rank(q: float) -> int | None:
            return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None

        return {
            "landing": self.landing, "event_time_field": self.event_time_field, "files": self.files,
            "events": len(ordered), "no_event_time": self.no_event_time, "malformed": self.malformed,
            "late_events": sum(1 for value in ordered if value > 0),
            "p50_ms": rank(0.5), "p99_ms": rank(0.99), "max_lateness_ms": ordered[-1] if ordered else None,
            "advice": [a.to_dict() for a in advise(self.lateness_ms, targets)],
            "problems": list(self.problems),
        }


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _epoch_ms(text: str) -> int:
    instant = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if instant.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return (instant - _EPOCH) // timedelta(milliseconds=1)


def landed_lateness(landing: str, event_time_field: str | None = None, *, filesystem: Any = None,
                    storage_options: dict[str, Any] | None = None) -> LandedLateness:
    """Measure the lateness of the events in a landing folder (the lander's JSON-lines files).

    Arrival order is ``stream_time`` (ties: file name, then line); files without it are taken in
    file-name and line order.

    :param landing: folder (local path or fsspec URL) of ``*.jsonl`` files.
    :param event_time_field: the event-time field (ISO-8601 with zone); default: the first of
        :data:`EVENT_TIME_FIELDS` present in the first event.
    :param filesystem: / storage_options: how to reach the folder, as for
        :func:`watermark_ops.core.checkpoint.read_checkpoint` (``filesystem`` is used only when the
        folder is on it, :func:`~watermark_ops.core.checkpoint.filesystem_for`). One fresh listing,
        then every file read at once (concurrently on object storage, within
        :data:`~watermark_ops.core.checkpoint.MAX_CONCURRENT_READS`, retried within a bound).
    :raises LatenessError: when the folder does not exist, or no event-time field is recognised.
    :raises OSError: when the folder cannot be listed or a file in it cannot be read (naming it).
    """
    return _landed_lateness(_read_landing(landing, filesystem, storage_options), landing, event_time_field)


def _read_landing(landing: str, filesystem: Any, storage_options: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """``[(file as shown, bytes | exception)]`` of the folder's ``*.jsonl`` files, by name: one fresh
    listing, then one concurrent read. :raises LatenessError: no such folder."""
    from watermark_ops.core.checkpoint import filesystem_for, open_storage

    fs = filesystem_for(landing, filesystem)
    storage, folder = open_storage(landing, filesystem=fs,
                                   storage_options=storage_options if fs is None and "://" in str(landing) else None)
    try:
        listed = storage.names(folder)
    except (FileNotFoundError, NotADirectoryError):
        listed = None
    if listed is None:
        raise LatenessError(f"{landing}: no such landing folder (expected the folder of the lander's .jsonl files)")
    paths = sorted(f"{folder}/{n}" for n in listed if n.endswith(".jsonl") and not n.startswith((".", "_")))
    content = storage.read(paths)
    return [(storage.display(p), content(p)) for p in paths]


def _landed_lateness(files: list[tuple[str, Any]], landing: str, event_time_field: str | None) -> LandedLateness:
    """:func:`landed_lateness` of files already read."""
    names = [name for name, _ in files]
    result = LandedLateness(landing=str(landing), event_time_field=event_time_field, files=len(names))

    def problem(message: str) -> None:
        result.malformed += 1
        if len(result.problems) < _MAX_PROBLEMS:
            result.problems.append(message)

    arrivals: list[tuple[int, int, int, int]] = []  # (arrival ms, file index, line, event ms)
    for file_index, (name, raw) in enumerate(files):
        if isinstance(raw, Exception):
            raise OSError(f"{name}: cannot read the landed file: {raw!r}") from raw
        text = raw.decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{name}:{number}"
            try:
                event = loads(line)
            except json.JSONDecodeError as exc:
                problem(f"{where}: expected one JSON object per line ({exc.msg})")
                continue
            if not isinstance(event, dict):
                problem(f"{where}: expected a JSON object")
                continue
            if result.event_time_field is None:
                found = [f for f in EVENT_TIME_FIELDS if f in event]
                if not found:
                    raise LatenessError(f"{where}: no event-time field: expected one of {EVENT_TIME_FIELDS} "
                                        f"(or pass event_time_field)")
                result.event_time_field = found[0]
            value = event.get(result.event_time_field)
            if value is None:
                result.no_event_time += 1
                continue
            try:
                event_ms = _epoch_ms(str(value))
                arrival_ms = _epoch_ms(event[ARRIVAL_FIELD]) if event.get(ARRIVAL_FIELD) else 0
            except ValueError as exc:
                problem(f"{where}: expected ISO-8601 instants with a zone in {result.event_time_field} "
                        f"and {ARRIVAL_FIELD} ({exc})")
                continue
            arrivals.append((arrival_ms, file_index, number, event_ms))
    arrivals.sort()
    result.lateness_ms = observed_lateness(a[3] for a in arrivals)
    return result


# --------------------------------------------------------------------------------------------
# The report (terminal, JSON, XCom)


@dataclass(frozen=True)
class LatenessReport:
    """Drops per run of a checkpoint's query, and the observed lateness of its inputs.

    :ivar checkpoint: the checkpoint location.
    :ivar progress_log: its progress log, ``<checkpoint>.progress.jsonl``.
    :ivar runs: one :class:`RunDrops` per run, in the order the runs started.
    :ivar inputs: one :class:`LandedLateness` per landing folder.
    :ivar targets: the drop-rate targets of the advice.
    :ivar problems: progress-log lines that could not be read, each naming file and line.
    """

    checkpoint: str
    progress_log: str
    runs: tuple[RunDrops, ...]
    inputs: tuple[LandedLateness, ...]
    targets: tuple[float, ...] = DEFAULT_TARGETS
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready ``{"checkpoint", "progress_log", "runs": [RunDrops.to_dict()],
        "inputs": [LandedLateness.summary()], "problems": [str]}`` (the DAG pushes it to XCom)."""
        return {
            "checkpoint": self.checkpoint,
            "progress_log": self.progress_log,
            "runs": [run.to_dict() for run in self.runs],
            "inputs": [item.summary(self.targets) for item in self.inputs],
            "problems": list(self.problems),
        }


def _rule_fields(records: list[dict[str, Any]], sources: int) -> list[str | None]:
    """The event-time field per source named by the newest record's ``late_rule`` (None each when none)."""
    for record in reversed(records):
        rule = record.get("late_rule")
        fields = rule.get("event_time") if isinstance(rule, dict) else None
        if isinstance(fields, str):
            return [fields] * sources
        if isinstance(fields, list) and all(isinstance(f, str) for f in fields):
            return (fields + [None] * sources)[:sources]
    return [None] * sources


def lateness_report(checkpoint: str, landings: Iterable[str] = (), targets: Iterable[float] = DEFAULT_TARGETS,
                    event_time_field: str | None = None, *, filesystem: Any = None,
                    storage_options: dict[str, Any] | None = None) -> LatenessReport:
    """Drops per run from the checkpoint's progress log, and observed lateness per landing folder.

    :param checkpoint: the checkpoint location; its progress log is ``<checkpoint>.progress.jsonl``.
    :param landings: landing folders of the query's inputs (one per input; may be empty).
    :param targets: drop-rate targets of the advice (default 1 % and 0.1 %).
    :param event_time_field: forces the event-time field of every landing (default: the newest
        progress record's ``late_rule`` names it, one per source in plan order, as the recorder
        writes it; else recognised from :data:`EVENT_TIME_FIELDS`).
    :param filesystem: / storage_options: how to reach the progress log and the landing folders
        (e.g. ``s3://``), as for :func:`watermark_ops.core.checkpoint.read_checkpoint`; the
        landing folders are read concurrently.
    :return: a :class:`LatenessReport`.
    :raises LatenessError: for a missing landing folder or unrecognised events.
    :raises OSError: when the progress log exists but cannot be read.
    """
    log_path = progress_log_path(checkpoint)
    where = {"filesystem": filesystem, "storage_options": storage_options}
    landings = list(landings)
    # The progress log and every landing folder at once (each folder's files read concurrently).
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(landings) + 1) as pool:
        log_future = pool.submit(read_progress_log, log_path, **where)
        read = [pool.submit(_read_landing, landing, filesystem, storage_options) for landing in landings]
        progress = log_future.result()
        files = [future.result() for future in read]
    fields = [event_time_field] * len(landings) if event_time_field else _rule_fields(progress.records, len(landings))
    inputs = [_landed_lateness(f, landing, field) for f, landing, field in zip(files, landings, fields)]
    return LatenessReport(
        checkpoint=str(checkpoint),
        progress_log=log_path,
        runs=tuple(drops_per_run(progress.records)),
        inputs=tuple(inputs),
        targets=tuple(targets),
        problems=tuple(progress.problems),
    )
