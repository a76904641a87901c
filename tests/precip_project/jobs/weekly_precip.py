"""Seattle's weather in 7-day windows sliding by 1 day, per weather type: a flat Structured
Streaming script over Parquet files, parsing inline.

Input: Parquet files of daily rows ``date`` (text ``2013-01-06``), ``precipitation`` (mm),
``temp_max``, ``temp_min``, ``wind`` (doubles), ``weather`` (text). Rows whose date does not parse
or whose precipitation is missing or negative (a gauge's "no reading" sentinel) are kept aside with
a reason by a second query; the others go through a 1-day watermark into ``window(date, "7 days",
"1 day")`` per weather: days, total precipitation, mean temp_max; append mode, Parquet.

    spark-submit weekly_precip.py LANDING OUTPUT CHECKPOINTS
"""
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

landing, output, checkpoints = sys.argv[1:4]
spark = (SparkSession.builder.appName("weekly_precip").config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
raw = spark.readStream.schema("date STRING, precipitation DOUBLE, temp_max DOUBLE, temp_min DOUBLE, wind DOUBLE, "
                              "weather STRING").parquet(landing)
parsed = raw.select(F.try_to_timestamp("date", F.lit("yyyy-MM-dd")).alias("day"), "precipitation", "temp_max",
                    "weather", F.col("date").alias("landed_date"))
good = parsed.where(F.col("day").isNotNull() & (F.col("precipitation") >= 0))
windows = (good.withWatermark("day", "1 day")
           .groupBy(F.window("day", "7 days", "1 day"), "weather")
           .agg(F.count(F.lit(1)).alias("days"), F.sum("precipitation").alias("precipitation_mm"),
                F.avg("temp_max").alias("mean_temp_max")))
bad = parsed.where(F.col("day").isNull() | F.col("precipitation").isNull() | (F.col("precipitation") < 0)).select(
    F.when(F.col("day").isNull(), "unreadable_date").otherwise("no_gauge_reading").alias("reason"),
    "landed_date", "precipitation", "weather")
q1 = (windows.writeStream.format("parquet").outputMode("append")
      .option("checkpointLocation", checkpoints + "/windows").trigger(availableNow=True).start(output))
q2 = (bad.writeStream.format("json").option("checkpointLocation", checkpoints + "/quarantine")
      .trigger(availableNow=True).start(output + "_quarantine"))
spark.streams.awaitAnyTermination()
q1.awaitTermination()
q2.awaitTermination()
