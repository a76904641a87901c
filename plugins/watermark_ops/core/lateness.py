"""Late-data accounting and advice: how large should the watermark delay threshold be?

Two views of lateness, both in epoch milliseconds UTC (durations in ms, or ``timedelta``):

* **What the watermark dropped**, per run, from the job's progress log (``<checkpoint>.progress.jsonl``,
  written by ``watermark_ops.spark.ProgressRecorder``; one line per micro-batch) and the late-row
  ledger (:func:`watermark_ops.core.ledger.late_ledger`): the *rows* late over ``input_rows``, where
  the ledger replayed every batch of the run; else no rate (None), never Spark's count in its
  place. A run is one start of the query (Spark's ``run_id``, new at each restart; ``run_tag`` is
  the Airflow run id the job was given). Spark's own ``numRowsDroppedByWatermark`` (the progress
  log's ``rows_dropped_by_watermark``) is kept beside it as ``late_partial_aggregates_spark``: it is
  counted at each stateful operator's input, which for an aggregation is already partially
  aggregated (late *groups*, a lower bound of the late rows); for ``dropDuplicatesWithinWatermark``
  and a stream-stream join it counts raw rows.
  Which watermark those rows missed follows the Spark version and a session conf, per batch
  (:func:`watermark_ops.core.ledger.late_watermark_rule`): Spark >= 3.4 with
  ``spark.sql.streaming.statefulOperator.allowMultiple`` true (the default) filters late rows with
  the *previous* batch's watermark (``offsets/N-1``; 0 for batch 0), before 3.4 or with it false
  with the batch's own. Each run says which (:attr:`RunDrops.late_watermark`); records that name
  neither the version nor the conf (written before the recorder kept them) are read with the
  Spark >= 3.4 default, and the run says it was assumed.
* **How late the data itself is**, on the job's own event-time field (the late rule's): for a job
  whose parsing is its own (any file format), from the rows the launcher's Spark replay made
  (:func:`replayed_lateness`); else from the landing folder's JSON lines. In arrival order (the
  order the batches read their files, or an arrival-time field the landing names, else file name
  then line), each event's *lateness* is how far its event time lies behind the maximum
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
from watermark_ops.core.run_drops import RunDrops, drops_per_run, with_rows_late

__all__ = [
    "DEFAULT_TARGETS",
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
    "readable_threshold_ms",
    "replayed_lateness",
    "smallest_delay_threshold",
    "spark_interval",
    "with_rows_late",
]

#: Drop-rate targets of the advice: 1 % and 0.1 %.
DEFAULT_TARGETS = (0.01, 0.001)
#: Problems kept per landing folder (the count is always complete).
_MAX_PROBLEMS = 20


class LatenessError(ValueError):
    """Bad input for the lateness report: names the file, line or value and what was expected."""


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
    """A duration in ms as a Spark interval string for ``withWatermark``, e.g. ``"2 hours 1 minute"``
    (Spark's interval syntax takes a unit in the singular or the plural).

    Zero units are left out; 0 ms is ``"0 seconds"``.
    """
    parts = []
    remaining = int(duration_ms)
    for unit, size in (("hour", 3_600_000), ("minute", 60_000), ("second", 1000), ("millisecond", 1)):
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count} {unit}" + ("" if count == 1 else "s"))
    return " ".join(parts) or "0 seconds"


def readable_threshold_ms(duration_ms: int) -> int:
    """A delay threshold rounded *up* to a unit people write: whole seconds under a minute, whole
    minutes under a day, whole hours from a day on (``8 h 50 min 0.001 s`` -> ``8 h 51 min``). A
    longer threshold drops no more events than a shorter one, so the promise holds."""
    duration_ms = int(duration_ms)
    if duration_ms <= 0:
        return 0
    unit = 1000 if duration_ms < 60_000 else 60_000 if duration_ms < 86_400_000 else 3_600_000
    return -(-duration_ms // unit) * unit


@dataclass(frozen=True)
class Advice:
    """The smallest delay threshold keeping the drop rate under a target.

    :ivar target_drop_rate: the share to stay strictly below (0.01 = 1 %).
    :ivar delay_threshold_ms: the smallest such threshold, in ms (:func:`smallest_delay_threshold`).
    :ivar events_dropped: events that threshold would still drop (lateness >= threshold); the
        suggested one (:attr:`suggested_ms`) drops at most as many.
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

    @property
    def suggested_ms(self) -> int:
        """The threshold rounded up to a readable unit (:func:`readable_threshold_ms`)."""
        return readable_threshold_ms(self.delay_threshold_ms)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields plus ``suggested_delay_threshold_ms`` and its ``spark_interval``
        (usable in ``withWatermark``, e.g. ``"8 hours 51 minutes"``)."""
        return {
            "target_drop_rate": self.target_drop_rate, "delay_threshold_ms": self.delay_threshold_ms,
            "suggested_delay_threshold_ms": self.suggested_ms, "spark_interval": spark_interval(self.suggested_ms),
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
    """The observed lateness of the rows of one input, on the job's event-time field.

    :ivar landing: the landing folder (for a Spark-replayed job the one named, None when none was).
    :ivar event_time_field: the field used as event time: the job's (its late rule's, or given).
    :ivar files: files read (hidden names, Spark's in-progress files, are skipped).
    :ivar lateness_ms: per row with an event time, in arrival order, ms.
    :ivar no_event_time: rows whose event time is null: bad input the job sets aside, not
        lateness; counted, not listed.
    :ivar malformed: lines that are not JSON objects, or whose times are not ISO-8601 instants
        with a zone: counted, and the first ones named in ``problems``.
    :ivar problems: the first messages naming file, line and what was expected.
    :ivar source: ``"landing"`` (the landed JSON lines, read here) or ``"spark_replay"`` (the rows the
        launcher's Spark replay made with the job's own parsing, ``<checkpoint>.replay.jsonl``).
    :ivar read_from: what was read: the landing folder, or the replay log (``<checkpoint>.replay.jsonl``).
    """

    landing: str | None
    event_time_field: str | None
    files: int = 0
    lateness_ms: list[int] = field(default_factory=list)
    no_event_time: int = 0
    malformed: int = 0
    problems: list[str] = field(default_factory=list)
    source: str = "landing"
    read_from: str | None = None

    def summary(self, targets: Iterable[float] = DEFAULT_TARGETS) -> dict[str, Any]:
        """JSON-ready: ``{"landing", "read_from", "event_time_field", "source", "files", "events", "no_event_time",
        "malformed", "late_events" (lateness > 0), "p50_ms", "p99_ms", "max_lateness_ms", "advice": [...],
        "problems"}`` (quantiles are nearest-rank; None without events)."""
        ordered = sorted(self.lateness_ms)

        def rank(q: float) -> int | None:
            return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None

        return {
            "landing": self.landing, "read_from": self.read_from or self.landing,
            "event_time_field": self.event_time_field, "source": self.source,
            "files": self.files, "events": len(ordered), "no_event_time": self.no_event_time,
            "malformed": self.malformed, "late_events": sum(1 for value in ordered if value > 0),
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


def landed_lateness(landing: str, event_time_field: str | None, *, arrival_field: str | None = None,
                    filesystem: Any = None, storage_options: dict[str, Any] | None = None) -> LandedLateness:
    """Measure the lateness of the events in a landing folder of JSON-lines files.

    Arrival order is ``arrival_field`` when given (ties: file name, then line), else file name,
    then line (a lander that names its files in arrival order).

    :param landing: folder (local path or fsspec URL) of ``*.jsonl`` files.
    :param event_time_field: the job's event-time field (ISO-8601 text with a zone).
    :param arrival_field: a field telling when each event reached the landing (ISO-8601 with a
        zone), None to take the files' order.
    :param filesystem: / storage_options: how to reach the folder, as for
        :func:`watermark_ops.core.checkpoint.read_checkpoint` (``filesystem`` is used only when the
        folder is on it, :func:`~watermark_ops.core.checkpoint.filesystem_for`). One fresh listing,
        then every file read at once (concurrently on object storage, within
        :data:`~watermark_ops.core.checkpoint.MAX_CONCURRENT_READS`, retried within a bound).
    :raises LatenessError: when the folder does not exist, or no event-time field is given.
    :raises OSError: when the folder cannot be listed or a file in it cannot be read (naming it).
    """
    if not event_time_field:
        raise LatenessError(f"{landing}: {_NO_FIELD}")
    return _landed_lateness(_read_landing(landing, filesystem, storage_options), landing, event_time_field,
                            arrival_field)


#: Why there is no advice without the job's event-time field (it is never guessed).
_NO_FIELD = ("which field holds the event time? The checkpoint's progress log has no late rule naming it (the "
             "run pattern's event_time declaration, or the recorder's late_rule): pass it (event_time_field, "
             "or --event-time-field)")


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
        raise LatenessError(f"{landing}: no such landing folder (expected the folder of the job's landed .jsonl files)")
    paths = sorted(f"{folder}/{n}" for n in listed if n.endswith(".jsonl") and not n.startswith((".", "_")))
    content = storage.read(paths)
    return [(storage.display(p), content(p)) for p in paths]


def _landed_lateness(files: list[tuple[str, Any]], landing: str, event_time_field: str,
                     arrival_field: str | None = None) -> LandedLateness:
    """:func:`landed_lateness` of files already read."""
    result = LandedLateness(landing=str(landing), event_time_field=event_time_field, files=len(files))

    def problem(message: str) -> None:
        result.malformed += 1
        if len(result.problems) < _MAX_PROBLEMS:
            result.problems.append(message)

    times = f"{event_time_field}" + (f" and {arrival_field}" if arrival_field else "")
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
            value = event.get(event_time_field)
            if value is None:
                result.no_event_time += 1
                continue
            try:
                event_ms = _epoch_ms(str(value))
                arrival_ms = _epoch_ms(str(event[arrival_field])) if arrival_field and event.get(arrival_field) else 0
            except ValueError as exc:
                problem(f"{where}: expected ISO-8601 instants with a zone in {times} ({exc}); a job that parses "
                        "its own event times gets its advice from the launcher's Spark replay")
                continue
            arrivals.append((arrival_ms, file_index, number, event_ms))
    arrivals.sort()
    result.lateness_ms = observed_lateness(a[3] for a in arrivals)
    return result


def replayed_lateness(checkpoint: str, event_time_field: str | None, landing: str | None = None, *,
                      filesystem: Any = None, storage_options: dict[str, Any] | None = None) -> LandedLateness | None:
    """The observed lateness of the rows entering the watermark, from the launcher's Spark replay
    records (``<checkpoint>.replay.jsonl``, :mod:`watermark_ops.core.ledger.replayed`).

    Arrival order is batch order, then the order the batch read its files (the source log's), then
    line: the lateness of a row is how far its event time lies behind the newest event time seen
    before it (:func:`observed_lateness`), as the advice on a landing folder models it; here for
    any landed format and the job's own event-time parsing.

    :return: a :class:`LandedLateness` (``source`` ``"spark_replay"``; ``files``: the files the
        replayed batches read), None when the checkpoint has no replay record.
    :raises OSError: when the replay log exists but cannot be read.
    """
    from watermark_ops.core.ledger.replayed import read_replay_log, replay_log_path

    records, problems = read_replay_log(checkpoint, filesystem=filesystem, storage_options=storage_options)
    if not records:
        return None
    times, files = [], set()
    for batch_id in sorted(records):
        times.extend(int(t) for t in records[batch_id].get("event_times_ms") or [])
        files.update(records[batch_id].get("files") or [])
    return LandedLateness(landing=str(landing) if landing else None, event_time_field=event_time_field,
                          files=len(files), lateness_ms=observed_lateness(times), problems=problems[:_MAX_PROBLEMS],
                          malformed=len(problems), source="spark_replay", read_from=replay_log_path(checkpoint))


# --------------------------------------------------------------------------------------------
# The report (terminal, JSON, XCom)


@dataclass(frozen=True)
class LatenessReport:
    """What the watermark dropped per run of a checkpoint's query, and the observed lateness of its inputs.

    :ivar checkpoint: the checkpoint location.
    :ivar progress_log: its progress log, ``<checkpoint>.progress.jsonl``.
    :ivar runs: one :class:`RunDrops` per run, in the order the runs started.
    :ivar inputs: one :class:`LandedLateness` per input (per landing folder; one for a Spark-replayed job).
    :ivar targets: the drop-rate targets of the advice.
    :ivar problems: progress-log lines that could not be read, each naming file and line, and why
        an input has no advice (in the job's terms).
    :ivar late_rows_unknown_reason: why some runs' late rows are unknown (their batches the ledger
        could not replay, each problem once with its batch range), None when every run's are known
        or the ledger was not read.
    :ivar recovered: per run (as :attr:`runs`), ``{"rows_late_recovered", "rows_late_dropped",
        "corrections"}`` from the corrections log; empty without one.
    """

    checkpoint: str
    progress_log: str
    runs: tuple[RunDrops, ...]
    inputs: tuple[LandedLateness, ...]
    targets: tuple[float, ...] = DEFAULT_TARGETS
    problems: tuple[str, ...] = ()
    late_rows_unknown_reason: str | None = None
    recovered: tuple[dict[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready ``{"checkpoint", "progress_log", "runs": [RunDrops.to_dict()],
        "inputs": [LandedLateness.summary()], "problems": [str], "late_rows_unknown_reason"}`` (the
        DAG pushes it to XCom); with an allowed lateness (:attr:`recovered`), each run also has
        ``rows_late_recovered``, ``rows_late_dropped`` and ``corrections``."""
        return {
            "checkpoint": self.checkpoint,
            "progress_log": self.progress_log,
            "runs": [{**run.to_dict(), **(self.recovered[i] if self.recovered else {})}
                     for i, run in enumerate(self.runs)],
            "inputs": [item.summary(self.targets) for item in self.inputs],
            "problems": list(self.problems),
            "late_rows_unknown_reason": self.late_rows_unknown_reason,
        }


def newest_late_rule(records: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``late_rule`` of the newest progress record that has one (as recorded), else None."""
    for record in reversed(list(records)):
        rule = record.get("late_rule")
        if isinstance(rule, dict):
            return rule
    return None


def _rule_fields(rule: dict[str, Any] | None, sources: int) -> list[str | None]:
    """The event-time field per source the late rule names (None each when none)."""
    fields = rule.get("event_time") if rule else None
    if isinstance(fields, str):
        return [fields] * sources
    if isinstance(fields, list) and all(isinstance(f, str) for f in fields):
        return (fields + [None] * sources)[:sources]
    return [None] * sources


def _parsed_by_job(rule: dict[str, Any] | None) -> bool:
    """True when the late rule says a source's rows are made by the job's own parsing (any format)."""
    inputs = (rule or {}).get("inputs")
    return isinstance(inputs, list) and any(isinstance(i, dict) and i.get("parsing") == "job" for i in inputs)


def lateness_inputs(checkpoint: str, landings: Sequence[str], records: Sequence[dict[str, Any]],
                    event_time_field: str | None = None, arrival_field: str | None = None, *,
                    filesystem: Any = None,
                    storage_options: dict[str, Any] | None = None) -> tuple[list[LandedLateness], list[str]]:
    """The observed lateness of a checkpoint's inputs, on the job's own event-time field.

    * A job whose parsing is its own (the late rule's ``inputs`` say ``"parsing": "job"``): the rows
      the launcher's Spark replay made (:func:`replayed_lateness`), whatever the landed format; the
      landing folders are not read.
    * Else each landing folder's JSON lines (:func:`landed_lateness`) on the field the late rule
      names for that source (or ``event_time_field``).

    :param records: the checkpoint's progress records, already read (the newest ``late_rule`` names
        the field and how the rows are made).
    :return: ``(inputs, problems)``: for a Spark-replayed job without a replay record yet, no input
        and a problem saying so in the job's terms.
    :raises LatenessError: for a landing folder that does not exist, or whose event-time field
        neither the late rule nor ``event_time_field`` names (never guessed).
    :raises OSError: when a landing file or the replay log cannot be read.
    """
    where = {"filesystem": filesystem, "storage_options": storage_options}
    rule = newest_late_rule(records)
    problems: list[str] = []
    if _parsed_by_job(rule):
        field_name = event_time_field or _rule_fields(rule, 1)[0]
        replayed = replayed_lateness(checkpoint, field_name, landings[0] if landings else None, **where)
        if replayed is None:
            declared = any(isinstance(i, dict) and i.get("pre_watermark") for i in rule.get("inputs") or [])
            if not declared:  # only the launcher's batch twin could replay them, and it recorded nothing
                from watermark_ops.core.ledger.replayed import replay_log_path

                problems.append(f"no delay-threshold advice for {checkpoint}: the job parses its own rows with its "
                                "own code and declares no pre-watermark function, and no Spark replay has recorded "
                                f"their {field_name or 'event'} times in {replay_log_path(checkpoint)} (the "
                                "launcher's batch twin says in its log why it made none): they and its late rows "
                                "are unknown; declare pre_watermark=\"module:function\" on the run pattern and the "
                                "launcher replays each batch in Spark after the run")
            else:
                from watermark_ops.core.ledger.replayed import replay_log_path

                problems.append(f"no delay-threshold advice yet for {checkpoint}: the job parses its own rows, and "
                                f"the launcher's Spark replay has recorded none of their {field_name or 'event'} "
                                f"times in {replay_log_path(checkpoint)} (it records them after each run of the "
                                "launcher; a run whose replay failed says why in its log)")
            return [], problems
        return [replayed], problems
    fields = [event_time_field] * len(landings) if event_time_field else _rule_fields(rule, len(landings))
    missing = [landing for landing, f in zip(landings, fields) if not f]
    if missing:
        raise LatenessError(f"no delay-threshold advice for {', '.join(missing)}: {_NO_FIELD}")
    if not landings:
        return [], problems
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(landings)) as pool:  # every folder's files at once
        read = [pool.submit(_read_landing, landing, filesystem, storage_options) for landing in landings]
        files = [future.result() for future in read]
    return [_landed_lateness(f, landing, name, arrival_field)
            for f, landing, name in zip(files, landings, fields)], problems


def lateness_report(checkpoint: str, landings: Iterable[str] = (), targets: Iterable[float] = DEFAULT_TARGETS,
                    event_time_field: str | None = None, arrival_field: str | None = None, *,
                    rows: bool = True, ledger: Any = None, filesystem: Any = None,
                    storage_options: dict[str, Any] | None = None) -> LatenessReport:
    """What the watermark dropped per run (the late-row ledger's rows, Spark's count beside them),
    and the observed lateness of the inputs with the delay-threshold advice.

    :param checkpoint: the checkpoint location; its progress log is ``<checkpoint>.progress.jsonl``.
    :param landings: landing folders of the query's inputs (one per input; may be empty).
    :param targets: drop-rate targets of the advice (default 1 % and 0.1 %).
    :param event_time_field: forces the event-time field (default: the newest progress record's
        ``late_rule`` names it, one per source in plan order, as the recorder writes it; never guessed).
    :param arrival_field: a landed field telling when each event arrived (default: files' order).
    :param rows: replay the checkpoint's batches (:func:`watermark_ops.core.ledger.late_ledger`) for
        each run's late *rows* and drop rate; False leaves them None (Spark's count only).
    :param ledger: a :class:`~watermark_ops.core.ledger.LateLedger` already read (e.g. of one run's
        batches, as the run pattern's ``collect_progress`` has it): its rows are used and no other
        ledger is read, so a run's figures here equal those made from it; a run whose batches it
        does not hold stays unknown, saying so.
    :param filesystem: / storage_options: how to reach the progress log and the landing folders
        (e.g. ``s3://``), as for :func:`watermark_ops.core.checkpoint.read_checkpoint`; the
        landing folders are read concurrently.
    :return: a :class:`LatenessReport`.
    :raises LatenessError: as :func:`lateness_inputs`: a missing landing folder, no event-time field.
    :raises OSError: when the progress log exists but cannot be read, or a landed file cannot be read.
    """
    log_path = progress_log_path(checkpoint)
    where = {"filesystem": filesystem, "storage_options": storage_options}
    progress = read_progress_log(log_path, **where)
    inputs, problems = lateness_inputs(checkpoint, list(landings), progress.records, event_time_field,
                                       arrival_field, **where)
    runs = drops_per_run(progress.records)
    unknown = None
    if (rows or ledger is not None) and runs:
        from watermark_ops.core.ledger.replay import late_ledger
        from watermark_ops.core.ledger.unknown import batches_text, unknown_reason

        ledger = late_ledger(checkpoint, **where) if ledger is None else ledger
        held = {b.batch_id for b in ledger.batches}

        def reason_of(missing: list[int]) -> str | None:  # a run's own batches, never the whole ledger's
            if not set(missing) <= held:
                return f"{batches_text(missing)}: the late-row ledger was read for another run's batches only"
            sources = [s for s in ledger.not_replayable if set(s.get("batch_ids") or ()) & set(missing)]
            return unknown_reason(missing, ledger.problems, sources, ledger.found)

        replayed = {b.batch_id: b.rows_late for b in ledger.batches if b.replayed}
        runs = with_rows_late(runs, replayed, reason_of)
        missing = sorted({b for run in runs for b in run.batch_ids if b not in replayed})
        unknown = reason_of(missing) if missing else None
        recovered = _recovered(checkpoint, runs, ledger, where)
    return LatenessReport(
        checkpoint=str(checkpoint),
        progress_log=log_path,
        runs=tuple(runs),
        inputs=tuple(inputs),
        targets=tuple(targets),
        problems=tuple(progress.problems) + tuple(problems),
        late_rows_unknown_reason=unknown,
        recovered=recovered if (rows or ledger is not None) and runs else (),
    )


def _recovered(checkpoint: str, runs: list[RunDrops], ledger: Any, where: dict[str, Any]) -> tuple[dict, ...]:
    """Per run: its (row, window) drops and its rows dropped from only some of their windows
    (``window_drops``, ``rows_late_partly``), and its late rows split by the corrections log
    (:func:`watermark_ops.core.ledger.recovered.recovery`) when it has one (an allowed lateness)."""
    from watermark_ops.core.ledger.corrections import read_corrections
    from watermark_ops.core.ledger.recovered import recovery

    corrections, _ = read_corrections(checkpoint, **where)
    by_batch = {b.batch_id: b for b in ledger.batches if b.replayed}
    found = []
    for run in runs:
        mine = [by_batch[b] for b in run.batch_ids] if run.rows_late is not None else None
        found.append({"window_drops": None if mine is None else sum(b.window_drops for b in mine),
                      "rows_late_partly": None if mine is None else sum(b.rows_late_partly for b in mine),
                      **(recovery(None if mine is None else [r for b in mine for r in b.late_rows], corrections,
                                  run.run_tag) if corrections else {})})
    return tuple(found)
