"""The head of a checkpoint at a glance: query id, head batch, watermark, in-flight batch.

What ``watermark-ops status`` shows before the stall classification, and the exit status it
returns. Built from a checkpoint already read (:func:`watermark_ops.core.checkpoint.read_checkpoint`);
all instants are epoch milliseconds UTC, also given as ISO-8601 UTC text.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from watermark_ops.core.batch_kinds import batch_events
from watermark_ops.core.checkpoint import Checkpoint
from watermark_ops.core.log_formats import ReadProblem
from watermark_ops.core.times import iso_utc

__all__ = ["CheckpointStatus"]

#: Problem kinds that make the whole checkpoint unreadable (when not about one batch).
_FATAL_KINDS = ("checkpoint_missing", "not_a_checkpoint", "unreadable")


@dataclass(frozen=True)
class CheckpointStatus:
    """The head of a checkpoint.

    :ivar location: the checkpoint location as the reader shows it.
    :ivar query_id: the query id (``metadata``), None when unreadable or missing.
    :ivar head_batch_id: the latest batch id with an offsets file, None without batches.
    :ivar lowest_batch_id: the lowest batch id with an offsets file (above 0 after purging), as
        listed: also right after a bounded read (``read_checkpoint(newest=N)``) that did not read it.
    :ivar watermark_ms: the watermark the next batch starts from (epoch ms UTC), None if unknown.
    :ivar in_flight_batch: the head batch when it has no commit, else None.
    :ivar latest_batch_timestamp_ms: the head batch's ``batchTimestampMs`` (epoch ms UTC).
    :ivar problems: the reader's problems, each naming its file (of the files read: a bounded
        read does not see the older ones).
    :ivar batches_read: the batch ids whose files were read.
    :ivar unread_batches: older batch ids listed but not read (a bounded read,
        :func:`watermark_ops.core.stall.read_recent`); 0 when every file was read.
    :ivar events: the batches read that are not ordinary micro-batches, each named at its batch
        (:func:`watermark_ops.core.batch_kinds.batch_events`: a state repartition, a v2 offset
        log's source added or removed): ``{"kind", "batch_id", "file", "message", ...}``.
    """

    location: str
    query_id: str | None
    head_batch_id: int | None
    lowest_batch_id: int | None
    watermark_ms: int | None
    in_flight_batch: int | None
    latest_batch_timestamp_ms: int | None
    problems: tuple[ReadProblem, ...] = ()
    batches_read: int = 0
    unread_batches: int = 0
    events: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, checkpoint: Checkpoint) -> CheckpointStatus:
        """The status of a checkpoint read by :func:`watermark_ops.core.checkpoint.read_checkpoint`."""
        head = checkpoint.batch(checkpoint.head_batch_id) if checkpoint.head_batch_id is not None else None
        lowest = checkpoint.lowest_offsets_batch_id
        if lowest is None:  # a Checkpoint built by hand, not by the reader
            lowest = min((b.batch_id for b in checkpoint.batches if b.offsets_file is not None), default=None)
        return cls(
            location=checkpoint.location,
            query_id=checkpoint.query_id,
            head_batch_id=checkpoint.head_batch_id,
            lowest_batch_id=lowest,
            watermark_ms=checkpoint.next_watermark_ms,
            in_flight_batch=checkpoint.in_flight_batch_id,
            latest_batch_timestamp_ms=head.timestamp_ms if head is not None else None,
            problems=checkpoint.problems,
            batches_read=len(checkpoint.batches),
            unread_batches=checkpoint.unread_batches,
            events=tuple(batch_events((b.offsets, b.committed) for b in checkpoint.batches if b.offsets is not None)),
        )

    @property
    def exit_code(self) -> int:
        """2 when the checkpoint cannot be read (missing, not a checkpoint, unlistable) or its
        head's watermark is unknown (head files unreadable), else 0."""
        unreadable_head = self.head_batch_id is not None and self.watermark_ms is None
        missing = any(p.kind in _FATAL_KINDS and p.batch_id is None for p in self.problems)
        return 2 if unreadable_head or missing else 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready::

            {"location", "query_id", "head_batch_id", "lowest_batch_id", "watermark_ms", "watermark",
             "in_flight_batch", "latest_batch_timestamp_ms", "latest_batch_time",
             "problems": [{"kind", "file", "message", "batch_id"}], "batches_read", "unread_batches",
             "events": [{"kind", "batch_id", "file", "message", ...}]}
        """
        return {
            "location": self.location,
            "query_id": self.query_id,
            "head_batch_id": self.head_batch_id,
            "lowest_batch_id": self.lowest_batch_id,
            "watermark_ms": self.watermark_ms,
            "watermark": iso_utc(self.watermark_ms),
            "in_flight_batch": self.in_flight_batch,
            "latest_batch_timestamp_ms": self.latest_batch_timestamp_ms,
            "latest_batch_time": iso_utc(self.latest_batch_timestamp_ms),
            "problems": [p.to_dict() for p in self.problems],
            "batches_read": self.batches_read,
            "unread_batches": self.unread_batches,
            "events": [dict(e) for e in self.events],
        }
