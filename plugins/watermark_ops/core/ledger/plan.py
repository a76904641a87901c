"""What one micro-batch read and which watermark judged it: the part of a replay that needs no rows.

For batch N of a checkpoint:

1. the offset log: ``offsets/N`` holds the batch's watermark (``batchWatermarkMs``, the one it ran
   with), its processing time (``batchTimestampMs``) and, for a file source, the log offset it
   ended at (``{"logOffset": k}``, ``FileStreamSourceOffset``); ``offsets/N-1`` gives where it started;
2. the file source's log (``sources/<i>``, :mod:`watermark_ops.core.source_log`:
   ``FileStreamSourceLog`` / ``CompactibleFileStreamLog``): the files batch N read are those of the
   log offsets in ``(end of N-1, end of N]``;
3. the late rule and the watermark for late rows, from the batch's progress record
   (:mod:`watermark_ops.core.ledger.rule`).

A :class:`BatchPlan` holds that; the rows are then made by the Python replay of JSON lines
(:mod:`~watermark_ops.core.ledger.lines`) or by Spark through the job's own pre-watermark function
(``watermark_ops.spark.replay``), and both apply the same rule (:func:`tally`). A source that is not
a file source with a ``logOffset`` (Kafka, rate, ...) is *not replayable*, never guessed; a corrupt
or missing log is a :class:`~watermark_ops.core.log_formats.ReadProblem` naming it. Pure core.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Iterable

from watermark_ops.core.checkpoint import Checkpoint, open_storage, read_checkpoint
from watermark_ops.core.ledger.model import BatchLedger, LateRow
from watermark_ops.core.ledger.rule import LateRule, LateWatermarkRule, LedgerError, late_watermark_rule
from watermark_ops.core.log_formats import ReadProblem
from watermark_ops.core.progress import progress_log_path, read_progress_log
from watermark_ops.core.source_log import MAX_LOG_OFFSETS_PER_READ, file_source_log_offset, read_source_log

__all__ = ["TICK_PREFIX", "BatchPlan", "ReplayRow", "plan_batch", "plan_batches", "progress_records", "tally"]

#: The tick files the driver lands for an owed trailing batch (``watermark_ops.spark.land_tick``): empty.
TICK_PREFIX = "watermark-ops-tick-"


@dataclass(frozen=True)
class BatchPlan:
    """What batch N read and which watermark judged its rows (module docstring).

    :ivar batch_id: the batch id.
    :ivar ok: False when something the replay needs could not be read (``problems`` says what).
    :ivar watermark_ms: / timestamp_ms: ``offsets/N``'s ``batchWatermarkMs`` and ``batchTimestampMs``.
    :ivar files: ``(source index, file URI)`` in log order, the driver's tick files left out.
    :ivar log_offsets: ``{source id: [first, last]}`` log offsets read per file source.
    :ivar rule: the late rule of the batch's progress record.
    :ivar late_watermark_ms: the watermark late rows were filtered with (epoch ms UTC).
    :ivar late_watermark: which one, and why (:class:`LateWatermarkRule`).
    :ivar record: the batch's progress record (None without one).
    :ivar listed_ms: ``{file URI: its modification time when the file source listed it}`` (epoch ms
        UTC, the source log's ``timestamp``).
    """

    batch_id: int
    ok: bool
    watermark_ms: int | None = None
    timestamp_ms: int | None = None
    files: tuple[tuple[int, str], ...] = ()
    log_offsets: dict[str, list[int]] = field(default_factory=dict)
    rule: LateRule | None = None
    late_watermark_ms: int | None = None
    late_watermark: LateWatermarkRule | None = None
    record: dict[str, Any] | None = None
    listed_ms: dict[str, int] = field(default_factory=dict)

    def spark_rows(self) -> dict[str, int | None]:
        """The progress record's ``input_rows`` and ``rows_dropped_by_watermark`` (late partial
        aggregates), as :class:`BatchLedger`'s ``spark_input_rows`` / ``spark_rows_dropped``."""
        record = self.record
        return {"spark_input_rows": int(record.get("input_rows") or 0) if record else None,
                "spark_rows_dropped": int(record.get("rows_dropped_by_watermark") or 0) if record else None}

    def unreplayed(self) -> BatchLedger:
        """The batch as not replayed (its counts 0, not to be used), with what is known of it."""
        return BatchLedger(self.batch_id, False, self.watermark_ms, self.timestamp_ms, log_offsets=self.log_offsets,
                           rule=self.rule, late_watermark_ms=self.late_watermark_ms,
                           late_watermark=self.late_watermark, **self.spark_rows())


