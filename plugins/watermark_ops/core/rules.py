"""The audit rules: pure functions from batch records to findings.

Each rule sees plain records (:class:`BatchRecord`: batch id, watermark, batch time, next
watermark, committed, conf, files), built from :func:`watermark_ops.core.checkpoint.read_checkpoint`,
and, for the memory rules, the head remembered by the previous audit
(:mod:`watermark_ops.core.memory`). Each finding has a stable rule name, a severity, the batch id
and the file it is about. :mod:`watermark_ops.core.audit` applies them all; a new rule is a new
function here, listed in :data:`RULES` and called there.

Why the rules hold (``MicroBatchExecution``, ``WatermarkTracker``): the global watermark only
rises within a run; ``commits/N.nextBatchWatermarkMs`` is the watermark at the end of batch N, and
a restart starts batch N+1 with ``max(offsets N batchWatermarkMs, commits N nextBatchWatermarkMs)``
(``populateStartOffsets``), written into ``offsets/N+1``. So along batch ids the values
``offsets[0].wm <= commits[0].next = offsets[1].wm <= commits[1].next = ...`` never decrease.

Rules (name: severity, what):

* ``watermark_regressed`` (error): a value of that chain below an earlier one (one finding per
  step down); or, with memory, a batch after the remembered head whose watermark is below the
  remembered next-batch watermark (the only evidence once the old files are purged). A re-run of
  an in-flight batch uses its own offsets and is not a regression.
* ``commit_offset_mismatch`` (error): ``commits/N.nextBatchWatermarkMs != offsets/N+1.batchWatermarkMs``.
* ``commit_without_offsets`` (error; warning below the lowest offsets file, where an interrupted
  purge leaves commits behind): ``commits/N`` without ``offsets/N``.
* ``missing_batch`` (warning): a hole in the retained range: ``offsets/N`` missing between the
  lowest and the head batch, or ``commits/N`` missing before the head (async progress tracking
  leaves legitimate holes). Consecutive holes are one finding.
* ``restart_impossible`` (error): ``offsets/H-1`` missing below the head ``offsets/H`` (H > 0), in
  a query that does not use async progress tracking. Every restart reads it for batch H's start
  offsets (``MicroBatchExecution.populateStartOffsets`` → ``validateOffsetLogAndGetPrevOffset``)
  and fails with ``IllegalStateException: batch H-1 doesn't exist`` (SPARK-38033); Spark itself
  never leaves that hole (it purges below ``H - minBatchesToRetain``, ``minBatchesToRetain >=
  1``). With async progress tracking (the ``asyncProgressTrackingEnabled`` option of
  ``writeStream``: ``AsyncProgressTrackingMicroBatchExecution``, stateless queries on a
  ProcessingTime trigger) the restart looks for the newest batch below H that is on disk
  (``AsyncOffsetSeqLog.getPrevBatchFromStorage``), so the hole stays a ``missing_batch``
  warning. That option lives only in the query's options: Spark writes it into no checkpoint
  file (``offsets/N`` ``conf`` holds only ``OffsetSeqMetadata.relevantSQLConfs``), so the audit
  takes it from the job's progress log (``requested_conf["asyncProgressTrackingEnabled"]``) or
  an offsets ``conf`` that carries it. The recorder (``watermark_ops.spark``) does not write it:
  async progress tracking needs a ProcessingTime trigger, never the availableNow / once runs the
  run pattern launches; a long-running query that uses it must add it to its progress records.
* ``in_flight_batch`` (info): the head has offsets but no commit: running now, or its driver died;
  the next start re-runs it with its own offsets.
* ``conf_changed`` (warning): a recorded conf differs from the previous batch's (Spark freezes
  them at the first batch, so a change means the checkpoint was edited or mixed); or a run asked
  for a frozen conf (e.g. another ``spark.sql.streaming.multipleWatermarkPolicy``) that the
  checkpoint overrode: the job's progress log beside the checkpoint records each run's
  ``requested_conf``, while Spark writes the frozen value into every new offsets file
  (``OffsetSeqMetadata.setSessionConf``), so the offsets alone never show that drift.
* ``state_repartitioned`` (info): the batch Spark's offline state repartition wrote (same offsets,
  watermark and batch time as the batch before, a new ``spark.sql.shuffle.partitions``; Spark 4.2+,
  :mod:`watermark_ops.core.batch_kinds`): not a ``conf_changed``.
* ``sources_changed`` (info): a v2 offset log's named sources differ from the previous batch's: a
  source added or removed on restart (source evolution, Spark 4.2+), named at that batch.
* ``checkpoint_reset`` (error, memory): the query id changed: the checkpoint was replaced and the
  watermark restarted from 0.
* ``query_id_changed`` (info, memory): the query id changed over the same history: the batch the
  previous audit saw as head is still there, written before that audit (its ``batchTimestampMs``)
  and ending at the watermark it remembered. Spark writes a new id when ``metadata`` was lost and
  ``spark.sql.streaming.checkpoint.verifyMetadataExists.enabled=false`` lets it go on
  (``StreamMetadata``, ``MicroBatchExecution``, Spark 4.2+); nothing was replaced.
* ``reset_accepted`` (info, memory): the query id changed exactly as someone accepted beforehand
  (:func:`watermark_ops.core.memory.accept_reset`: who, when, why); a change to another query id
  is still ``checkpoint_reset``.
* ``rewound`` (error, memory): the head batch id is below the remembered one (log files deleted,
  or an old copy restored).
* ``unreadable`` (error): a file (or the checkpoint) that could not be read or parsed
  (:class:`watermark_ops.core.checkpoint.ReadProblem`; its kind starts the message).

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import msgspec

from watermark_ops.core.checkpoint import Batch
from watermark_ops.core.batch_kinds import SHUFFLE_PARTITIONS, batch_events, repartition_of
from watermark_ops.core.log_formats import OffsetsEntry, ReadProblem
from watermark_ops.core.memory import RememberedHead
from watermark_ops.core.times import iso_utc

__all__ = [
    "ERROR",
    "INFO",
    "RULES",
    "WARNING",
    "BatchRecord",
    "Finding",
    "commit_offset_mismatch",
    "commit_without_offsets",
    "batch_kinds",
    "conf_changed",
    "conf_requested_but_frozen",
    "history_kept",
    "in_flight_batch",
    "memory_rules",
    "missing_batch",
    "uses_async_progress_tracking",
    "unreadable",
    "watermark_regressed",
]

ERROR, WARNING, INFO = "error", "warning", "info"
#: The ``writeStream`` option that turns on async progress tracking
#: (``AsyncProgressTrackingMicroBatchExecution.ASYNC_PROGRESS_TRACKING_ENABLED``).
ASYNC_PROGRESS_TRACKING = "asyncProgressTrackingEnabled"

#: Every rule name with its (default) severity. Names are stable: alerts and dashboards key on them.
RULES: dict[str, str] = {
    "watermark_regressed": ERROR,
    "commit_offset_mismatch": ERROR,
    "commit_without_offsets": ERROR,
    "missing_batch": WARNING,
    "restart_impossible": ERROR,
    "in_flight_batch": INFO,
    "conf_changed": WARNING,
    "state_repartitioned": INFO,
    "sources_changed": INFO,
    "checkpoint_reset": ERROR,
    "query_id_changed": INFO,
    "reset_accepted": INFO,
    "rewound": ERROR,
    "unreadable": ERROR,
}


class Finding(msgspec.Struct, frozen=True):
    """One thing the audit found.

    :ivar rule: a name of :data:`RULES`.
    :ivar severity: ``error`` | ``warning`` | ``info``.
    :ivar batch_id: the batch concerned (the first of a range), None for the whole checkpoint.
    :ivar file: the file concerned (for a missing file: where it should be), None if none.
    :ivar message: for a human, with the values (ms and ISO-8601 UTC).
    """

    rule: str
    severity: str
    batch_id: int | None
    file: str | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """``{"rule", "severity", "batch_id", "file", "message"}``."""
        return {"rule": self.rule, "severity": self.severity, "batch_id": self.batch_id,
                "file": self.file, "message": self.message}


class BatchRecord(msgspec.Struct, frozen=True):
    """What the rules know about one batch id (plain values; build with :meth:`from_batch`).

    :ivar watermark_ms: offsets ``batchWatermarkMs`` (epoch ms UTC); None: no readable offsets file.
    :ivar timestamp_ms: offsets ``batchTimestampMs`` (epoch ms UTC); None likewise.
    :ivar next_watermark_ms: commits ``nextBatchWatermarkMs`` (epoch ms UTC); None when there is
        no readable commit or it predates Spark 2.4 (no such field).
    :ivar committed: a commit file exists.
    :ivar has_offsets: an offsets file exists (readable or not).
    """

    batch_id: int
    watermark_ms: int | None = None
    timestamp_ms: int | None = None
    next_watermark_ms: int | None = None
    committed: bool = False
    has_offsets: bool = True
    conf: dict[str, str] | None = None
    offsets_file: str | None = None
    commit_file: str | None = None
    offsets: OffsetsEntry | None = None

    @classmethod
    def from_batch(cls, batch: Batch) -> BatchRecord:
        """The record of a :class:`watermark_ops.core.checkpoint.Batch`."""
        return cls.from_batches((batch,))[0]

    @classmethod
    def from_batches(cls, batches: Iterable[Batch]) -> tuple[BatchRecord, ...]:
        """:meth:`from_batch` of each batch, in order: one loop without a call per batch but the
        constructor's (an audit builds 10,000 of them)."""
        records = []
        append = records.append
        for batch in batches:
            commit, offsets = batch.commit, batch.offsets
            if offsets is not None:
                watermark, timestamp, conf = offsets.watermark_ms, offsets.timestamp_ms, offsets.conf
            else:
                watermark = timestamp = conf = None
            append(cls(batch.batch_id, watermark, timestamp,
                       commit.next_watermark_ms if commit is not None and "nextBatchWatermarkMs" in commit.metadata
                       else None,
                       batch.commit_file is not None, batch.offsets_file is not None, conf, batch.offsets_file,
                       batch.commit_file, offsets))
        return tuple(records)

    def to_dict(self) -> dict[str, Any]:
        """``{"batch_id", "watermark_ms", "timestamp_ms", "next_watermark_ms", "committed"}``."""
        return {"batch_id": self.batch_id, "watermark_ms": self.watermark_ms, "timestamp_ms": self.timestamp_ms,
                "next_watermark_ms": self.next_watermark_ms, "committed": self.committed}


