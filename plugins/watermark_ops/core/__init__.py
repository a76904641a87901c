"""The pure core of watermark-ops: read a checkpoint, apply the rules, return plain data.

Imports neither Airflow, Spark, argparse nor rich (only the standard library, fsspec and
pendulum); nothing here prints. Every result is a dataclass with ``to_dict()`` (JSON-ready;
instants in epoch milliseconds UTC, with ISO-8601 text beside them).

Modules, in the order data flows through them::

    times        epoch ms <-> ISO-8601 text, durations (pendulum at the edges)
    log_formats  Spark's offset log, commit log and metadata formats, parsed from bytes
    checkpoint   read a checkpoint folder through fsspec -> Checkpoint (batches + problems)
    progress     the jobs' progress logs (<checkpoint>.progress.jsonl) -> records, run summaries
    memory       the audit's memory across restarts (interface + JSON state file)
    rules        the audit rules: batch records -> findings
    audit        run every rule -> AuditReport
    status       the head of a checkpoint -> CheckpointStatus
    thresholds   the stall thresholds
    facts        per-batch facts for the stall classification
    stall        classify the watermark: advancing, idle, stalled, lagging, jumped
    checks       the one evaluation sensors and triggers share (done, wait, fail, skip)
    lateness     rows dropped per run, observed lateness, delay-threshold advice
"""

from watermark_ops.core.audit import AuditReport, run_audit
from watermark_ops.core.checkpoint import Batch, Checkpoint, read_checkpoint
from watermark_ops.core.checks import Check, check
from watermark_ops.core.lateness import LatenessReport, lateness_report
from watermark_ops.core.log_formats import ReadProblem
from watermark_ops.core.memory import AuditMemory, MemoryFormatError, RememberedHead, StateFileMemory
from watermark_ops.core.progress import ProgressLog, progress_log_path, read_progress_log, run_report
from watermark_ops.core.rules import RULES, Finding
from watermark_ops.core.stall import STATES, CheckpointMissing, Classification, StallInputError, classify, evaluate
from watermark_ops.core.status import CheckpointStatus
from watermark_ops.core.thresholds import DEFAULT_THRESHOLDS, Thresholds
from watermark_ops.core.times import duration, instant_ms, iso_utc

__all__ = [
    "DEFAULT_THRESHOLDS",
    "RULES",
    "STATES",
    "AuditMemory",
    "AuditReport",
    "Batch",
    "Check",
    "Checkpoint",
    "CheckpointMissing",
    "CheckpointStatus",
    "Classification",
    "Finding",
    "LatenessReport",
    "MemoryFormatError",
    "ProgressLog",
    "ReadProblem",
    "RememberedHead",
    "StallInputError",
    "StateFileMemory",
    "Thresholds",
    "check",
    "classify",
    "duration",
    "evaluate",
    "instant_ms",
    "iso_utc",
    "lateness_report",
    "progress_log_path",
    "read_checkpoint",
    "read_progress_log",
    "run_audit",
    "run_report",
]