@dataclass(frozen=True)
class ReplayRow:
    """One row a replay made of a landed file.

    :ivar file: the landed file's URI. :ivar line: its line (1-based), None when not known.
    :ivar reason: why the job sets it aside, None when it enters the watermark.
    :ivar event_us: its event time (epoch µs UTC), None when set aside without one.
    :ivar event: the row as landed (or as the job's function made it), None when it cannot be shown.
    """

    file: str
    line: int | None
    reason: str | None
    event_us: int | None
    event: dict[str, Any] | None


def progress_records(checkpoint: str, query_id: str | None, problems: list[ReadProblem],
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


def plan_batch(state: Checkpoint, storage: Any, root: str, batch_id: int, record: dict | None,
               problems: list[ReadProblem], unreplayable: dict[str, dict[str, Any]],
               force_basis: str | None = None, listings: dict[str, Any] | None = None) -> BatchPlan:
    """One batch → :class:`BatchPlan` (``ok`` False, with a problem appended, when it cannot be replayed).

    :param unreplayable: filled with the sources that are not file sources with a ``logOffset``.
    :param force_basis: ``"previous"`` / ``"current"``: judge late rows by that watermark instead of the
        recorded rule's (a what-if).
    """
    batch = state.batch(batch_id)
    offsets = batch.offsets if batch else None
    if offsets is None:
        if batch is None or batch.offsets_file is None:
            problems.append(ReadProblem("missing", f"{state.location}/offsets/{batch_id}",
                                        "no offsets file for this batch (purged, or never written)", batch_id))
        return BatchPlan(batch_id, False, record=record)
    plan = BatchPlan(batch_id, False, offsets.watermark_ms, offsets.timestamp_ms, record=record)
    previous = state.batch(batch_id - 1) if batch_id > 0 else None
    if batch_id > 0 and (previous is None or previous.offsets is None):
        problems.append(ReadProblem(
            "missing", f"{state.location}/offsets/{batch_id - 1}",
            f"batch {batch_id} cannot be replayed: the offsets of batch {batch_id - 1} (where it started reading) "
            "are not readable (purged by minBatchesToRetain, or corrupt)", batch_id))
        return plan
    where = f"{progress_log_path(state.location)} (batch {batch_id})"
    if record is None or record.get("late_rule") is None:
        problems.append(ReadProblem(
            "no_late_rule", progress_log_path(state.location),
            "no progress record with a late_rule for this batch: expected the job to record which rows it drops "
            "as late (a job older than the ledger, or a query without a watermark)", batch_id))
        return plan
    try:
        rule = LateRule.from_dict(record["late_rule"], where)
        which = late_watermark_rule(record, where)
    except LedgerError as err:
        problems.append(ReadProblem("bad_field", progress_log_path(state.location), str(err), batch_id))
        return plan
    if force_basis is not None and force_basis != which.basis:
        which = replace(which, basis=force_basis, reason=f"forced to the {force_basis} watermark (what-if); "
                                                         f"the record says: {which.reason}")
    # offsets/N-1 is readable here (checked above); batch 0 has none: Spark uses 0.
    late_ms = offsets.watermark_ms if which.basis == "current" else (previous.offsets.watermark_ms if previous else 0)
    plan = replace(plan, rule=rule, late_watermark_ms=late_ms, late_watermark=which)
    ok = True
    read: list[tuple[int, str]] = []
    listed: dict[str, int] = {}
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
            for f in log.files[k]:
                if not f.path.rstrip("/").rsplit("/", 1)[-1].startswith(TICK_PREFIX):
                    read.append((index, f.path))
                    listed[f.path] = f.timestamp_ms
    return replace(plan, ok=ok, files=tuple(read), log_offsets=ranges, listed_ms=listed)


def plan_batches(checkpoint: str, batch_ids: Iterable[int], *, filesystem: Any = None,
                 storage_options: dict[str, Any] | None = None) -> tuple[Checkpoint, list[BatchPlan], list[ReadProblem]]:
    """:func:`plan_batch` for each of ``batch_ids`` (ascending) of one checkpoint: what a replay that
    makes the rows elsewhere (the launcher's, in Spark) needs from the checkpoint.

    :return: ``(checkpoint read, plans, problems)``; a source that is not a file source is a problem too.
    :raises OSError: when the progress log exists but cannot be read.
    """
    where = {"filesystem": filesystem, "storage_options": storage_options}
    storage, root = open_storage(checkpoint, **where)
    state = read_checkpoint(checkpoint, **where)
    problems: list[ReadProblem] = list(state.problems)
    records = progress_records(state.location, state.query_id, problems, where)
    unreplayable: dict[str, dict[str, Any]] = {}
    plans = [plan_batch(state, storage, root, batch_id, records.get(batch_id), problems, unreplayable)
             for batch_id in sorted(set(batch_ids))]
    for source_id, entry in unreplayable.items():
        problems.append(ReadProblem("not_replayable", f"{state.location}/sources/{source_id}",
                                    f"source {source_id} ({entry.get('description')}) is not a file source: its rows "
                                    "cannot be recovered from the checkpoint"))
    return state, plans, problems


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


def tally(plan: BatchPlan, rows: Iterable[ReplayRow], replayed_by: str, *, rows_read: int | None = None,
          set_aside: dict[str, int] | None = None) -> BatchLedger:
    """Apply the plan's late rule to the rows a replay made of the batch's files.

    :param rows: the rows entering the watermark (``reason`` None) and, when ``set_aside`` is not
        given, every row set aside too (counted by reason; the first of each reason is the example).
    :param replayed_by: ``"python"`` or ``"spark"``.
    :param rows_read: the rows the files made (default: the rows given).
    :param set_aside: ``{reason: rows}`` counted by the replay itself (the Spark replay counts in
        Spark and passes only the examples among ``rows``).
    :return: a replayed :class:`BatchLedger`.
    """
    counted = dict(set_aside or {})
    examples: dict[str, dict[str, Any]] = {}
    aggregated, seen, late = 0, 0, []
    for row in rows:
        seen += 1
        if row.reason is not None:
            if set_aside is None:
                counted[row.reason] = counted.get(row.reason, 0) + 1
            examples.setdefault(row.reason, {"file": row.file, "line": row.line, "event": row.event})
            continue
        is_late, late_by, start_ms, end_ms = plan.rule.late(row.event_us, plan.late_watermark_ms)
        if not is_late:
            aggregated += 1
            continue
        dropped = tuple(plan.rule.windows_dropped(row.event_us, plan.late_watermark_ms))
        kept = len(plan.rule.windows_of(row.event_us)) - len(dropped)
        late.append(LateRow(plan.batch_id, row.file, row.line, row.event or {}, row.event_us // 1000,
                            plan.late_watermark_ms, late_by, start_ms, end_ms, dropped, kept))
    files = tuple(dict.fromkeys(uri for _, uri in plan.files))
    read = rows_read if rows_read is not None else seen
    return BatchLedger(plan.batch_id, True, plan.watermark_ms, plan.timestamp_ms, files, plan.log_offsets, read,
                       counted, aggregated, tuple(late), rule=plan.rule, late_watermark_ms=plan.late_watermark_ms,
                       late_watermark=plan.late_watermark, replayed_by=replayed_by, set_aside_examples=examples,
                       **plan.spark_rows())
