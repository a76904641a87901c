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
* ``lagging``: the lag exceeds ``max_lag``. When the newest progress record carries the data
  interval of the run that wrote it (the run pattern stamps it), the lag is that interval's end
  minus the current watermark: a backfill or catch-up run of old data whose watermark reached its
  interval's end is on time, not lagging (``lag_basis`` ``"data_interval"``). Without the stamp it
  is the latest batch's processing time minus the current watermark (``"wall_clock"``): what the
  pipeline itself knows, not the evaluation instant (an idle pipeline does not lag more by
  waiting); a replay of old data run without the run pattern lags by years there: disable the
  check (``max_lag=None``) for it. :mod:`watermark_ops.core.freshness` judges the basis.
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
``event_time_max_ms_by_partition``, e.g. per station), the classification reports each
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

Read first, then judge
----------------------
This module reads, then classifies; the classification itself is a pure function of one read
(:mod:`watermark_ops.core.classification`, its sentences :mod:`watermark_ops.core.reasons`, the
evidence of a watermark :mod:`watermark_ops.core.evidence`), which opens no file. One read is a
:class:`watermark_ops.core.snapshot.Snapshot`: the newest batches, the progress records of those
batches, the state metadata when the watermark is 0. A face that looks again keeps a remembered
view (:mod:`watermark_ops.core.view`) and moves it on (:func:`watermark_ops.core.advance.advance`):
:func:`evaluate_tail`.

Public API
----------
``read_recent(location, thresholds, at_ms=...)`` (the bounded read),
``classify(checkpoint, progress_records, thresholds, at_ms)`` (an already read checkpoint),
``classify_at(checkpoint, thresholds, at_ms)`` (the same with the progress log beside it),
``evaluate(location, thresholds, at=...)`` (reads, then classifies), ``evaluate_tail`` (the same
from a remembered view), ``Classification``, ``BatchFacts``, the state names. The thresholds are
:class:`watermark_ops.core.thresholds.Thresholds`; the one evaluation the Airflow sensors and
trigger share is :func:`watermark_ops.core.checks.check`.
"""


from __future__ import annotations

from typing import Any

from watermark_ops.core.checkpoint import Checkpoint
from watermark_ops.core.classification import (  # noqa: F401 - the public names, importable from here
    ADVANCING,
    IDLE,
    JUMPED,
    LAGGING,
    NO_WATERMARK,
    POLICY_CONF,
    STALLED,
    STATES,
    WATERMARK_UNKNOWN,
    CheckpointMissing,
    Classification,
    StallInputError,
    classify,
    classify_snapshot,
)
from watermark_ops.core.evidence import watermark_evidence  # noqa: F401
from watermark_ops.core.facts import BatchFacts  # noqa: F401
from watermark_ops.core.progress import progress_log_path
from watermark_ops.core.snapshot import needs_state_metadata, snapshot_of, state_metadata_of  # noqa: F401
from watermark_ops.core.snapshot import read_recent as _read_recent
from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS, Thresholds
from watermark_ops.core.times import instant_ms
from watermark_ops.core.view import WINDOW

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
    "classify_snapshot",
    "evaluate",
    "evaluate_tail",
    "read_recent",
    "needs_state_metadata",
    "recent_batches",
    "state_metadata_of",
    "watermark_evidence",
]

#: The newest batches the bounded read holds at least (:func:`recent_batches`): Spark's own
#: ``spark.sql.streaming.minBatchesToRetain`` default, so a real checkpoint is usually read whole.
RECENT_BATCHES = WINDOW


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
    return _read_recent(location, wanted, at_ms=at_ms, storage_options=storage_options, filesystem=filesystem)


def classify_at(checkpoint: Checkpoint, thresholds: Thresholds = DEFAULT_THRESHOLDS, at_ms: int | None = None,
                progress_log: str | None = None, *, storage_options: dict[str, Any] | None = None,
                filesystem: Any = None) -> Classification:
    """:func:`classify` with the progress log read first: only its end, the records of the
    batches the checkpoint holds (:func:`watermark_ops.core.progress.read_progress_tail`, from
    the oldest batch read; at most :data:`watermark_ops.core.progress.TAIL_MAX_BYTES`), and the
    state metadata while the watermark is 0 (:func:`~watermark_ops.core.snapshot.snapshot_of`).

    A missing log is no problem; a log that cannot be read, its bad lines, and a tail cut at the
    byte limit are carried into ``problems``.

    :param at_ms: the evaluation instant, epoch ms UTC; default now, taken *after* reading, so
        that every batch the read saw counts (a batch whose time is after the start of a slow read
        is not "after the evaluation instant").
    :param progress_log: the log's location; default beside the checkpoint,
        ``<checkpoint>.progress.jsonl`` (:func:`watermark_ops.core.progress.progress_log_path`).
    :param storage_options: / filesystem: fsspec options, or an fsspec filesystem, to read the
        progress log and the state metadata with; as for :func:`~watermark_ops.core.checkpoint.read_checkpoint`.
    :raises CheckpointMissing: / :raises StallInputError: see :func:`classify`.
    """
    snapshot = snapshot_of(checkpoint, progress_log=progress_log, storage_options=storage_options,
                           filesystem=filesystem)
    return classify_snapshot(snapshot, thresholds, at_ms)


def evaluate(location: Any, thresholds: Thresholds = DEFAULT_THRESHOLDS, *, at: Any = None,
             storage_options: dict[str, Any] | None = None, with_progress_log: bool = True,
             filesystem: Any = None) -> Classification:
    """Read the newest batches of a checkpoint (and the end of its progress log) and classify its
    watermark at ``at``: :func:`read_recent`, then the rest of the snapshot, then
    :func:`~watermark_ops.core.classification.classify_snapshot` (see "What is read" in the module
    docstring; ``history`` in the result tells what was left unread).

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
    return classify_snapshot(_rest(checkpoint, location, storage_options, filesystem, with_progress_log),
                             thresholds, at_ms)


