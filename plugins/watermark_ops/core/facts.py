"""What the stall classification knows of each batch: :class:`BatchFacts`, from the checkpoint and the progress log.

A batch's facts join its offsets file (watermark, batch time, source offsets), its commit file
(next watermark) and, when the job wrote one, its progress-log record (input rows, the largest
event time observed, Spark's run id). Which inputs got data in a batch is read from the source
offsets: an offset that changed against the previous batch's means new input (the trailing no-data
batch of ``availableNow`` repeats the previous offsets). All times are epoch milliseconds UTC.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from watermark_ops.core.checkpoint import Checkpoint
from watermark_ops.core.times import iso_utc

__all__ = ["BatchFacts", "batch_facts", "inputs_evidence", "last_move", "progress_by_batch"]


@dataclass(frozen=True)
class BatchFacts:
    """What the classification knows of one batch (epoch ms UTC).

    :ivar inputs_advanced: the sources whose offset changed against the previous batch (or that
        appeared with an offset): v1 offset logs by plan position (``int``), v2 by the name written
        in the file (``str``: a v2 file lists its sources in no fixed order); None when unknown
        (first retained batch after a purge, no progress log, a v1 log whose source count changed).
    :ivar source_keys: the keys of ``sources`` in file order (positions, or v2 names).
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
    inputs_advanced: tuple[int | str, ...] | None
    input_rows: int | None = None
    event_time_max_ms: int | None = None
    run_id: str | None = None
    source_keys: tuple[int | str, ...] = ()

    @property
    def keys(self) -> tuple[int | str, ...]:
        """:attr:`source_keys`, or the positions when built without them."""
        return self.source_keys or tuple(range(len(self.sources)))

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


def progress_by_batch(records: Iterable[dict[str, Any]], query_id: str | None,
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


def batch_facts(checkpoint: Checkpoint, progress: dict[int, dict[str, Any]], at_ms: int) -> list[BatchFacts]:
    """The readable batches at or before ``at_ms``, in batch-id order, with their inputs."""
    out: list[BatchFacts] = []
    previous: dict[int | str, Any] | None = None
    for batch in checkpoint.batches:
        offsets = batch.offsets
        if offsets is None:
            continue
        if offsets.timestamp_ms > at_ms:
            break
        record = progress.get(batch.batch_id)
        current = offsets.by_source
        advanced: tuple[int | str, ...] | None
        if previous is not None and (previous.keys() == current.keys() or offsets.version >= 2):
            # by key: a v2 source added on restart advanced when it has an offset; a removed one did not
            advanced = tuple(k for k, new in current.items()
                             if new != previous.get(k) and (k in previous or new is not None))
        elif batch.batch_id == 0:
            advanced = tuple(k for k, s in current.items() if s is not None)
        else:
            advanced = _advanced_from_progress(record)
        previous = current
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
            source_keys=tuple(current),
        ))
    return out


def last_move(facts: Sequence[BatchFacts]) -> dict[str, Any] | None:
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


def inputs_evidence(facts: Sequence[BatchFacts], progress: dict[int, dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    if not facts:
        return ()
    head = facts[-1]
    descriptions: dict[int, str] = {}
    for record in progress.values():
        for i, source in enumerate(record.get("sources") or []):
            if isinstance(source, dict) and source.get("description"):
                descriptions[i] = source["description"]
    out = []
    for i, (key, offset) in enumerate(zip(head.keys, head.sources)):
        last = next((b for b in reversed(facts) if b.inputs_advanced and key in b.inputs_advanced), None)
        named = isinstance(key, str)  # a v2 offset log: the source's name; progress lists plan order
        out.append({
            "source": key,
            "name": key if named else None,
            "description": None if named else descriptions.get(i),
            "offset": offset,
            "last_advanced_batch": last.batch_id if last else None,
            "last_advanced_ms": last.timestamp_ms if last else None,
        })
    return tuple(out)
