"""The late-row ledger: every row the watermark dropped, recovered from the checkpoint.

Spark counts only ``numRowsDroppedByWatermark``, and for an aggregation it counts late *partial
aggregates* after partial aggregation, not rows. The ledger replays each micro-batch from what the
checkpoint and the landing folder keep, without touching the job's plan. One concept per module:

* :mod:`~watermark_ops.core.ledger.rule`: the late rule (which rows are late, by which watermark:
  the previous batch's on Spark >= 3.4 with ``allowMultiple``), and :func:`late_rule` to record it;
* :mod:`~watermark_ops.core.ledger.plan`: what one batch read (offset log, file source log) and the
  watermark that judged it; :func:`~watermark_ops.core.ledger.plan.tally` applies the rule to rows;
* the replays that make the rows: the launcher's Spark replay through the job's own pre-watermark
  function, any format (records read by :mod:`~watermark_ops.core.ledger.replayed`), or the Python
  replay of the package's classified JSON lines (:mod:`~watermark_ops.core.ledger.lines`), which says
  when it cannot be exact instead of guessing;
* :mod:`~watermark_ops.core.ledger.replay`: :func:`late_ledger`, a checkpoint's ledger;
* :mod:`~watermark_ops.core.ledger.model`: the values (:class:`LateRow`, :class:`BatchLedger`, :class:`LateLedger`);
* :mod:`~watermark_ops.core.ledger.sink`: the late-row sink, one run's balance (:func:`reconcile_run`)
  and its check (:func:`judge_run`: quarantine, late rows unknown);
* :mod:`~watermark_ops.core.ledger.corrections` and :mod:`~watermark_ops.core.ledger.recovered`: with
  an allowed lateness, the corrections log and which late rows it recovered;
* :mod:`~watermark_ops.core.ledger.unknown`: when the late rows cannot be known (a batch not
  replayed: every face says *unknown*, never 0), and each repeated problem once with its batch range.

All instants are epoch milliseconds UTC. Pure core: no Airflow, no Spark.
"""

from __future__ import annotations

from watermark_ops.core.lateness import replayed_lateness  # the advice on the replayed rows, beside them
from watermark_ops.core.ledger.lines import classify_line
from watermark_ops.core.ledger.model import BatchLedger, LateLedger, LateRow
from watermark_ops.core.ledger.plan import TICK_PREFIX, BatchPlan, ReplayRow, plan_batch, tally
from watermark_ops.core.ledger.replay import late_ledger
from watermark_ops.core.ledger.replayed import (
    FILTERED_BY_JOB,
    read_replay_log,
    replay_log_path,
    replay_record,
)
from watermark_ops.core.ledger.rule import (
    ALLOW_MULTIPLE_CONF,
    InputProfile,
    LateRule,
    LateWatermarkRule,
    LedgerError,
    interval_ms,
    late_rule,
    late_watermark_rule,
    schema_kinds,
)
from watermark_ops.core.ledger.sink import (
    DEFAULT_MAX_QUARANTINE_RATE,
    balance_line,
    judge_run,
    quarantine_check,
    reconcile_run,
    unknown_late_warning,
    with_ledger_rows,
    write_late_rows,
)
from watermark_ops.core.ledger.unknown import UNKNOWN, group_problems, id_ranges, problem_lines

__all__ = [
    "ALLOW_MULTIPLE_CONF",
    "DEFAULT_MAX_QUARANTINE_RATE",
    "FILTERED_BY_JOB",
    "TICK_PREFIX",
    "UNKNOWN",
    "BatchLedger",
    "BatchPlan",
    "InputProfile",
    "LateLedger",
    "LateRow",
    "LateRule",
    "LateWatermarkRule",
    "LedgerError",
    "ReplayRow",
    "balance_line",
    "classify_line",
    "group_problems",
    "id_ranges",
    "interval_ms",
    "judge_run",
    "late_ledger",
    "late_rule",
    "late_watermark_rule",
    "plan_batch",
    "problem_lines",
    "quarantine_check",
    "read_replay_log",
    "reconcile_run",
    "replay_log_path",
    "replay_record",
    "replayed_lateness",
    "schema_kinds",
    "tally",
    "unknown_late_warning",
    "with_ledger_rows",
    "write_late_rows",
]
