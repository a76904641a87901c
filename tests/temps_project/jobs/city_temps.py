"""City temperatures in 6-hour windows: a flat Structured Streaming script, parsing inline.

Input: JSON lines ``{"city": ..., "event_time": "2010-01-01 03:00:00", "temp": "39.4"}`` (local
wall-clock text, read as UTC; the temperature as text). Rows whose event time or temperature does not
parse are kept aside with a reason by a second query; the others go through a 1-hour watermark into
6-hour windows per city (count, mean, min, max), written in append mode as Parquet.

    spark-submit city_temps.py LANDING OUTPUT CHECKPOINTS
"""
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

landing, output, checkpoints = sys.argv[1:4]
spark = (SparkSession.builder.appName("city_temps").config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
raw = spark.readStream.schema("city STRING, event_time STRING, temp STRING").json(landing)
parsed = raw.select("city", F.try_to_timestamp("event_time", F.lit("yyyy-MM-dd HH:mm:ss")).alias("event_time"),
                    F.expr("try_cast(temp AS DOUBLE)").alias("temp_f"), F.col("event_time").alias("landed_time"),
                    F.col("temp").alias("landed_temp"))
good = parsed.where(F.col("event_time").isNotNull() & F.col("temp_f").isNotNull())
windows = (good.withWatermark("event_time", "1 hour")
           .groupBy(F.window("event_time", "6 hours"), "city")
           .agg(F.count(F.lit(1)).alias("readings"), F.avg("temp_f").alias("mean_temp_f"),
                F.min("temp_f").alias("min_temp_f"), F.max("temp_f").alias("max_temp_f")))
bad = parsed.where(F.col("event_time").isNull() | F.col("temp_f").isNull()).select(
    F.when(F.col("event_time").isNull(), "unreadable_time").otherwise("unreadable_temp").alias("reject_reason"),
    "city", "landed_time", "landed_temp")
q1 = (windows.writeStream.format("parquet").outputMode("append")
      .option("checkpointLocation", checkpoints + "/windows").trigger(availableNow=True).start(output))
q2 = (bad.writeStream.format("json").option("checkpointLocation", checkpoints + "/rejects")
      .trigger(availableNow=True).start(output + "_rejects"))
spark.streams.awaitAnyTermination()
q1.awaitTermination()
q2.awaitTermination()