def _ms(ms: int) -> str:
    return f"{ms} ({iso_utc(ms)})"


def _path(location: str, log_name: str, batch_id: int) -> str:
    return f"{location.rstrip('/')}/{log_name}/{batch_id}"


def _finding(rule: str, batch_id: int | None, file: str | None, message: str, severity: str | None = None) -> Finding:
    return Finding(rule, severity or RULES[rule], batch_id, file, message)


# --------------------------------------------------------------------------------------------
# Rules over records


def watermark_regressed(records: Sequence[BatchRecord], highest: tuple[int, str] | None = None) -> list[Finding]:
    """Steps down along ``offsets[N].wm, commits[N].next, offsets[N+1].wm, ...`` (unknown values skipped).

    :param highest: ``(value, "offsets/N" | "commits/N")``: the highest value of the batches before
        ``records`` and where it was first seen (an audit of the new batches only, with the batch
        before them first, names the same place as a full one).
    """
    findings = []
    # the previous value and the highest so far, and where: ("offsets" | "commits", batch id), or
    # for a highest given by the caller its own text; "offsets/N" is written only for a finding
    # (20,000 values in an audit of 10,000 batches)
    previous: int | None = None
    previous_at: Any = None
    high, high_at = (highest[0], highest[1]) if highest is not None else (None, None)

    def regressed(value: int, log_name: str, record: BatchRecord) -> Finding:
        where = f"{log_name}/{record.batch_id}"
        field_name = "batchWatermarkMs" if log_name == "offsets" else "nextBatchWatermarkMs"
        file = record.offsets_file if log_name == "offsets" else record.commit_file
        return _finding(
            "watermark_regressed", record.batch_id, file,
            f"{where} {field_name} {_ms(value)} is below {_ms(previous)} of {_where(previous_at)} "
            f"(highest so far {_ms(high)} in {_where(high_at)}): the watermark moved backwards "
            f"by {previous - value} ms",
        )

    for record in records:  # the offsets value, then the commit's: no tuple per value (20,000 of them)
        value = record.watermark_ms
        if value is not None:
            if previous is not None and value < previous:
                findings.append(regressed(value, "offsets", record))
            previous, previous_at = value, ("offsets", record.batch_id)
            if high is None or value > high:
                high, high_at = value, previous_at
        value = record.next_watermark_ms
        if value is not None:
            if previous is not None and value < previous:
                findings.append(regressed(value, "commits", record))
            previous, previous_at = value, ("commits", record.batch_id)
            if high is None or value > high:
                high, high_at = value, previous_at
    return findings


