"""weekly_precip: one restart of the team's sliding-window precipitation job per week, attached to
watermark-ops.

``PRECIP_HOME`` holds the landing folder, the checkpoints and the outputs; ``PRECIP_LAUNCH`` chooses
spark-submit (``submit``, the default) or a Spark Connect server (``connect``). The ``land`` task
writes the days whose readings arrived in the data interval as one Parquet file: a day of 10 mm of
rain or more is read from the hand gauge and arrives 5 days late, every other day on the day. Its
param ``no_gauge`` names days whose gauge sent its "no reading" sentinel (-1 mm) instead.
The run pattern attaches the job as it is, declaring its checkpoint, its landing and the allowed
lateness, and not its window: watermark-ops reads the sliding window from the job's plan.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import CronDataIntervalTimetable, Param, dag, task

from watermark_ops.airflow.run import watermarked_run

HOME = Path(os.environ.get("PRECIP_HOME", "/tmp/precip"))
JOB = str(Path(__file__).resolve().parents[1] / "jobs" / "weekly_precip.py")
LANDING, OUTPUT, CHECKPOINTS = str(HOME / "landing"), str(HOME / "output"), str(HOME / "checkpoints")
HAND_GAUGE_MM, HAND_GAUGE_DAYS_LATE = 10.0, 5


@dag(schedule=CronDataIntervalTimetable("0 0 * * 0", timezone="UTC"),
     start_date=pendulum.datetime(2013, 1, 6, tz="UTC"), catchup=True, max_active_runs=1,
     params={"no_gauge": Param([], type="array")})
def weekly_precip():
    @task
    def land(data_interval_start=None, data_interval_end=None, params=None) -> dict:
        """The days whose readings arrived in the data interval, one Parquet file."""
        import pandas as pd
        from vega_datasets import local_data

        start, end = pd.Timestamp(data_interval_start.naive()), pd.Timestamp(data_interval_end.naive())
        days = local_data.seattle_weather()
        late = days["precipitation"] >= HAND_GAUGE_MM
        arrived = days["date"] + pd.to_timedelta(late.astype(int) * HAND_GAUGE_DAYS_LATE, unit="D")
        rows = days[(arrived >= start) & (arrived < end)].copy()
        rows["date"] = rows["date"].dt.strftime("%Y-%m-%d")
        rows.loc[rows["date"].isin(params["no_gauge"]), "precipitation"] = -1.0
        Path(LANDING).mkdir(parents=True, exist_ok=True)
        path = Path(LANDING) / f"weather_{start:%Y-%m-%d}.parquet"
        hidden = path.with_name("." + path.name)  # the file source skips names starting with "."
        rows.to_parquet(hidden, index=False)
        os.replace(hidden, path)
        return {"rows": len(rows), "late_days": int(late[rows.index].sum())}

    land() >> watermarked_run(
        "weekly_precip", attach=True, application=JOB, checkpoint=CHECKPOINTS + "/windows", landings=[LANDING],
        application_args=[LANDING, OUTPUT, CHECKPOINTS], allowed_lateness="30 days",
        launch=os.environ.get("PRECIP_LAUNCH", "submit"), late_sink=OUTPUT + "_late")


weekly_precip()
