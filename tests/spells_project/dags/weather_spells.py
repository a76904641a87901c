"""weather_spells: one restart of the team's session-window job per week, attached to watermark-ops.

``SPELLS_HOME`` holds the landing folder, the checkpoints and the outputs; ``SPELLS_LAUNCH`` chooses
spark-submit (``submit``, the default) or a Spark Connect server (``connect``). The ``land`` task
writes the days whose readings arrived in the data interval as one JSON-lines file: a day of 10 mm
of rain or more is read from the hand gauge and arrives 4 days late, every other day on the day. Its
param ``old_format`` names days the station's old software sends with its date as ``11/20/2012``,
which the job cannot read (its ``unreadable_days`` query keeps them).
The run pattern attaches the job as it is, declaring its checkpoint, its landing and the allowed
lateness, and not its window: watermark-ops reads the session window from the job's plan.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import CronDataIntervalTimetable, Param, dag, task

from watermark_ops.airflow.run import watermarked_run

HOME = Path(os.environ.get("SPELLS_HOME", "/tmp/spells"))
JOB = str(Path(__file__).resolve().parents[1] / "jobs" / "weather_spells.py")
LANDING, OUTPUT, CHECKPOINTS = str(HOME / "landing"), str(HOME / "output"), str(HOME / "checkpoints")
HAND_GAUGE_MM, HAND_GAUGE_DAYS_LATE = 10.0, 4


@dag(schedule=CronDataIntervalTimetable("0 0 * * 0", timezone="UTC"),
     start_date=pendulum.datetime(2012, 11, 18, tz="UTC"), catchup=True, max_active_runs=1,
     params={"old_format": Param([], type="array")})
def weather_spells():
    @task
    def land(data_interval_start=None, data_interval_end=None, params=None) -> dict:
        """The days whose readings arrived in the data interval, one JSON-lines file."""
        import pandas as pd
        from vega_datasets import local_data

        start, end = pd.Timestamp(data_interval_start.naive()), pd.Timestamp(data_interval_end.naive())
        days = local_data.seattle_weather()
        late = days["precipitation"] >= HAND_GAUGE_MM
        arrived = days["date"] + pd.to_timedelta(late.astype(int) * HAND_GAUGE_DAYS_LATE, unit="D")
        rows = days[(arrived >= start) & (arrived < end)].copy()
        old = rows["date"].dt.strftime("%Y-%m-%d").isin(params["old_format"])
        rows["date"] = rows["date"].dt.strftime("%Y-%m-%d").where(~old, rows["date"].dt.strftime("%m/%d/%Y"))
        Path(LANDING).mkdir(parents=True, exist_ok=True)
        path = Path(LANDING) / f"weather_{start:%Y-%m-%d}.json"
        hidden = path.with_name("." + path.name)  # the file source skips names starting with "."
        rows.to_json(hidden, orient="records", lines=True)
        os.replace(hidden, path)
        return {"rows": len(rows), "late_days": int(late[rows.index].sum()), "old_format": int(old.sum())}

    land() >> watermarked_run(
        "weather_spells", attach=True, application=JOB, checkpoint=CHECKPOINTS + "/spells", landings=[LANDING],
        application_args=[LANDING, OUTPUT, CHECKPOINTS],
        allowed_lateness="30 days",
        launch=os.environ.get("SPELLS_LAUNCH", "submit"), late_sink=OUTPUT + "_late")


weather_spells()