def _where(at: Any) -> str:
    """``"offsets/N"`` | ``"commits/N"`` of a ``(log name, batch id)``, or a place given as text."""
    return at if isinstance(at, str) else f"{at[0]}/{at[1]}"


def commit_offset_mismatch(records: Sequence[BatchRecord]) -> list[Finding]:
    """``commits/N.nextBatchWatermarkMs != offsets/N+1.batchWatermarkMs`` where both are readable."""
    by_id = {r.batch_id: r for r in records}
    findings = []
    for record in records:
        following = by_id.get(record.batch_id + 1)
        if record.next_watermark_ms is None or following is None or following.watermark_ms is None:
            continue
        if record.next_watermark_ms != following.watermark_ms:
            findings.append(_finding(
                "commit_offset_mismatch", following.batch_id, following.offsets_file,
                f"offsets/{following.batch_id} batchWatermarkMs {_ms(following.watermark_ms)} differs from "
                f"commits/{record.batch_id} nextBatchWatermarkMs {_ms(record.next_watermark_ms)}: Spark starts "
                f"batch {following.batch_id} with the watermark batch {record.batch_id} committed",
            ))
    return findings


def commit_without_offsets(records: Sequence[BatchRecord]) -> list[Finding]:
    """Commit files whose batch has no offsets file."""
    offsets_ids = [r.batch_id for r in records if r.has_offsets]
    lowest = min(offsets_ids) if offsets_ids else None
    findings = []
    for record in records:
        if record.committed and not record.has_offsets:
            below = lowest is not None and record.batch_id < lowest
            findings.append(_finding(
                "commit_without_offsets", record.batch_id, record.commit_file,
                f"commits/{record.batch_id} exists without offsets/{record.batch_id}"
                + (f": below the lowest offsets file ({lowest}), left by an interrupted purge" if below
                   else ": the offset log lost a batch that was committed"),
                severity=WARNING if below else None,
            ))
    return findings


