"""Audit a checkpoint: prove that the event-time watermark never moved backwards.

:func:`run_audit` reads the checkpoint (:func:`watermark_ops.core.checkpoint.read_checkpoint`),
applies every rule of :mod:`watermark_ops.core.rules` against the head remembered by the previous
audit (:mod:`watermark_ops.core.memory`), remembers the new head and returns an
:class:`AuditReport` (plain data; :meth:`AuditReport.to_dict` is the ``--json`` shape).

Status: ``violation`` when any error finding other than ``unreadable`` exists, else
``unreadable`` when any ``unreadable`` finding exists, else ``ok``; exit codes 1, 2, 0.

Pure core: imports neither Airflow nor Spark.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from watermark_ops.core.checkpoint import Checkpoint, open_storage, read_checkpoint
from watermark_ops.core.memory import AuditMemory, RememberedHead
from watermark_ops.core.progress import ProgressLog, progress_log_path, read_progress_log
from watermark_ops.core.rules import (
    ERROR,
    INFO,
    WARNING,
    BatchRecord,
    Finding,
    commit_offset_mismatch,
    commit_without_offsets,
    conf_changed,
    conf_requested_but_frozen,
    in_flight_batch,
    memory_rules,
    missing_batch,
    unreadable,
    uses_async_progress_tracking,
    watermark_regressed,
)
from watermark_ops.core.times import iso_utc

__all__ = ["EXIT_CODES", "AuditReport", "audit_checkpoint", "run_audit"]

EXIT_CODES = {"ok": 0, "violation": 1, "unreadable": 2}


@dataclass(frozen=True)
class AuditReport:
    """The result of one audit (see :meth:`to_dict` for the JSON shape).

    :ivar watermark_ms: the watermark the next batch starts from (epoch ms UTC), None if unknown.
    :ivar remembered: the head remembered by the previous audit, None if none.
    :ivar added_batch_ids: ids of the batches added since the remembered head (all when no memory):
        the batches of the runs since the previous audit.
    """

    location: str
    query_id: str | None
    head_batch_id: int | None
    in_flight_batch_id: int | None
    watermark_ms: int | None
    batches: tuple[BatchRecord, ...]
    findings: tuple[Finding, ...]
    remembered: RememberedHead | None = None
    audited_at_ms: int = 0
    added_batch_ids: tuple[int, ...] = field(default=())

    @property
    def status(self) -> str:
        """``ok`` | ``violation`` | ``unreadable`` (see the module docstring)."""
        errors = [f for f in self.findings if f.severity == ERROR]
        if any(f.rule != "unreadable" for f in errors):
            return "violation"
        return "unreadable" if errors else "ok"

    @property
    def exit_code(self) -> int:
        """0 ok, 1 violation, 2 unreadable."""
        return EXIT_CODES[self.status]

    def by_severity(self, severity: str) -> list[Finding]:
        """The findings of one severity."""
        return [f for f in self.findings if f.severity == severity]

    def head(self) -> RememberedHead | None:
        """What to remember after this audit, None when the head or its watermark is unknown."""
        if self.head_batch_id is None or self.watermark_ms is None:
            return None
        return RememberedHead(self.query_id, self.head_batch_id, self.watermark_ms, self.audited_at_ms)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (documented in the README)::

            {"location": str, "status": "ok" | "violation" | "unreadable", "query_id": str | null,
             "watermark_ms": int | null, "watermark": ISO-8601 UTC | null,
             "head_batch_id": int | null, "in_flight_batch": int | null,
             "batches": [{"batch_id", "watermark_ms", "timestamp_ms", "next_watermark_ms", "committed"}],
             "findings": [{"rule", "severity", "batch_id", "file", "message"}],
             "remembered": {"query_id", "head_batch_id", "watermark_ms", "audited_at_ms"} | null,
             "added_batches": {"first": int, "last": int, "count": int} | null,
             "audited_at_ms": int}
        """
        added = None
        if self.added_batch_ids:
            added = {"first": self.added_batch_ids[0], "last": self.added_batch_ids[-1],
                     "count": len(self.added_batch_ids)}
        return {
            "location": self.location,
            "status": self.status,
            "query_id": self.query_id,
            "watermark_ms": self.watermark_ms,
            "watermark": iso_utc(self.watermark_ms),
            "head_batch_id": self.head_batch_id,
            "in_flight_batch": self.in_flight_batch_id,
            "batches": [b.to_dict() for b in self.batches],
            "findings": [f.to_dict() for f in self.findings],
            "remembered": self.remembered.to_dict() if self.remembered else None,
            "added_batches": added,
            "audited_at_ms": self.audited_at_ms,
        }

    def to_json(self, indent: int | None = None) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent)


