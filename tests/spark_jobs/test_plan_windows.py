"""The window of a query read from its analyzed plan, as real Spark writes it: tumbling, sliding
(a slide that divides the duration, one that does not, a start offset), session windows with a
static and a dynamic gap, under any window column name, and the columns a result derives from the
window's start and end (``window.start AS window_start``), for the streaming query and its batch twin."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from watermark_ops.core.state.plan import parse_analyzed_plan
from watermark_ops.spark.restart import analyzed_plan_text

H, M = 3_600_000, 60_000


@pytest.fixture(scope="module")
def events(spark, tmp_path_factory):
    folder = tmp_path_factory.mktemp("plan-windows")
    (folder / "a.json").write_text('{"station": "s1", "at": "2020-01-01 00:00:00", "v": 1}\n')
    stream = spark.readStream.schema("station STRING, at TIMESTAMP, v INT").json(str(folder)).withWatermark("at", "1 hour")
    batch = spark.read.schema("station STRING, at TIMESTAMP, v INT").json(str(folder))
    return stream, batch


def _shape(frame):
    return parse_analyzed_plan(analyzed_plan_text(frame))


@pytest.mark.parametrize("window, expected", [
    (("2 hours",), (2 * H, 2 * H, 0)),
    (("2 hours", "30 minutes"), (2 * H, 30 * M, 0)),
    (("100 minutes", "30 minutes"), (100 * M, 30 * M, 0)),  # the slide does not divide the duration
    (("2 hours", "30 minutes", "10 minutes"), (2 * H, 30 * M, 10 * M)),
])
def test_a_time_windows_duration_slide_and_offset_are_read_from_the_plan(events, window, expected):
    for frame in events:  # the streaming query, and the same transformations in batch (the twin's)
        grouped = frame.groupBy(F.window("at", *window), "station").agg(F.sum("v").alias("total"))
        shape = _shape(grouped)
        assert [(w["kind"], w["column"], w["time_column"], w["duration_ms"], w["slide_ms"], w["offset_ms"])
                for w in shape.windows] == [("time", "window", "at", *expected)]
        assert shape.window_columns == {}


def test_the_columns_derived_from_the_windows_start_and_end_are_named_under_any_name(events):
    stream, _ = events
    split = (stream.groupBy(F.window("at", "2 hours", "1 hour"), "station").agg(F.count(F.lit(1)).alias("n"))
             .select(F.col("window.start").alias("opens"), F.col("window.end").alias("closes"), "station", "n"))
    shape = _shape(split)
    assert shape.window_columns == {"start": "opens", "end": "closes"} and shape.windows[0]["slide_ms"] == H


def test_a_session_windows_gap_is_read_static_or_dynamic(events):
    stream, _ = events
    static = _shape(stream.groupBy(F.session_window("at", "45 minutes"), "station").agg(F.sum("v").alias("total")))
    assert [(w["kind"], w["gap_ms"], w["gap"]) for w in static.windows] == [("session", 45 * M, "45 minutes")]
    gap = F.when(F.col("station") == "s1", "10 minutes").otherwise("1 hour")
    dynamic = _shape(stream.groupBy(F.session_window("at", gap), "station").agg(F.sum("v").alias("total")))
    assert dynamic.windows[0]["kind"] == "session" and dynamic.windows[0]["gap_ms"] is None
    assert "CASE WHEN" in dynamic.windows[0]["gap"]


def test_a_query_without_a_window_has_none(events):
    stream, _ = events
    assert _shape(stream.dropDuplicates(["station", "at"])).windows == ()


def test_a_declared_window_that_disagrees_with_the_plan_stops_the_run_in_one_line(tmp_path):
    """The temps project's job has 6-hour windows: declaring 2 hours stops the run before its
    queries start (exit 8), with one line naming both, and nothing is written."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    job = Path(__file__).resolve().parents[1] / "temps_project" / "jobs" / "city_temps.py"
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "t.json").write_text('{"city": "sf", "event_time": "2010-01-01 00:00:00", "temp": "50"}\n')
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([sys.executable, "-m", "watermark_ops.spark.launch", "--checkpoint", str(tmp_path / "ck" / "windows"),
                           "--window", "2 hours", "--master", "local[2]", "--", str(job), str(tmp_path / "landing"),
                           str(tmp_path / "out"), str(tmp_path / "ck")], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 8, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "declared window '2 hours'" in errors[0] and "window(6 hours)" in errors[0], errors
    assert "Traceback" not in done.stderr and not (tmp_path / "ck" / "windows" / "offsets").exists()
