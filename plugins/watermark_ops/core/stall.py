"""Classify a checkpoint's watermark at an instant: advancing, idle, stalled, lagging or jumped.

A watermark that stops moving silently stops a streaming pipeline: append-mode windows never
close, state grows, downstream tables stay incomplete. This module reads the offset log, the
commit log (:func:`watermark_ops.core.checkpoint.read_checkpoint`) and, when present, the job's
progress log (``<checkpoint>.progress.jsonl``, :mod:`watermark_ops.core.progress`) and tells which of
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

Partition skew: a warning, not a state
--------------------------------------
When the job records each batch's newest event time per partition (the progress log's
``event_time_max_ms_by_partition``, e.g. per origin airport), the classification reports each
partition's newest event time so far (the max over the records read, across batches and runs),
the leader and how far each trails it (:mod:`watermark_ops.core.partition_skew`), in
``partition_skew``. A partition trailing by more than ``max_partition_skew`` adds a sentence to
``warnings``; it changes neither ``state``, ``applies`` nor ``alarm``. Why: the watermark itself is
healthy (it follows the leader, as Spark defines it), and a skew is expected while one partition
is replayed or backfilled; what it costs, the trailing partition's rows dropped as late, is
counted by the late-row ledger, and a stall sensor that failed on it would page for a condition
no restart fixes. The warning says which partition and by how much, so a person can decide.

The evaluation instant (``at``, default now)
-------------------------------------------
Only batches whose ``batchTimestampMs`` is at or before ``at`` are considered (progress records
likewise by ``timestamp_ms``), so a classification can be reproduced later: as long as the files
are retained, evaluating at a past instant gives what an evaluation at that instant gave. The
commit of a batch that started before ``at`` but committed after it is counted (file contents
carry no commit time). ``at`` drives idleness only; lag and skew use the batches' own processing
times, which are real wall-clock values even when the events are years old.
What is read: the newest batches only
-------------------------------------
A sensor pokes every few minutes for as long as a pipeline lives, so its cost must not grow with
the history. :func:`evaluate` (hence :func:`watermark_ops.core.checks.check`, the sensors and the
trigger) and ``watermark-ops status`` read through :func:`read_recent`: three folder listings,
``metadata`` and the files of the newest :func:`recent_batches` batch ids (:data:`RECENT_BATCHES`,
100, Spark's own ``minBatchesToRetain`` default, so a real checkpoint is usually read whole; more
when ``stall_batches`` asks for it), and the end of the progress log back to the oldest of those
batches (:func:`watermark_ops.core.progress.read_progress_tail`). Older files are not read, so a
corrupt or unreadable old file does not stop a poke (the audit reads and checks everything).
When older batches exist that were not read (``Classification.history["complete"]`` false), what
the retained logs would say is said of the batches read: "the watermark has not moved in the 100
newest batches read (since batch N at T)" rather than "never moved"; no data batch among them
gives an idle time measured from the oldest batch read (a lower bound); a jump found in the oldest
batch read may have happened earlier; that batch's inputs come from the progress log, else are
unknown (as after Spark's purge). An ``at`` before the oldest batch read widens the read until
enough batches at or before ``at`` are in (a past instant may read more; a poke at now never does).

Queries without a watermark: ``no_watermark`` and ``watermark_unknown``
-----------------------------------------------------------------------
A query without ``withWatermark`` (a ``dropDuplicates`` or ``limit`` of another team, a plain
filter) also writes ``batchWatermarkMs`` 0 into every offsets file and ``nextBatchWatermarkMs`` 0
into every commit: its input arrives and "the watermark" never moves, exactly as for a
watermarked query whose event times are all null (whose event-time statistics Spark 4.2 reports
as 1970-01-01T00:00:00Z, 0 ms: seen on real runs). Only while the current watermark is 0 (it never goes back, so it was
never set) the classification asks the evidence whether the query has a watermark at all
(:func:`watermark_evidence`, in ``Classification.watermark_evidence``), never the number of batches:

* it has one when the offset or commit log holds a watermark above 0; when a progress record of
  the batches read carries Spark's ``eventTime.watermark`` or event-time statistics (the
  progress log's ``watermark_ms``, ``event_time_min_ms``/``max_ms`` not null: Spark reports them
  only for a plan with an ``EventTimeWatermark``, ``ProgressReporter``); when a stateful
  operator is ``dedupeWithinWatermark``; or when a state schema column carries
  ``spark.watermarkDelayMs`` (a window or event-time column of the state key,
  :func:`watermark_ops.core.checkpoint.read_state_metadata`). Then the five states above apply
  unchanged: null event times still make ``stalled``.
* it has none when the progress records of the batches read (executed batches of this query)
  all record ``watermark_ms`` null and no event time, and nothing above says otherwise: state
  ``no_watermark``, no alarm (there is no watermark to stall, lag or jump; the audit still
  checks the logs).
* otherwise the evidence cannot tell (no progress log, or records without the fields; a
  stateless query, no ``state/``; a ``dedupe`` whose state keys hold no event-time column, which
  a ``dropDuplicates("id")`` after ``withWatermark`` also writes): once a committed data batch
  left the watermark at 0 the state is ``watermark_unknown``, no alarm, and the reason says
  "cannot tell whether this query has a watermark: ..." with what was looked at.

Idleness is still reported in both states' reasons (``applies`` includes ``idle``) but raises no
alarm: the stall classification is about a watermark, and these queries have none it can judge.

Public API
----------
``read_recent(location, thresholds, at_ms=...)`` (the bounded read),
``classify(checkpoint, progress_records, thresholds, at_ms)`` (an already read checkpoint),
``classify_at(checkpoint, thresholds, at_ms)`` (the same with the progress log beside it),
``evaluate(location, thresholds, at=...)`` (reads, then classifies), ``Classification``,
``BatchFacts``, the state names. The thresholds are :class:`watermark_ops.core.thresholds.Thresholds`;
the one evaluation the Airflow sensors and trigger share is :func:`watermark_ops.core.checks.check`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from watermark_ops.core.checkpoint import Checkpoint, StateMetadata, read_checkpoint, read_state_metadata
from watermark_ops.core.facts import BatchFacts, batch_facts, inputs_evidence, last_move, progress_by_batch
from watermark_ops.core.partition_skew import PartitionSkew, partition_skew
from watermark_ops.core.progress import TAIL_MAX_BYTES, progress_log_path, read_progress_tail
from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS, Thresholds
from watermark_ops.core.times import duration_ms as _ms
from watermark_ops.core.times import duration_words as _words
from watermark_ops.core.times import instant_ms, iso_utc, now_ms

__all__ = [
    "ADVANCING",
    "IDLE",
    "JUMPED",
    "LAGGING",
    "NO_WATERMARK",
    "POLICY_CONF",
    "RECENT_BATCHES",
    "STALLED",
    "STATES",
    "WATERMARK_UNKNOWN",
    "BatchFacts",
    "CheckpointMissing",
    "Classification",
    "StallInputError",
    "classify",
    "classify_at",
    "evaluate",
    "evaluate_tail",
    "read_recent",
    "needs_state_metadata",
    "recent_batches",
    "state_metadata_of",
    "watermark_evidence",
]

JUMPED, STALLED, LAGGING, IDLE, ADVANCING = "jumped", "stalled", "lagging", "idle", "advancing"
#: A query without an event-time watermark (proven), and one that may or may not have one (the
#: evidence cannot tell): see "Queries without a watermark" in the module docstring.
NO_WATERMARK, WATERMARK_UNKNOWN = "no_watermark", "watermark_unknown"
#: The states: the five of a watermarked query in precedence order (the first that applies is
#: reported), then the two that replace them when the watermark was never set (never alarms).
STATES = (JUMPED, STALLED, LAGGING, IDLE, ADVANCING, NO_WATERMARK, WATERMARK_UNKNOWN)
#: The offsets ``conf`` key of the multiple-watermark policy (``min`` | ``max``).
POLICY_CONF = "spark.sql.streaming.multipleWatermarkPolicy"
#: The newest batches the bounded read holds at least (:func:`recent_batches`): Spark's own
#: ``spark.sql.streaming.minBatchesToRetain`` default, so a real checkpoint is usually read whole.
RECENT_BATCHES = 100


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
# The classification


@dataclass(frozen=True)
class Classification:
    """The state of a checkpoint's watermark at an instant, with its evidence (epoch ms UTC).

    :ivar state: one of :data:`STATES`.
    :ivar alarm: True for ``jumped``, ``stalled``, ``lagging`` and idleness past ``max_idle``; never
        for ``no_watermark`` and ``watermark_unknown``.
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
    :ivar history: what was read (:func:`read_recent` reads only the newest batches):
        ``{"complete": bool (every batch file listed was read), "batches_read": int,
        "unread_batches": int (older batch ids listed, not read), "first_batch_id": int | None
        (the oldest batch read), "first_batch_ms": int | None (its batchTimestampMs, epoch ms
        UTC), "first_batch_time": ISO-8601 | None, "scope": str (the words the reasons use, e.g.
        "in the retained logs" or "in the 100 newest batches read (...)")}``.
    :ivar partition_skew: each partition's newest event time over the progress records read, the
        leader and how far each trails it (:class:`~watermark_ops.core.partition_skew.PartitionSkew`);
        None when the job records no per-partition event times.
    :ivar warnings: one sentence per partition trailing the leader by more than
        ``max_partition_skew``; warnings change neither ``state`` nor ``alarm``.
    :ivar watermark_evidence: whether the query has an event-time watermark
        (:func:`watermark_evidence`): ``{"has_watermark": True | False | None (cannot tell),
        "source": "checkpoint_logs" | "progress_log" | "state_metadata" | None, "evidence":
        [sentences], "state_operators": [StateOperator.to_dict()] | None (state not read)}``;
        None without batches.
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
    history: dict[str, Any] | None = None
    partition_skew: PartitionSkew | None = None
    warnings: tuple[str, ...] = ()
    watermark_evidence: dict[str, Any] | None = None

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
            "history": self.history,
            "partition_skew": self.partition_skew.to_dict() if self.partition_skew else None,
            "warnings": list(self.warnings),
            "watermark_evidence": self.watermark_evidence,
        }

    def summary(self) -> str:
        """One line: state, alarm, watermark, lag, latest batch, the number of warnings, first reason."""
        head = self.latest_batch
        parts = [
            f"{self.location}: {self.state}{' (ALARM)' if self.alarm else ''}",
            f"watermark {iso_utc(self.watermark_ms) or 'none'}",
            f"lag {_words(self.lag_ms)}",
            f"latest batch {head.batch_id} at {iso_utc(head.timestamp_ms)}" if head else "no batch",
            *([f"{len(self.warnings)} warning(s): partition skew"] if self.warnings else []),
        ]
        return "; ".join(parts) + (f": {self.reasons[0]}" if self.reasons else "")


