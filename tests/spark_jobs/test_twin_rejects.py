"""A reject query without a reason column is named: its rows are the run's set-aside rows.

The job below keeps its bad rows (event time unreadable) in a quarantine query with an
``input_file_name()`` column and no reason column (``queryName("quarantine")``), and also copies
every raw row to an archive (a query over the same source that is not a reject query). Launched
through ``python -m watermark_ops.spark.launch``, its batch twin counts the quarantine's rows as set
aside under the query's name, with an example record (file, line), not ``filtered_by_job``; the
archive's rows are not counted (with the watermarked rows they would exceed the rows read).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.spark_jobs.test_twin import land
from watermark_ops.core.ledger import read_replay_log

JOB = '''
import sys
from pyspark.sql import SparkSession, functions as F

landing, output, checkpoints = sys.argv[1:4]
spark = (SparkSession.builder.appName("rejects").config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false").getOrCreate())
raw = spark.readStream.schema("city STRING, event_time STRING, temp STRING").json(landing)
parsed = raw.select("city", F.try_to_timestamp("event_time", F.lit("yyyy-MM-dd HH:mm:ss")).alias("at"), "event_time")
windows = (parsed.where(F.col("at").isNotNull()).withWatermark("at", "1 hour")
           .groupBy(F.window("at", "6 hours"), "city").count())
bad = parsed.where(F.col("at").isNull()).select("city", "event_time", F.input_file_name().alias("landed_file"))
q1 = (windows.writeStream.format("parquet").outputMode("append").option("checkpointLocation", checkpoints + "/windows")
      .trigger(availableNow=True).start(output))
q2 = (bad.writeStream.queryName("quarantine").format("json").option("checkpointLocation", checkpoints + "/quarantine")
      .trigger(availableNow=True).start(output + "_quarantine"))
q3 = (raw.writeStream.format("json").option("checkpointLocation", checkpoints + "/archive")
      .trigger(availableNow=True).start(output + "_archive"))
spark.streams.awaitAnyTermination()
'''


def test_a_quarantine_query_without_a_reason_column_sets_its_rows_aside_by_name(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    rows = land("2010-01-02", tmp_path / "landing")
    bad = [{"city": "sf", "event_time": f"at noon {n}", "temp": "50"} for n in range(3)]
    (tmp_path / "landing" / "temps_bad.json").write_text("".join(json.dumps(b) + "\n" for b in bad))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [sys.executable, "-m", "watermark_ops.spark.launch", "--checkpoint", str(tmp_path / "ck" / "windows"),
               "--master", "local[2]", "--run-tag", "r1", "--window", "6 hours", "--", str(tmp_path / "job.py"),
               str(tmp_path / "landing"), str(tmp_path / "out"), str(tmp_path / "ck")]
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    replays, problems = read_replay_log(str(tmp_path / "ck" / "windows"))
    assert problems == []
    (record,) = [r for r in replays.values() if r["rows_read"]]
    assert record["method"] == "twin" and not record["problems"]
    assert record["rows_read"] == len(rows) + len(bad) and record["rows_aggregated"] == len(rows)
    assert record["rows_quarantined"] == {"quarantine": len(bad)}  # not filtered_by_job, not the archive's copy
    example = record["set_aside_examples"]["quarantine"]
    assert Path(example["file"].removeprefix("file://")).name == "temps_bad.json"
    assert example["event"]["event_time"] == bad[example["line"] - 1]["event_time"]
