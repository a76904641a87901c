"""Hourly departure windows per origin airport: the main watermarked Structured Streaming job.

Input: the lander's JSON-lines files (``watermark_ops.examples.flights.lander``) in a landing folder, read by the
file source with an explicit schema and classified (``flight_inputs.classified_events``). Event
time is ``dep_time`` (actual departure, UTC).

Two streaming queries, each with its own checkpoint, both started by one run:

* ``flight_windows``: good rows → ``withWatermark("event_time", <delay threshold>)`` → tumbling
  1-hour event-time windows per origin: departures, mean and max departure delay (minutes),
  output mode **append** into a Parquet sink (exactly once through the checkpoint). A window is
  written once, when the watermark passes its end; rows whose window had already closed are
  dropped by Spark and counted as ``rows_dropped_by_watermark`` in the progress log.
  With ``--output-mode update`` the same aggregate runs in output mode **update**: every
  micro-batch emits the windows it changed, with their current value, and ``foreachBatch`` upserts
  them by ``(origin, window_start)`` into a DuckDB file (``--upsert-sink``, default
  ``<output>.duckdb``) or PostgreSQL (``--upsert-dsn``), idempotently per batch id
  (``upsert_sink``). A window thus appears in the run that saw its first departure and is revised
  while late rows arrive; once the watermark passes its end Spark evicts its state, drops later
  rows of it (counted as in append mode), and its row is final: the value append mode writes.
  The watermark is needed in both modes: without it the state store would keep every window.
* ``flight_windows_quarantine``: bad records (``flight_inputs.quarantined``), kept aside in a
  Parquet sink with a ``reason``: ``invalid_encoding`` (line is not valid UTF-8),
  ``malformed_record`` (line is not a JSON object of the schema, wrong types included),
  ``null_event_time`` (a cancelled flight), ``unparseable_event_time`` (not ISO-8601 with a zone),
  ``future_event_time`` (with ``--max-event-time-ahead``: a future-dated record that would jump the
  watermark), ``no_arrival`` (a diverted flight), and the file it came from (``source_file``).
  Nothing is dropped silently: good rows + quarantined rows = input rows.

Each run is a restart of both queries from their checkpoints with ``Trigger.AvailableNow``
(default) or the deprecated ``Trigger.Once``. With ``once`` the run is exactly one micro-batch and
no trailing no-data batch, so windows closed by the watermark that batch computes are written by
the *next* run. Every micro-batch is appended to ``<checkpoint>.progress.jsonl``.

Usage (spark-submit or plain python)::

    spark-submit spark_jobs/flight_windows.py --landing L --checkpoint C --output O \
        [--quarantine-output Q] [--delay-threshold "2 hours"] [--trigger availableNow|once] \
        [--max-event-time-ahead "1 hour"] [--output-mode append|update] \
        [--upsert-sink FILE.duckdb | --upsert-dsn postgresql://...]

Exit status: 0 when both queries finished, 1 with the query's exception when one failed, 3 when
another driver holds the checkpoint (``<checkpoint>.lock``, see ``watermark_ops.spark.checkpoint_lock``): nothing was started.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # flight_inputs, upsert_sink, in client mode

from flight_inputs import EVENT_SCHEMA_DDL, check_interval, classified_events, quarantined  # noqa: E402
from watermark_ops.spark import (  # noqa: E402
    add_run_arguments,
    execute,
    late_rule,
    observe_partition_event_times,
    run_driver,
    run_queries,
)
from upsert_sink import UpsertSink  # noqa: E402

QUERY_NAME = "flight_windows"
QUARANTINE_QUERY_NAME = "flight_windows_quarantine"
WINDOW_DURATION = "1 hour"
DEFAULT_DELAY_THRESHOLD = "2 hours"
OUTPUT_MODES = ("append", "update")
#: The origin airports of the lander's flights: they share one watermark, so their event-time skew is recorded.
ORIGINS = ("EWR", "JFK", "LGA")


@dataclass
class JobConfig:
    """Where the job reads and writes, and how. Locations are local paths or Hadoop URIs.

    ``max_event_time_ahead``: a Spark interval (``"1 hour"``); None or an empty / blank string
    (what the DAG's default Param renders) turns the future-time check off.

    ``output_mode``: ``"append"`` (Parquet at ``output``) or ``"update"`` (upserts into
    ``upsert_sink``, a DuckDB file, default ``<output>.duckdb``, or into ``upsert_dsn``, a
    ``postgresql://`` DSN, when given). Empty strings count as unset (what DAG Params render).

    :raises ValueError: when ``max_event_time_ahead`` is neither empty nor such an interval, for
        another output mode, or for an upsert target given in append mode.
    """

    landing: str
    checkpoint: str
    output: str
    quarantine_output: str | None = None
    quarantine_checkpoint: str | None = None
    delay_threshold: str = DEFAULT_DELAY_THRESHOLD
    spark_trigger: str = "availableNow"
    run_tag: str | None = None
    max_files_per_trigger: int | None = None
    max_event_time_ahead: str | None = None
    output_mode: str = "append"
    upsert_sink: str | None = None
    upsert_dsn: str | None = None

    def __post_init__(self) -> None:
        self.max_event_time_ahead = check_interval((self.max_event_time_ahead or "").strip() or None)
        if self.output_mode not in OUTPUT_MODES:
            raise ValueError(f"output mode must be one of {OUTPUT_MODES}, got {self.output_mode!r}")
        self.upsert_sink = (self.upsert_sink or "").strip() or None
        self.upsert_dsn = (self.upsert_dsn or "").strip() or None
        if self.output_mode == "append" and (self.upsert_sink or self.upsert_dsn):
            raise ValueError("--upsert-sink and --upsert-dsn need --output-mode update (append writes Parquet)")
        if self.upsert_sink and self.upsert_dsn:
            raise ValueError("give --upsert-sink (DuckDB file) or --upsert-dsn (PostgreSQL), not both")
        if self.output_mode == "update" and not self.upsert_dsn:
            self.upsert_sink = self.upsert_sink or self.output.rstrip("/") + ".duckdb"
        self.quarantine_output = self.quarantine_output or self.output.rstrip("/") + "_quarantine"
        self.quarantine_checkpoint = self.quarantine_checkpoint or self.checkpoint.rstrip("/") + "_quarantine"


def hourly_windows(events, delay_threshold: str):
    """Good rows → watermark → 1-hour tumbling windows per origin (an append- or update-mode aggregate).

    Output columns: ``origin, window_start, window_end`` (timestamps, UTC), ``departures``,
    ``mean_dep_delay`` and ``max_dep_delay`` (minutes).

    Each micro-batch's newest event time per origin is observed (``Dataset.observe``, see
    ``watermark_ops.spark.observe_partition_event_times``) and lands in the progress log as
    ``event_time_max_ms_by_partition``; the output is unchanged.
    """
    from pyspark.sql import functions as F

    good = events.where(F.col("reason").isNull()).select("origin", "event_time", "dep_delay")
    return (
        observe_partition_event_times(good, "origin", ORIGINS)  # per-origin skew; a pass-through node
        .withWatermark("event_time", delay_threshold)
        .groupBy(F.window("event_time", WINDOW_DURATION), F.col("origin"))
        .agg(
            F.count(F.lit(1)).alias("departures"),
            F.avg("dep_delay").alias("mean_dep_delay"),
            F.max("dep_delay").alias("max_dep_delay"),
        )
        .select(
            "origin",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "departures",
            "mean_dep_delay",
            "max_dep_delay",
        )
    )


def run(spark, config: JobConfig) -> dict:
    """Run (restart) both queries once with the configured Spark trigger and wait for them.

    :return: ``{"flight_windows": {"query_id", "batches": [progress records]},
        "flight_windows_quarantine": {...}}``; the records are those of this run (see
        ``watermark_ops.spark.recorder`` for their shape).
    In update output mode the windows go to ``config``'s upsert sink (:func:`windows_sink`);
    Spark's progress then reports no sink row count (``output_rows`` null: ``ForeachBatchSink``
    reports none), and ``state_rows_removed`` counts windows the watermark finalised and evicted,
    not rows written.

    :raises pyspark.errors.StreamingQueryException: when a query failed (after recording its
        batches and stopping the other query); an ``upsert_sink.UpsertSinkError`` or a database
        error raised in ``foreachBatch`` fails the windows query this way.
    """
    events = classified_events(spark, config.landing, config.max_files_per_trigger, config.max_event_time_ahead)
    plans = [
        (QUERY_NAME, hourly_windows(events, config.delay_threshold), config.checkpoint, windows_sink(config)),
        (QUARANTINE_QUERY_NAME, quarantined(events), config.quarantine_checkpoint, config.quarantine_output),
    ]
    # Recorded on every progress record, so the late-row ledger reads the rule instead of guessing it.
    rules = {QUERY_NAME: late_rule("window_end", "dep_time", config.delay_threshold, WINDOW_DURATION,
                                   config.max_event_time_ahead, schema=EVENT_SCHEMA_DDL,
                                   required_fields={"no_arrival": "arr_time"})}
    return {
        query.name: {"query_id": str(query.id), "batches": records}
        for query, records in run_queries(spark, plans, config.spark_trigger, config.run_tag,
                                          tick_landing=config.landing, late_rules=rules)
    }


def windows_sink(config: JobConfig):
    """The windows query's sink: the Parquet path (append), or a function that sets output mode
    **update** and ``foreachBatch(UpsertSink(...))`` on the query's ``DataStreamWriter``."""
    if config.output_mode == "append":
        return config.output
    sink = UpsertSink(config.upsert_dsn or config.upsert_sink, config.checkpoint)
    return lambda writer: writer.outputMode("update").foreachBatch(sink)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--landing", required=True, help="landing folder of the lander's JSON-lines files")
    parser.add_argument("--output", required=True, help="Parquet sink of the windows")
    parser.add_argument("--quarantine-output", help="Parquet sink of bad records (default <output>_quarantine)")
    parser.add_argument("--quarantine-checkpoint", help="default <checkpoint>_quarantine")
    parser.add_argument("--delay-threshold", default=DEFAULT_DELAY_THRESHOLD,
                        help=f"watermark delay threshold, a Spark interval (default {DEFAULT_DELAY_THRESHOLD!r})")
    parser.add_argument("--max-event-time-ahead", metavar="INTERVAL",
                        help="quarantine rows whose event time is later than the batch's processing time plus this "
                             "(e.g. '1 hour'), so a future-dated record cannot jump the watermark (default, or an empty "
                             "string: off)")
    parser.add_argument("--output-mode", choices=list(OUTPUT_MODES), default="append",
                        help="append (default): each window once, when the watermark passes its end, into Parquet; "
                             "update: each micro-batch's changed windows upserted by (origin, window_start)")
    parser.add_argument("--upsert-sink", metavar="FILE",
                        help="update mode: the DuckDB file the windows are upserted into (default <output>.duckdb)")
    parser.add_argument("--upsert-dsn", metavar="DSN",
                        help="update mode: upsert into PostgreSQL instead (postgresql://user@host:port/db)")
    add_run_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = JobConfig(
        landing=args.landing, checkpoint=args.checkpoint, output=args.output,
        quarantine_output=args.quarantine_output, quarantine_checkpoint=args.quarantine_checkpoint,
        delay_threshold=args.delay_threshold, spark_trigger=args.spark_trigger, run_tag=args.run_tag,
        max_files_per_trigger=args.max_files_per_trigger, max_event_time_ahead=args.max_event_time_ahead,
        output_mode=args.output_mode, upsert_sink=args.upsert_sink, upsert_dsn=args.upsert_dsn,
    )
    code, _ = execute(QUERY_NAME, args, lambda spark: run(spark, config))
    return code


if __name__ == "__main__":
    run_driver(main)