def _rest(checkpoint: Checkpoint, location: Any, storage_options: dict[str, Any] | None, filesystem: Any,
          with_progress_log: bool):
    """The snapshot of a checkpoint just read: the progress log's end beside a location given as
    text, the state metadata read from the location as given."""
    progress = with_progress_log and isinstance(location, str)
    return snapshot_of(checkpoint, location, progress="tail" if progress else None,
                       progress_log=progress_log_path(location) if progress else None,
                       storage_options=storage_options, filesystem=filesystem)


def evaluate_tail(location: Any, thresholds: Thresholds = DEFAULT_THRESHOLDS, previous: Any = None, *,
                  at: Any = None, filesystem: Any = None, storage_options: dict[str, Any] | None = None,
                  with_progress_log: bool = True, state_store: str | None = None) -> tuple[Classification, Any]:
    """:func:`evaluate` from a remembered view: the same classification for the same files, at a
    constant cost per poke whatever the history (:func:`watermark_ops.core.advance.advance`: no
    listing while the remembered head still matches; the progress log's new lines only).

    :param previous: the :class:`~watermark_ops.core.view.View` the last call returned (or None):
        a face keeps it between pokes (``View.to_dict`` / ``View.from_dict``, or a store,
        :func:`watermark_ops.core.view.load_view`).
    :param at: / filesystem: / storage_options: / with_progress_log: as for :func:`evaluate`. An
        ``at`` before the oldest batch held falls back to :func:`read_recent`'s widened read
        (the view returned is then the one moved on, not widened).
    :param state_store: keep the view's state summary to this depth (``rows`` | ``full``; None:
        carried as it is): :func:`watermark_ops.core.advance.advance`, read when the head moved.
    :return: ``(classification, view)``; keep ``view`` for the next poke.
    :raises CheckpointMissing: / :raises StallInputError: see :func:`classify`.
    :raises ValueError: for a bad ``at``.
    """
    from watermark_ops.core.advance import advance
    from watermark_ops.core.snapshot import view_snapshot

    at_ms = None if at is None else instant_ms(at)
    wanted = recent_batches(thresholds)
    progress = "always" if with_progress_log and isinstance(location, str) else "never"
    view = advance(location, previous, newest=max(wanted, previous.newest if previous is not None else 0),
                   progress=progress, filesystem=filesystem, storage_options=storage_options, state_store=state_store)
    snapshot = view_snapshot(view, wanted)
    checkpoint = snapshot.checkpoint
    if at_ms is not None and not checkpoint.complete:
        before = sum(1 for b in checkpoint.batches if b.timestamp_ms is not None and b.timestamp_ms <= at_ms)
        if before < wanted:
            checkpoint = read_recent(location, thresholds, at_ms=at_ms, storage_options=storage_options,
                                     filesystem=filesystem)
            snapshot = _rest(checkpoint, location, storage_options, filesystem, with_progress_log)
    return classify_snapshot(snapshot, thresholds, at_ms), view
