"""The state of a checkpoint as values: what :mod:`watermark_ops.core.state.reader` reads and the
summary, the rules and the faces use (no reading here, so that a face holding a stateless
checkpoint never imports the readers of state files).

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from watermark_ops.core.log_formats import ReadProblem

if TYPE_CHECKING:
    from watermark_ops.core.state.chain import StoreChain

__all__ = ["DEFAULT_MIN_BATCHES_TO_RETAIN", "PROVIDER_CONF", "CheckpointState", "OperatorState", "StateBatch",
           "committed_and_conf", "provider_of_class", "stateless_state"]

#: The SQL conf naming the state store provider (frozen in ``offsets/N`` ``conf``).
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
#: Spark's default ``spark.sql.streaming.minBatchesToRetain`` (a session conf no checkpoint file records).
DEFAULT_MIN_BATCHES_TO_RETAIN = 100


def provider_of_class(class_name: str | None) -> str | None:
    """``hdfs`` | ``rocksdb`` | the class name itself for another provider; None for None."""
    if not class_name:
        return None
    if class_name.endswith("HDFSBackedStateStoreProvider"):
        return "hdfs"
    if class_name.endswith("RocksDBStateStoreProvider"):
        return "rocksdb"
    return class_name


class StateBatch(msgspec.Struct, frozen=True):
    """One batch of one operator: ``rows`` held after it, ``removed`` by it, ``dropped_by_watermark``
    (progress log only), ``watermark_ms`` (offsets ``batchWatermarkMs``, epoch ms UTC); None: unknown."""

    batch_id: int
    rows: int | None = None
    removed: int | None = None
    dropped_by_watermark: int | None = None
    watermark_ms: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every attribute."""
        return {"batch_id": self.batch_id, "rows": self.rows, "removed": self.removed,
                "dropped_by_watermark": self.dropped_by_watermark, "watermark_ms": self.watermark_ms}


