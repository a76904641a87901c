"""city_temps: one restart of the team's flat temperatures job per day, attached to watermark-ops.

``TEMPS_HOME`` holds the landing folder, the checkpoints and the outputs; ``TEMPS_LAUNCH`` chooses
spark-submit (``submit``, the default) or a Spark Connect server (``connect``). The ``land`` task lands
the readings that arrived in the data interval, one JSON-lines file per city (San Francisco's link
delivers 10 hours late); its param ``garbage`` lands every event time unreadable (an upstream change).
The run pattern attaches the job as it is: the declarations it does not make (its checkpoint, its
window, the allowed lateness), nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import CronDataIntervalTimetable, Param, dag, task

from watermark_ops.airflow.run import watermarked_run

HOME = Path(os.environ.get("TEMPS_HOME", "/tmp/temps"))
JOB = str(Path(__file__).resolve().parents[1] / "jobs" / "city_temps.py")
LANDING, OUTPUT, CHECKPOINTS = str(HOME / "landing"), str(HOME / "output"), str(HOME / "checkpoints")
ARRIVES_AFTER_HOURS = {"seattle": 0, "sf": 10}


@dag(schedule=CronDataIntervalTimetable("0 0 * * *", timezone="UTC"),
     start_date=pendulum.datetime(2010, 1, 1, tz="UTC"), catchup=True, max_active_runs=1,
     params={"garbage": Param(False, type="boolean")})
def city_temps():
    @task
    def land(data_interval_start=None, data_interval_end=None, params=None) -> dict:
        """The readings that arrived in the data interval, one JSON-lines file per city."""
        import json
        from datetime import timedelta

        from vega_datasets import local_data

        start, end = data_interval_start.naive(), data_interval_end.naive()
        counts = {}
        Path(LANDING).mkdir(parents=True, exist_ok=True)
        for city, frame in (("seattle", local_data.seattle_temps()), ("sf", local_data.sf_temps())):
            arrived = frame["date"] + timedelta(hours=ARRIVES_AFTER_HOURS[city])
            rows = frame[(arrived >= start) & (arrived < end)]
            path = Path(LANDING) / f"temps_{start:%Y-%m-%d}_{city}.json"
            hidden = path.with_name("." + path.name)  # the file source skips names starting with "."
            with open(hidden, "w") as out:
                for row in rows.itertuples():
                    at = f"{row.date:%Y-%m-%d %H:%M:%S}"
                    out.write(json.dumps({"city": city, "event_time": "at " + at if params["garbage"] else at,
                                          "temp": str(row.temp)}) + "\n")
            os.replace(hidden, path)
            counts[city] = len(rows)
        return counts

    land() >> watermarked_run(
        "city_temps", attach=True, application=JOB, checkpoint=CHECKPOINTS + "/windows", landings=[LANDING],
        application_args=[LANDING, OUTPUT, CHECKPOINTS], window="6 hours", allowed_lateness="6 hours",
        launch=os.environ.get("TEMPS_LAUNCH", "submit"), late_sink=OUTPUT + "_late")


city_temps()
