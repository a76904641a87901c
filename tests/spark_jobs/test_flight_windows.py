"""The flight_windows job over real flights and real restarts, checked against pandas.

Each run lands one more day and restarts the query from its checkpoint on the shared local[2]
session (a real restart: new run id, offsets/commits read back from disk). The independent
computation replays Spark's watermark rules in pandas: per run, rows whose 1-hour window ended at
or before the previous batch's watermark are dropped; after the run's data batch the watermark is
max(previous, max event time − delay threshold); a window is emitted once the watermark passes its
end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pendulum
import pytest

import flight_windows as fw
from watermark_ops.spark import progress_log_path
from watermark_ops.core import progress
from watermark_ops.core.progress import read_progress_log, summarize_run
from watermark_ops.examples.flights import lander

from tests.spark_jobs.flight_expectations import assert_sink_equals
from tests.spark_jobs.flight_expectations import expected_windows as _expected

NY = "America/New_York"
REPO = Path(__file__).resolve().parents[2]


def _day_interval(day: int):
    start = pendulum.datetime(2013, 1, day, tz=NY)
    return start, start.add(days=1)


def _offsets_watermarks(checkpoint: str) -> dict[int, int]:
    """batchWatermarkMs per batch id, read straight from offsets/N (OffsetSeqLog, line 2)."""
    folder = Path(checkpoint) / "offsets"
    return {
        int(p.name): json.loads(p.read_text().splitlines()[1])["batchWatermarkMs"]
        for p in folder.iterdir()
        if p.name.isdigit()
    }


def _sink(spark, path: str) -> pd.DataFrame:
    return spark.read.parquet(path).toPandas()


@pytest.fixture(scope="module")
def four_restarts(spark, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("four_restarts")
    config = fw.JobConfig(landing=str(tmp / "landing"), checkpoint=str(tmp / "ck"), output=str(tmp / "out"))
    landed, runs = [], []
    for day in (1, 2, 3, 4):
        landed.append(lander.land_interval(*_day_interval(day), config.landing))
        config.run_tag = f"run-{day}"
        runs.append(fw.run(spark, config))
    return config, landed, runs


def test_windows_equal_independent_pandas_computation(spark, four_restarts):
    config, landed, _ = four_restarts
    emitted, _, _, _ = _expected(landed)
    sink = _sink(spark, config.output)
    assert_sink_equals(sink, emitted)
    assert len(sink) > 150  # about 50 hourly windows a day at three airports


def test_watermark_follows_the_rules_across_restarts(four_restarts):
    config, landed, runs = four_restarts
    _, _, data_batch_watermarks, final = _expected(landed)
    offsets = _offsets_watermarks(config.checkpoint)
    # availableNow: per run one data batch and one trailing no-data batch.
    assert sorted(offsets) == list(range(8))
    assert [offsets[b] for b in (0, 2, 4, 6)] == data_batch_watermarks
    assert [offsets[b] for b in (1, 3, 5, 7)] == data_batch_watermarks[1:] + [final]
    ordered = [offsets[b] for b in sorted(offsets)]
    assert all(a <= b for a, b in zip(ordered, ordered[1:]))
    assert [len(r[fw.QUERY_NAME]["batches"]) for r in runs] == [2, 2, 2, 2]


def test_progress_log_records_every_batch_with_its_run(spark, four_restarts):
    config, landed, _ = four_restarts
    log = read_progress_log(progress_log_path(config.checkpoint))
    assert log.problems == []
    assert [r["batch_id"] for r in log.records] == list(range(8))
    assert len({r["run_id"] for r in log.records}) == 4  # one Spark run id per restart
    assert len({r["query_id"] for r in log.records}) == 1
    emitted, dropped, _, _ = _expected(landed)
    total = summarize_run(log.records)
    assert total["windows_emitted"] == len(emitted) == spark.read.parquet(config.output).count()
    assert total["input_rows"] == sum(s["records"] for s in landed)
    # Spark counts late rows after partial aggregation (per window, key and partition), so its
    # figure is positive exactly when rows were late, and at most the number of late rows.
    assert dropped > 0 and 0 < total["late_partial_aggregates_spark"] <= dropped
    day2 = summarize_run([r for r in log.records if r["run_tag"] == "run-2"])
    assert day2["batch_ids"] == [2, 3] and day2["last_watermark_ms"] == _expected(landed[:2])[3]


def test_bad_records_are_kept_aside_and_counted(spark, four_restarts):
    config, landed, _ = four_restarts
    quarantine = _sink(spark, config.quarantine_output)
    statuses = pd.concat(pd.DataFrame([json.loads(line) for line in open(s["path"])]) for s in landed)
    assert (quarantine.reason == "null_event_time").sum() == (statuses.status == "cancelled").sum() > 0
    assert (quarantine.reason == "no_arrival").sum() == (statuses.status == "diverted").sum() > 0
    good = spark.read.parquet(config.output).groupBy().sum("departures").collect()[0][0]
    _, dropped, _, _ = _expected(landed)
    still_in_state = len(statuses) - len(quarantine) - dropped - good
    assert still_in_state >= 0  # nothing lost: emitted + late + quarantined + open windows = input
    log = read_progress_log(progress_log_path(config.quarantine_checkpoint))
    assert summarize_run(log.records)["quarantined_rows"] == len(quarantine)


def test_trigger_once_emits_windows_one_run_later(spark, tmp_path):
    landing = str(tmp_path / "landing")
    jobs = {
        t: fw.JobConfig(landing=landing, checkpoint=str(tmp_path / t / "ck"), output=str(tmp_path / t / "out"),
                        spark_trigger=t)
        for t in ("availableNow", "once")
    }
    lander.land_interval(*_day_interval(1), landing)
    with pytest.warns(FutureWarning, match="Trigger.Once is deprecated"):
        first = {t: fw.run(spark, c) for t, c in jobs.items()}
    assert [b["batch_id"] for b in first["availableNow"][fw.QUERY_NAME]["batches"]] == [0, 1]
    assert [b["batch_id"] for b in first["once"][fw.QUERY_NAME]["batches"]] == [0]
    now_windows = _sink(spark, jobs["availableNow"].output)
    assert len(now_windows) > 0
    assert spark.read.parquet(jobs["once"].output).count() == 0  # once: nothing emitted yet

    lander.land_interval(*_day_interval(2), landing)
    fw.run(spark, jobs["once"])
    once_windows = _sink(spark, jobs["once"].output)
    # The windows availableNow emitted in run 1 appear with once only in run 2 (plus any window
    # that run 2's late rows opened below that watermark: once filters late rows one run later).
    key = ["origin", "window_start"]
    assert set(map(tuple, now_windows[key].values)) <= set(map(tuple, once_windows[key].values))
    watermark_1 = _offsets_watermarks(jobs["availableNow"].checkpoint)[1]
    assert (pd.to_datetime(once_windows.window_end, utc=True).astype("int64") // 10**6 <= watermark_1).all()

    # A once restart with no new input runs no batch: no offsets file is written.
    before = sorted(_offsets_watermarks(jobs["once"].checkpoint))
    fw.run(spark, jobs["once"])
    assert sorted(_offsets_watermarks(jobs["once"].checkpoint)) == before == [0, 1]


def test_failed_query_exits_non_zero_with_its_exception(tmp_path):
    """A real driver (python spark_jobs/flight_windows.py) over a checkpoint whose offset log it cannot read."""
    landing = tmp_path / "landing"
    lander.land_interval(*_day_interval(1), str(landing))
    checkpoint = tmp_path / "ck"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n{this is not json\n")
    proc = subprocess.run(
        [sys.executable, str(REPO / "spark_jobs" / "flight_windows.py"), "--master", "local[2]",
         "--landing", str(landing), "--checkpoint", str(checkpoint), "--output", str(tmp_path / "out"),
         "--shuffle-partitions", "2"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "streaming query failed" in proc.stderr
    # The corrupt file is left exactly as it was: reported, never fixed.
    assert (checkpoint / "offsets" / "0").read_text() == "v1\n{this is not json\n"


def test_progress_log_convention_is_shared():
    assert progress_log_path("/a/ck/") == progress.progress_log_path("/a/ck") == "/a/ck.progress.jsonl"


def test_a_future_dated_flight_is_kept_aside_instead_of_jumping_the_watermark(spark, tmp_path):
    config = fw.JobConfig(landing=str(tmp_path / "landing"), checkpoint=str(tmp_path / "ck"),
                          output=str(tmp_path / "out"), max_event_time_ahead="1 hour")
    lander.land_interval(*_day_interval(1), config.landing)
    # A real flight of the day, its departure mistyped into 2099: landed like any other event.
    event = next(json.loads(line) for path in sorted(Path(config.landing).glob("*.jsonl"))
                 for line in path.read_text().splitlines() if json.loads(line)["status"] == "landed")
    event.update(id=10_000_000, dep_time="2099-01-01T12:00:00Z")
    (Path(config.landing) / "mistyped.jsonl").write_text(json.dumps(event) + "\n")
    fw.run(spark, config)
    bad = _sink(spark, config.quarantine_output)
    (future,) = bad[bad["reason"] == "future_event_time"].itertuples()
    assert future.id == 10_000_000 and future.dep_time == "2099-01-01T12:00:00Z"
    assert future.source_file.endswith("mistyped.jsonl")
    watermark = max(_offsets_watermarks(config.checkpoint).values())
    assert 0 < watermark < pendulum.datetime(2013, 1, 3, tz="UTC").int_timestamp * 1000  # 2013, not 2099
    observed = [r["observed_metrics"]["quarantine"] for r in read_progress_log(progress_log_path(config.quarantine_checkpoint)).records
                if r.get("observed_metrics")]
    assert sum(int(m["future_event_time"]) for m in observed) == 1
    with pytest.raises(ValueError, match="expected an interval"):
        fw.JobConfig(landing="l", checkpoint="c", output="o", max_event_time_ahead="1 hour'; DROP")
