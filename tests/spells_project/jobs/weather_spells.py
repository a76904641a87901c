"""Seattle's weather spells: consecutive days of the same weather as one session window, a plain
Structured Streaming script over JSON lines.

Input: JSON lines ``{"date": "2012-11-18", "precipitation": 0.0, "temp_max": ..., "weather": "rain", ...}``.
``session_window(day, "1 day")`` per weather: a day's one-row session is [date, date + 1 day), and a
next day of the same weather (start <= end) joins it. Each spell's start and end (split columns),
its days and total precipitation go to Parquet in append mode, behind a 1-day watermark. Rows
whose date does not parse are kept as they landed, with the file they came from, by a second query
named ``unreadable_days``. After both queries end, one line per run is appended to
``OUTPUT_runs.txt`` beside the output.

    spark-submit weather_spells.py LANDING OUTPUT CHECKPOINTS
"""
import sys
from datetime import datetime, timezone

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

landing, output, checkpoints = sys.argv[1:4]
spark = (SparkSession.builder.appName("weather_spells").config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
raw = spark.readStream.schema("date STRING, precipitation DOUBLE, temp_max DOUBLE, temp_min DOUBLE, wind DOUBLE, "
                              "weather STRING").json(landing)
days = raw.withColumn("day", F.try_to_timestamp("date", F.lit("yyyy-MM-dd")))
spells = (days.where(F.col("day").isNotNull()).withWatermark("day", "1 day")
          .groupBy(F.session_window("day", "1 day"), "weather")
          .agg(F.count(F.lit(1)).alias("days"), F.sum("precipitation").alias("precipitation_mm"))
          .select(F.col("session_window.start").alias("window_start"), F.col("session_window.end").alias("window_end"),
                  "weather", "days", "precipitation_mm"))
unreadable = days.where(F.col("day").isNull()).drop("day").withColumn("landed_file", F.input_file_name())
q1 = (spells.writeStream.format("parquet").outputMode("append")
      .option("checkpointLocation", checkpoints + "/spells").trigger(availableNow=True).start(output))
q2 = (unreadable.writeStream.queryName("unreadable_days").format("json")
      .option("checkpointLocation", checkpoints + "/unreadable").trigger(availableNow=True).start(output + "_unreadable"))
q1.awaitTermination()
q2.awaitTermination()
with open(output.rstrip("/") + "_runs.txt", "a") as runs:
    runs.write(f"{datetime.now(timezone.utc).isoformat()} spells written to {output}\n")
