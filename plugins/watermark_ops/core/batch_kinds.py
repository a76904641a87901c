"""Batches of Spark 4.2 / 4.3 that are not ordinary micro-batches, named for what they are.

Each function compares one ``offsets/N`` with the one before it
(:class:`~watermark_ops.core.log_formats.OffsetsEntry`, epoch ms UTC) and returns plain events,
``{"kind", "batch_id", "message", ...}``, that :mod:`watermark_ops.core.rules` turns into info
findings for ``audit`` and :class:`~watermark_ops.core.status.CheckpointStatus` shows on ``status``:

* ``state_repartitioned``: the batch Spark's offline repartition writes
  (``StreamingCheckpointManager.repartition(checkpoint, n)``, Spark 4.2+, RocksDB state store only:
  ``OfflineStateRepartitionRunner`` in ``sql/core/.../streaming/state/``): batch N+1 carries batch N's
  source offsets, ``batchWatermarkMs`` and ``batchTimestampMs`` and a new
  ``spark.sql.shuffle.partitions``; the batches after it run that many state partitions. The event
  holds ``{"from_partitions": int, "to_partitions": int, "committed": bool}``.
* ``sources_changed``: a v2 offset log (``spark.sql.streaming.offsetLog.formatVersion=2``,
  ``OffsetSeqLog`` v2) whose named sources differ from the previous batch's (a source added or
  removed on restart, with ``spark.sql.streaming.queryEvolution.enableSourceEvolution=true``):
  ``{"added": [name], "removed": [name]}``.

Pure core: imports neither Airflow nor Spark, never prints.
"""

from __future__ import annotations

from typing import Any, Iterable

from watermark_ops.core.log_formats import OffsetsEntry

__all__ = ["SHUFFLE_PARTITIONS", "batch_events", "repartition_of", "source_change_of"]

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def repartition_of(before: OffsetsEntry, after: OffsetsEntry) -> tuple[str, str] | None:
    """``(old, new)`` shuffle partitions when ``after`` is the repartition batch written over
    ``before`` (same offsets, watermark and batch time, another partition count), else None."""
    old, new = before.conf.get(SHUFFLE_PARTITIONS), after.conf.get(SHUFFLE_PARTITIONS)
    if old is None or new is None or old == new or after.batch_id != before.batch_id + 1:
        return None
    if (before.watermark_ms, before.timestamp_ms) != (after.watermark_ms, after.timestamp_ms):
        return None
    return (old, new) if before.by_source == after.by_source else None


def source_change_of(before: OffsetsEntry, after: OffsetsEntry) -> tuple[list[str], list[str]] | None:
    """``(added, removed)`` source names of a v2 offset log between two batches, None when unchanged
    or when either file is v1 (positions, no names: Spark then refuses another source count)."""
    if before.version < 2 or after.version < 2:
        return None
    old, new = list(before.source_ids), list(after.source_ids)
    added, removed = [n for n in new if n not in old], [n for n in old if n not in new]
    return (added, removed) if added or removed else None


def batch_events(entries: Iterable[tuple[OffsetsEntry, bool]]) -> list[dict[str, Any]]:
    """The events of consecutive offsets entries (``(entry, committed)`` in batch-id order)."""
    events: list[dict[str, Any]] = []
    previous: OffsetsEntry | None = None
    for entry, committed in entries:
        if previous is not None:
            events.extend(_events(previous, entry, committed))
        previous = entry
    return events


def _events(before: OffsetsEntry, after: OffsetsEntry, committed: bool) -> list[dict[str, Any]]:
    out = []
    moved = repartition_of(before, after)
    if moved is not None:
        old, new = moved
        tail = ("; later batches run " + new + " state partitions" if committed else
                "; not committed yet: the next start re-runs it with " + new + " partitions")
        out.append({
            "kind": "state_repartitioned", "batch_id": after.batch_id, "file": after.file,
            "from_partitions": int(old) if old.isdigit() else old, "to_partitions": int(new) if new.isdigit() else new,
            "committed": committed,
            "message": (f"state repartitioned from {old} to {new} partitions (batch {after.batch_id}): "
                        f"offsets/{after.batch_id} repeats batch {before.batch_id}'s offsets, watermark and batch "
                        f"time with {SHUFFLE_PARTITIONS}={new} (StreamingCheckpointManager.repartition){tail}"),
        })
    change = source_change_of(before, after)
    if change is not None:
        added, removed = change
        said = [*(f"source {n} added" for n in added), *(f"source {n} removed" for n in removed)]
        out.append({
            "kind": "sources_changed", "batch_id": after.batch_id, "file": after.file,
            "added": added, "removed": removed,
            "message": (f"{', '.join(said)} at batch {after.batch_id}: offsets/{after.batch_id} names "
                        f"{', '.join(after.source_ids)}, offsets/{before.batch_id} named "
                        f"{', '.join(before.source_ids)} (offset log v2, source evolution)"),
        })
    return out
