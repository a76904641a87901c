"""The job's batch twin: a flat script, attached with 0 changed lines, gets its exact late rows.

The job (``tests/temps_project/jobs/city_temps.py``) is unlike the example and the readings project:
real hourly temperatures of two cities in 2010 (the ``vega_datasets`` package's ``seattle-temps`` and
``sf-temps``), JSON lines whose event time is zone-less text in a field named ``event_time`` and whose
temperature is text, parsed inline in one ``select`` (``try_to_timestamp``, SQL ``try_cast``), no
function of its own, two queries (6-hour windows with count, mean, min and max; a reject query with
its own ``reject_reason``), ``awaitAnyTermination``. The south city's link delivers 10 hours late,
so each day some of its readings fall in windows the watermark already closed.

pandas computes the truth from the landed files alone: each run's watermark is the newest good event
time of the runs before it minus the 1-hour delay (one data batch per run plus the trailing no-data
batch; Spark >= 3.4 filters with the previous batch's watermark), and a row is late when its 6-hour
window ends at or before it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from watermark_ops.core.ledger import late_ledger, read_replay_log

JOB = Path(__file__).resolve().parents[1] / "temps_project" / "jobs" / "city_temps.py"
HOUR_MS = 3_600_000
WINDOW_MS = 6 * HOUR_MS
DELAY_MS = HOUR_MS
#: How late each city's readings arrive.
ARRIVES_AFTER = {"seattle": pd.Timedelta(0), "sf": pd.Timedelta(hours=10)}
DAYS = ("2010-01-02", "2010-01-03", "2010-01-04")
ALLOWED = "6 hours"


def _temps() -> pd.DataFrame:
    from vega_datasets import local_data

    frames = [local_data.seattle_temps().assign(city="seattle"), local_data.sf_temps().assign(city="sf")]
    return pd.concat(frames, ignore_index=True)


def land(day: str, landing: Path, garbage: bool = False) -> pd.DataFrame:
    """The readings that arrived in the day before ``day`` (the run's data interval), one JSON-lines
    file per city; ``garbage``: every event time unreadable (an upstream change). Returns them."""
    end = pd.Timestamp(day)
    temps = _temps()
    arrived = temps["date"] + temps["city"].map(ARRIVES_AFTER)
    rows = temps[(arrived >= end - pd.Timedelta(days=1)) & (arrived < end)].copy()
    rows["event_time"] = rows["date"].dt.strftime("%Y-%m-%d %H:%M:%S")
    if garbage:
        rows["event_time"] = "at " + rows["event_time"]
    rows["temp"] = rows["temp"].astype(str)
    landing.mkdir(parents=True, exist_ok=True)
    for city, part in rows.groupby("city"):
        path = landing / f"temps_{day}_{city}.json"
        hidden = path.with_name("." + path.name)
        with open(hidden, "w") as out:
            for row in part.itertuples():
                out.write(json.dumps({"city": city, "event_time": row.event_time, "temp": row.temp}) + "\n")
        os.replace(hidden, path)
    return rows[["city", "event_time", "temp"]]


def pandas_late(runs: list[pd.DataFrame]) -> list[set[tuple[str, str]]]:
    """Per run, the ``(city, landed event time)`` of its late rows (module docstring)."""
    late, newest = [], None
    for rows in runs:
        at = pd.to_datetime(rows["event_time"], format="%Y-%m-%d %H:%M:%S", errors="coerce")
        good = rows[at.notna()]
        ms = at[at.notna()].astype("int64") // 10**6
        watermark = (newest - DELAY_MS) if newest is not None else 0
        ends = ms // WINDOW_MS * WINDOW_MS + WINDOW_MS
        late.append({(c, t) for c, t in zip(good[ends <= watermark]["city"], good[ends <= watermark]["event_time"])})
        if len(ms):
            newest = max(newest or 0, int(ms.max()))
    return late


def launch(tmp: Path, run_tag: str, *declarations: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [sys.executable, "-m", "watermark_ops.spark.launch", "--checkpoint", str(tmp / "ck" / "windows"),
               "--run-tag", run_tag, "--window", "6 hours", *declarations, "--", str(JOB), str(tmp / "landing"),
               str(tmp / "out"), str(tmp / "ck")]
    return subprocess.run(command, env=env, cwd=tmp, capture_output=True, text=True, timeout=600)


def late_by_run(checkpoint: str, tags: list[str]) -> list[set[tuple[str, str]]]:
    """Per run tag, the ``(city, landed event time)`` of the ledger's late rows."""
    ledger = late_ledger(checkpoint)
    replays, _ = read_replay_log(checkpoint)
    tag_of = {batch: record["run_tag"] for batch, record in replays.items()}
    return [{(r.event["city"], r.event["landed_time"]) for r in ledger.late_rows if tag_of[r.batch_id] == tag}
            for tag in tags]


@pytest.fixture(scope="module")
def classic(tmp_path_factory):
    """Three daily runs under the launcher (a driver of its own each), then a day of garbage event times."""
    tmp = tmp_path_factory.mktemp("twin")
    runs, results = [], []
    for number, day in enumerate(DAYS):
        runs.append(land(day, tmp / "landing"))
        results.append(launch(tmp, f"run-{number}", "--master", "local[2]", "--allowed-lateness", ALLOWED))
    garbage = land("2010-01-05", tmp / "landing", garbage=True)
    results.append(launch(tmp, "run-garbage", "--master", "local[2]", "--allowed-lateness", ALLOWED))
    return tmp, runs, results, garbage


def test_a_flat_script_gets_its_exact_late_rows_with_no_changed_line(classic):
    tmp, runs, results, _ = classic
    for done in results:
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    checkpoint = str(tmp / "ck" / "windows")
    expected = pandas_late(runs)
    assert all(expected[1:]) and not expected[0]  # the south city's readings are late from the second day on
    assert late_by_run(checkpoint, ["run-0", "run-1", "run-2"]) == expected
    ledger = late_ledger(checkpoint)
    assert ledger.complete and {b.replayed_by for b in ledger.batches if b.files} == {"spark"}
    replays, problems = read_replay_log(checkpoint)
    assert problems == [] and {r["method"] for r in replays.values()} == {"twin"}
    for batch in ledger.batches:  # every row once: aggregated, late or set aside; as many as Spark read
        assert batch.rows_read == batch.spark_input_rows == (batch.rows_aggregated + batch.rows_late
                                                             + sum(batch.rows_quarantined.values()))
    # the twin wrote nothing: the job's own sinks hold what its two queries wrote, nothing else
    assert not any(p.name.startswith("twin") for p in (tmp / "out").iterdir())
    assert sorted(p.name for p in (tmp / "ck").iterdir() if p.is_dir()) == ["rejects", "windows"]
    # each late row names its file and the line that landed it (found by content: the job's select drops positions)
    for row in ledger.late_rows:
        landed = json.loads(_line(row.source_file, row.line))
        assert (landed["city"], landed["event_time"]) == (row.event["city"], row.event["landed_time"])


def _line(uri: str, number: int) -> str:
    return Path(uri.removeprefix("file://")).read_text().splitlines()[number - 1]


def test_garbage_event_times_are_set_aside_with_the_jobs_own_reason(classic):
    tmp, _, results, garbage = classic
    checkpoint = str(tmp / "ck" / "windows")
    replays, _ = read_replay_log(checkpoint)
    (record,) = [r for r in replays.values() if r["run_tag"] == "run-garbage" and r["rows_read"]]
    assert record["rows_read"] == len(garbage) and record["rows_aggregated"] == 0 and record["late_rows"] == []
    assert record["rows_quarantined"] == {"unreadable_time": len(garbage)}
    example = record["set_aside_examples"]["unreadable_time"]
    assert Path(example["file"].removeprefix("file://")).name.startswith("temps_2010-01-05_")
    assert example["event"]["reject_reason"] == "unreadable_time" and example["event"]["landed_time"].startswith("at ")
    assert json.loads(_line(example["file"], example["line"]))["event_time"] == example["event"]["landed_time"]


def pandas_windows(runs: list[pd.DataFrame]) -> pd.DataFrame:
    """Every landed good row's 6-hour window per city: readings, mean, min and max (pandas alone)."""
    rows = pd.concat(runs, ignore_index=True)
    at = pd.to_datetime(rows["event_time"], format="%Y-%m-%d %H:%M:%S", errors="coerce")
    rows = rows[at.notna()].assign(start=at[at.notna()].astype("int64") // 10**6 // WINDOW_MS * WINDOW_MS,
                                   temp_f=lambda r: r["temp"].astype(float))
    return rows.groupby(["start", "city"])["temp_f"].agg(["count", "mean", "min", "max"])


def test_recoverable_late_rows_are_published_as_corrections_of_their_windows(classic):
    from watermark_ops.core.ledger.corrections import read_corrections, standing

    tmp, runs, _, _ = classic
    checkpoint = str(tmp / "ck" / "windows")
    corrections, problems = read_corrections(checkpoint)
    assert problems == [] and corrections
    truth = pandas_windows(runs)
    late = late_ledger(checkpoint).late_rows
    # each late row's window closed 4 hours before the watermark that dropped it: within the 6 allowed
    assert late and all(0 <= r.late_by_ms < 6 * HOUR_MS for r in late)
    touched = {(r.window_start_ms, r.event["city"]) for r in late}
    current = standing(corrections)
    assert {(c["window_start_ms"], c["keys"]["city"]) for c in current} == touched  # no untouched window corrected
    for c in current:
        count, mean, low, high = truth.loc[(c["window_start_ms"], c["keys"]["city"])]
        assert c["window_end_ms"] - c["window_start_ms"] == WINDOW_MS
        assert c["corrected"]["readings"] == count and abs(c["corrected"]["mean_temp_f"] - mean) <= 1e-9
        assert (c["corrected"]["min_temp_f"], c["corrected"]["max_temp_f"]) == (low, high)
        mine = [r for r in late if (r.window_start_ms, r.event["city"]) == (c["window_start_ms"], c["keys"]["city"])]
        assert c["late_rows"] == len(mine) and c["emitted"]["readings"] == count - len(mine)
    # the table beside the sink holds the same rows, one folder per run
    table = pd.read_parquet(tmp / "out_corrections")
    assert len(table) == len(corrections) and set(table["run"]) == {c["run"] for c in corrections}
    assert sorted(table["readings"]) == sorted(c["corrected"]["readings"] for c in corrections)
    assert sorted(table["emitted_readings"]) == sorted(c["emitted"]["readings"] for c in corrections)


def test_writing_a_runs_corrections_again_replaces_them(spark, classic, tmp_path):
    import shutil

    from watermark_ops.core.ledger.corrections import corrections_log_path, read_corrections
    from watermark_ops.spark.corrections import write_corrections
    from watermark_ops.spark.twin import TwinQuery

    tmp = classic[0]
    checkpoint = str(tmp_path / "ck")
    shutil.copy(corrections_log_path(str(tmp / "ck" / "windows")), corrections_log_path(checkpoint))
    before, _ = read_corrections(checkpoint)
    run = [c for c in before if c["run"] == before[0]["run"]]
    result = spark.createDataFrame([], "window struct<start: timestamp, end: timestamp>, city string, readings bigint, "
                                       "mean_temp_f double, min_temp_f double, max_temp_f double")
    query = TwinQuery(result, format="parquet", path=str(tmp_path / "out"))
    for _ in range(2):  # the same run corrected twice (a rerun): written once
        folder = write_corrections(spark, [{k: v for k, v in c.items() if k != "write"} for c in run], query, checkpoint)
    assert len(pd.read_parquet(tmp_path / "out_corrections")) == len(run) and folder.endswith(run[0]["run"])
    after, _ = read_corrections(checkpoint)
    def made(corrections):
        return sorted((c["run"], c["window_start_ms"], json.dumps(c["corrected"], sort_keys=True)) for c in corrections)

    assert made(after) == made(before) and after[-len(run):][0]["run"] == run[0]["run"]  # the rerun is the newest


def test_the_twin_runs_the_script_without_starting_or_writing_anything(spark, tmp_path):
    from watermark_ops.spark.launch import _run_script
    from watermark_ops.spark.twin import run_twin

    rows = land("2010-01-02", tmp_path / "landing")
    files = sorted(str(p) for p in (tmp_path / "landing").glob("*.json"))
    args = [str(tmp_path / "landing"), str(tmp_path / "out"), str(tmp_path / "ck")]
    twin = run_twin(lambda: _run_script(str(JOB), args, {}), lambda path: files)
    assert not (tmp_path / "out").exists() and not (tmp_path / "ck").exists() and spark.streams.active == []
    assert [(q.checkpoint, q.output_mode, q.format) for q in twin.queries] == [
        (str(tmp_path / "ck" / "windows"), "append", "parquet"), (str(tmp_path / "ck" / "rejects"), "append", "json")]
    ((entering, column, delay),) = twin.watermarks
    assert (column, delay) == ("event_time", "1 hour") and entering.count() == len(rows)
    # the query's own result, computed in batch: every window with every one of its rows
    windows = twin.queries[0].frame.toPandas()
    assert windows["readings"].sum() == len(rows) and set(windows["city"]) == {"seattle", "sf"}


@pytest.mark.parametrize("script, reason", [
    ("spark.readStream.format('rate').load().withWatermark('timestamp', '1 minute')"
     ".writeStream.format('console').start()", "only file sources can be twinned"),
    ("spark.range(3).write.mode('overwrite').parquet(OUT)\n"
     "spark.readStream.schema('a INT').json(LANDING).writeStream.format('console').start()",
     "writes a batch result"),
])
def test_a_job_that_cannot_be_twinned_says_why_in_one_line(spark, tmp_path, script, reason):
    from watermark_ops.spark.launch import _run_script
    from watermark_ops.spark.twin import CannotTwin, run_twin

    (tmp_path / "landing").mkdir()
    job = tmp_path / "job.py"
    job.write_text("from pyspark.sql import SparkSession\nspark = SparkSession.builder.getOrCreate()\n"
                   f"OUT, LANDING = {str(tmp_path / 'out')!r}, {str(tmp_path / 'landing')!r}\n" + script + "\n")
    with pytest.raises(CannotTwin, match=reason) as raised:
        run_twin(lambda: _run_script(str(job), [], {}), lambda path: [])
    assert "\n" not in str(raised.value) and "declare pre_watermark" in str(raised.value)
    assert not (tmp_path / "out").exists()


def test_over_spark_connect_the_twin_gives_the_same_late_rows(connect_server, tmp_path):
    runs = []
    for number, day in enumerate(DAYS[:2]):
        runs.append(land(day, tmp_path / "landing"))
        done = launch(tmp_path, f"run-{number}", "--remote", connect_server.url, "--allowed-lateness", ALLOWED)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    checkpoint = str(tmp_path / "ck" / "windows")
    expected = pandas_late(runs)
    assert expected[1] and late_by_run(checkpoint, ["run-0", "run-1"]) == expected
    assert late_ledger(checkpoint).complete
    from watermark_ops.core.ledger.corrections import read_corrections

    corrections, _ = read_corrections(checkpoint)
    truth = pandas_windows(runs)
    assert corrections and all(c["corrected"]["readings"] == truth.loc[(c["window_start_ms"], c["keys"]["city"])]["count"]
                               for c in corrections)


def test_the_driver_reads_what_the_sink_holds_as_sparks_own_read_of_it_does(spark, classic):
    from pyspark.sql import functions as F

    from watermark_ops.spark.corrections import emitted_here
    from watermark_ops.spark.twin import TwinQuery

    tmp = classic[0]
    result = spark.read.parquet(str(tmp / "out"))  # Spark's own batch read of the sink (through its log)
    everything = (0, 2**62)
    here = emitted_here(TwinQuery(result, format="parquet", path=str(tmp / "out")), WINDOW_MS, *everything)
    rows = [json.loads(r["_wo_event"]) for r in here]
    by_spark = {(r["start"], r["city"]): r for r in result.select(
        F.unix_millis("window.start").alias("start"), F.unix_millis("window.end").alias("end"), "city", "readings",
        "mean_temp_f", "min_temp_f", "max_temp_f").toPandas().to_dict("records")}
    assert rows and len(rows) == len(by_spark)  # every window the job emitted, read with no Spark job
    for row in rows:
        truth = by_spark[(row["_wo_window_start_ms"], row["city"])]
        assert row["_wo_window_end_ms"] == truth["end"] and row["readings"] == truth["readings"]
        assert all(row[c] == truth[c] for c in ("mean_temp_f", "min_temp_f", "max_temp_f"))
    # a window range: only the windows starting in it
    first = min(r["_wo_window_start_ms"] for r in rows)
    assert {r["_wo_event_us"] for r in emitted_here(TwinQuery(result, format="parquet", path=str(tmp / "out")),
                                                    WINDOW_MS, first, first + 1)} == {first}
    # Spark reads it instead: a partitioned sink (its keys live in folder names), a key that is not
    # text, a sink of another format
    result.write.partitionBy("city").parquet(str(tmp / "partitioned"))
    partitioned = spark.read.parquet(str(tmp / "partitioned")).select(*result.columns)
    assert emitted_here(TwinQuery(partitioned, format="parquet", path=str(tmp / "partitioned")), WINDOW_MS,
                        *everything) is None
    dated = result.withColumn("city", F.to_date(F.lit("2010-01-01")))
    assert emitted_here(TwinQuery(dated, format="parquet", path=str(tmp / "out")), WINDOW_MS, *everything) is None
    assert emitted_here(TwinQuery(result, format="json", path=str(tmp / "out")), WINDOW_MS, *everything) is None


def test_a_landed_file_changed_or_gone_since_the_stream_read_it_is_named(classic, tmp_path):
    from dataclasses import replace

    from watermark_ops.core.ledger.plan import plan_batches
    from watermark_ops.spark.twin_ledger import changed_files

    tmp = classic[0]
    replays, _ = read_replay_log(str(tmp / "ck" / "windows"))
    _, plans, problems = plan_batches(str(tmp / "ck" / "windows"), sorted(replays))
    assert problems == [] and sum(len(p.listed_ms) for p in plans) == len({u for p in plans for _, u in p.files})
    assert changed_files(plans) == {}  # Spark's listing times are the files' own: nothing changed
    kept = tmp_path / "kept.json"
    kept.write_text("{}\n")
    listed = int(kept.stat().st_mtime_ns // 1_000_000)
    plan = replace(plans[0], listed_ms={kept.as_uri(): listed - 1000, (tmp_path / "gone.json").as_uri(): listed})
    changed = changed_files([plan])
    assert "modified since the stream listed it" in changed[kept.as_uri()]
    assert "gone" in changed[(tmp_path / "gone.json").as_uri()]


def test_an_object_changed_or_gone_since_the_stream_listed_it_is_named(s3_server, monkeypatch):
    from watermark_ops.core.ledger.plan import BatchPlan
    from watermark_ops.examples.s3server import REGION
    from watermark_ops.spark.twin_ledger import changed_files

    fs = s3_server.filesystem()
    bucket = f"twin-{os.getpid()}"
    fs.call_s3("create_bucket", Bucket=bucket)
    fs.pipe(f"{bucket}/landing/a.json", b"{}\n")
    listed = fs.call_s3("list_objects_v2", Bucket=bucket)["Contents"][0]["LastModified"]  # what S3A records
    listed_ms = int(listed.timestamp() * 1000)
    options = s3_server.storage_options()  # the driver reaches the store through its environment
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", options["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", options["secret"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint_url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    same, gone = f"s3a://{bucket}/landing/a.json", f"s3a://{bucket}/landing/gone.json"
    assert changed_files([BatchPlan(0, True, listed_ms={same: listed_ms})]) == {}
    changed = changed_files([BatchPlan(0, True, listed_ms={same: listed_ms - 5000, gone: listed_ms})])
    assert "modified since the stream listed it" in changed[same] and "gone" in changed[gone]
