"""Hourly mean temperature and humidity per weather station: a user's own watermarked job.

Input: JSON lines ``{"station", "observed_at" (ISO-8601 UTC), "temp_f", "humidity"}`` in a landing
folder. ``withWatermark("event_time", "3 hours")``, 1-hour tumbling windows per station, append
mode into Parquet; bad lines (malformed, no or unparseable ``observed_at``) kept aside in
``<output>_quarantine``. Everything watermark-ops needs is recorded by ``watermark_ops.spark``.
"""

from __future__ import annotations

import argparse

from watermark_ops.spark import (
    add_run_arguments,
    classified_json_stream,
    execute,
    late_rule,
    observe_partition_event_times,
    quarantined,
    run_driver,
    run_queries,
)

NAME = "station_hourly"
SCHEMA = "station STRING, observed_at STRING, temp_f DOUBLE, humidity DOUBLE, _corrupt_record STRING"
STATIONS = ("EWR", "JFK", "LGA")
DELAY_THRESHOLD = "3 hours"
WINDOW = "1 hour"


def run(spark, args) -> dict:
    from pyspark.sql import functions as F

    events = classified_json_stream(spark, args.landing, SCHEMA, "observed_at", args.max_files_per_trigger)
    good = events.where(F.col("reason").isNull())
    hourly = (
        observe_partition_event_times(good, "station", STATIONS)
        .withWatermark("event_time", DELAY_THRESHOLD)
        .groupBy(F.window("event_time", WINDOW), "station")
        .agg(F.count(F.lit(1)).alias("observations"), F.avg("temp_f").alias("mean_temp_f"),
             F.avg("humidity").alias("mean_humidity"))
        .select("station", F.col("window.start").alias("hour_start"), "observations", "mean_temp_f", "mean_humidity")
    )
    plans = [
        (NAME, hourly, args.checkpoint, args.output),
        (NAME + "_quarantine", quarantined(events), args.checkpoint + "_quarantine", args.output + "_quarantine"),
    ]
    rule = late_rule("window_end", "observed_at", DELAY_THRESHOLD, window=WINDOW, schema=SCHEMA)
    done = run_queries(spark, plans, args.spark_trigger, args.run_tag, tick_landing=args.landing,
                       late_rules={NAME: rule})
    return {query.name: {"query_id": str(query.id), "batches": records} for query, records in done}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--landing", required=True)
    parser.add_argument("--output", required=True)
    add_run_arguments(parser)
    args = parser.parse_args()
    return execute(NAME, args, lambda spark: run(spark, args))[0]


if __name__ == "__main__":
    run_driver(main)
