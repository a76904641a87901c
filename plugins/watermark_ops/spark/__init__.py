"""The Spark-side recorder of watermark-ops: what runs beside a team's Structured Streaming job so
that the package can audit it, replay its late rows, show its skew and stalls.

Needs only pyspark (``pip install watermark-ops[spark]`` where the driver runs); the rest of the
package never imports pyspark. Two ways in:

* **Attach to the job as it is** (:mod:`watermark_ops.spark.launch`): the run pattern
  (``watermarked_run(attach=True, ...)``) gives spark-submit or the Spark Connect operator the
  package's launcher and the job's script as its argument::

      spark-submit .../watermark_ops/spark/launch.py --checkpoint CK --run-tag RUN --window "1 hour" \
          --pre-watermark readings:parse --reason-column reason -- readings.py --its --own --args

  The launcher (:mod:`~watermark_ops.spark.attach`) records the script's reader settings, its
  ``withWatermark`` and each query it starts, takes each checkpoint's lock, writes the progress
  log, and afterwards replays each batch through the job's pre-watermark function in Spark
  (:mod:`~watermark_ops.spark.replay`): exact late rows for the job's own parsing, any format.
* **The opt-in helpers**, for a job written with the package: :func:`add_run_arguments`,
  :func:`execute`, :func:`run_queries` (:mod:`~watermark_ops.spark.driver`),
  :func:`classified_json_stream` / :func:`quarantined` (:mod:`~watermark_ops.spark.inputs`),
  :func:`late_rule`, :func:`observe_partition_event_times`, :func:`run_driver`::

      def run(spark, args):
          events = classified_json_stream(spark, args.landing, SCHEMA, "observed_at")
          frame = (observe_partition_event_times(events.where("reason IS NULL"), "station", STATIONS)
                   .withWatermark("event_time", "3 hours").groupBy(window("event_time", "1 hour"), "station")...)
          rule = late_rule("window_end", "observed_at", "3 hours", window="1 hour", schema=SCHEMA)
          done = run_queries(spark, [("hourly", frame, args.checkpoint, args.output)],
                             args.spark_trigger, args.run_tag, late_rules={"hourly": rule})
          return {q.name: {"query_id": str(q.id), "batches": records} for q, records in done}

The pieces, one concept per module: the session (:mod:`~watermark_ops.spark.session`), the Spark
trigger and what a restart owes (:mod:`~watermark_ops.spark.trigger`), the progress log and its
recorder (:mod:`~watermark_ops.spark.recorder`, the log's shape there), the one-driver-per-checkpoint
lock (:mod:`~watermark_ops.spark.lock`), the exit path that survives a killed launcher
(:mod:`~watermark_ops.spark.exits`), Spark Connect (:mod:`~watermark_ops.spark.connect`), the start
check and the diagnosis of a refused restart (:mod:`~watermark_ops.spark.restart`).
"""

from __future__ import annotations

from watermark_ops.core.ledger.rule import interval_ms, late_rule, schema_kinds
from watermark_ops.spark.driver import add_run_arguments, execute, run_queries
from watermark_ops.spark.exits import (
    EXIT_CHECKPOINT_IN_USE,
    EXIT_RESTART_REFUSED,
    EXIT_SERVER_LOST,
    EXIT_VERSION_MISMATCH,
    exit_process,
    exit_with_launcher,
    run_driver,
)
from watermark_ops.spark.inputs import classified_json_stream, quarantined
from watermark_ops.spark.lock import CheckpointInUse, checkpoint_lock, lock_path
from watermark_ops.spark.recorder import (
    OTHER_PARTITION,
    RECORDED_CONFS,
    ProgressRecorder,
    observe_partition_event_times,
    progress_record,
)
from watermark_ops.spark.restart import RestartRefused, check_start, diagnose_failure
from watermark_ops.spark.session import build_session
from watermark_ops.spark.trigger import (
    FROZEN_CONFS,
    POLICY_CONF,
    SPARK_TRIGGERS,
    apply_spark_trigger,
    checkpoint_watermark_policy,
    land_tick,
    owed_trailing_batch,
)
from watermark_ops.core.progress import progress_log_path
from watermark_ops.core.ledger.rule import ALLOW_MULTIPLE_CONF

__all__ = [
    "ALLOW_MULTIPLE_CONF",
    "EXIT_CHECKPOINT_IN_USE",
    "EXIT_RESTART_REFUSED",
    "EXIT_SERVER_LOST",
    "EXIT_VERSION_MISMATCH",
    "FROZEN_CONFS",
    "OTHER_PARTITION",
    "POLICY_CONF",
    "RECORDED_CONFS",
    "SPARK_TRIGGERS",
    "CheckpointInUse",
    "ProgressRecorder",
    "RestartRefused",
    "add_run_arguments",
    "apply_spark_trigger",
    "build_session",
    "check_start",
    "checkpoint_lock",
    "checkpoint_watermark_policy",
    "classified_json_stream",
    "diagnose_failure",
    "execute",
    "exit_process",
    "exit_with_launcher",
    "interval_ms",
    "land_tick",
    "late_rule",
    "lock_path",
    "observe_partition_event_times",
    "owed_trailing_batch",
    "progress_log_path",
    "progress_record",
    "quarantined",
    "run_driver",
    "run_queries",
    "schema_kinds",
]
