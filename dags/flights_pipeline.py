"""flights_pipeline: one restart of the flight_windows streaming query per daily data interval of 2013.

land (the flights that landed in the interval) → flight_windows (spark-submit, Trigger.AvailableNow,
a restart of the same query from its checkpoint) → collect_progress (this run's micro-batches and
last watermark to XCom) + late_ledger (every row this run's batches dropped as late, written to
``<output>_late/batch=<N>.jsonl``, and the balance input = aggregated + late + quarantined) + audit_checkpoint (the watermark never went backwards) + windows_complete
(the completeness gate: waits until the watermark passed the interval the run closes, then records
it on the ``flight_windows_complete`` asset for downstream DAGs) → announce_days (one partitioned
event on ``flight_windows_days`` per New York day the emitted-through watermark newly closed, key
``YYYY-MM-DD``, each day once: ``flights_daily_report`` runs once per final day).

``max_active_runs=1``: two runs of one query on one checkpoint corrupt it. Daily intervals are
America/New_York midnights (pendulum), so 2013-03-10 is a 23-hour interval and 2013-11-03 a
25-hour one. The Spark connection is ``spark_default`` (``local[2]`` when set from the environment
as JSON: ``{"conn_type":"spark","host":"local[2]","extra":{"deploy-mode":"client"}}``).

``WATERMARK_OPS_PIPELINE_END`` (an ISO date, default 2013-12-31) ends the catch-up earlier: the
end-to-end test on the real deployment unpauses the DAG with three days to run.

Cheap to parse: no pyspark, no file I/O at module level.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, CronDataIntervalTimetable, Param, dag, task

from watermark_ops.airflow.notifiers import WatermarkWebhookNotifier
from watermark_ops.airflow.operators import WatermarkAuditOperator
from watermark_ops.airflow.partitions import WatermarkPartitionsOperator
from watermark_ops.airflow.sensors import WatermarkReachedSensor
from watermark_ops.examples.flights.daily import DAY_ASSET_NAME, day_asset_uri, day_facts
from watermark_ops.examples.flights.settings import SPARK_JOBS_DIR, job_locations, spark_submit_env

JOB = "flight_windows"
LOCATIONS = job_locations(JOB)
# Downstream DAGs schedule on this asset: each event says through which instant the hourly windows
# in the sink are final (extra: watermark_ms, emitted_through_ms).
FLIGHT_WINDOWS_COMPLETE = Asset(name="flight_windows_complete", uri="file://" + LOCATIONS["output"])
# One partitioned event per New York day whose windows are all in the sink (partition key YYYY-MM-DD;
# extra["partitions"][day]: windows, departures, late_rows). flights_daily_report schedules on it.
FLIGHT_WINDOWS_DAYS = Asset(name=DAY_ASSET_NAME, uri=day_asset_uri(LOCATIONS["output"]))
START = pendulum.datetime(2013, 1, 1, tz="America/New_York")


@dag(
    dag_id="flights_pipeline",
    schedule=CronDataIntervalTimetable("0 0 * * *", timezone="America/New_York"),
    start_date=START,
    # A deployment can end the catch-up earlier (the end-to-end test schedules three days).
    end_date=pendulum.parse(os.environ.get("WATERMARK_OPS_PIPELINE_END", "2013-12-31"), tz="America/New_York"),
    catchup=True,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
    params={
        "delay_threshold": Param("2 hours", type="string", description="watermark delay threshold (Spark interval)"),
        "spark_trigger": Param("availableNow", enum=["availableNow", "once"],
                               description="Spark trigger; once is deprecated and emits windows one run later"),
        "shuffle_partitions": Param(4, type="integer", minimum=1,
                                    description="spark.sql.shuffle.partitions for a new checkpoint (frozen after)"),
        "max_event_time_ahead": Param(
            "", type="string",
            description="Spark interval such as '1 hour'; empty = off. Quarantines (reason future_event_time) "
                        "rows whose event time is later than the batch's processing time plus this, so one "
                        "future-dated record cannot move the watermark ahead for good (the jumped state). "
                        "Leave it off for a replay of past data such as 2013."),
        "output_mode": Param("append", enum=["append", "update"],
                             description="append: each window once, when the watermark passes its end (Parquet); "
                                         "update: windows upserted every run and revised by late rows, into "
                                         "<output>.duckdb, final once the watermark passes their end"),
    },
    tags=["watermark-ops", "spark"],
    doc_md=__doc__,
)
def flights_pipeline():
    @task
    def land(data_interval_start=None, data_interval_end=None) -> dict:
        """Land the flights that reached the stream in the data interval (idempotent)."""
        from watermark_ops.examples.flights.lander import land_interval

        return land_interval(data_interval_start, data_interval_end, LOCATIONS["landing"])

    run_job = SparkSubmitOperator(
        task_id=JOB,
        application=str(SPARK_JOBS_DIR / "flight_windows.py"),
        py_files=",".join(str(SPARK_JOBS_DIR / f) for f in ("checkpoint_lock.py", "flight_inputs.py", "streaming_driver.py", "upsert_sink.py")),
        conn_id="spark_default",
        name=JOB,
        application_args=[
            "--landing", LOCATIONS["landing"],
            "--checkpoint", LOCATIONS["checkpoint"],
            "--output", LOCATIONS["output"],
            "--delay-threshold", "{{ params.delay_threshold }}",
            "--trigger", "{{ params.spark_trigger }}",
            "--run-tag", "{{ run_id }}",
            # One token, so that an empty value (off) reaches the job as "" instead of a dangling flag.
            "--max-event-time-ahead={{ params.max_event_time_ahead }}",
            "--output-mode", "{{ params.output_mode }}",
        ],
        conf={
            "spark.sql.shuffle.partitions": "{{ params.shuffle_partitions }}",
            "spark.ui.showConsoleProgress": "false",
        },
        env_vars=spark_submit_env(),
        execution_timeout=timedelta(minutes=30),
    )

    @task(multiple_outputs=True)
    def collect_progress(run_id=None) -> dict:
        """This run's micro-batches (batch ids, watermarks, windows emitted, drops), last watermark, and
        rows kept aside (``quarantined_rows``, ``quarantined_by_reason``)."""
        from watermark_ops.core.progress import run_report

        return run_report(LOCATIONS["checkpoint"], run_id)

    @task(multiple_outputs=True)
    def late_ledger(run_id=None) -> dict:
        """Every row this run's batches dropped as late (Spark counts only late groups), recovered from the
        checkpoint and the landed files, written to ``<output>_late/batch=<N>.jsonl``; to XCom: ``rows_late``,
        ``late_by_batch``, ``late_by_origin`` and the balance ``rows_in == rows_aggregated + rows_late +
        rows_quarantined`` (``balanced``), Spark's own count as ``rows_dropped_by_watermark_spark``."""
        from watermark_ops.core.ledger import reconcile_run

        return reconcile_run(LOCATIONS["checkpoint"], run_id, sink=LOCATIONS["output"].rstrip("/") + "_late")

    # Prove the watermark never went backwards, this run included; the audit's memory (the head it
    # saw last time) lives in Airflow's asset state store, so it survives Spark's log purging.
    audit = WatermarkAuditOperator(task_id="audit_checkpoint", checkpoint=LOCATIONS["checkpoint"])

    # Completeness gate. A run's watermark ends a little before its interval's end (the newest
    # departure that landed in it, minus the delay threshold), and max_active_runs=1 keeps the next
    # run from moving it further: so each run closes the interval *before* it, i.e. everything up
    # to data_interval_start (under Trigger.Once, whose windows appear one run later, one interval
    # earlier still).
    complete = WatermarkReachedSensor(
        task_id="windows_complete",
        checkpoint=LOCATIONS["checkpoint"],
        target="{{ data_interval_start if params.spark_trigger == 'availableNow' "
               "else data_interval_start - macros.timedelta(days=1) }}",
        asset=FLIGHT_WINDOWS_COMPLETE,
        mode="reschedule",
        poke_interval=60,
        timeout=timedelta(hours=1),
        retries=0,
        max_lag=None,  # a replay of 2013 lags processing time by years by construction
        on_failure_callback=WatermarkWebhookNotifier(checkpoint=LOCATIONS["checkpoint"]),
    )

    # Completeness per New York day, as partitioned asset events: every day the emitted-through
    # watermark (what committed batches really wrote; under Trigger.Once one run later) newly closed,
    # announced once across retries, restarts and re-runs (memory in the asset state store). After
    # late_ledger, so each day's late rows so far are in its sink; skipped when no day closed.
    announce_days = WatermarkPartitionsOperator(
        task_id="announce_days",
        checkpoint=LOCATIONS["checkpoint"],
        asset=FLIGHT_WINDOWS_DAYS,
        since=START.isoformat(),
        grain="day",
        timezone="America/New_York",
        partition_facts=day_facts(LOCATIONS["output"]),
        retries=2,
    )

    ledger = late_ledger()
    land() >> run_job >> [collect_progress(), ledger, audit, complete]
    [ledger, complete] >> announce_days


flights_pipeline()
