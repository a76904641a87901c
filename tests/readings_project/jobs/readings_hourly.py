"""Hourly weather per station from CSV readings: a plain Structured Streaming job.

Input: CSV files with a header, ``station,event_time,temp_f,wind_mph,gust`` where ``event_time`` is
epoch milliseconds and ``gust`` is a number in mph, empty when calm, or the text ``HIGH`` when the
sensor saturates. Readings with an unreadable event time or gust are set aside with a reason in
their own CSV sink; the others go through a 2-hour watermark into 1-hour windows per station,
written in append mode as Parquet.

    spark-submit readings_hourly.py --landing DIR --output DIR --checkpoint DIR
"""

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

SCHEMA = "station STRING, event_time STRING, temp_f STRING, wind_mph STRING, gust STRING"


def parse(raw):
    """Landed readings → typed readings, with a ``reason`` for those set aside (null: a good reading)."""
    millis = F.col("event_time").try_cast("long")
    gust = F.col("gust").try_cast("double")
    reason = (F.when(millis.isNull(), F.lit("bad_event_time"))
              .when(F.col("gust").isNotNull() & gust.isNull(), F.lit("gust_not_a_number")))
    return (raw.withColumn("reading_time", F.timestamp_millis(millis))
            .withColumn("temp", F.col("temp_f").try_cast("double"))
            .withColumn("gust_mph", gust)
            .withColumn("reason", reason))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--landing", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()

    spark = SparkSession.builder.appName("readings_hourly").getOrCreate()
    raw = spark.readStream.schema(SCHEMA).option("header", True).csv(args.landing)
    readings = parse(raw)

    hourly = (readings.where(F.col("reason").isNull())
              .withWatermark("reading_time", "2 hours")
              .groupBy(F.window("reading_time", "1 hour"), "station")
              .agg(F.count(F.lit(1)).alias("readings"), F.avg("temp").alias("mean_temp_f"),
                   F.max("gust_mph").alias("max_gust_mph"))
              .select("station", F.col("window.start").alias("hour_start"), "readings", "mean_temp_f",
                      "max_gust_mph"))
    rejected = readings.where(F.col("reason").isNotNull()).select(
        "reason", "station", "event_time", "gust", F.col("_metadata.file_path").alias("source_file"))

    windows = (hourly.writeStream.format("parquet").outputMode("append")
               .option("checkpointLocation", args.checkpoint)
               .trigger(availableNow=True).start(args.output))
    kept_aside = (rejected.writeStream.format("csv").option("header", True)
                  .option("checkpointLocation", args.checkpoint + "_rejected")
                  .trigger(availableNow=True).start(args.output + "_rejected"))
    windows.awaitTermination()
    kept_aside.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
