"""The Spark-side recorder of watermark-ops: what a user's Structured Streaming job adds so that the
package can audit it, replay its late rows, show its skew and stalls.

Needs only pyspark (``pip install watermark-ops[spark]`` where the driver runs); the rest of the
package never imports pyspark. A job adds a few lines (the whole of a small job is in the README,
"Use it with your own job")::

    from watermark_ops.spark import (add_run_arguments, execute, late_rule,
                                     observe_partition_event_times, run_driver, run_queries)

    def run(spark, args):
        frame = (observe_partition_event_times(events, "station", STATIONS)   # per-partition event times
                 .withWatermark("event_time", "3 hours").groupBy(window("event_time", "1 hour"), "station")...)
        rule = late_rule("window_end", "time_hour", "3 hours", window="1 hour")  # which rows are late
        done = run_queries(spark, [("weather_hourly", frame, args.checkpoint, args.output)],
                           args.spark_trigger, args.run_tag, late_rules={"weather_hourly": rule})
        return {q.name: {"query_id": str(q.id), "batches": records} for q, records in done}

    def main():
        parser = argparse.ArgumentParser(); add_run_arguments(parser)  # --checkpoint, --trigger, --run-tag, ...
        parser.add_argument("--output", required=True); args = parser.parse_args()
        return execute("weather_hourly", args, lambda spark: run(spark, args))[0]

    if __name__ == "__main__":
        run_driver(main)

What each piece does (:mod:`watermark_ops.spark.driver`, :mod:`watermark_ops.spark.lock`):

* :func:`run_queries` takes the one-driver-per-checkpoint lock (``<checkpoint>.lock``,
  :func:`checkpoint_lock`), starts each query with its checkpoint and the Spark trigger
  (``availableNow`` or ``once``), and records every micro-batch's ``StreamingQueryProgress`` with a
  ``StreamingQueryListener`` (:class:`ProgressRecorder`) into ``<checkpoint>.progress.jsonl``: the
  late rule, the per-partition event times, the requested confs and the Spark version, the shape
  documented in :mod:`watermark_ops.spark.driver`;
* :func:`late_rule` says which rows the query drops as late (window aggregation of width W on
  field F, or a join / deduplication on field F);
* :func:`observe_partition_event_times` records each batch's newest event time per partition
  (``Dataset.observe``, a pass-through node);
* :mod:`watermark_ops.spark.connect`: the same job on a Spark Connect server (``--remote sc://...``;
  progress polled from the query instead of a listener, versions checked, bounded stop);
* :func:`run_driver` is the exit path that survives a killed launcher (spark-submit's JVM).
"""

from __future__ import annotations

from watermark_ops.core.ledger.rule import interval_ms, late_rule, schema_kinds
from watermark_ops.spark.driver import add_run_arguments, execute, run_queries
from watermark_ops.spark.exits import (
    EXIT_CHECKPOINT_IN_USE,
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
    "EXIT_SERVER_LOST",
    "EXIT_VERSION_MISMATCH",
    "FROZEN_CONFS",
    "OTHER_PARTITION",
    "POLICY_CONF",
    "RECORDED_CONFS",
    "SPARK_TRIGGERS",
    "CheckpointInUse",
    "ProgressRecorder",
    "add_run_arguments",
    "apply_spark_trigger",
    "build_session",
    "checkpoint_lock",
    "checkpoint_watermark_policy",
    "classified_json_stream",
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
