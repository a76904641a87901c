"""The audit's findings over a checkpoint already read: every rule that needs no memory, and the
order every face shows them in.

:func:`log_findings` applies the rules of :mod:`watermark_ops.core.rules` that judge the files
alone (read problems, the offset and commit logs, the progress log); :func:`with_memory` adds the
memory rules' findings in :func:`watermark_ops.core.audit.audit_checkpoint`'s order. A remembered
view keeps the former (:mod:`watermark_ops.core.advance` audits the new batches with them); the
audit adds the latter against the head it remembers.

Pure core: imports neither Airflow nor Spark; nothing here reads.
"""

from __future__ import annotations

from typing import Iterable

from watermark_ops.core.checkpoint import Checkpoint
from watermark_ops.core.progress import ProgressLog
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
    missing_batch,
    unreadable,
    uses_async_progress_tracking,
    watermark_regressed,
)

__all__ = ["log_findings", "log_rules", "sort_findings", "with_memory"]

_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}


def sort_findings(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """Errors first, then warnings, then info; within a severity by batch id (None first); equal
    keys keep their order (the rules' order: a stable sort)."""
    return tuple(sorted(findings, key=lambda f: (_ORDER[f.severity], -1 if f.batch_id is None else f.batch_id)))


def log_findings(checkpoint: Checkpoint, progress: ProgressLog | None = None) -> tuple[Finding, ...]:
    """Every rule that needs no memory, over a checkpoint already read: the read problems, then
    the rules of the offset and commit logs (and of the progress log, when given), sorted
    (:func:`sort_findings`). What a remembered view keeps (:mod:`watermark_ops.core.advance`)."""
    records = tuple(BatchRecord.from_batch(b) for b in checkpoint.batches)
    return sort_findings([*unreadable(checkpoint.problems), *log_rules(records, checkpoint, progress)])


def log_rules(records: tuple[BatchRecord, ...], checkpoint: Checkpoint, progress: ProgressLog | None) -> list[Finding]:
    location = checkpoint.location
    return [
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


def with_memory(findings: Iterable[Finding], memory: Iterable[Finding]) -> tuple[Finding, ...]:
    """:func:`log_findings`' findings with the memory rules' (:func:`~watermark_ops.core.rules.memory_rules`),
    in :func:`audit_checkpoint`'s order: for equal keys, the read problems, then the memory rules,
    then the other rules."""
    findings = list(findings)
    return sort_findings([*(f for f in findings if f.rule == "unreadable"), *memory,
                          *(f for f in findings if f.rule != "unreadable")])