def _ranges(ids: Iterable[int]) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for i in sorted(ids):
        if ranges and i == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], i)
        else:
            ranges.append((i, i))
    return ranges


def _gaps(ids: Iterable[int]) -> list[tuple[int, int]]:
    """The ranges of ids missing between the lowest and the highest of ``ids`` (from the sorted ids:
    a stray huge id costs one range, not memory for every id in between)."""
    ordered = sorted(ids)
    return [(before + 1, after - 1) for before, after in zip(ordered, ordered[1:]) if after - before > 1]


def _hole(location: str, log_name: str, first: int, last: int, where: str) -> Finding:
    """One ``missing_batch`` finding for ``<log_name>/first..last``, named by its first file."""
    span = f"{log_name}/{first}" if first == last else f"{log_name}/{first}..{last} ({last - first + 1} batches)"
    return _finding("missing_batch", first, _path(location, log_name, first),
                    f"{span} missing {where} (async progress tracking leaves such holes; otherwise files were deleted)")


def uses_async_progress_tracking(records: Sequence[BatchRecord], progress_records: Iterable[dict[str, Any]] = (),
                                 query_id: str | None = None) -> bool:
    """Whether the query ran with async progress tracking: ``asyncProgressTrackingEnabled`` is
    ``"true"`` in an offsets ``conf`` or in a progress record's ``requested_conf`` (records of
    another query id are ignored). Spark records the option nowhere in the checkpoint itself."""
    def on(conf: Any) -> bool:
        return isinstance(conf, dict) and str(conf.get(ASYNC_PROGRESS_TRACKING, "")).strip().lower() == "true"

    if any(on(r.conf) for r in records):
        return True
    return any(on(p.get("requested_conf")) for p in progress_records
               if isinstance(p, dict) and not (query_id and p.get("query_id") not in (None, query_id)))


