"""The Spark side on the releases teams run: pyspark 3.5 LTS, 4.0, 4.1 and 4.3 (4.2, the pinned one,
runs the whole suite), each in a virtual environment of its own with the package's **driver part
from the wheel and no Airflow** (``pip install "watermark-ops[spark]"``, what a cluster's driver gets).

Per release, through ``spark-submit`` of that release and the package's launcher, on jobs unlike the
example that import nothing of watermark-ops:

* a Parquet job with several micro-batches per run (its own ``maxFilesPerTrigger``) and a zone-less
  event-time pattern, no pre-watermark function: its batch twin's late rows equal pandas', with the
  late rule of that release confirmed by the run (Spark >= 3.4 filters batch N's rows with batch
  N-1's watermark: pandas computes which rows that drops, and which the batch's own would);
* the flat temperatures job (``tests/temps_project``) for two daily runs with an allowed lateness:
  its late rows and its correction equal pandas';
* the checkpoints each release wrote are audited (ok) and their state read by this repository's core
  (rows from the files equal Spark's ``numRowsTotal``);
* on each 4.x release, the flat job again as a client of that release's own Spark Connect server.

The environments are kept between runs in ``~/.cache/watermark-ops/pyspark-<release>`` (uv's cache
holds the built pyspark wheels: the first build of a release takes minutes, later ones seconds); the
wheel is installed into them again on every run.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.packaging_fixtures import uv
from tests.release_venvs import CACHE, release_venv
from tests.spark_jobs.test_launch import _weather
from tests.spark_jobs.test_twin import DELAY_MS, HOUR_MS, land, pandas_late, pandas_windows

pytestmark = pytest.mark.timeout(1800)

REPO = Path(__file__).resolve().parents[1]
#: The releases besides the pinned 4.2.0 (the newest of each line on PyPI when written).
RELEASES = ("3.5.9", "4.0.5", "4.1.4", "4.3.0")
TEMPS_JOB = REPO / "tests" / "temps_project" / "jobs" / "city_temps.py"
PARQUET_JOB = '''
import sys
from pyspark.sql import SparkSession, functions as F

landing, output, checkpoint = sys.argv[1:4]
spark = SparkSession.builder.appName("plain parquet").config("spark.sql.session.timeZone", "UTC") \\
    .config("spark.sql.shuffle.partitions", "2").getOrCreate()
raw = spark.readStream.schema("station STRING, event_time STRING, temp DOUBLE").option("maxFilesPerTrigger", 1) \\
    .parquet(landing)
readings = raw.select("station", F.to_timestamp("event_time", "yyyy-MM-dd HH:mm:ss").alias("at"), "temp") \\
    .where(F.col("at").isNotNull())
hourly = readings.withWatermark("at", "1 hour").groupBy(F.window("at", "1 hour"), "station").agg(
    F.avg("temp").alias("mean_temp"))
hourly.writeStream.outputMode("append").format("json").option("checkpointLocation", checkpoint) \\
    .trigger(availableNow=True).start(output).awaitTermination()
'''


def _environment(release: str, wheel: Path) -> Path:
    """The release's venv (``tests.release_venvs``) with this run's wheel, without Airflow."""
    venv = release_venv(release)
    python = venv / "bin" / "python"
    with open(CACHE / f"pyspark-{release}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # The driver part from the wheel: the base install and the spark extra, nothing of Airflow.
        subprocess.run([uv(), "pip", "install", "-q", "--python", str(python), "--reinstall-package", "watermark-ops",
                        f"watermark-ops[spark] @ {wheel.as_uri()}"], check=True, timeout=600)
    return venv


def _with_connect_client(release: str, venv: Path) -> None:
    """The release's Spark Connect client dependencies (grpc, protobuf, zstandard) in its venv, once."""
    python = venv / "bin" / "python"
    with open(CACHE / f"pyspark-{release}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".made-connect").exists():
            wanted = [f"pyspark[connect]=={release}", "pandas<3", "pyarrow"]
            offline = subprocess.run([uv(), "pip", "install", "-q", "--offline", "--python", str(python), *wanted],
                                     capture_output=True, text=True)
            if offline.returncode != 0:
                subprocess.run([uv(), "pip", "install", "-q", "--python", str(python), *wanted], check=True,
                               timeout=1500)
            (venv / ".made-connect").touch()


def _launch(venv: Path, tmp: Path, job: Path, checkpoint: Path, run_tag: str, *declarations: str,
            args: list[str]) -> subprocess.CompletedProcess:
    """``spark-submit`` of the release, the installed launcher, the job after ``--``."""
    python = venv / "bin" / "python"
    launcher = subprocess.run([str(python), "-c", "import watermark_ops.spark.launch as m; print(m.__file__)"],
                              capture_output=True, text=True, check=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV", "SPARK_HOME"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", PYSPARK_PYTHON=str(python),
               PYSPARK_DRIVER_PYTHON=str(python), SPARK_LOCAL_IP="127.0.0.1")
    command = [str(venv / "bin" / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               launcher, "--checkpoint", str(checkpoint), "--run-tag", run_tag, *declarations, "--", str(job), *args]
    return subprocess.run(command, env=env, cwd=tmp, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module", params=RELEASES)
def release(request, wheel, tmp_path_factory):
    """One release: its environment, then both jobs run through it."""
    version = request.param
    started = time.monotonic()
    venv = _environment(version, wheel)
    made_in = time.monotonic() - started
    tmp = tmp_path_factory.mktemp(f"pyspark-{version}")
    # the Parquet job: three files, one micro-batch each, in one run
    (tmp / "plain.py").write_text(PARQUET_JOB)
    landing = tmp / "parquet"
    landing.mkdir()
    # EWR's day, JFK's next day, then LGA's first day again: the second file moves the batch's own
    # watermark a day past the one the previous batch ran with, so the two rules drop different rows
    frames = [_weather(station, day) for station, day in (("EWR", "2013-01-02"), ("JFK", "2013-01-03"),
                                                            ("LGA", "2013-01-02"))]
    for number, frame in enumerate(frames):
        frame.to_parquet(landing / f"part-{number}.parquet", index=False)
        os.utime(landing / f"part-{number}.parquet", (1_700_000_000 + number, 1_700_000_000 + number))
    parquet = _launch(venv, tmp, tmp / "plain.py", tmp / "ck_parquet", "run-0", "--window", "1 hour",
                      args=[str(landing), str(tmp / "out_parquet"), str(tmp / "ck_parquet")])
    # the temperatures job: two daily runs with an allowed lateness
    temps, runs = [], []
    for number, day in enumerate(("2010-01-02", "2010-01-03")):
        runs.append(land(day, tmp / "landing"))
        temps.append(_launch(venv, tmp, TEMPS_JOB, tmp / "ck" / "windows", f"run-{number}", "--window", "6 hours",
                             "--allowed-lateness", "6 hours",
                             args=[str(tmp / "landing"), str(tmp / "out"), str(tmp / "ck")]))
    airflow = subprocess.run([str(venv / "bin" / "python"), "-c", "import airflow"], capture_output=True, text=True)
    return {"version": version, "venv": venv, "tmp": tmp, "parquet": parquet, "frames": frames, "temps": temps,
            "runs": runs, "airflow": airflow, "made_in": made_in}


@pytest.fixture(scope="module", params=[r for r in RELEASES if not r.startswith("3.")])
def connected_release(request, wheel, tmp_path_factory):
    """A 4.x release's own Spark Connect server (its bundled ``spark-connect`` jar, started by the
    package's ``python -m watermark_ops.spark.connect`` in that release's venv, stopped by its
    process group) and the flat job's two daily runs through the launcher as its client. pyspark
    3.5 bundles no Connect server jar (it comes from Maven there): not run on 3.5."""
    import signal
    import socket

    from watermark_ops.spark.connect import free_port

    version = request.param
    venv = _environment(version, wheel)
    _with_connect_client(version, venv)
    tmp = tmp_path_factory.mktemp(f"connect-{version}")
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV", "SPARK_HOME"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", PYSPARK_PYTHON=str(python),
               SPARK_LOCAL_IP="127.0.0.1")
    port = free_port("127.0.0.1")
    with open(tmp / "server.log", "ab") as log:
        server = subprocess.Popen([str(python), "-m", "watermark_ops.spark.connect", "--port", str(port),
                                   "--conf", "spark.sql.shuffle.partitions=2"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and server.poll() is None:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        runs, results = [], []
        for number, day in enumerate(("2010-01-02", "2010-01-03")):
            runs.append(land(day, tmp / "landing"))
            command = [str(python), "-m", "watermark_ops.spark.launch", "--remote", f"sc://127.0.0.1:{port}",
                       "--checkpoint", str(tmp / "ck" / "windows"), "--run-tag", f"run-{number}", "--window", "6 hours",
                       "--allowed-lateness", "6 hours", "--", str(TEMPS_JOB), str(tmp / "landing"), str(tmp / "out"),
                       str(tmp / "ck")]
            results.append(subprocess.run(command, env=env, cwd=tmp, capture_output=True, text=True, timeout=900))
        yield {"version": version, "tmp": tmp, "runs": runs, "results": results,
               "server_log": (tmp / "server.log").read_text(errors="replace")}
    finally:
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(server.pid, signal.SIGKILL)


def test_over_the_release_s_spark_connect_the_flat_job_recovers_its_late_rows(connected_release):
    for done in connected_release["results"]:
        assert done.returncode == 0, (done.stderr[-4000:], connected_release["server_log"][-2000:])
    checkpoint = str(connected_release["tmp"] / "ck" / "windows")
    records = [json.loads(line) for line in Path(checkpoint + ".progress.jsonl").read_text().splitlines()]
    assert {r["spark_version"] for r in records} == {connected_release["version"]}
    _late_rows_and_corrections_match_pandas(checkpoint, connected_release["runs"])


def _late_rows_and_corrections_match_pandas(checkpoint: str, runs: list[pd.DataFrame]) -> None:
    """The flat job's second run: its late rows are pandas', and its corrections count every landed
    row of their windows."""
    from watermark_ops.core.ledger import late_ledger
    from watermark_ops.core.ledger.corrections import read_corrections

    expected = pandas_late(runs)
    late = {(r.event["city"], r.event["landed_time"]) for r in late_ledger(checkpoint).late_rows}
    assert expected[1] and late == expected[1]
    corrections, _ = read_corrections(checkpoint)
    truth = pandas_windows(runs)
    assert corrections and all(c["corrected"]["readings"] == truth.loc[(c["window_start_ms"], c["keys"]["city"])]["count"]
                               for c in corrections)


def _ok(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


def test_the_driver_part_installs_from_the_wheel_without_airflow(release):
    assert release["airflow"].returncode != 0 and "No module named 'airflow'" in release["airflow"].stderr
    _ok(release["parquet"])
    records = [json.loads(line) for line in (release["tmp"] / "ck_parquet.progress.jsonl").read_text().splitlines()]
    assert {r["spark_version"] for r in records} == {release["version"]}


def test_the_release_s_late_rule_is_confirmed_by_a_real_run(release):
    from watermark_ops.core.ledger import late_ledger

    _ok(release["parquet"])
    checkpoint = str(release["tmp"] / "ck_parquet")
    ledger = late_ledger(checkpoint)
    assert ledger.complete and [b.batch_id for b in ledger.batches if b.files] == [0, 1, 2]
    # batch N is judged by the watermark batch N-1 ran with (Spark >= 3.4, allowMultiple true)
    first, _, third = release["frames"]
    watermark = int(pd.to_datetime(first["event_time"], utc=True).max().timestamp() * 1000) - HOUR_MS
    starts = pd.to_datetime(third["event_time"], utc=True).astype("int64") // 10**6 // HOUR_MS * HOUR_MS
    expected = sorted(third[starts + HOUR_MS <= watermark]["event_time"])
    late = sorted(pd.Timestamp(r.event["at"]).strftime("%Y-%m-%d %H:%M:%S") for r in ledger.late_rows)
    assert expected and late == expected
    assert {b.late_watermark.basis for b in ledger.batches if b.files} == {"previous"}
    # the batch's own watermark (set by the first two files) would drop other rows: the run decides between them
    newest = max(int(pd.to_datetime(f["event_time"], utc=True).max().timestamp() * 1000) for f in release["frames"][:2])
    own = sorted(third[starts + HOUR_MS <= newest - HOUR_MS]["event_time"])
    assert len(own) > len(expected)
    for batch in ledger.batches:
        assert batch.rows_read == batch.spark_input_rows


def test_the_flat_job_recovers_its_late_rows_as_corrections(release):
    for done in release["temps"]:
        _ok(done)
    checkpoint = str(release["tmp"] / "ck" / "windows")
    _late_rows_and_corrections_match_pandas(checkpoint, release["runs"])


def test_its_checkpoints_are_audited_and_their_state_read(release):
    from watermark_ops.core.audit import run_audit
    from watermark_ops.core.state.reader import read_state

    for done in release["temps"]:
        _ok(done)
    checkpoint = str(release["tmp"] / "ck" / "windows")
    assert run_audit(checkpoint).status == "ok"
    progress = [json.loads(line) for line in Path(checkpoint + ".progress.jsonl").read_text().splitlines()]
    spark_rows = {r["batch_id"]: r["state_rows"] for r in progress if r.get("state_operators")}
    (operator,) = read_state(checkpoint, progress_records=()).operators
    counted = operator.file_rows
    assert counted and all(counted[b] == rows for b, rows in spark_rows.items() if b in counted), (counted, spark_rows)
