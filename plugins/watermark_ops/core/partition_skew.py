"""Event-time skew between the partitions of one watermarked input: who leads, who trails, by how much.

Spark keeps one watermark per query (per input, then ``min``/``max`` over inputs): the newest event
time seen minus the delay threshold. When the rows of one key arrive later than the others' (one
station's files a day late), that key's newest event time trails the leader's, the watermark
follows the leader, and the trailing key's rows are the ones dropped as late. Flink aligns
watermarks per split for this; Spark does not, so the skew has to be watched.

Input: the progress log's records (``<checkpoint>.progress.jsonl``, written by
``watermark_ops.spark.recorder``), each with ``partition_column`` (e.g. ``"station"``) and
``event_time_max_ms_by_partition`` (``{"north": ms, "south": ms}``, null for a partition
without a row in that batch): the job's ``Dataset.observe`` metrics as Spark reported them in
``StreamingQueryProgress.observedMetrics``. A partition's newest event time is the maximum over
every record read, across batches and runs (the max so far); the leader is the partition with the
newest of them; each partition trails it by the difference.

All instants are epoch milliseconds UTC. Pure core: standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from watermark_ops.core.times import duration_words, iso_utc

__all__ = ["PartitionSkew", "PartitionTime", "partition_skew", "skew_before_each_batch"]


@dataclass(frozen=True)
class PartitionTime:
    """One partition's newest event time so far (epoch ms UTC).

    :ivar partition: the value of the partition column (``"south"``).
    :ivar event_time_max_ms: the newest event time of its rows in the records read; None when no
        record read had a row of it.
    :ivar max_batch_id: the batch that observed that event time (None with it).
    :ivar last_data_batch_id: the newest batch that had a row of it (None: none read).
    :ivar behind_leader_ms: the leader's newest event time minus this one (0 for the leader;
        None when not seen).
    :ivar behind_watermark_ms: the watermark minus this newest event time when positive, else 0:
        how far below the shared watermark this partition's newest row is (None without a
        watermark or when not seen).
    :ivar late_rows: rows of it the watermark dropped, when a ledger counted them, else None.
    """

    partition: str
    event_time_max_ms: int | None
    max_batch_id: int | None = None
    last_data_batch_id: int | None = None
    behind_leader_ms: int | None = None
    behind_watermark_ms: int | None = None
    late_rows: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields plus ``event_time_max`` as ISO-8601 UTC text."""
        return {"partition": self.partition, "event_time_max_ms": self.event_time_max_ms,
                "event_time_max": iso_utc(self.event_time_max_ms), "max_batch_id": self.max_batch_id,
                "last_data_batch_id": self.last_data_batch_id, "behind_leader_ms": self.behind_leader_ms,
                "behind_watermark_ms": self.behind_watermark_ms, "late_rows": self.late_rows}