def missing_batch(records: Sequence[BatchRecord], location: str, has_commit_log: bool = True,
                  async_progress_tracking: bool | Callable[[], bool] = False) -> list[Finding]:
    """Holes inside the retained range (consecutive ids grouped into one finding), and
    ``restart_impossible`` for ``offsets/H-1`` missing below the head ``H`` unless
    ``async_progress_tracking`` (see :func:`uses_async_progress_tracking`; a callable is asked
    only then)."""
    offsets_ids = {r.batch_id for r in records if r.has_offsets}
    if not offsets_ids:
        return []
    low, head = min(offsets_ids), max(offsets_ids)
    below_head = head - 1
    blocked = head > 0 and below_head not in offsets_ids
    if blocked and callable(async_progress_tracking):
        async_progress_tracking = async_progress_tracking()
    blocked = blocked and not async_progress_tracking
    findings = []
    for first, last in _gaps(offsets_ids):
        if blocked and last == below_head:
            last = below_head - 1  # the batch below the head is its own finding, below
            if last < first:
                continue
        findings.append(_hole(location, "offsets", first, last, f"between offsets/{low} and offsets/{head}"))
    if blocked:
        findings.append(_finding(
            "restart_impossible", below_head, _path(location, "offsets", below_head),
            f"offsets/{below_head} is missing below the head offsets/{head}: the query cannot restart. A restart "
            f"reads offsets/{below_head} for the offsets batch {head} starts from "
            f"(MicroBatchExecution.validateOffsetLogAndGetPrevOffset) and fails with \"batch {below_head} doesn't "
            f"exist\" (SPARK-38033). Spark never leaves this hole without async progress tracking "
            f"({ASYNC_PROGRESS_TRACKING}), which this query does not record using: the file was deleted or lost; "
            f"restore it from a copy of the checkpoint",
        ))
    if has_commit_log:
        uncommitted = {r.batch_id for r in records if r.has_offsets and not r.committed and r.batch_id != head}
        findings += [_hole(location, "commits", first, last, "although later batches exist")
                     for first, last in _ranges(uncommitted)]
    return findings


def in_flight_batch(records: Sequence[BatchRecord], has_commit_log: bool = True) -> list[Finding]:
    """The head batch with offsets and no commit (info)."""
    heads = [r for r in records if r.has_offsets]
    if not heads or not has_commit_log or heads[-1].committed:
        return []
    head = heads[-1]
    restart = f" with its own offsets (watermark {_ms(head.watermark_ms)})" if head.watermark_ms is not None else ""
    return [_finding(
        "in_flight_batch", head.batch_id, head.offsets_file,
        f"offsets/{head.batch_id} has no commits/{head.batch_id}: batch {head.batch_id} is in flight (running now, "
        f"or its driver died); the next start re-runs it{restart}",
    )]


def conf_changed(records: Sequence[BatchRecord]) -> list[Finding]:
    """Confs that differ from the previous batch that recorded them (keys in both only)."""
    findings = []
    previous: tuple[int, dict[str, str]] | None = None
    last: BatchRecord | None = None
    for record in records:
        if not record.conf:
            continue
        if previous is not None and previous[1] != record.conf:  # equal (often the very same dict): no change
            before_id, before = previous
            # a repartition batch sets a new partition count on purpose: state_repartitioned names it
            moved = (last is not None and last.offsets is not None and record.offsets is not None
                     and repartition_of(last.offsets, record.offsets) is not None)
            for key in sorted(set(before) & set(record.conf)):
                if before[key] != record.conf[key] and not (moved and key == SHUFFLE_PARTITIONS):
                    findings.append(_finding(
                        "conf_changed", record.batch_id, record.offsets_file,
                        f"{key} is {record.conf[key]!r} in offsets/{record.batch_id} but {before[key]!r} in "
                        f"offsets/{before_id}: Spark freezes it at the first batch and ignores a new value",
                    ))
        previous, last = (record.batch_id, record.conf), record
    return findings


