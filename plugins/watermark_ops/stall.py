"""Classify a checkpoint's watermark at an instant: advancing, idle, stalled, lagging or jumped.

A watermark that stops moving silently stops a streaming pipeline: append-mode windows never
close, state grows, downstream tables stay incomplete. This module reads the offset log, the
commit log (:func:`watermark_ops.checkpoint.read_checkpoint`) and, when present, the job's
progress log (``<checkpoint>.progress.jsonl``, :mod:`watermark_ops.progress`) and tells which of
five states the watermark is in, with the evidence (batch ids, watermarks, source offsets, times).

Pure core: imports neither Airflow nor Spark. Times are epoch milliseconds UTC (``int``) inside;
pendulum only at the edges (parsing ``at``, ISO-8601 text in :meth:`Classification.to_dict`).

Terms
-----
* A batch's *watermark* is offsets ``batchWatermarkMs`` (the watermark it ran with); its *next
  watermark* is commits ``nextBatchWatermarkMs`` (computed at its end). The *current watermark*
  is what the next batch starts from (``MicroBatchExecution.populateStartOffsets``): the head
  batch committed → ``max(watermark, next watermark)``; in flight → its own watermark.
* A *data batch* is a batch whose source offsets differ from the previous batch's (offsets file
  lines 3+, in plan order): new input arrived. The trailing no-data batch of ``availableNow``
  repeats the previous offsets and is not one. Batch 0 is a data batch for every source with an
  offset. The first retained batch after a purge (``minBatchesToRetain``) has no predecessor on
  disk: its inputs are taken from the progress log (per-source ``input_rows``), else unknown.
* The watermark *moved* in batch N when ``next watermark > watermark`` (or when N started above
  the previous batch's next watermark). Under the ``min`` multiple-watermark policy (the default,
  ``spark.sql.streaming.multipleWatermarkPolicy``, frozen in each offsets file's ``conf``) the
  global watermark moves only when every watermarked input has seen data since the query
  started: Spark persists only the global value, so after a restart every input's own value
  starts again from 0 (``WatermarkTracker``; SPARK-50046).

The five states (precedence when several apply: ``jumped`` > ``stalled`` > ``lagging`` > ``idle`` >
``advancing``; :data:`STATES`)
--------------------------------------------------------------------------------------------
* ``jumped``: the current watermark is ahead of the latest batch's processing time
  (``batchTimestampMs``) by more than ``max_skew``: a future-dated record. The watermark never
  goes back, so every later on-time row will be dropped as late: an alarm of its own, and one
  that does not heal by waiting.
* ``stalled``: input keeps arriving but the watermark does not move: at least ``stall_batches``
  committed data batches since the watermark last moved, or at least two spanning
  ``stall_window`` of processing time. Causes seen on real Spark: one input without data under
  ``min``; inputs taking turns across restarts (SPARK-50046); an event-time column that is null
  (or filtered out) for every new row; new rows all older than the watermark.
* ``lagging``: the latest batch's processing time minus the current watermark exceeds
  ``max_lag``. Lag is measured against the latest batch time, what the pipeline itself knows,
  not against the evaluation instant: an idle pipeline does not lag more by waiting. A replay of
  old data (the flights of 2013 processed in 2026) lags by years: that is a backlog, truthfully
  reported; disable the check (``max_lag=None``) for a deliberate replay.
* ``idle``: no data batch within ``idle_after`` before the evaluation instant. Not an alarm by
  itself (as Flink's idleness teaches); an alarm past ``max_idle``.
* ``advancing``: none of the above: input arrived within ``idle_after`` and the watermark moved
  within the stall window (or there are not yet enough data batches to call a stall; the reasons
  say so).

``alarm`` is true for ``jumped``, ``stalled``, ``lagging``, and for idleness past ``max_idle``
(whatever the state).

The evaluation instant (``at``, default now)
-------------------------------------------
Only batches whose ``batchTimestampMs`` is at or before ``at`` are considered (progress records
likewise by ``timestamp_ms``), so a classification can be reproduced later: as long as the files
are retained, evaluating at a past instant gives what an evaluation at that instant gave. The
commit of a batch that started before ``at`` but committed after it is counted (file contents
carry no commit time). ``at`` drives idleness only; lag and skew use the batches' own processing
times, which are real wall-clock values even when the events are years old.

Public API
----------
``Thresholds`` (durations, ``datetime.timedelta``; defaults :data:`DEFAULT_THRESHOLDS`),
``duration(value)``, ``instant_ms(value)``, ``classify(checkpoint, progress_records, thresholds, at_ms)``,
``evaluate(location, thresholds, at=...)``, ``check(location, goal=...)`` (the one evaluation the
Airflow sensors and trigger share), ``Classification``, ``Check``, ``render_classification``.

Terminal: importing this module replaces ``status`` in the ``watermark-ops`` CLI registry
(``watermark_ops.cli.COMMAND_MODULES`` lists it) with :func:`status_command`: the issue-3 status
plus the classification (``--json`` adds ``state``), the thresholds as flags (``--max-lag PT6H``,
``--max-idle none``, ``--stall-batches 3``, ...) and ``--at ISO-8601-INSTANT``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any, Iterable, Sequence

from watermark_ops.audit import iso_utc
from watermark_ops.checkpoint import Checkpoint, read_checkpoint
from watermark_ops.progress import read_progress_log
from watermark_ops.settings import progress_log_path

__all__ = [
    "ADVANCING",
    "DEFAULT_THRESHOLDS",
    "GOALS",
    "IDLE",
    "JUMPED",
    "LAGGING",
    "POLICY_CONF",
    "STALLED",
    "STATES",
    "Check",
    "CheckpointMissing",
    "Classification",
    "StallInputError",
    "Thresholds",
    "add_status_arguments",
    "check",
    "classify",
    "duration",
    "evaluate",
    "instant_ms",
    "render_classification",
    "status_classification",
    "status_command",
    "thresholds_from_args",
]

JUMPED, STALLED, LAGGING, IDLE, ADVANCING = "jumped", "stalled", "lagging", "idle", "advancing"
#: The five states in precedence order: the first that applies is reported.
STATES = (JUMPED, STALLED, LAGGING, IDLE, ADVANCING)
#: The offsets ``conf`` key of the multiple-watermark policy (``min`` | ``max``).
POLICY_CONF = "spark.sql.streaming.multipleWatermarkPolicy"
#: What the sensors wait for: a healthy watermark, or a watermark that reached a target instant.
GOALS = ("healthy", "reached")


class StallInputError(ValueError):
    """The checkpoint cannot be classified: missing, not a checkpoint, or its head batch unreadable.

    :ivar location: the checkpoint location.
    :ivar problems: the reader's problems (``ReadProblem.to_dict()`` dicts), each naming its file.
    """

    def __init__(self, location: str, message: str, problems: Sequence[dict[str, Any]] = ()):
        super().__init__(f"{location}: {message}")
        self.location = location
        self.problems = list(problems)


class CheckpointMissing(StallInputError):
    """No checkpoint folder at the location (the job has not run yet, or a wrong path)."""


# --------------------------------------------------------------------------------------------
# Durations and instants at the edges


def duration(value: Any, name: str = "duration") -> timedelta | None:
    """A threshold as a plain ``datetime.timedelta`` (or None: the check is disabled).

    :param value: a ``timedelta`` (a pendulum ``Duration`` is converted to a plain one: pendulum
        durations break Airflow's serialization under the real executor), a number of seconds
        (int/float or decimal text), an ISO-8601 duration text (``PT6H``, ``P1DT2H``, parsed by
        pendulum), or None / ``"none"`` / ``"off"`` (disabled).
    :param name: the parameter's name, for the error message.
    :raises ValueError: for anything else, or a negative duration.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "off", "null")):
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a duration, got {value!r}")
    if isinstance(value, timedelta):
        result = timedelta(seconds=value.total_seconds())
    elif isinstance(value, (int, float)):
        result = timedelta(seconds=value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            result = timedelta(seconds=float(text))
        except ValueError:
            import pendulum

            try:
                parsed = pendulum.parse(text)
            except Exception:
                parsed = None
            if not isinstance(parsed, timedelta):
                raise ValueError(
                    f"{name}: expected seconds or an ISO-8601 duration such as 'PT6H' or 'P1DT2H', got {value!r}"
                ) from None
            result = timedelta(seconds=parsed.total_seconds())
    else:
        raise ValueError(f"{name}: expected a timedelta, seconds or an ISO-8601 duration, got {value!r}")
    if result < timedelta(0):
        raise ValueError(f"{name}: a duration must not be negative, got {value!r}")
    return result


def instant_ms(value: Any) -> int:
    """An instant as epoch milliseconds UTC.

    :param value: an aware ``datetime`` (pendulum or stdlib), an ISO-8601 text (a text without an
        offset is read as UTC, pendulum's rule), or epoch milliseconds (``int``).
    :raises ValueError: for a naive ``datetime`` (ambiguous), unparseable text, or another type.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected an instant, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: give a time zone (the instant would be ambiguous)")
        return int(round(value.timestamp() * 1000))
    if isinstance(value, str):
        import pendulum

        try:
            parsed = pendulum.parse(value.strip())
        except Exception as exc:
            raise ValueError(f"expected an ISO-8601 instant such as 2013-01-02T00:00:00Z, got {value!r}: {exc}") from None
        if not isinstance(parsed, datetime):
            raise ValueError(f"expected an ISO-8601 instant (date and time), got {value!r}")
        return int(round(parsed.timestamp() * 1000))
    raise ValueError(f"expected an instant (datetime, ISO-8601 text or epoch ms), got {value!r}")


def _now_ms() -> int:
    import pendulum

    return int(pendulum.now("UTC").timestamp() * 1000)


def _ms(delta: timedelta | None) -> int | None:
    return None if delta is None else int(round(delta.total_seconds() * 1000))


def _words(ms: int | None) -> str:
    """A duration for humans, e.g. ``2 hours 5 minutes`` (pendulum's words), ``-3 seconds``."""
    if ms is None:
        return "unknown"
    import pendulum

    if abs(ms) < 1000:
        return f"{ms} ms"
    text = pendulum.duration(milliseconds=abs(ms)).in_words()
    return ("-" if ms < 0 else "") + text


# --------------------------------------------------------------------------------------------
# Thresholds


@dataclass(frozen=True)
class Thresholds:
    """The thresholds of the classification (all durations are ``datetime.timedelta``).

    :ivar idle_after: no data batch for this long before the evaluation instant → ``idle``
        (default 15 minutes: a few triggers of a frequently scheduled job).
    :ivar max_idle: idle for longer than this → alarm (default 1 day; raise it above the
        schedule interval of a daily job, e.g. 26 hours). None: idleness never alarms.
    :ivar max_lag: latest batch time minus the current watermark above this → ``lagging``
        (default 6 hours: the job's delay threshold plus its schedule interval must fit under
        it). None: the check is disabled (a deliberate replay of old data).
    :ivar max_skew: the current watermark ahead of the latest batch time by more than this →
        ``jumped`` (default 5 minutes: well above clock skew between producers and the driver,
        well below a mistyped date). None: disabled.
    :ivar stall_window: two or more data batches spanning this much processing time without the
        watermark moving → ``stalled`` (default 1 hour). None: only ``stall_batches`` counts.
    :ivar stall_batches: this many data batches without the watermark moving → ``stalled``
        (a count, default 3).

    Each duration accepts what :func:`duration` accepts; values are normalised to plain
    ``timedelta`` (or None).

    :raises ValueError: for a bad value, naming the threshold.
    """

    idle_after: timedelta = timedelta(minutes=15)
    max_idle: timedelta | None = timedelta(days=1)
    max_lag: timedelta | None = timedelta(hours=6)
    max_skew: timedelta | None = timedelta(minutes=5)
    stall_window: timedelta | None = timedelta(hours=1)
    stall_batches: int = 3

    def __post_init__(self) -> None:
        for item in fields(self):
            if item.name == "stall_batches":
                continue
            value = duration(getattr(self, item.name), item.name)
            if value is None and item.name == "idle_after":
                raise ValueError("idle_after: a duration is required (it defines idleness)")
            object.__setattr__(self, item.name, value)
        batches = self.stall_batches
        if isinstance(batches, str) and batches.strip().isdigit():
            batches = int(batches)
        if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
            raise ValueError(f"stall_batches: expected a whole number >= 1, got {self.stall_batches!r}")
        object.__setattr__(self, "stall_batches", batches)

    def to_dict(self) -> dict[str, int | None]:
        """JSON-ready: ``{"idle_after_ms", "max_idle_ms", "max_lag_ms", "max_skew_ms",
        "stall_window_ms", "stall_batches"}`` (ms ints, None when disabled)."""
        out: dict[str, int | None] = {
            f"{item.name}_ms": _ms(getattr(self, item.name)) for item in fields(self) if item.name != "stall_batches"
        }
        out["stall_batches"] = self.stall_batches
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Thresholds:
        """The inverse of :meth:`to_dict` (missing keys take the defaults).

        :raises ValueError: for an unknown key or a bad value.
        """
        known = {f"{item.name}_ms": item.name for item in fields(cls) if item.name != "stall_batches"}
        unknown = set(data) - set(known) - {"stall_batches"}
        if unknown:
            raise ValueError(f"unknown threshold keys {sorted(unknown)}; expected {sorted(known) + ['stall_batches']}")
        kwargs: dict[str, Any] = {}
        for key, name in known.items():
            if key in data:
                value = data[key]
                if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                    raise ValueError(f"{key}: expected milliseconds (int) or null, got {value!r}")
                kwargs[name] = None if value is None else timedelta(milliseconds=value)
        if "stall_batches" in data:
            kwargs["stall_batches"] = data["stall_batches"]
        return cls(**kwargs)


DEFAULT_THRESHOLDS = Thresholds()


# --------------------------------------------------------------------------------------------
# The classification


@dataclass(frozen=True)
class BatchFacts:
    """What the classification knows of one batch (epoch ms UTC).

    :ivar inputs_advanced: the source indexes (plan order) whose offset changed against the
        previous batch; None when unknown (first retained batch after a purge, no progress log).
    :ivar input_rows: rows read (progress log), None without a record.
    :ivar event_time_max_ms: the largest event time the watermark operators saw (progress log
        ``eventTime.max``), None when no row carried one or without a record.
    :ivar run_id: Spark's run id (new at every restart), from the progress log.
    """

    batch_id: int
    timestamp_ms: int
    watermark_ms: int
    next_watermark_ms: int | None
    committed: bool
    sources: tuple[Any, ...]
    inputs_advanced: tuple[int, ...] | None
    input_rows: int | None = None
    event_time_max_ms: int | None = None
    run_id: str | None = None

    @property
    def is_data(self) -> bool:
        """New input arrived in this batch (offsets advanced, or the progress log says rows were read)."""
        if self.inputs_advanced is not None:
            return bool(self.inputs_advanced)
        return bool(self.input_rows)

    @property
    def end_watermark_ms(self) -> int | None:
        """The watermark after this batch: ``max(watermark, next watermark)``; None while in flight."""
        return None if self.next_watermark_ms is None else max(self.watermark_ms, self.next_watermark_ms)

    def to_dict(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "timestamp_ms": self.timestamp_ms,
            "time": iso_utc(self.timestamp_ms),
            "watermark_ms": self.watermark_ms,
            "next_watermark_ms": self.next_watermark_ms,
            "committed": self.committed,
            "inputs_advanced": None if self.inputs_advanced is None else list(self.inputs_advanced),
            "input_rows": self.input_rows,
            "event_time_max_ms": self.event_time_max_ms,
            "run_id": self.run_id,
        }


@dataclass(frozen=True)
class Classification:
    """The state of a checkpoint's watermark at an instant, with its evidence (epoch ms UTC).

    :ivar state: one of :data:`STATES`.
    :ivar alarm: True for ``jumped``, ``stalled``, ``lagging`` and idleness past ``max_idle``.
    :ivar applies: every state whose condition holds, in precedence order (``state`` is the first;
        ``advancing`` only when nothing else holds).
    :ivar reasons: one sentence per condition that holds (and why ``advancing`` when nothing does).
    :ivar hints: likely causes of a stall, read from the evidence.
    :ivar watermark_ms: the current watermark (what the next batch starts from); None without batches.
    :ivar emitted_through_ms: the watermark the latest *committed* batch ran with: append-mode
        windows ending at or before it are in the sink. Lower than ``watermark_ms`` until a batch
        runs with the new watermark (``availableNow``'s trailing no-data batch does at once;
        ``Trigger.Once`` one run later).
    :ivar lag_ms: latest batch time minus ``watermark_ms``; None while the watermark is 0 (never set).
    :ivar skew_ms: ``watermark_ms`` minus the latest batch time (positive: ahead of processing time).
    :ivar idle_ms: ``evaluated_at_ms`` minus the latest data batch's time; without any identified
        data batch, minus the first batch's time (a lower bound); None without batches.
    :ivar latest_batch / latest_data_batch: :class:`BatchFacts` or None.
    :ivar last_move: ``{"batch_id", "timestamp_ms", "from_ms", "to_ms"}`` of the latest batch in
        which the watermark moved, None if it never moved in the retained logs.
    :ivar flat_data_batches: the committed data batches since the last move (the stall evidence).
    :ivar jump: ``{"batch_id", "timestamp_ms", "from_ms", "to_ms"}``: the batch whose watermark
        first ran ahead of its processing time by more than ``max_skew`` (when jumped).
    :ivar inputs: per source (plan order): ``{"source", "description", "offset",
        "last_advanced_batch", "last_advanced_ms"}``.
    :ivar policy: the frozen ``spark.sql.streaming.multipleWatermarkPolicy`` (None if not recorded).
    :ivar problems: files that could not be read (each names its file) and bad progress-log lines.
    """

    location: str
    state: str
    alarm: bool
    applies: tuple[str, ...]
    reasons: tuple[str, ...]
    hints: tuple[str, ...]
    evaluated_at_ms: int
    thresholds: Thresholds
    query_id: str | None = None
    watermark_ms: int | None = None
    emitted_through_ms: int | None = None
    lag_ms: int | None = None
    skew_ms: int | None = None
    idle_ms: int | None = None
    latest_batch: BatchFacts | None = None
    latest_data_batch: BatchFacts | None = None
    last_move: dict[str, Any] | None = None
    flat_data_batches: tuple[BatchFacts, ...] = ()
    jump: dict[str, Any] | None = None
    inputs: tuple[dict[str, Any], ...] = ()
    policy: str | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def healthy(self) -> bool:
        """Not an alarm."""
        return not self.alarm

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every attribute, instants also as ISO-8601 UTC text (``watermark``,
        ``emitted_through``, ``evaluated_at``), batches as :meth:`BatchFacts.to_dict`."""
        return {
            "location": self.location,
            "state": self.state,
            "alarm": self.alarm,
            "applies": list(self.applies),
            "reasons": list(self.reasons),
            "hints": list(self.hints),
            "evaluated_at_ms": self.evaluated_at_ms,
            "evaluated_at": iso_utc(self.evaluated_at_ms),
            "query_id": self.query_id,
            "watermark_ms": self.watermark_ms,
            "watermark": iso_utc(self.watermark_ms),
            "emitted_through_ms": self.emitted_through_ms,
            "emitted_through": iso_utc(self.emitted_through_ms),
            "lag_ms": self.lag_ms,
            "skew_ms": self.skew_ms,
            "idle_ms": self.idle_ms,
            "latest_batch": self.latest_batch.to_dict() if self.latest_batch else None,
            "latest_data_batch": self.latest_data_batch.to_dict() if self.latest_data_batch else None,
            "last_move": self.last_move,
            "flat_data_batches": [b.to_dict() for b in self.flat_data_batches],
            "jump": self.jump,
            "inputs": list(self.inputs),
            "policy": self.policy,
            "thresholds": self.thresholds.to_dict(),
            "problems": list(self.problems),
        }

    def summary(self) -> str:
        """One line: state, alarm, watermark, lag, latest batch, first reason."""
        head = self.latest_batch
        parts = [
            f"{self.location}: {self.state}{' (ALARM)' if self.alarm else ''}",
            f"watermark {iso_utc(self.watermark_ms) or 'none'}",
            f"lag {_words(self.lag_ms)}",
            f"latest batch {head.batch_id} at {iso_utc(head.timestamp_ms)}" if head else "no batch",
        ]
        return "; ".join(parts) + (f": {self.reasons[0]}" if self.reasons else "")


def _progress_by_batch(records: Iterable[dict[str, Any]], query_id: str | None,
                       at_ms: int) -> tuple[dict[int, dict[str, Any]], list[dict[str, Any]]]:
    """Executed progress records by batch id (the last one wins: a re-run replaces a crashed one),
    and the records of triggers that ran no batch; only those at or before ``at_ms`` and of this query."""
    by_batch: dict[int, dict[str, Any]] = {}
    empty: list[dict[str, Any]] = []
    for record in records:
        if query_id and record.get("query_id") not in (None, query_id):
            continue
        stamp = record.get("timestamp_ms")
        if isinstance(stamp, int) and stamp > at_ms:
            continue
        if record.get("executed", True):
            by_batch[record["batch_id"]] = record
        else:
            empty.append(record)
    return by_batch, empty


def _advanced_from_progress(record: dict[str, Any] | None) -> tuple[int, ...] | None:
    if not record or not isinstance(record.get("sources"), list):
        return None
    return tuple(i for i, s in enumerate(record["sources"]) if isinstance(s, dict) and (s.get("input_rows") or 0) > 0)


def _facts(checkpoint: Checkpoint, progress: dict[int, dict[str, Any]], at_ms: int) -> list[BatchFacts]:
    """The readable batches at or before ``at_ms``, in batch-id order, with their inputs."""
    out: list[BatchFacts] = []
    previous_sources: tuple[Any, ...] | None = None
    for batch in checkpoint.batches:
        offsets = batch.offsets
        if offsets is None:
            continue
        if offsets.timestamp_ms > at_ms:
            break
        record = progress.get(batch.batch_id)
        if previous_sources is not None and len(previous_sources) == len(offsets.sources):
            advanced: tuple[int, ...] | None = tuple(
                i for i, (old, new) in enumerate(zip(previous_sources, offsets.sources)) if old != new
            )
        elif batch.batch_id == 0:
            advanced = tuple(i for i, s in enumerate(offsets.sources) if s is not None)
        else:
            advanced = _advanced_from_progress(record)
        previous_sources = offsets.sources
        out.append(BatchFacts(
            batch_id=batch.batch_id,
            timestamp_ms=offsets.timestamp_ms,
            watermark_ms=offsets.watermark_ms,
            # A pre-2.4 commit (``{}``) holds no watermark: its 0 is a default, not a value to compare.
            next_watermark_ms=(batch.commit.next_watermark_ms
                               if batch.commit is not None and batch.commit.has_next_watermark else None),
            committed=batch.committed,
            sources=offsets.sources,
            inputs_advanced=advanced,
            input_rows=None if record is None else int(record.get("input_rows") or 0),
            event_time_max_ms=None if record is None else record.get("event_time_max_ms"),
            run_id=None if record is None else record.get("run_id"),
        ))
    return out


def _last_move(facts: Sequence[BatchFacts]) -> dict[str, Any] | None:
    move = None
    previous_end: int | None = None
    for b in facts:
        if previous_end is not None and b.watermark_ms > previous_end:
            move = {"batch_id": b.batch_id, "timestamp_ms": b.timestamp_ms, "from_ms": previous_end, "to_ms": b.watermark_ms}
        end = b.end_watermark_ms
        if end is not None and end > b.watermark_ms:
            move = {"batch_id": b.batch_id, "timestamp_ms": b.timestamp_ms, "from_ms": b.watermark_ms, "to_ms": end}
        previous_end = end if end is not None else b.watermark_ms
    return move


def _inputs(facts: Sequence[BatchFacts], progress: dict[int, dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    if not facts:
        return ()
    head = facts[-1]
    descriptions: dict[int, str] = {}
    for record in progress.values():
        for i, source in enumerate(record.get("sources") or []):
            if isinstance(source, dict) and source.get("description"):
                descriptions[i] = source["description"]
    out = []
    for i, offset in enumerate(head.sources):
        last = next((b for b in reversed(facts) if b.inputs_advanced and i in b.inputs_advanced), None)
        out.append({
            "source": i,
            "description": descriptions.get(i),
            "offset": offset,
            "last_advanced_batch": last.batch_id if last else None,
            "last_advanced_ms": last.timestamp_ms if last else None,
        })
    return tuple(out)


def _stall_hints(flat: Sequence[BatchFacts], n_inputs: int, policy: str | None) -> list[str]:
    hints: list[str] = []
    rows = [b for b in flat if b.input_rows]
    if rows and all(b.event_time_max_ms is None for b in rows):
        total = sum(b.input_rows or 0 for b in rows)
        hints.append(
            f"no event time was observed in the {total} input rows of these batches: the event-time column is "
            f"null (or filtered out before withWatermark) for every new row"
        )
    known = [b for b in flat if b.inputs_advanced is not None]
    if n_inputs >= 2 and known and (policy or "min") == "min":
        seen = set().union(*(b.inputs_advanced for b in known))
        never = [i for i in range(n_inputs) if i not in seen]
        if never:
            hints.append(
                f"input(s) {', '.join(map(str, never))} got no data in these batches: under the 'min' "
                f"multiple-watermark policy the global watermark waits for the slowest input"
            )
        else:
            runs: dict[Any, set[int]] = {}
            for b in known:
                runs.setdefault(b.run_id or ("batch", b.batch_id), set()).update(b.inputs_advanced)
            if all(len(inputs) < n_inputs for inputs in runs.values()):
                hints.append(
                    "every input got data, but no run (restart) saw data on all inputs: Spark persists only the "
                    "global watermark, so after a restart each input's own watermark starts again from 0 and under "
                    "'min' the global one cannot rise until every input sees data in the same run (SPARK-50046)"
                )
    if known and not hints:
        hints.append("input arrived but the watermark did not move: the new rows' event times may all be older "
                     "than the current watermark plus the delay threshold (late or replayed data)")
    return hints


def classify(checkpoint: Checkpoint, progress_records: Iterable[dict[str, Any]] = (),
             thresholds: Thresholds = DEFAULT_THRESHOLDS, at_ms: int | None = None,
             extra_problems: Iterable[str] = ()) -> Classification:
    """Classify the watermark of an already read checkpoint at ``at_ms`` (see the module docstring).

    :param checkpoint: from :func:`watermark_ops.checkpoint.read_checkpoint`.
    :param progress_records: the job's progress-log records (``ProgressLog.records``), optional:
        they add input rows, observed event times and run ids to the evidence.
    :param thresholds: :class:`Thresholds`.
    :param at_ms: the evaluation instant, epoch ms UTC (default now).
    :param extra_problems: messages to carry into ``problems`` (e.g. bad progress-log lines).
    :return: a :class:`Classification`.
    :raises CheckpointMissing: no checkpoint folder at the location.
    :raises StallInputError: not a checkpoint, or the head batch's offsets cannot be read.
    """
    at_ms = _now_ms() if at_ms is None else at_ms
    problems = [f"{p.kind}: {p.file}: {p.message}" for p in checkpoint.problems] + list(extra_problems)
    as_dicts = [p.to_dict() for p in checkpoint.problems]
    fatal = [p for p in checkpoint.problems if p.batch_id is None and p.kind in ("checkpoint_missing", "not_a_checkpoint", "unreadable")]
    if any(p.kind == "checkpoint_missing" for p in fatal):
        raise CheckpointMissing(checkpoint.location, "no checkpoint folder at this location", as_dicts)
    if fatal:
        raise StallInputError(checkpoint.location, "; ".join(f"{p.kind}: {p.message}" for p in fatal), as_dicts)
    head_id = checkpoint.head_batch_id
    if head_id is not None and checkpoint.batch(head_id).offsets is None:
        raise StallInputError(
            checkpoint.location,
            f"the head batch's offsets file {checkpoint.batch(head_id).offsets_file} cannot be read: "
            + "; ".join(p.message for p in checkpoint.problems if p.batch_id == head_id),
            as_dicts,
        )

    by_batch, empty_triggers = _progress_by_batch(progress_records, checkpoint.query_id, at_ms)
    facts = _facts(checkpoint, by_batch, at_ms)
    base = dict(location=checkpoint.location, evaluated_at_ms=at_ms, thresholds=thresholds,
                query_id=checkpoint.query_id, problems=tuple(problems))
    if not facts:
        reason = (f"no batch at or before {iso_utc(at_ms)}" if checkpoint.batches
                  else "the checkpoint has no batch yet")
        return Classification(state=IDLE, alarm=False, applies=(IDLE,), reasons=(f"idle: {reason}",), hints=(), **base)

    head = facts[-1]
    policy = (checkpoint.batch(head.batch_id).conf or {}).get(POLICY_CONF)
    watermark = head.end_watermark_ms if head.committed and head.end_watermark_ms is not None else head.watermark_ms
    committed = [b for b in facts if b.committed]
    emitted_through = committed[-1].watermark_ms if committed else None
    lag = head.timestamp_ms - watermark if watermark > 0 else None
    skew = watermark - head.timestamp_ms
    data = [b for b in facts if b.is_data]
    latest_data = data[-1] if data else None
    idle = at_ms - (latest_data or facts[0]).timestamp_ms
    move = _last_move(facts)
    flat = tuple(b for b in data if b.committed and b.next_watermark_ms is not None
                 and (move is None or b.batch_id > move["batch_id"]))
    t = thresholds
    applies: list[str] = []
    reasons: list[str] = []
    hints: list[str] = []
    jump = None

    if t.max_skew is not None and skew > _ms(t.max_skew):
        applies.append(JUMPED)
        for b in facts:
            end = b.end_watermark_ms
            if end is not None and end - b.timestamp_ms > _ms(t.max_skew):
                jump = {"batch_id": b.batch_id, "timestamp_ms": b.timestamp_ms, "from_ms": b.watermark_ms, "to_ms": end}
                break
        where = f" since batch {jump['batch_id']} (from {iso_utc(jump['from_ms'])})" if jump else ""
        reasons.append(
            f"jumped: the watermark {iso_utc(watermark)} is {_words(skew)} ahead of the latest batch time "
            f"{iso_utc(head.timestamp_ms)} (max skew {_words(_ms(t.max_skew))}){where}: a future-dated record; "
            f"every later on-time row will be dropped as late"
        )

    span = flat[-1].timestamp_ms - flat[0].timestamp_ms if len(flat) >= 2 else 0
    by_count = len(flat) >= t.stall_batches
    by_window = len(flat) >= 2 and t.stall_window is not None and span >= _ms(t.stall_window)
    if by_count or by_window:
        applies.append(STALLED)
        since = (f"since batch {move['batch_id']} ({iso_utc(move['timestamp_ms'])})" if move
                 else "in the retained logs")
        rule = (f"{len(flat)} >= {t.stall_batches} data batches" if by_count
                else f"data batches over {_words(span)} >= stall window {_words(_ms(t.stall_window))}")
        reasons.append(
            f"stalled: input arrived in {len(flat)} data batches ({flat[0].batch_id}..{flat[-1].batch_id}) but the "
            f"watermark stayed at {iso_utc(watermark)} {since} ({rule})"
        )
        hints = _stall_hints(flat, len(head.sources), policy)

    if t.max_lag is not None and lag is not None and lag > _ms(t.max_lag):
        applies.append(LAGGING)
        reasons.append(
            f"lagging: the watermark {iso_utc(watermark)} is {_words(lag)} behind the latest batch time "
            f"{iso_utc(head.timestamp_ms)} (max lag {_words(_ms(t.max_lag))})"
        )

    idle_too_long = t.max_idle is not None and idle > _ms(t.max_idle)
    if latest_data is None or idle > _ms(t.idle_after):
        applies.append(IDLE)
        last = (f"the latest data batch {latest_data.batch_id} at {iso_utc(latest_data.timestamp_ms)}" if latest_data
                else f"no data batch in the retained logs (first batch {facts[0].batch_id} at {iso_utc(facts[0].timestamp_ms)})")
        limit = (f"longer than max idle {_words(_ms(t.max_idle))}" if idle_too_long
                 else f"max idle {_words(_ms(t.max_idle))}" if t.max_idle is not None else "max idle disabled")
        empty = [r for r in empty_triggers if latest_data is None or (r.get("timestamp_ms") or 0) > latest_data.timestamp_ms]
        ran = (f"; the job ran {len(empty)} trigger(s) without input since, the last at {empty[-1].get('timestamp')}"
               if empty else "")
        reasons.append(f"idle: no new input for {_words(idle)} since {last} ({limit}){ran}")

    if not applies:
        if move is not None and not flat:
            why = f"the watermark moved in batch {move['batch_id']} ({iso_utc(move['from_ms'])} -> {iso_utc(move['to_ms'])})"
        else:
            why = (f"the watermark has not moved over {len(flat)} data batch(es), fewer than the "
                   f"{t.stall_batches} (or the {_words(_ms(t.stall_window))} window) needed to call a stall")
        reasons.append(f"advancing: input arrived {_words(idle)} before the evaluation instant and {why}")
    if watermark == 0:
        reasons.append("the watermark is 0: no watermarked input has set it yet (lag is undefined)")

    state = applies[0] if applies else ADVANCING
    alarm = state in (JUMPED, STALLED, LAGGING) or idle_too_long
    return Classification(
        state=state, alarm=alarm, applies=tuple(applies) or (ADVANCING,), reasons=tuple(reasons), hints=tuple(hints),
        watermark_ms=watermark, emitted_through_ms=emitted_through, lag_ms=lag, skew_ms=skew, idle_ms=idle,
        latest_batch=head, latest_data_batch=latest_data, last_move=move, flat_data_batches=flat, jump=jump,
        inputs=_inputs(facts, by_batch), policy=policy, **base,
    )


def evaluate(location: Any, thresholds: Thresholds = DEFAULT_THRESHOLDS, *, at: Any = None,
             storage_options: dict[str, Any] | None = None, with_progress_log: bool = True) -> Classification:
    """Read a checkpoint (and its progress log) and classify its watermark at ``at``.

    :param location: checkpoint folder: local path, fsspec URL (``s3://``, ``memory://``, ...).
    :param thresholds: :class:`Thresholds`.
    :param at: the evaluation instant (:func:`instant_ms`: aware datetime, ISO-8601 text, epoch
        ms); default now, taken once the files are read.
    :param storage_options: fsspec options for the checkpoint's filesystem.
    :param with_progress_log: read ``<checkpoint>.progress.jsonl`` when present (a missing log is
        not an error; an unreadable one is reported in ``problems``).
    :raises CheckpointMissing: / :raises StallInputError: see :func:`classify`.
    :raises ValueError: for a bad ``at``.
    """
    at_ms = None if at is None else instant_ms(at)
    checkpoint = read_checkpoint(location, storage_options=storage_options)
    records: list[dict[str, Any]] = []
    extra: list[str] = []
    if with_progress_log and isinstance(location, str):
        try:
            log = read_progress_log(progress_log_path(location))
            records, extra = log.records, list(log.problems)
        except OSError as exc:
            extra.append(f"progress log {progress_log_path(location)} cannot be read: {exc!r}")
    # Default: now, taken *after* reading, so that every batch the read saw counts (a batch whose
    # time is after the start of a slow read is not "after the evaluation instant").
    return classify(checkpoint, records, thresholds, _now_ms() if at_ms is None else at_ms, extra)


# --------------------------------------------------------------------------------------------
# The one evaluation the Airflow sensors and trigger share


@dataclass(frozen=True)
class Check:
    """One evaluation for a sensor or trigger.

    :ivar outcome: ``done`` (the sensor succeeds), ``wait`` (evaluate again later; the sensor
        fails when its timeout runs out), ``fail`` (fail now: waiting cannot help), ``skip``
        (missing checkpoint with ``missing_ok``).
    :ivar message: why, for the task log and the failure message.
    :ivar classification: None when the checkpoint does not exist.
    """

    outcome: str
    message: str
    classification: Classification | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"outcome", "message", "classification": Classification.to_dict() | None}``."""
        return {"outcome": self.outcome, "message": self.message,
                "classification": self.classification.to_dict() if self.classification else None}


def check(location: Any, *, goal: str = "healthy", thresholds: Thresholds = DEFAULT_THRESHOLDS,
          target_ms: int | None = None, missing_ok: bool = False, fail_on_jumped: bool = True,
          at: Any = None, storage_options: dict[str, Any] | None = None) -> Check:
    """Evaluate a checkpoint for a sensor: the same call in ``poke``, ``reschedule`` and the trigger.

    ``goal="healthy"`` (``WatermarkStallSensor``): not an alarm → ``done``; ``jumped`` → ``fail``
    (the watermark never goes back); another alarm → ``wait`` (it may heal: data for the idle
    input, the backlog caught up); a missing checkpoint → ``skip`` with ``missing_ok``, else ``fail``.

    ``goal="reached"`` (``WatermarkReachedSensor``): ``done`` when ``emitted_through_ms >=
    target_ms``: a committed batch ran with a watermark at or past the target, so append-mode
    windows ending at or before it are final *and in the sink*; ``jumped`` with ``fail_on_jumped``
    → ``fail`` (a future-dated record passes every target, but the rows still to come will be
    dropped: completeness is not proven); else ``wait`` (also while the checkpoint does not exist).

    :param target_ms: the target instant, epoch ms UTC (required for ``reached``).
    :raises ValueError: for a bad goal or a missing target.
    :raises StallInputError: the checkpoint exists but cannot be classified (its head is unreadable).
    """
    if goal not in GOALS:
        raise ValueError(f"goal must be one of {GOALS}, got {goal!r}")
    if goal == "reached" and (isinstance(target_ms, bool) or not isinstance(target_ms, int)):
        raise ValueError(f"goal 'reached' needs target_ms (epoch ms UTC), got {target_ms!r}")
    try:
        c = evaluate(location, thresholds, at=at, storage_options=storage_options)
    except CheckpointMissing as exc:
        if goal == "reached":
            return Check("wait", f"{exc}: waiting for the job to create it")
        if missing_ok:
            return Check("skip", f"{exc} (missing_ok: the job has not run yet)")
        return Check("fail", f"{exc}: expected a Structured Streaming checkpoint")
    if goal == "healthy":
        if c.healthy:
            return Check("done", f"healthy: {c.summary()}", c)
        if c.state == JUMPED:
            return Check("fail", f"alarm: {c.summary()}", c)
        return Check("wait", f"alarm: {c.summary()}", c)
    if c.state == JUMPED and fail_on_jumped:
        return Check("fail", f"the watermark jumped ahead of processing time, completeness is not proven: {c.summary()}", c)
    emitted = c.emitted_through_ms
    if emitted is not None and emitted >= target_ms:
        return Check("done", f"reached: batches committed with watermark {iso_utc(emitted)} >= target "
                             f"{iso_utc(target_ms)} ({c.location})", c)
    return Check("wait", f"not reached: committed batches ran with watermark {iso_utc(emitted) or 'none'} "
                         f"< target {iso_utc(target_ms)} (next batch starts from {iso_utc(c.watermark_ms) or 'none'}; "
                         f"{c.state}) ({c.location})", c)


# --------------------------------------------------------------------------------------------
# Terminal: rich output and the ``watermark-ops status`` additions

_STATE_STYLE = {JUMPED: "bold red", STALLED: "bold red", LAGGING: "bold yellow", IDLE: "cyan", ADVANCING: "bold green"}


def render_classification(c: Classification, console: Any) -> None:
    """Print a classification on a ``rich`` console: state, reasons, hints, evidence table."""
    from rich.markup import escape
    from rich.table import Table

    alarm = " [bold red](ALARM)[/]" if c.alarm else ""
    console.print(f"watermark state [{_STATE_STYLE[c.state]}]{c.state}[/]{alarm} at {iso_utc(c.evaluated_at_ms)}")
    for reason in c.reasons:
        console.print(f"  - {reason}", highlight=False, markup=False)
    for hint in c.hints:
        console.print(f"  hint: {hint}", highlight=False, markup=False)
    table = Table(title="Evidence", title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    head, data = c.latest_batch, c.latest_data_batch
    rows = [
        ("current watermark", f"{iso_utc(c.watermark_ms) or 'none'} ({c.watermark_ms} ms)"),
        ("emitted through", f"{iso_utc(c.emitted_through_ms) or 'none'}"),
        ("latest batch", f"{head.batch_id} at {iso_utc(head.timestamp_ms)}" + ("" if head.committed else " (in flight)")
         if head else "none"),
        ("latest data batch", f"{data.batch_id} at {iso_utc(data.timestamp_ms)}" if data else "none"),
        ("lag (latest batch - watermark)", _words(c.lag_ms)),
        ("idle (evaluated at - latest data batch)", _words(c.idle_ms)),
        ("last move", f"batch {c.last_move['batch_id']}: {iso_utc(c.last_move['from_ms'])} -> {iso_utc(c.last_move['to_ms'])}"
         if c.last_move else "none in the retained logs"),
        ("data batches since", ", ".join(str(b.batch_id) for b in c.flat_data_batches) or "none"),
        ("policy", c.policy or "not recorded"),
    ]
    if c.jump:
        rows.append(("jump", f"batch {c.jump['batch_id']}: {iso_utc(c.jump['from_ms'])} -> {iso_utc(c.jump['to_ms'])}"))
    for item in c.inputs:
        rows.append((f"input {item['source']}", f"offset {item['offset']}, last advanced in batch "
                                                f"{item['last_advanced_batch']}" + (f" ({item['description']})" if item["description"] else "")))
    t = c.thresholds
    rows.append(("thresholds", f"idle after {_words(_ms(t.idle_after))}, max idle {_words(_ms(t.max_idle)) if t.max_idle else 'off'}, "
                               f"max lag {_words(_ms(t.max_lag)) if t.max_lag else 'off'}, max skew "
                               f"{_words(_ms(t.max_skew)) if t.max_skew else 'off'}, stall after {t.stall_batches} data batches"
                               f" or {_words(_ms(t.stall_window)) if t.stall_window else 'no window'}"))
    for label, value in rows:
        table.add_row(label, escape(value))  # offsets and source descriptions hold [ ]
    console.print(table)


_FLAG_HELP = {
    "idle_after": "no data batch for this long -> idle (durations: seconds or ISO-8601, e.g. PT6H, P1DT2H)",
    "max_idle": "idle longer than this -> alarm ('none' disables)",
    "max_lag": "latest batch time - watermark above this -> lagging ('none' disables)",
    "max_skew": "watermark ahead of the latest batch time by more than this -> jumped ('none' disables)",
    "stall_window": "data batches over this much time without a watermark move -> stalled ('none': count only)",
}


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--at`` and the threshold flags (durations: seconds or ISO-8601 such as ``PT6H``)."""
    parser.add_argument("--at", metavar="ISO-8601-INSTANT",
                        help="evaluation instant (default now), e.g. 2026-11-21T12:00:00Z; batches after it are ignored")
    for item in fields(Thresholds):
        flag = "--" + item.name.replace("_", "-")
        if item.name == "stall_batches":
            parser.add_argument(flag, type=int, default=None, metavar="K",
                                help=f"data batches without a watermark move -> stalled (default {item.default})")
            continue
        shown = _words(_ms(item.default)) if item.default is not None else "none"
        parser.add_argument(flag, default=None, metavar="DURATION", help=f"{_FLAG_HELP[item.name]} (default {shown})")


def thresholds_from_args(args: argparse.Namespace) -> Thresholds:
    """The :class:`Thresholds` of the parsed flags (unset flags keep the defaults).

    :raises ValueError: for a bad duration, naming the flag.
    """
    overrides = {item.name: getattr(args, item.name) for item in fields(Thresholds)
                 if getattr(args, item.name, None) is not None}
    return replace(DEFAULT_THRESHOLDS, **overrides)


def status_classification(checkpoint: Checkpoint, args: argparse.Namespace) -> Classification | None:
    """The classification for ``watermark-ops status``: the flags, ``--at``, the checkpoint already read.

    :return: None when the checkpoint is missing or cannot be classified (the status output
        already shows the problems).
    :raises ValueError: for a bad flag value (the message names it).
    """
    thresholds = thresholds_from_args(args)
    at_ms = _now_ms() if not getattr(args, "at", None) else instant_ms(args.at)
    records: list[dict[str, Any]] = []
    extra: list[str] = []
    try:
        log = read_progress_log(progress_log_path(checkpoint.location))
        records, extra = log.records, list(log.problems)
    except OSError as exc:
        extra.append(f"progress log cannot be read: {exc!r}")
    try:
        return classify(checkpoint, records, thresholds, at_ms, extra)
    except StallInputError:
        return None


def status_command(args: argparse.Namespace) -> int:
    """``watermark-ops status CHECKPOINT [--json] [--at ISO] [threshold flags]``.

    The issue-3 status (:func:`watermark_ops.cli.status_payload`, :func:`~watermark_ops.cli.render_status`)
    plus the classification: ``--json`` adds ``state`` (one of :data:`STATES`, None when the
    checkpoint cannot be classified) and ``classification`` (:meth:`Classification.to_dict`); the
    human output adds the state, its reasons and the evidence table.

    :return: :func:`watermark_ops.cli.status_exit_code` (0, or 2 when the checkpoint cannot be
        read); 2 for a bad flag value (the message names it). An alarm does not change it: read
        ``classification.alarm``.
    """
    from watermark_ops import cli

    try:
        thresholds_from_args(args)
        if getattr(args, "at", None):
            instant_ms(args.at)
    except ValueError as exc:
        print(f"watermark-ops status: {exc}", file=sys.stderr)
        return 2
    checkpoint = read_checkpoint(args.checkpoint)
    payload = cli.status_payload(checkpoint)
    classification = status_classification(checkpoint, args)
    payload["state"] = classification.state if classification else None
    payload["classification"] = classification.to_dict() if classification else None
    if args.json:
        print(json.dumps(payload))
    else:
        console = cli.terminal_console()
        cli.render_status(checkpoint, payload, console)
        if classification is not None:
            render_classification(classification, console)
    return cli.status_exit_code(checkpoint, payload)


def _register_status_command() -> None:
    """Replace ``status`` in the ``watermark-ops`` registry (``cli.COMMAND_MODULES`` imports this module)."""
    from watermark_ops import cli

    def arguments(parser: argparse.ArgumentParser) -> None:
        cli.status_arguments(parser)
        add_status_arguments(parser)

    cli.register(cli.Subcommand(
        "status", "show a checkpoint's head and classify its watermark: advancing, idle, stalled, lagging or jumped",
        arguments, status_command,
    ))


_register_status_command()
