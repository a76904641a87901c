"""Hourly weather per station from JSON-lines readings, written with watermark-ops' opt-in helpers.

The same readings as ``readings_hourly.py``, landed as JSON lines with ``event_time`` as ISO-8601
text, read by ``classified_json_stream`` (its own reasons: malformed line, a ``gust`` that is not a
number, an event time that is null or not ISO-8601 with a zone) and run by ``run_queries``.

    spark-submit readings_classified.py --landing DIR --output DIR --checkpoint DIR
"""

import argparse

from watermark_ops.spark import (add_run_arguments, classified_json_stream, execute, late_rule, quarantined,
                                 run_driver, run_queries)

NAME = "readings_classified"
SCHEMA = "station STRING, event_time STRING, temp_f DOUBLE, wind_mph DOUBLE, gust DOUBLE, _corrupt_record STRING"
DELAY_THRESHOLD, WINDOW = "2 hours", "1 hour"


def hourly(events):
    """Good readings → 2-hour watermark → 1-hour windows per station."""
    from pyspark.sql import functions as F

    return (events.where(F.col("reason").isNull())
            .withWatermark("event_time", DELAY_THRESHOLD)
            .groupBy(F.window("event_time", WINDOW), "station")
            .agg(F.count(F.lit(1)).alias("readings"), F.avg("temp_f").alias("mean_temp_f"),
                 F.max("gust").alias("max_gust_mph"))
            .select("station", F.col("window.start").alias("hour_start"), "readings", "mean_temp_f", "max_gust_mph"))


def run(spark, args) -> dict:
    events = classified_json_stream(spark, args.landing, SCHEMA, "event_time", args.max_files_per_trigger)
    plans = [(NAME, hourly(events), args.checkpoint, args.output),
             (NAME + "_quarantine", quarantined(events), args.checkpoint + "_quarantine", args.output + "_quarantine")]
    rule = late_rule("window_end", "event_time", DELAY_THRESHOLD, window=WINDOW, schema=SCHEMA)
    done = run_queries(spark, plans, args.spark_trigger, args.run_tag, late_rules={NAME: rule})
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
