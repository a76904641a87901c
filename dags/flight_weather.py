"""flight_weather: one restart of the flights × weather join per daily data interval of 2013.

land_flights + land_weather → the run pattern (``watermark_ops.airflow.run.watermarked_run``):
preflight (will the restart work?) → flight_weather (spark-submit: a stream-stream left-outer join
with two watermarks, Trigger.AvailableNow) → collect_progress (this run's batches, last watermark,
drop rate and delay-threshold advice to XCom) + late_ledger + audit_checkpoint → state_checkpoint.

The multiple-watermark policy (``min`` or ``max``) is a Param, but Spark freezes it in the
checkpoint at the first batch: on later runs a different value is ignored and the job logs that the
checkpoint's policy wins. ``max_active_runs=1``: two runs of one query on one checkpoint corrupt it.
Cheap to parse: no pyspark, no file I/O at module level.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import CronDataIntervalTimetable, Param, dag, task

from watermark_ops.airflow.run import watermarked_run
from watermark_ops.examples.flights.settings import (
    SPARK_JOBS_DIR,
    STATE_MAINTENANCE_CONF,
    job_locations,
    spark_submit_env,
)

JOB = "flight_weather"
LOCATIONS = job_locations(JOB)


@dag(
    dag_id="flight_weather",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="America/New_York"),
    start_date=pendulum.datetime(2013, 1, 1, tz="America/New_York"),
    end_date=pendulum.datetime(2013, 12, 31, tz="America/New_York"),
    catchup=True,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    params={
        "watermark_policy": Param("min", enum=["min", "max"],
                                  description="spark.sql.streaming.multipleWatermarkPolicy (frozen at the first batch)"),
        "flights_delay_threshold": Param("2 hours", type="string"),
        "weather_delay_threshold": Param("3 hours", type="string"),
        "shuffle_partitions": Param(4, type="integer", minimum=1),
    },
    tags=["watermark-ops", "spark"],
    doc_md=__doc__,
)
def flight_weather():
    @task
    def land_flights(data_interval_start=None, data_interval_end=None) -> dict:
        """The flights that landed in the interval (the same idempotent files flights_pipeline lands)."""
        from watermark_ops.examples.flights.lander import land_interval

        return land_interval(data_interval_start, data_interval_end, LOCATIONS["landing"])

    @task
    def land_weather(data_interval_start=None, data_interval_end=None) -> dict:
        """The weather observations that reached the stream in the interval."""
        from watermark_ops.examples.flights.weather_lander import land_weather_interval

        return land_weather_interval(data_interval_start, data_interval_end, LOCATIONS["weather_landing"])

    # The run pattern: spark-submit the restart, then progress with the drop rate and delay-threshold
    # advice, the late-row ledger, and the audit (the policy drift shows as conf_changed).
    run = watermarked_run(
        "flight_weather_run",
        application=str(SPARK_JOBS_DIR / "flight_weather_join.py"),
        py_files=str(SPARK_JOBS_DIR / "flight_inputs.py"),
        checkpoint=LOCATIONS["checkpoint"],
        landings=[LOCATIONS["landing"], LOCATIONS["weather_landing"]],
        application_args=[
            "--landing", LOCATIONS["landing"],
            "--weather-landing", LOCATIONS["weather_landing"],
            "--output", LOCATIONS["output"],
            "--flights-delay-threshold", "{{ params.flights_delay_threshold }}",
            "--weather-delay-threshold", "{{ params.weather_delay_threshold }}",
            "--watermark-policy", "{{ params.watermark_policy }}",
        ],
        conf={
            "spark.sql.shuffle.partitions": "{{ params.shuffle_partitions }}",
            "spark.ui.showConsoleProgress": "false",
            # A join keeps four state stores per partition: compacted only if the maintenance task runs
            # while a run holds them (settings.STATE_MAINTENANCE_CONF).
            **STATE_MAINTENANCE_CONF,
        },
        env_vars=spark_submit_env(),
        task_ids={"submit": JOB},
        prefix_group_id=False,
    )
    [land_flights(), land_weather()] >> run

flight_weather()