@dataclass(frozen=True)
class PartitionSkew:
    """The event-time skew between the partitions of a query's input (epoch ms UTC).

    :ivar column: the partition column (``"station"``).
    :ivar partitions: leader first, then by how far each trails it; partitions never seen last.
    :ivar leader: the partition with the newest event time (None when none was seen).
    :ivar leader_event_time_ms: its newest event time.
    :ivar max_partition_skew_ms: the threshold (:attr:`Thresholds.max_partition_skew`), None: no warning.
    :ivar watermark_ms: the watermark the partitions share (None when not given).
    :ivar first_batch_id: / last_batch_id: the batches whose records were read.
    """

    column: str
    partitions: tuple[PartitionTime, ...]
    leader: str | None
    leader_event_time_ms: int | None
    max_partition_skew_ms: int | None = None
    watermark_ms: int | None = None
    first_batch_id: int | None = None
    last_batch_id: int | None = None

    @property
    def skew_ms(self) -> int | None:
        """How far the most trailing seen partition is behind the leader (0 with one partition)."""
        behind = [p.behind_leader_ms for p in self.partitions if p.behind_leader_ms is not None]
        return max(behind) if behind else None

    @property
    def trailing(self) -> tuple[PartitionTime, ...]:
        """The partitions behind the leader by more than ``max_partition_skew_ms`` (none when it is None)."""
        if self.max_partition_skew_ms is None:
            return ()
        return tuple(p for p in self.partitions
                     if p.behind_leader_ms is not None and p.behind_leader_ms > self.max_partition_skew_ms)

    def partition(self, name: str) -> PartitionTime | None:
        """The entry of partition ``name``, None when the records never named it."""
        return next((p for p in self.partitions if p.partition == name), None)

    def with_late_rows(self, late_rows: Mapping[str, int]) -> PartitionSkew:
        """A copy whose partitions carry their late rows (``{partition: rows}``, missing: 0)."""
        return replace(self, partitions=tuple(replace(p, late_rows=int(late_rows.get(p.partition, 0)))
                                              for p in self.partitions))

    def warnings(self) -> list[str]:
        """One sentence per trailing partition (:attr:`trailing`), naming leader, gap and threshold."""
        out = []
        for p in self.trailing:
            shared = (f"the partitions share one watermark ({iso_utc(self.watermark_ms)})"
                      if self.watermark_ms else "the partitions share one watermark")
            below = (f"; its newest row is already {duration_words(p.behind_watermark_ms)} behind that watermark"
                     if p.behind_watermark_ms else "")
            out.append(
                f"partition skew: {self.column} {p.partition} trails the leader {self.leader} by "
                f"{duration_words(p.behind_leader_ms)} (newest event time {iso_utc(p.event_time_max_ms)} in batch "
                f"{p.max_batch_id} vs {iso_utc(self.leader_event_time_ms)}; max partition skew "
                f"{duration_words(self.max_partition_skew_ms)}): {shared}, so {p.partition}'s rows still to come "
                f"with event times behind it are dropped as late{below} (watermark-ops late: late rows per "
                f"{self.column})"
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, ``skew_ms``, ``trailing`` (partition names), instants also as ISO-8601."""
        return {"column": self.column, "leader": self.leader, "leader_event_time_ms": self.leader_event_time_ms,
                "leader_event_time": iso_utc(self.leader_event_time_ms), "skew_ms": self.skew_ms,
                "max_partition_skew_ms": self.max_partition_skew_ms,
                "trailing": [p.partition for p in self.trailing], "watermark_ms": self.watermark_ms,
                "first_batch_id": self.first_batch_id, "last_batch_id": self.last_batch_id,
                "partitions": [p.to_dict() for p in self.partitions]}


def _observed(record: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    column, times = record.get("partition_column"), record.get("event_time_max_ms_by_partition")
    if isinstance(column, str) and isinstance(times, dict):
        return column, times
    return None


class _Maxima:
    """The running max per partition over records fed in batch order."""

    def __init__(self, column: str):
        self.column = column
        self.seen: dict[str, dict[str, int | None]] = {}
        self.first: int | None = None
        self.last: int | None = None

    def add(self, record: Mapping[str, Any]) -> None:
        observed = _observed(record)
        if observed is None or observed[0] != self.column:
            return
        batch_id = record.get("batch_id")
        self.first = batch_id if self.first is None else self.first
        self.last = batch_id
        for name, value in observed[1].items():
            entry = self.seen.setdefault(str(name), {"max": None, "max_batch": None, "last_batch": None})
            if isinstance(value, bool) or not isinstance(value, int):
                continue  # null: no row of this partition in the batch
            entry["last_batch"] = batch_id
            if entry["max"] is None or value > entry["max"]:
                entry["max"], entry["max_batch"] = value, batch_id

    def skew(self, watermark_ms: int | None, max_partition_skew_ms: int | None) -> PartitionSkew:
        seen = {name: e for name, e in self.seen.items() if e["max"] is not None}
        leader = max(seen, key=lambda name: (seen[name]["max"], name), default=None)
        top = seen[leader]["max"] if leader is not None else None
        partitions = []
        for name, e in self.seen.items():
            value = e["max"]
            partitions.append(PartitionTime(
                partition=name, event_time_max_ms=value, max_batch_id=e["max_batch"],
                last_data_batch_id=e["last_batch"],
                behind_leader_ms=None if value is None else top - value,
                behind_watermark_ms=None if value is None or not watermark_ms else max(0, watermark_ms - value)))
        partitions.sort(key=lambda p: (p.behind_leader_ms is None, p.behind_leader_ms or 0, p.partition))
        return PartitionSkew(column=self.column, partitions=tuple(partitions), leader=leader, leader_event_time_ms=top,
                             max_partition_skew_ms=max_partition_skew_ms, watermark_ms=watermark_ms,
                             first_batch_id=self.first, last_batch_id=self.last)


def _column(records: list[Mapping[str, Any]]) -> str | None:
    """The partition column of the newest record that has one."""
    return next((observed[0] for observed in map(_observed, reversed(records)) if observed), None)


def partition_skew(records: Iterable[Mapping[str, Any]], *, watermark_ms: int | None = None,
                   max_partition_skew_ms: int | None = None) -> PartitionSkew | None:
    """The newest event time per partition over progress-log records, the leader, and the gaps.

    :param records: progress records in batch order (one per batch id: a re-run's record replaces
        the crashed one before this is called); records without ``event_time_max_ms_by_partition``
        (a job that does not record it, a no-data trigger) are skipped, and so are records of
        another ``partition_column`` than the newest record's.
    :param watermark_ms: the watermark the partitions share, for ``behind_watermark_ms``.
    :param max_partition_skew_ms: the warning threshold (:attr:`PartitionSkew.trailing`); None: off.
    :return: a :class:`PartitionSkew`, None when no record carries per-partition event times.
    """
    records = list(records)
    column = _column(records)
    if column is None:
        return None
    maxima = _Maxima(column)
    for record in records:
        maxima.add(record)
    return maxima.skew(watermark_ms, max_partition_skew_ms)


def skew_before_each_batch(records: Mapping[int, Mapping[str, Any]]) -> dict[int, PartitionSkew]:
    """The skew entering each batch: for every batch id N of ``records`` (``{batch id: record}``),
    :func:`partition_skew` over the records of the batches before N, each with the watermark N ran
    with (the record's ``watermark_ms``). Batches before which nothing was observed are left out.

    One pass in batch order (the late-row ledger uses it to say how far a partition trailed when
    its rows were dropped).
    """
    ordered = [records[k] for k in sorted(records)]
    column = _column(ordered)
    if column is None:
        return {}
    maxima = _Maxima(column)
    out = {}
    for record in ordered:
        if maxima.last is not None:
            out[record["batch_id"]] = maxima.skew(record.get("watermark_ms"), None)
        maxima.add(record)
    return out