def batch_kinds(records: Sequence[BatchRecord]) -> list[Finding]:
    """``state_repartitioned`` and ``sources_changed`` (info): the batches of
    :mod:`watermark_ops.core.batch_kinds`, each named at the batch where it happened."""
    events = batch_events((r.offsets, r.committed) for r in records if r.offsets is not None)
    return [_finding(e["kind"], e["batch_id"], e["file"], e["message"]) for e in events]


def conf_requested_but_frozen(records: Sequence[BatchRecord], progress_records: Iterable[dict[str, Any]],
                              progress_file: str | None, query_id: str | None, *,
                              seen: Iterable[tuple[Any, str]] = (),
                              reported: dict[tuple[Any, str], int] | None = None) -> list[Finding]:
    """``conf_changed`` for runs whose requested conf the checkpoint overrode (one per run and key).

    :param progress_records: the job's progress-log records (``batch_id``, ``run_id``,
        ``query_id``, ``requested_conf``; see ``watermark_ops.spark.recorder``).
    :param progress_file: the progress log's location, named in the findings.
    :param query_id: the checkpoint's query id; records of other queries are ignored.
    :param seen: ``(run id, conf key)`` pairs already reported (by an audit of the earlier batches).
    :param reported: filled with ``{(run id, conf key): batch id}`` of each finding made.
    """
    by_id = {r.batch_id: r for r in records if r.conf}
    findings, seen = [], set(seen)
    agreed: tuple[Any, Any] = (None, None)  # the last (requested, conf) found to agree: a run repeats both
    for progress in progress_records:
        record = by_id.get(progress.get("batch_id"))
        requested = progress.get("requested_conf") or {}
        if record is None or (query_id and progress.get("query_id") != query_id):
            continue
        if record.conf is agreed[1] and requested == agreed[0]:
            continue
        if isinstance(requested, dict) and requested.items() <= record.conf.items():
            agreed = (requested, record.conf)
            continue  # every requested value is the frozen one (the usual case, one C-level check)
        for key in sorted(set(requested) & set(record.conf)):
            if str(requested[key]) != str(record.conf[key]) and (progress.get("run_id"), key) not in seen:
                seen.add((progress.get("run_id"), key))
                if reported is not None:
                    reported[(progress.get("run_id"), key)] = record.batch_id
                findings.append(_finding(
                    "conf_changed", record.batch_id, progress_file,
                    f"the run starting at batch {record.batch_id} asked for {key}={requested[key]!r}, but the "
                    f"checkpoint keeps {record.conf[key]!r} (offsets/{record.batch_id}): Spark froze it at the "
                    f"first batch and ignored the new value",
                ))
    return findings


