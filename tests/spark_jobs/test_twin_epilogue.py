"""The launcher's batch twin runs a script up to its queries and no further.

The job below is flat (no function, no ``__main__`` guard) and has an epilogue: after its query it
appends a line to a file, either after ``query.awaitTermination()``, after
``spark.streams.awaitAnyTermination()``, or right after its ``start()`` (a script that never
awaits), and it registers an ``atexit`` handler that appends another. Run through
``python -m watermark_ops.spark.launch`` (a driver of its own, its batch twin run after the real
run), the file gets exactly one line of each per run, and the twin did run (its replay records).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from watermark_ops.core.ledger import read_replay_log

from tests.spark_jobs.test_twin import land

JOB = '''
import atexit, sys
from pyspark.sql import SparkSession, functions as F

landing, output, checkpoint, epilogue, mode = sys.argv[1:6]
spark = (SparkSession.builder.appName("epilogue").config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false").getOrCreate())

def note(what):
    with open(epilogue, "a") as out:
        out.write(what + "\\n")

atexit.register(note, "atexit")
raw = spark.readStream.schema("city STRING, event_time STRING, temp STRING").json(landing)
rows = raw.select("city", F.to_timestamp("event_time", "yyyy-MM-dd HH:mm:ss").alias("at"))
windows = rows.withWatermark("at", "1 hour").groupBy(F.window("at", "6 hours"), "city").count()
query = (windows.writeStream.format("parquet").outputMode("append").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start(output))
if mode == "query":
    query.awaitTermination()
elif mode == "streams":
    spark.streams.awaitAnyTermination()
note("epilogue")
'''


def _launch(tmp: Path, mode: str, *declarations: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [sys.executable, "-m", "watermark_ops.spark.launch", "--checkpoint", str(tmp / "ck"),
               "--master", "local[2]", "--window", "6 hours", *declarations, "--", str(tmp / "job.py"),
               str(tmp / "landing"), str(tmp / "out"), str(tmp / "ck"), str(tmp / "epilogue.txt"), mode]
    return subprocess.run(command, env=env, cwd=tmp, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("mode, runs", [("query", 2), ("streams", 1), ("none", 1)])
def test_the_scripts_epilogue_and_exit_handlers_run_once_per_run(tmp_path, mode, runs):
    (tmp_path / "job.py").write_text(JOB)
    for number, day in enumerate(("2010-01-02", "2010-01-03")[:runs]):
        land(day, tmp_path / "landing")
        done = _launch(tmp_path, mode, "--run-tag", f"run-{number}")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        lines = (tmp_path / "epilogue.txt").read_text().splitlines()
        assert lines == ["epilogue", "atexit"] * (number + 1), done.stderr[-3000:]
    replays, problems = read_replay_log(str(tmp_path / "ck"))
    assert problems == [] and replays and {r["method"] for r in replays.values()} == {"twin"}  # the twin ran
    assert {r["run_tag"] for r in replays.values()} == {f"run-{n}" for n in range(runs)}
    assert all(not r["problems"] for r in replays.values())
