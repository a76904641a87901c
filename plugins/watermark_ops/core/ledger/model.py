"""The late-row ledger's values: one late row, one replayed micro-batch, a checkpoint's ledger.

Plain data with ``to_dict()`` / ``summary()``; produced by :func:`watermark_ops.core.ledger.late_ledger`
from the Python replay of JSON lines or from the launcher's Spark replay records. All instants
epoch ms UTC. Pure core.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from watermark_ops.core.ledger.rule import LateRule, LateWatermarkRule
from watermark_ops.core.ledger.unknown import group_problems, unknown_reason
from watermark_ops.core.log_formats import ReadProblem
from watermark_ops.core.partition_skew import PartitionSkew
from watermark_ops.core.times import iso_utc

__all__ = ["BatchLedger", "LateLedger", "LateRow"]


@dataclass(frozen=True)
class LateRow:
    """One row a micro-batch dropped as late.

    :ivar batch_id: the micro-batch that read and dropped it.
    :ivar source_file: the landed file's URI (as in the file source's log).
    :ivar line: the row's line in that file (1-based): for JSON lines the line, for CSV with a header
        the line after it; for a columnar file (Parquet, ORC) the row's position; None when the job's
        pre-watermark function does not keep the row's position (it selected other columns).
    :ivar event: the row as landed (the JSON object; a CSV or Parquet row as ``{column: value}``),
        or, when its position was not kept, as the pre-watermark function made it.
    :ivar event_time_ms: its event time (epoch ms UTC).
    :ivar watermark_ms: the watermark it missed: the batch's watermark for late rows
        (:attr:`BatchLedger.late_watermark_ms`: ``offsets/N-1``'s or ``offsets/N``'s ``batchWatermarkMs``).
    :ivar late_by_ms: watermark minus the rule's instant (window end or event time), >= 0.
    :ivar window_start_ms: / window_end_ms: the earliest window it was dropped from (a tumbling
        window's only one; a session window's one-row session ``[event time, event time + gap)``),
        None for an ``event_time`` rule.
    :ivar windows_dropped: every window it was dropped from, ``((start ms, end ms), ...)`` earliest
        first (a sliding window's row may lose some of its windows and keep the others).
    :ivar windows_kept: how many of its windows kept it (> 0: dropped from only some of them).
    """

    batch_id: int
    source_file: str
    line: int | None
    event: dict[str, Any]
    event_time_ms: int
    watermark_ms: int
    late_by_ms: int
    window_start_ms: int | None = None
    window_end_ms: int | None = None
    windows_dropped: tuple[tuple[int, int], ...] = ()
    windows_kept: int = 0

    @property
    def dropped_windows(self) -> tuple[tuple[int, int], ...]:
        """:attr:`windows_dropped`, or the one window of a row recorded without them (a record older
        than sliding windows), or none."""
        if self.windows_dropped:
            return self.windows_dropped
        return ((self.window_start_ms, self.window_end_ms),) if self.window_end_ms is not None else ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields plus ``event_time`` and ``watermark`` as ISO-8601 UTC text;
        ``windows_dropped`` as ``[{"window_start_ms", "window_end_ms"}]``."""
        return {
            "batch_id": self.batch_id, "source_file": self.source_file, "line": self.line, "event": self.event,
            "event_time_ms": self.event_time_ms, "event_time": iso_utc(self.event_time_ms),
            "watermark_ms": self.watermark_ms, "watermark": iso_utc(self.watermark_ms),
            "late_by_ms": self.late_by_ms, "window_start_ms": self.window_start_ms, "window_end_ms": self.window_end_ms,
            "windows_dropped": [{"window_start_ms": a, "window_end_ms": b} for a, b in self.dropped_windows],
            "windows_kept": self.windows_kept,
        }

    @classmethod
    def from_dict(cls, item: dict[str, Any], batch_id: int) -> LateRow:
        """The inverse of :meth:`to_dict` (a replay record's late row), in batch ``batch_id``.

        :raises KeyError: / ValueError: / TypeError: when a required field is missing or not a number.
        """
        dropped = tuple((int(w["window_start_ms"]), int(w["window_end_ms"])) for w in item.get("windows_dropped") or ())
        return cls(batch_id, item.get("source_file"), item.get("line"), item.get("event") or {},
                   int(item["event_time_ms"]), int(item["watermark_ms"]), int(item["late_by_ms"]),
                   item.get("window_start_ms"), item.get("window_end_ms"), dropped, int(item.get("windows_kept") or 0))


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
        ``rows_dropped_by_watermark`` (Spark's count: late partial aggregates, not rows) for the
        batch, None without a record; shown as ``late_partial_aggregates_spark``.
    :ivar rule: the late rule applied, None when there was none.
    :ivar late_watermark_ms: the watermark the batch filtered late rows with (epoch ms UTC):
        ``offsets/N-1``'s ``batchWatermarkMs`` (0 for batch 0) or the batch's own, per
        :attr:`late_watermark`; None when not replayed that far.
    :ivar late_watermark: the :class:`LateWatermarkRule` followed, None when there was no record.
    :ivar replayed_by: ``"python"`` (the landed JSON lines, :mod:`~watermark_ops.core.ledger.lines`) or
        ``"spark"`` (the launcher's replay through the job's pre-watermark function,
        :mod:`~watermark_ops.core.ledger.replayed`); None when not replayed.
    :ivar set_aside_examples: ``{reason: {"file", "line", "event"}}``: the first row set aside for each
        reason (what a failed quarantine check names).
    :ivar skew_before: the event-time skew between the values of the job's partition column entering the batch:
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
    replayed_by: str | None = None
    set_aside_examples: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def rows_late(self) -> int:
        """Rows dropped as late (from at least one of their windows)."""
        return len(self.late_rows)

    @property
    def window_drops(self) -> int:
        """(row, window) drops: each late row counted once per window it was dropped from."""
        return sum(len(row.dropped_windows) or 1 for row in self.late_rows)

    @property
    def rows_late_partly(self) -> int:
        """Late rows dropped from only some of their windows (kept in the others)."""
        return sum(1 for row in self.late_rows if row.windows_kept > 0)

    @property
    def partition_column(self) -> str | None:
        """The job's partition column (the progress record's ``partition_column``), None when not recorded."""
        return self.skew_before.column if self.skew_before else None

    def late_by_partition(self) -> dict[str, int]:
        """Late rows per value of the job's partition column (:attr:`partition_column`); empty without one."""
        return self.late_by(self.partition_column) if self.partition_column else {}

    def late_by(self, key: str) -> dict[str, int]:
        """Late rows per value of the event's ``key`` field (``"?"`` when absent), descending."""
        counts: dict[str, int] = {}
        for row in self.late_rows:
            name = str(row.event.get(key) if row.event.get(key) is not None else "?")
            counts[name] = counts.get(name, 0) + 1
        return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))

    def summary(self) -> dict[str, Any]:
        """JSON-ready, without the rows: ``{"batch_id", "replayed", "watermark_ms", "watermark",
        "timestamp_ms", "files", "log_offsets", "rows_read", "rows_quarantined", "rows_aggregated",
        "rows_late", "window_drops" ((row, window) drops), "rows_late_partly" (rows dropped from only
        some of their windows), "late_by_partition" (by the job's partition column), "worst_late_by_ms",
        "spark_input_rows", "late_partial_aggregates_spark" (Spark's count),
        "rule", "partition_column", "behind_leader_before_ms": {partition: ms} | None, "late_watermark_ms",
        "late_watermark" (ISO), "late_watermark_rule": LateWatermarkRule.to_dict() | None, "replayed_by",
        "set_aside_examples"}`` (``partition_column``
        and ``behind_leader_before_ms`` from :attr:`skew_before`); ``rows_read``, ``rows_aggregated``
        and ``rows_late`` are None for a batch not replayed (unknown, never 0)."""
        known = self.replayed
        return {
            "batch_id": self.batch_id, "replayed": self.replayed,
            "watermark_ms": self.watermark_ms, "watermark": iso_utc(self.watermark_ms),
            "timestamp_ms": self.timestamp_ms, "files": list(self.files), "log_offsets": self.log_offsets,
            "rows_read": self.rows_read if known else None, "rows_quarantined": dict(self.rows_quarantined),
            "rows_aggregated": self.rows_aggregated if known else None, "rows_late": self.rows_late if known else None,
            "window_drops": self.window_drops if known else None,
            "rows_late_partly": self.rows_late_partly if known else None,
            "late_by_partition": self.late_by_partition(),
            "worst_late_by_ms": max((r.late_by_ms for r in self.late_rows), default=None),
            "spark_input_rows": self.spark_input_rows, "late_partial_aggregates_spark": self.spark_rows_dropped,
            "rule": self.rule.to_dict() if self.rule else None,
            "partition_column": self.skew_before.column if self.skew_before else None,
            "behind_leader_before_ms": ({p.partition: p.behind_leader_ms for p in self.skew_before.partitions}
                                        if self.skew_before else None),
            "late_watermark_ms": self.late_watermark_ms, "late_watermark": iso_utc(self.late_watermark_ms),
            "late_watermark_rule": self.late_watermark.to_dict() if self.late_watermark else None,
            "replayed_by": self.replayed_by, "set_aside_examples": dict(self.set_aside_examples),
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
    def unreplayed_batch_ids(self) -> list[int]:
        """The batches asked for that were not replayed (their late rows are unknown), ascending."""
        return [b.batch_id for b in self.batches if not b.replayed]

    @property
    def late_rows_unknown_reason(self) -> str | None:
        """Why the late rows of these batches cannot be known (not :attr:`complete`), None when they
        can: the batches not replayed and their problems, each kind once with its batch range
        (:func:`~watermark_ops.core.ledger.unknown.unknown_reason`)."""
        if self.complete:
            return None
        return unknown_reason(self.unreplayed_batch_ids, self.problems, self.not_replayable, self.found) or \
            "the ledger is not complete (see the problems)"

    @property
    def late_rows(self) -> list[LateRow]:
        """Every late row, in batch order."""
        return [row for batch in self.batches for row in batch.late_rows]

    def totals(self) -> dict[str, Any]:
        """Over the replayed batches: ``{"late_rows_known": bool (:attr:`complete`), "rows_read",
        "rows_aggregated", "rows_late", "window_drops", "rows_late_partly" (None unless every batch
        was replayed: a part of the batches' rows is not the ledger's figure), "replayed_batch_ids", "rows_late_replayed",
        "rows_aggregated_replayed" (the replayed batches' own, named as such),
        "rows_quarantined", "quarantined_by_reason", "late_by_batch": {id: rows},
        "late_by_partition": {value of the job's partition column: rows},
        "late_partial_aggregates_spark" (Spark's count, over every batch: known without a replay),
        "set_aside_examples": {reason: the first row set aside for it, ``{"batch_id", "file", "line",
        "event"}``}}``."""
        replayed = [b for b in self.batches if b.replayed]
        by_reason: dict[str, int] = {}
        by_partition: dict[str, int] = {}
        examples: dict[str, dict[str, Any]] = {}
        for batch in replayed:
            for reason, example in batch.set_aside_examples.items():
                examples.setdefault(reason, {"batch_id": batch.batch_id, **example})
            for reason, rows in batch.rows_quarantined.items():
                by_reason[reason] = by_reason.get(reason, 0) + rows
            for name, rows in batch.late_by_partition().items():
                by_partition[name] = by_partition.get(name, 0) + rows
        known = self.complete
        return {
            "late_rows_known": known,
            "rows_read": sum(b.rows_read for b in replayed),
            "rows_aggregated": sum(b.rows_aggregated for b in replayed) if known else None,
            "rows_late": sum(b.rows_late for b in replayed) if known else None,
            "window_drops": sum(b.window_drops for b in replayed) if known else None,
            "rows_late_partly": sum(b.rows_late_partly for b in replayed) if known else None,
            "replayed_batch_ids": [b.batch_id for b in replayed],  # what the two figures below are over
            "rows_late_replayed": sum(b.rows_late for b in replayed),
            "rows_aggregated_replayed": sum(b.rows_aggregated for b in replayed),
            "rows_quarantined": sum(by_reason.values()),
            "quarantined_by_reason": by_reason,
            "late_by_batch": {str(b.batch_id): b.rows_late for b in replayed},
            "late_by_partition": dict(sorted(by_partition.items(), key=lambda item: (-item[1], item[0]))),
            "late_partial_aggregates_spark": sum(b.spark_rows_dropped or 0 for b in self.batches),  # Spark's: known
            "set_aside_examples": examples,
        }

    def to_dict(self, rows: bool = False) -> dict[str, Any]:
        """JSON-ready: ``{"checkpoint", "query_id", "complete", "late_rows_known" (= complete),
        "late_rows_unknown_reason": str | None, "batches_not_replayed": [id], "totals", "batches":
        [summary], "problems": [ReadProblem.to_dict()], "problem_groups": each repeated problem once
        with its batch range (:func:`~watermark_ops.core.ledger.unknown.group_problems`),
        "not_replayable", "partition_skew"}``, plus ``"late_rows"`` when ``rows``."""
        document = {
            "checkpoint": self.checkpoint, "query_id": self.query_id, "complete": self.complete,
            "late_rows_known": self.complete, "late_rows_unknown_reason": self.late_rows_unknown_reason,
            "batches_not_replayed": self.unreplayed_batch_ids,
            "totals": self.totals(), "batches": [b.summary() for b in self.batches],
            "problems": [p.to_dict() for p in self.problems], "problem_groups": group_problems(self.problems),
            "not_replayable": list(self.not_replayable),
            "partition_skew": self.partition_skew.to_dict() if self.partition_skew else None,
        }
        if rows:
            document["late_rows"] = [r.to_dict() for r in self.late_rows]
        return document