def _stall_hints(flat: Sequence[BatchFacts], n_inputs: int, policy: str | None) -> list[str]:
    hints: list[str] = []
    rows = [b for b in flat if b.input_rows]
    if rows and all(b.event_time_max_ms is None for b in rows):
        total = sum(b.input_rows or 0 for b in rows)
        hints.append(
            f"no event time was observed in the {total} input rows of these batches: the event-time column is "
            f"null (or filtered out before withWatermark) for every new row"
        )
    elif rows and all(b.event_time_max_ms is None or b.event_time_max_ms <= 0 for b in rows):
        total = sum(b.input_rows or 0 for b in rows)
        hints.append(
            f"the newest event time Spark observed in the {total} input rows of these batches is "
            f"1970-01-01T00:00:00Z (0), what Spark reports for rows whose event time is null: the event-time "
            f"column is null for every new row"
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


def watermark_evidence(watermark_ms: int | None, progress: dict[int, dict[str, Any]],
                       state: StateMetadata | None) -> dict[str, Any]:
    """Whether the query has an event-time watermark, from its own evidence (see "Queries without
    a watermark" in the module docstring); never from the number of batches.

    :param watermark_ms: the current watermark (epoch ms UTC); above 0 proves a watermark.
    :param progress: the progress records of the batches read, by batch id (executed batches of
        this query, :func:`watermark_ops.core.facts.progress_by_batch`).
    :param state: the state operators' metadata (:func:`watermark_ops.core.checkpoint.read_state_metadata`),
        None when not read.
    :return: ``{"has_watermark": True | False | None, "source": "checkpoint_logs" | "progress_log" |
        "state_metadata" | None, "evidence": [sentences: what proves it, or why it cannot be told],
        "state_operators": [StateOperator.to_dict()] | None}``.
    """
    operators = None if state is None else [op.to_dict() for op in state.operators]

    def result(has: bool | None, source: str | None, evidence: list[str]) -> dict[str, Any]:
        return {"has_watermark": has, "source": source, "evidence": evidence, "state_operators": operators}

    if watermark_ms is not None and watermark_ms > 0:
        return result(True, "checkpoint_logs", [f"the offset and commit logs hold the watermark {iso_utc(watermark_ms)}"])
    records = [progress[k] for k in sorted(progress)]
    stats = [r for r in records if any(r.get(k) is not None for k in ("watermark_ms", "event_time_min_ms", "event_time_max_ms"))]
    if stats:
        r = stats[-1]
        return result(True, "progress_log", [
            f"Spark reported an event-time watermark ({iso_utc(r.get('watermark_ms')) or 'none'}) and event times "
            f"({iso_utc(r.get('event_time_min_ms')) or 'none'}..{iso_utc(r.get('event_time_max_ms')) or 'none'}) in the "
            f"progress of batch {r['batch_id']}: it reports eventTime only for a plan with withWatermark"])
    if state is not None:
        within = [op for op in state.operators if op.name == "dedupeWithinWatermark"]
        if within:
            return result(True, "state_metadata", [
                f"state operator {within[0].operator_id} is dedupeWithinWatermark ({within[0].metadata_file}), "
                f"which Spark allows only with a watermark"])
        columns = state.watermark_columns
        if columns:
            c = columns[0]
            name = next((op.name for op in state.operators if op.operator_id == c["operator_id"]), None)
            return result(True, "state_metadata", [
                f"state operator {c['operator_id']} ({name or 'unnamed'}) keeps the event-time column {c['column']!r} in "
                f"its state {c['key_or_value']} with spark.watermarkDelayMs {c['delay_ms']} ({c['file']})"])
    recorded = [r for r in records if "watermark_ms" in r]
    if recorded:
        ids = [r["batch_id"] for r in recorded]
        rows = sum(int(r.get("input_rows") or 0) for r in recorded)
        return result(False, "progress_log", [
            f"Spark's progress of the {len(recorded)} batch(es) read ({ids[0]}..{ids[-1]}, {rows} input rows) reports "
            f"no event-time watermark and no event time: it reports eventTime.watermark for every batch of a plan "
            f"with withWatermark (ProgressReporter)"])
    why = ["no progress-log record of the batches read carries Spark's eventTime" if records
           else "no progress-log record of the batches read (no progress log, or not this query's)"]
    if state is None:
        why.append("the state metadata was not read")
    elif not state.has_state_folder:
        why.append("the checkpoint has no state/ folder (a stateless query keeps no state metadata to tell by)")
    elif not any(op.name for op in state.operators):
        why.append("state/ holds no readable operator metadata (Spark writes it since 3.5)")
    else:
        names = ", ".join(f"{op.operator_id}: {op.name}" for op in state.operators if op.name)
        why.append(f"the state operators ({names}) keep no event-time column in their state schema: a query "
                   f"without withWatermark writes the same metadata as one whose watermark column is not a state key")
    return result(None, None, why)


def _check_readable(checkpoint: Checkpoint) -> None:
    """Raise when the checkpoint cannot be classified at all (see :func:`classify`)."""
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


def _jumped(facts: Sequence[BatchFacts], watermark: int, skew: int, t: Thresholds,
            complete: bool = True) -> tuple[str, dict[str, Any] | None]:
    """The ``jumped`` reason and the batch whose watermark first ran ahead of its time by more than
    ``max_skew`` (the first among those read: when that is the oldest batch read and older ones were
    not read, the jump may be earlier, and the reason says so)."""
    jump = None
    for b in facts:
        end = b.end_watermark_ms
        if end is not None and end - b.timestamp_ms > _ms(t.max_skew):
            jump = {"batch_id": b.batch_id, "timestamp_ms": b.timestamp_ms, "from_ms": b.watermark_ms, "to_ms": end}
            break
    where = f" since batch {jump['batch_id']} (from {iso_utc(jump['from_ms'])})" if jump else ""
    if jump and not complete and jump["batch_id"] == facts[0].batch_id:
        where = (f" since batch {jump['batch_id']} or earlier (the oldest batch read; older batches were not read, "
                 f"from {iso_utc(jump['from_ms'])})")
    reason = (
        f"jumped: the watermark {iso_utc(watermark)} is {_words(skew)} ahead of the latest batch time "
        f"{iso_utc(facts[-1].timestamp_ms)} (max skew {_words(_ms(t.max_skew))}){where}: a future-dated record; "
        f"every later on-time row will be dropped as late"
    )
    return reason, jump


def _stalled(flat: Sequence[BatchFacts], move: dict[str, Any] | None, watermark: int, t: Thresholds,
             scope: str = "in the retained logs") -> str | None:
    """The ``stalled`` reason when enough data batches (or a long enough span) passed without a move, else None."""
    span = flat[-1].timestamp_ms - flat[0].timestamp_ms if len(flat) >= 2 else 0
    by_count = len(flat) >= t.stall_batches
    by_window = len(flat) >= 2 and t.stall_window is not None and span >= _ms(t.stall_window)
    if not (by_count or by_window):
        return None
    since = (f"since batch {move['batch_id']} ({iso_utc(move['timestamp_ms'])})" if move
             else scope)
    rule = (f"{len(flat)} >= {t.stall_batches} data batches" if by_count
            else f"data batches over {_words(span)} >= stall window {_words(_ms(t.stall_window))}")
    return (f"stalled: input arrived in {len(flat)} data batches ({flat[0].batch_id}..{flat[-1].batch_id}) but the "
            f"watermark stayed at {iso_utc(watermark)} {since} ({rule})")


def _idle(facts: Sequence[BatchFacts], latest_data: BatchFacts | None, idle: int, idle_too_long: bool,
          empty_triggers: Sequence[dict[str, Any]], t: Thresholds, scope: str = "in the retained logs") -> str:
    """The ``idle`` reason: since when no input arrived, against ``max_idle``, and the empty triggers since."""
    last = (f"the latest data batch {latest_data.batch_id} at {iso_utc(latest_data.timestamp_ms)}" if latest_data
            else f"no data batch {scope} (first batch {facts[0].batch_id} at {iso_utc(facts[0].timestamp_ms)})")
    limit = (f"longer than max idle {_words(_ms(t.max_idle))}" if idle_too_long
             else f"max idle {_words(_ms(t.max_idle))}" if t.max_idle is not None else "max idle disabled")
    empty = [r for r in empty_triggers if latest_data is None or (r.get("timestamp_ms") or 0) > latest_data.timestamp_ms]
    ran = (f"; the job ran {len(empty)} trigger(s) without input since, the last at {empty[-1].get('timestamp')}"
           if empty else "")
    return f"idle: no new input for {_words(idle)} since {last} ({limit}){ran}"


def _advancing(move: dict[str, Any] | None, flat: Sequence[BatchFacts], idle: int, t: Thresholds) -> str:
    """Why ``advancing``: the latest move, or too few data batches to call a stall."""
    if move is not None and not flat:
        why = f"the watermark moved in batch {move['batch_id']} ({iso_utc(move['from_ms'])} -> {iso_utc(move['to_ms'])})"
    else:
        why = (f"the watermark has not moved over {len(flat)} data batch(es), fewer than the "
               f"{t.stall_batches} (or the {_words(_ms(t.stall_window))} window) needed to call a stall")
    return f"advancing: input arrived {_words(idle)} before the evaluation instant and {why}"


def _history(checkpoint: Checkpoint, facts: Sequence[BatchFacts]) -> dict[str, Any]:
    """What was read, for :attr:`Classification.history` (and the words the reasons use)."""
    first = facts[0] if facts else None
    read = len(checkpoint.batches)
    if checkpoint.complete:
        scope = "in the retained logs"
    else:
        since = f", since batch {first.batch_id} at {iso_utc(first.timestamp_ms)}" if first else ""
        scope = (f"in the {read} newest batches read ({checkpoint.unread_batches} older batches not read{since})")
    return {
        "complete": checkpoint.complete,
        "batches_read": read,
        "unread_batches": checkpoint.unread_batches,
        "first_batch_id": first.batch_id if first else None,
        "first_batch_ms": first.timestamp_ms if first else None,
        "first_batch_time": iso_utc(first.timestamp_ms) if first else None,
        "scope": scope,
    }


def classify(checkpoint: Checkpoint, progress_records: Iterable[dict[str, Any]] = (),
             thresholds: Thresholds = DEFAULT_THRESHOLDS, at_ms: int | None = None,
             extra_problems: Iterable[str] = (), state_metadata: StateMetadata | None = None) -> Classification:
    """Classify the watermark of an already read checkpoint at ``at_ms`` (see the module docstring).

    :param checkpoint: from :func:`watermark_ops.core.checkpoint.read_checkpoint`.
    :param progress_records: the job's progress-log records (``ProgressLog.records``), optional:
        they add input rows, observed event times and run ids to the evidence.
    :param thresholds: :class:`Thresholds`.
    :param at_ms: the evaluation instant, epoch ms UTC (default now).
    :param extra_problems: messages to carry into ``problems`` (e.g. bad progress-log lines).
    :param state_metadata: the state operators' metadata (:func:`read_state_metadata`), evidence of
        a watermark while the watermark is 0 (:func:`watermark_evidence`); None: not read (the
        readers, :func:`classify_at` and :func:`evaluate`, read it when :func:`needs_state_metadata`).
    :return: a :class:`Classification`.
    :raises CheckpointMissing: no checkpoint folder at the location.
    :raises StallInputError: not a checkpoint, or the head batch's offsets cannot be read.
    """
    at_ms = now_ms() if at_ms is None else at_ms
    problems = [f"{p.kind}: {p.file}: {p.message}" for p in checkpoint.problems] + list(extra_problems)
    _check_readable(checkpoint)
    by_batch, empty_triggers = progress_by_batch(progress_records, checkpoint.query_id, at_ms)
    facts = batch_facts(checkpoint, by_batch, at_ms)
    history = _history(checkpoint, facts)
    scope = history["scope"]
    base = dict(location=checkpoint.location, evaluated_at_ms=at_ms, thresholds=thresholds,
                query_id=checkpoint.query_id, problems=tuple(problems), history=history)
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
    move = last_move(facts)
    flat = tuple(b for b in data if b.committed and b.next_watermark_ms is not None
                 and (move is None or b.batch_id > move["batch_id"]))
    t = thresholds
    applies: list[str] = []
    reasons: list[str] = []
    hints: list[str] = []
    jump = None
    evidence = watermark_evidence(watermark, by_batch, state_metadata)
    partitions = partition_skew((by_batch[k] for k in sorted(by_batch)), watermark_ms=watermark,
                                max_partition_skew_ms=_ms(t.max_partition_skew))
    common = dict(watermark_ms=watermark, emitted_through_ms=emitted_through, lag_ms=lag, skew_ms=skew, idle_ms=idle,
                  latest_batch=head, latest_data_batch=latest_data, last_move=move, flat_data_batches=flat,
                  inputs=inputs_evidence(facts, by_batch), policy=policy, partition_skew=partitions,
                  warnings=tuple(partitions.warnings()) if partitions else (), watermark_evidence=evidence, **base)
    has = evidence["has_watermark"]
    if watermark == 0 and (has is False or (has is None and flat)):
        # See "Queries without a watermark" in the module docstring: a state of its own, never an alarm.
        state = NO_WATERMARK if has is False else WATERMARK_UNKNOWN
        batches = (f"input arrived in {len(flat)} committed data batch(es) ({flat[0].batch_id}..{flat[-1].batch_id})"
                   if flat else "no committed data batch yet")
        if state == NO_WATERMARK:
            reasons.append(f"no_watermark: the query has no event-time watermark ({evidence['evidence'][0]}); "
                           f"{batches} and the watermark stays at 0 as Spark writes it for such a query: nothing to "
                           f"stall, lag or jump, not an alarm (the audit still checks the offset and commit logs)")
        else:
            reasons.append(f"watermark_unknown: cannot tell whether this query has a watermark: "
                           f"{'; '.join(evidence['evidence'])}. {batches[0].upper() + batches[1:]} and the watermark "
                           f"stayed at 0 (never set): with a watermark that is a stall (event times null for every "
                           f"row, or an input without data under 'min'), without one it is normal; not an alarm")
        applies.append(state)
        if latest_data is None or idle > _ms(t.idle_after):
            applies.append(IDLE)
            reasons.append(_idle(facts, latest_data, idle, t.max_idle is not None and idle > _ms(t.max_idle),
                                 empty_triggers, t, scope))
        return Classification(state=state, alarm=False, applies=tuple(applies), reasons=tuple(reasons),
                              hints=tuple(hints), **common)

    if t.max_skew is not None and skew > _ms(t.max_skew):
        applies.append(JUMPED)
        reason, jump = _jumped(facts, watermark, skew, t, checkpoint.complete)
        reasons.append(reason)
    stalled = _stalled(flat, move, watermark, t, scope)
    if stalled:
        applies.append(STALLED)
        reasons.append(stalled)
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
        reasons.append(_idle(facts, latest_data, idle, idle_too_long, empty_triggers, t, scope))
    if not applies:
        reasons.append(_advancing(move, flat, idle, t))
    if watermark == 0:
        reasons.append("the watermark is 0: no watermarked input has set it yet (lag is undefined)")

    state = applies[0] if applies else ADVANCING
    alarm = state in (JUMPED, STALLED, LAGGING) or idle_too_long
    # Partition skew is evidence and a warning only: see "Partition skew: a warning, not a state" above.
    return Classification(state=state, alarm=alarm, applies=tuple(applies) or (ADVANCING,), reasons=tuple(reasons),
                          hints=tuple(hints), jump=jump, **common)


def needs_state_metadata(checkpoint: Checkpoint) -> bool:
    """True when the watermark the next batch starts from is 0 (never set): only then does
    :func:`classify` look at the state operators' metadata (:func:`watermark_evidence`)."""
    return checkpoint.next_watermark_ms == 0


def state_metadata_of(checkpoint: Checkpoint, location: Any = None,
                      storage_options: dict[str, Any] | None = None, *,
                      filesystem: Any = None) -> tuple[StateMetadata | None, list[str]]:
    """The state operators' metadata when :func:`needs_state_metadata`, else None; and its problems
    as messages (``"<kind>: <file>: <message>"``). Read from ``location`` (default the
    checkpoint's own location) with :func:`watermark_ops.core.checkpoint.read_state_metadata`."""
    if not needs_state_metadata(checkpoint):
        return None, []
    try:
        state = read_state_metadata(checkpoint.location if location is None else location,
                                    filesystem=filesystem, storage_options=storage_options)
    except Exception as exc:  # noqa: BLE001 - evidence missing, not a failed classification
        return None, [f"state metadata of {checkpoint.location} cannot be read: {exc!r}"]
    return state, [f"{p.kind}: {p.file}: {p.message}" for p in state.problems]


def classify_at(checkpoint: Checkpoint, thresholds: Thresholds = DEFAULT_THRESHOLDS, at_ms: int | None = None,
                progress_log: str | None = None, *, storage_options: dict[str, Any] | None = None,
                filesystem: Any = None) -> Classification:
    """:func:`classify` with the job's progress log read first: only its end, the records of the
    batches the checkpoint holds (:func:`watermark_ops.core.progress.read_progress_tail`, from
    the oldest batch read; at most :data:`watermark_ops.core.progress.TAIL_MAX_BYTES`).

    A missing log is no problem; a log that cannot be read, its bad lines, and a tail cut at the
    byte limit are carried into ``problems``.

    :param at_ms: the evaluation instant, epoch ms UTC; default now, taken *after* reading, so
        that every batch the read saw counts (a batch whose time is after the start of a slow read
        is not "after the evaluation instant").
    :param progress_log: the log's location; default beside the checkpoint,
        ``<checkpoint>.progress.jsonl`` (:func:`watermark_ops.core.progress.progress_log_path`).
    :param storage_options: / filesystem: fsspec options, or an fsspec filesystem, to read the
        progress log and the state metadata (only while the watermark is 0,
        :func:`state_metadata_of`) with; as for :func:`~watermark_ops.core.checkpoint.read_checkpoint`.
    :raises CheckpointMissing: / :raises StallInputError: see :func:`classify`.
    """
    path = progress_log or progress_log_path(checkpoint.location)
    records: list[dict[str, Any]] = []
    extra: list[str] = []
    if checkpoint.batches:  # without a batch the progress log adds nothing
        try:
            log = read_progress_tail(path, checkpoint.batches[0].batch_id, query_id=checkpoint.query_id,
                                     filesystem=filesystem, storage_options=storage_options)
            records, extra = log.records, list(log.problems)
            if not log.complete:
                extra.append(f"progress log {path}: read from byte {log.start_offset} on only (the last "
                             f"{TAIL_MAX_BYTES} bytes): records of the oldest batches read may be missing")
        except OSError as exc:
            extra.append(f"progress log {path} cannot be read: {exc!r}")
    state, state_problems = state_metadata_of(checkpoint, storage_options=storage_options, filesystem=filesystem)
    return classify(checkpoint, records, thresholds, now_ms() if at_ms is None else at_ms, extra + state_problems,
                    state_metadata=state)


def recent_batches(thresholds: Thresholds = DEFAULT_THRESHOLDS) -> int:
    """How many of the newest batches :func:`read_recent` reads: :data:`RECENT_BATCHES`, or
    ``2 * stall_batches + 2`` when larger (a stall is counted in data batches, and an
    ``availableNow`` run adds a no-data batch after each data batch)."""
    return max(RECENT_BATCHES, 2 * thresholds.stall_batches + 2)


def read_recent(location: Any, thresholds: Thresholds = DEFAULT_THRESHOLDS, *, at_ms: int | None = None,
                storage_options: dict[str, Any] | None = None, newest: int | None = None,
                filesystem: Any = None) -> Checkpoint:
    """The bounded read every poke uses (``status``, :func:`evaluate`, the sensors and trigger).

    ``read_checkpoint(location, newest=recent_batches(thresholds))``: three listings,
    ``metadata`` and at most ``2 * newest`` batch files, whatever the history. When ``at_ms`` is
    given and fewer than ``newest`` of the batches read are at or before it (an instant in the
    past), the read is widened until they are, or everything is read: classifying at a past
    instant gives what a read of the whole checkpoint gives for the batches before it.

    :param location: / filesystem: / storage_options: see :func:`watermark_ops.core.checkpoint.read_checkpoint`.
    :param at_ms: the evaluation instant (epoch ms UTC), None for now (never widened).
    :param newest: the number of newest batches to read (default :func:`recent_batches`).
    :return: a :class:`~watermark_ops.core.checkpoint.Checkpoint` (``complete``, ``unread_batches``
        tell what was left unread).
    :raises ValueError: ``newest`` below 1.
    """
    wanted = recent_batches(thresholds) if newest is None else newest
    checkpoint = read_checkpoint(location, filesystem=filesystem, storage_options=storage_options, newest=wanted)
    while at_ms is not None and not checkpoint.complete:
        before = sum(1 for b in checkpoint.batches if b.timestamp_ms is not None and b.timestamp_ms <= at_ms)
        if before >= wanted:
            break
        checkpoint = read_checkpoint(location, filesystem=filesystem, storage_options=storage_options,
                                     newest=len(checkpoint.batches) - before + wanted)
    return checkpoint


def evaluate(location: Any, thresholds: Thresholds = DEFAULT_THRESHOLDS, *, at: Any = None,
             storage_options: dict[str, Any] | None = None, with_progress_log: bool = True,
             filesystem: Any = None) -> Classification:
    """Read the newest batches of a checkpoint (and the end of its progress log) and classify its
    watermark at ``at``: :func:`read_recent`, then :func:`classify_at` (see "What is read" in the
    module docstring; ``history`` in the result tells what was left unread).

    :param location: checkpoint folder: local path, fsspec URL (``s3://``, ``memory://``, ...).
    :param thresholds: :class:`Thresholds`.
    :param at: the evaluation instant (:func:`watermark_ops.core.times.instant_ms`: aware datetime,
        ISO-8601 text, epoch ms); default now, taken once the files are read.
    :param storage_options: fsspec options for the checkpoint's filesystem.
    :param filesystem: an fsspec filesystem to read the checkpoint (``location`` a path or URL on
        it) and its progress log with (e.g. from an Airflow connection).
    :param with_progress_log: read ``<location>.progress.jsonl`` when present (a missing log is
        not an error; an unreadable one is reported in ``problems``).
    :raises CheckpointMissing: / :raises StallInputError: see :func:`classify`.
    :raises ValueError: for a bad ``at``.
    """
    at_ms = None if at is None else instant_ms(at)
    checkpoint = read_recent(location, thresholds, at_ms=at_ms, storage_options=storage_options, filesystem=filesystem)
    return _classify_read(checkpoint, location, thresholds, at_ms, storage_options, filesystem, with_progress_log)


def _classify_read(checkpoint: Checkpoint, location: Any, thresholds: Thresholds, at_ms: int | None,
                   storage_options: dict[str, Any] | None, filesystem: Any, with_progress_log: bool) -> Classification:
    if with_progress_log and isinstance(location, str):
        return classify_at(checkpoint, thresholds, at_ms, progress_log_path(location), storage_options=storage_options,
                           filesystem=filesystem)
    state, state_problems = state_metadata_of(checkpoint, location, storage_options, filesystem=filesystem)
    return classify(checkpoint, (), thresholds, now_ms() if at_ms is None else at_ms, state_problems,
                    state_metadata=state)


def evaluate_tail(location: Any, thresholds: Thresholds = DEFAULT_THRESHOLDS, previous: Any = None, *,
                  at: Any = None, filesystem: Any = None, storage_options: dict[str, Any] | None = None,
                  with_progress_log: bool = True) -> tuple[Classification, Any]:
    """:func:`evaluate` over a followed tail: the same classification for the same files, at a
    constant cost per poke whatever the history (:func:`watermark_ops.core.tail.follow`: no
    listing while the remembered head still matches).

    :param previous: the :class:`~watermark_ops.core.tail.Tail` the last call returned (or None):
        a face keeps it between pokes (``Tail.to_dict`` / ``Tail.from_dict``).
    :param at: / filesystem: / storage_options: / with_progress_log: as for :func:`evaluate`. An
        ``at`` before the oldest batch held falls back to :func:`read_recent`'s widened read
        (the tail returned is then the one followed, not widened).
    :return: ``(classification, tail)``; keep ``tail`` for the next poke.
    :raises CheckpointMissing: / :raises StallInputError: see :func:`classify`.
    :raises ValueError: for a bad ``at``.
    """
    from watermark_ops.core.tail import follow

    at_ms = None if at is None else instant_ms(at)
    wanted = recent_batches(thresholds)
    tail = follow(location, previous, newest=wanted, filesystem=filesystem, storage_options=storage_options)
    checkpoint = tail.checkpoint
    if at_ms is not None and not checkpoint.complete:
        before = sum(1 for b in checkpoint.batches if b.timestamp_ms is not None and b.timestamp_ms <= at_ms)
        if before < wanted:
            checkpoint = read_recent(location, thresholds, at_ms=at_ms, storage_options=storage_options,
                                     filesystem=filesystem)
    return _classify_read(checkpoint, location, thresholds, at_ms, storage_options, filesystem,
                          with_progress_log), tail