@dataclass(frozen=True)
class OperatorState:
    """One stateful operator as read (see the module docstring).

    :ivar name: Spark's operator name, None without operator metadata (Spark before 3.5).
    :ivar partitions: partition folders on disk (the frozen ``spark.sql.shuffle.partitions``).
    :ivar provider: ``hdfs`` | ``rocksdb`` (from the files, else the frozen conf), None if unknown.
    :ivar changelog: RocksDB changelog checkpointing.
    :ivar format_version: checkpoint format version (1, or 2: unique ids in names), None without files.
    :ivar bounded_by_watermark: True when a watermark can evict the state, False when none can
        (``bound_reason`` says why), None when the files cannot tell.
    :ivar batches: rows per batch, oldest first (``rows_source``: ``progress`` | ``files``).
    :ivar file_rows: ``{batch id: rows}`` counted from the files (every partition and counted store).
    :ivar count_note: why rows could not be counted from the files (or only in part), else None.
    :ivar target_version: the version a restart loads; ``chain_length``: the most files a restart
        replays for one partition and store; ``base_versions``: the snapshot / zip versions the
        load starts from (0: from empty); ``snapshot_version``: the newest snapshot on disk.
    :ivar versions_kept: the most versions on disk for one store; ``oldest_version`` /
        ``latest_version`` over all stores.
    :ivar missing_files: files the restart needs that are not there; ``problems`` files that could
        not be read (truncated, corrupt, unsupported codec).
    """

    operator_id: int
    name: str | None
    stores: tuple[str, ...]
    partitions: int
    provider: str | None
    changelog: bool
    format_version: int | None
    bounded_by_watermark: bool | None
    bound_reason: str
    watermark_columns: tuple[dict[str, Any], ...]
    batches: tuple[StateBatch, ...]
    rows_source: str | None
    file_rows: dict[int, int]
    count_note: str | None
    target_version: int | None
    chain_length: int
    base_versions: tuple[int, ...]
    snapshot_version: int | None
    versions_kept: int
    oldest_version: int | None
    latest_version: int | None
    bytes_on_disk: int
    files_on_disk: int
    missing_files: tuple[str, ...]
    problems: tuple[ReadProblem, ...]
    folder: str
    chains: tuple[StoreChain, ...] = field(default=(), repr=False, compare=False)

    @property
    def rows(self) -> list[int | None]:
        """Rows held per batch read, oldest first (newest last)."""
        return [b.rows for b in self.batches]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``rows`` and ``batch_ids`` are parallel lists, newest last."""
        return {
            "operator_id": self.operator_id, "name": self.name, "stores": list(self.stores),
            "partitions": self.partitions, "provider": self.provider, "changelog": self.changelog,
            "format_version": self.format_version, "bounded_by_watermark": self.bounded_by_watermark,
            "bound_reason": self.bound_reason, "watermark_columns": [dict(c) for c in self.watermark_columns],
            "batch_ids": [b.batch_id for b in self.batches], "rows": self.rows,
            "removed": [b.removed for b in self.batches],
            "dropped_by_watermark": [b.dropped_by_watermark for b in self.batches],
            "watermark_ms": [b.watermark_ms for b in self.batches], "rows_source": self.rows_source,
            "file_rows": {str(k): v for k, v in sorted(self.file_rows.items())}, "count_note": self.count_note,
            "target_version": self.target_version, "chain_length": self.chain_length,
            "base_versions": list(self.base_versions), "snapshot_version": self.snapshot_version,
            "versions_kept": self.versions_kept, "oldest_version": self.oldest_version,
            "latest_version": self.latest_version, "bytes_on_disk": self.bytes_on_disk,
            "files_on_disk": self.files_on_disk, "missing_files": list(self.missing_files),
            "problems": [p.to_dict() for p in self.problems], "folder": self.folder,
        }


class CheckpointState(msgspec.Struct, frozen=True):
    """The state of a checkpoint (:func:`read_state`).

    :ivar committed_batch_id: the newest committed batch (the restart loads version +1), None if none.
    :ivar conf: the head batch's frozen confs (offsets ``conf``), {} if unknown.
    :ivar min_batches_to_retain: what the versions kept are compared with (the caller's, default 100).
    :ivar problems: metadata and listing problems (file problems are per operator).
    """

    location: str
    has_state_folder: bool
    operators: tuple[OperatorState, ...] = ()
    committed_batch_id: int | None = None
    conf: dict[str, str] = msgspec.field(default_factory=dict)
    min_batches_to_retain: int = DEFAULT_MIN_BATCHES_TO_RETAIN
    problems: tuple[ReadProblem, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """``{"location", "has_state_folder", "committed_batch_id", "min_batches_to_retain", "operators", "problems"}``."""
        return {"location": self.location, "has_state_folder": self.has_state_folder,
                "committed_batch_id": self.committed_batch_id, "min_batches_to_retain": self.min_batches_to_retain,
                "operators": [op.to_dict() for op in self.operators],
                "problems": [p.to_dict() for p in self.problems]}


def committed_and_conf(checkpoint: Any) -> tuple[int | None, dict[str, str]]:
    """The newest committed batch id of ``checkpoint`` (the logs as read; None when none) and its
    head batch's frozen confs (offsets ``conf``; {} when unknown): what a restart loads from."""
    committed_id = next((b.batch_id for b in reversed(checkpoint.batches) if b.committed), None)  # ascending ids
    head = checkpoint.batch(checkpoint.head_batch_id) if checkpoint.head_batch_id is not None else None
    return committed_id, dict(head.conf) if head is not None and head.conf else {}


def stateless_state(shown: str, checkpoint: Any, metadata: Any,
                    min_batches_to_retain: int = DEFAULT_MIN_BATCHES_TO_RETAIN) -> CheckpointState:
    """The :class:`CheckpointState` of a checkpoint without ``state/`` (``metadata``: its
    :class:`~watermark_ops.core.state.metadata.StateMetadata`, ``has_state_folder`` False): the
    newest committed batch and the head's frozen confs of ``checkpoint`` (the logs as read)."""
    committed_id, conf = committed_and_conf(checkpoint)
    return CheckpointState(shown, False, committed_batch_id=committed_id, conf=conf,
                           min_batches_to_retain=min_batches_to_retain, problems=tuple(metadata.problems))
