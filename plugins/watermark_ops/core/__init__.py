"""The pure core of watermark-ops: read a checkpoint, apply the rules, return plain data.

Imports neither Airflow, Spark, argparse nor rich (only the standard library, fsspec and
pendulum); nothing here prints. Every result is a dataclass with ``to_dict()`` (JSON-ready;
instants in epoch milliseconds UTC, with ISO-8601 text beside them).

Modules, in the order data flows through them::

    times        epoch ms <-> ISO-8601 text, durations (pendulum at the edges)
    log_formats  Spark's offset log, commit log and metadata formats, parsed from bytes
    checkpoint   read a checkpoint folder through fsspec -> Checkpoint (batches + problems)
    progress     the jobs' progress logs (<checkpoint>.progress.jsonl) -> records, run summaries
    snapshot     one read of a checkpoint (logs, progress tail, state metadata when needed) -> Snapshot
    memory       what is remembered of a checkpoint: the audit's head, the store interface, the JSON state file
    view         the remembered view of a checkpoint (window, audited boundary and findings, progress
                 position, state metadata, accepted reset), its JSON form, where it is kept
    advance      the one function that moves a view on: probe offsets/<head+1> by name, read only what is new
    rules        the audit rules: batch records -> findings
    findings     every rule that needs no memory, their order; a view's audit moved on by new batches
    audit        run every rule -> AuditReport (from the remembered view: the new batches only)
    status       the head of a checkpoint -> CheckpointStatus
    thresholds   the stall thresholds
    facts        per-batch facts for the stall classification
    partition_skew  event-time skew between the values of a partition column: newest event time, leader, gaps
    evidence     whether a query has an event-time watermark at all
    reasons      the classification's sentences and a stall's likely causes
    classification  the stall classification, a pure function of one read
    tail         the sensors' tail of earlier versions: now a view followed over the logs alone
    stall        read, then classify the watermark: advancing, idle, stalled, lagging, jumped
    checks       the one evaluation sensors and triggers share (done, wait, fail, skip)
    lateness     rows dropped per run, observed lateness, delay-threshold advice
    source_log   the file source's log (sources/<i>, compact files): the files each log offset added
    ledger       the late-row ledger: every row the watermark dropped, replayed from the checkpoint
    partitions   event-time partitions (days in a time zone, UTC hours) closed by the emitted-through
                 watermark, and the memory that announces each once
    overview     what the watermark pages show: overview rows (problems first, paged), a checkpoint's detail
    overview_cache  overview rows from remembered views, one shared evaluation for every viewer
"""

from __future__ import annotations

import importlib
from typing import Any

#: Where each public name lives. The names are imported on first use (PEP 562 ``__getattr__``),
#: so ``import watermark_ops`` (and ``python -m watermark_ops audit``) loads only the modules a
#: command needs: the stall classification's, the lateness report's and pendulum stay unloaded
#: for an audit.
_HOMES = {
    "AuditReport": "audit", "run_audit": "audit",
    "Batch": "checkpoint", "Checkpoint": "checkpoint", "read_checkpoint": "checkpoint",
    "Check": "checks", "check": "checks",
    "LatenessReport": "lateness", "lateness_report": "lateness",
    "LateLedger": "ledger", "late_ledger": "ledger", "reconcile_run": "ledger", "write_late_rows": "ledger",
    "ReadProblem": "log_formats",
    "PartitionSkew": "partition_skew",
    "AuditMemory": "memory", "MemoryFormatError": "memory", "RememberedHead": "memory", "StateFileMemory": "memory",
    "View": "view", "load_view": "view", "save_view": "view", "advance": "advance",
    "Snapshot": "snapshot", "read_snapshot": "snapshot",
    "AnnouncedPartitions": "partitions", "Partition": "partitions", "PartitionMemoryError": "partitions",
    "closed_partitions": "partitions", "newly_closed": "partitions", "partition_of": "partitions",
    "ProgressLog": "progress", "progress_log_path": "progress", "read_progress_log": "progress",
    "run_report": "progress",
    "RULES": "rules", "Finding": "rules",
    "STATES": "stall", "CheckpointMissing": "stall", "Classification": "stall", "StallInputError": "stall",
    "classify": "stall", "evaluate": "stall", "evaluate_tail": "stall", "classify_snapshot": "stall",
    "Tail": "tail", "follow": "tail",
    "CheckpointStatus": "status",
    "DEFAULT_THRESHOLDS": "thresholds", "Thresholds": "thresholds",
    "duration": "times", "instant_ms": "times", "iso_utc": "times",
}


def __getattr__(name: str) -> Any:
    """The public name ``name``, imported from its module on first use (then cached here)."""
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "DEFAULT_THRESHOLDS",
    "RULES",
    "STATES",
    "AnnouncedPartitions",
    "AuditMemory",
    "AuditReport",
    "Batch",
    "Check",
    "Checkpoint",
    "CheckpointMissing",
    "CheckpointStatus",
    "Classification",
    "Finding",
    "LateLedger",
    "LatenessReport",
    "MemoryFormatError",
    "Partition",
    "PartitionMemoryError",
    "PartitionSkew",
    "ProgressLog",
    "ReadProblem",
    "RememberedHead",
    "Snapshot",
    "StallInputError",
    "StateFileMemory",
    "Thresholds",
    "View",
    "advance",
    "check",
    "classify",
    "classify_snapshot",
    "closed_partitions",
    "duration",
    "evaluate",
    "instant_ms",
    "iso_utc",
    "late_ledger",
    "lateness_report",
    "load_view",
    "newly_closed",
    "partition_of",
    "progress_log_path",
    "read_checkpoint",
    "read_progress_log",
    "read_snapshot",
    "reconcile_run",
    "run_audit",
    "run_report",
    "save_view",
    "write_late_rows",
]