def memory_rules(records: Sequence[BatchRecord], remembered: RememberedHead | None, *, query_id: str | None,
                 head_batch_id: int | None, location: str, seen: Sequence[BatchRecord] = ()) -> list[Finding]:
    """``checkpoint_reset`` (or ``query_id_changed``, ``reset_accepted``), ``rewound`` and
    ``watermark_regressed`` against the remembered head; ``seen``: the batches the previous audit
    read (its remembered view), the evidence of :func:`history_kept`."""
    if remembered is None:
        return []
    when = iso_utc(remembered.audited_at_ms)
    if remembered.query_id and query_id and remembered.query_id != query_id:
        change = (f"query id is {query_id}, the audit of {when} saw {remembered.query_id} (head batch "
                  f"{remembered.head_batch_id}, watermark {_ms(remembered.watermark_ms)})")
        acceptance = remembered.accepted_reset
        if acceptance is not None and acceptance.covers(remembered.query_id, query_id):
            return [_finding("reset_accepted", None, f"{location.rstrip('/')}/metadata",
                             f"{change}: the checkpoint was replaced on purpose, reset {acceptance.describe()}")]
        kept = history_kept(records, remembered, seen)
        if kept is not None:
            return [_finding("query_id_changed", None, f"{location.rstrip('/')}/metadata",
                             f"query id changed, history kept: {change}; {kept}")]
        other = (f"; the reset {acceptance.describe()} was for query id {acceptance.to_query_id}, not this one"
                 if acceptance is not None else "")
        return [_finding(
            "checkpoint_reset", None, f"{location.rstrip('/')}/metadata",
            f"{change}: the checkpoint was replaced and the watermark restarted from 0{other}",
        )]
    findings = []
    if head_batch_id is None or head_batch_id < remembered.head_batch_id:
        now = "no batch" if head_batch_id is None else f"head batch {head_batch_id}"
        findings.append(_finding(
            "rewound", head_batch_id, _path(location, "offsets", head_batch_id) if head_batch_id is not None else location,
            f"{now} but the audit of {when} saw head batch {remembered.head_batch_id}: offset-log files were "
            f"deleted or an old copy of the checkpoint restored; Spark will re-run batches already committed",
        ))
    later = [r for r in records if r.batch_id > remembered.head_batch_id and r.watermark_ms is not None
             and r.watermark_ms < remembered.watermark_ms]
    if later:
        first = later[0]
        more = f" (and {len(later) - 1} later batches)" if len(later) > 1 else ""
        findings.append(_finding(
            "watermark_regressed", first.batch_id, first.offsets_file,
            f"offsets/{first.batch_id} batchWatermarkMs {_ms(first.watermark_ms)} is below {_ms(remembered.watermark_ms)}, "
            f"the watermark the audit of {when} saw for the batch after head {remembered.head_batch_id}{more}",
        ))
    return findings


def history_kept(records: Sequence[BatchRecord], remembered: RememberedHead,
                 seen: Sequence[BatchRecord] = ()) -> str | None:
    """The evidence that a new query id goes on over the remembered history, or None (a replaced
    checkpoint): the remembered head batch is still in the offset log with the ``batchTimestampMs``
    (epoch ms) the previous audit read in it (``seen``; without it: at or before that audit), the
    watermark after it is the one remembered (``max(offsets batchWatermarkMs, commits
    nextBatchWatermarkMs)``, ms), and no later batch runs below it. A checkpoint written again
    from scratch has new batch times, whatever its watermarks."""
    then = next((r for r in records if r.batch_id == remembered.head_batch_id), None)
    if then is None or then.watermark_ms is None or then.timestamp_ms is None:
        return None
    saw = next((r for r in seen if r.batch_id == remembered.head_batch_id and r.timestamp_ms is not None), None)
    if (then.timestamp_ms != saw.timestamp_ms) if saw is not None else (then.timestamp_ms > remembered.audited_at_ms):
        return None
    end = max(then.watermark_ms, then.next_watermark_ms or 0) if then.committed else then.watermark_ms
    if remembered.watermark_ms != end:
        return None
    later = [r for r in records if r.batch_id > then.batch_id and r.watermark_ms is not None]
    if any(r.watermark_ms < remembered.watermark_ms for r in later):
        return None
    return (f"offsets/{then.batch_id} is still the batch of {iso_utc(then.timestamp_ms)} that audit saw, ending at "
            f"watermark {_ms(remembered.watermark_ms)}, and {len(later)} later batch(es) continue from it: Spark wrote "
            f"a new metadata id over the same offsets and watermark (a lost metadata file restarted with "
            f"spark.sql.streaming.checkpoint.verifyMetadataExists.enabled=false), not a reset")


def unreadable(problems: Iterable[ReadProblem]) -> list[Finding]:
    """One ``unreadable`` finding per read problem."""
    return [_finding("unreadable", p.batch_id, p.file, f"[{p.kind}] {p.message}") for p in problems]