def audit_checkpoint(checkpoint: Checkpoint, remembered: RememberedHead | None = None,
                     now_ms: int | None = None, progress: ProgressLog | None = None) -> AuditReport:
    """Apply every rule to a checkpoint read by :func:`watermark_ops.core.checkpoint.read_checkpoint`.

    :param remembered: the head remembered by the previous audit of this checkpoint, or None.
    :param now_ms: the audit instant (epoch ms UTC), default now.
    :param progress: the job's progress log (:class:`watermark_ops.core.progress.ProgressLog`), or None.
    """
    records = tuple(BatchRecord.from_batch(b) for b in checkpoint.batches)
    location = checkpoint.location
    findings = [
        *unreadable(checkpoint.problems),
        *memory_rules(records, remembered, query_id=checkpoint.query_id, head_batch_id=checkpoint.head_batch_id,
                      location=location),
        *watermark_regressed(records),
        *commit_offset_mismatch(records),
        *commit_without_offsets(records),
        *missing_batch(records, location, checkpoint.has_commit_log,
                       uses_async_progress_tracking(records, progress.records if progress is not None else (),
                                                    checkpoint.query_id)),
        *conf_changed(records),
        *(conf_requested_but_frozen(records, progress.records, progress.location, checkpoint.query_id)
          if progress is not None else []),
        *in_flight_batch(records, checkpoint.has_commit_log),
    ]
    order = {ERROR: 0, WARNING: 1, INFO: 2}
    findings.sort(key=lambda f: (order[f.severity], -1 if f.batch_id is None else f.batch_id))
    since = remembered.head_batch_id if remembered is not None and remembered.query_id == checkpoint.query_id else None
    added = tuple(r.batch_id for r in records if r.has_offsets and (since is None or r.batch_id > since))
    return AuditReport(
        location=location,
        query_id=checkpoint.query_id,
        head_batch_id=checkpoint.head_batch_id,
        in_flight_batch_id=checkpoint.in_flight_batch_id,
        watermark_ms=checkpoint.next_watermark_ms,
        batches=records,
        findings=tuple(findings),
        remembered=remembered,
        audited_at_ms=int(time.time() * 1000) if now_ms is None else now_ms,
        added_batch_ids=added,
    )


def _progress_beside(location: str, storage_options: dict[str, Any] | None,
                     filesystem: Any = None) -> ProgressLog | None:
    """The job's progress log beside the checkpoint (``<checkpoint>.progress.jsonl``), if readable."""
    try:
        return read_progress_log(progress_log_path(location), filesystem=filesystem, storage_options=storage_options)
    except (OSError, ValueError, ImportError):
        return None


def run_audit(location: Any, memory: AuditMemory | None = None, *, storage_options: dict[str, Any] | None = None,
              now_ms: int | None = None, filesystem: Any = None) -> AuditReport:
    """Read the checkpoint, audit it against the remembered head, then remember the new head.

    The memory moves on after every audit that found a head, violations included: each finding
    about a change is reported once (by this audit), and the next audit compares with what this
    one saw.

    :param location: the checkpoint (see :func:`watermark_ops.core.checkpoint.read_checkpoint`).
    :param memory: a :class:`watermark_ops.core.memory.StateFileMemory`, an
        :class:`watermark_ops.airflow.memory.AssetStateStoreMemory`, or None (no memory rules).
    :param storage_options: / filesystem: how to reach the checkpoint and its progress log, as for
        :func:`~watermark_ops.core.checkpoint.read_checkpoint` (every file read at once, concurrently).
    :raises watermark_ops.core.memory.MemoryFormatError: when the memory holds something malformed
        (nothing is read from the checkpoint then, and nothing is written).
    """
    key = str(location)
    remembered = memory.load(key) if memory is not None else None
    storage, root = open_storage(location, filesystem=filesystem, storage_options=storage_options)
    if storage.retry_delays:  # a remote store: the progress log is read while the checkpoint is
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=1) as pool:
            progress_future = pool.submit(_progress_beside, storage.display(root), storage_options, filesystem)
            checkpoint = read_checkpoint(location, filesystem=filesystem, storage_options=storage_options)
            progress = progress_future.result()
    else:
        checkpoint = read_checkpoint(location, filesystem=filesystem, storage_options=storage_options)
        progress = _progress_beside(checkpoint.location, storage_options, filesystem)
    report = audit_checkpoint(checkpoint, remembered, now_ms=now_ms, progress=progress)
    head = report.head()
    if memory is not None and head is not None:
        memory.save(key, head)
    return report
