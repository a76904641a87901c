"""The batch equivalent of flight_windows, for the benchmark: the same outputs without streaming.

    spark-submit benchmarks/flight_windows_batch.py --landing L --output O

Reads every JSON-lines file of the landing folder as a batch (``spark.read.json`` with the job's
reader and row rules: ``flight_inputs.json_reader`` and ``classify``), writes the same hourly windows per origin (departures,
mean and max departure delay; no watermark, no state store, no checkpoint) to ``O`` and the bad
rows with their reason to
``O_quarantine``, both as Parquet. Prints ``windows=<n> quarantined=<n>``.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "spark_jobs"))

from flight_inputs import EVENT_SCHEMA_DDL, classify, json_reader  # noqa: E402
from watermark_ops.spark import build_session  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--landing", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)

    from pyspark.sql import functions as F

    import flight_windows as fw

    spark = build_session("flight_windows_batch")
    # The job's own reader and row rules (flight_inputs), applied to a batch read.
    events = classify(json_reader(spark.read, EVENT_SCHEMA_DDL).json(args.landing), EVENT_SCHEMA_DDL, "dep_time",
                      {"no_arrival": "arr_time"})
    windows = events.where(F.col("reason").isNull()).groupBy(F.window("event_time", fw.WINDOW_DURATION), "origin").agg(
        F.count(F.lit(1)).alias("departures"), F.avg("dep_delay").alias("mean_dep_delay"),
        F.max("dep_delay").alias("max_dep_delay"),
    )
    windows.write.mode("overwrite").parquet(args.output)
    events.where(F.col("reason").isNotNull()).select(
        "reason", "id", "origin", "status", "dep_time", "arr_time", "_corrupt_record",
        F.col("_metadata.file_path").alias("source_file"),
    ).write.mode("overwrite").parquet(args.output.rstrip("/") + "_quarantine")
    print(f"windows={spark.read.parquet(args.output).count()} "
          f"quarantined={spark.read.parquet(args.output.rstrip('/') + '_quarantine').count()}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
