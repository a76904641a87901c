"""flights_pipeline: one restart of the flight_windows streaming query per daily data interval of 2013.

land (the flights that landed in the interval) → the run pattern
(``watermark_ops.airflow.run.watermarked_run``): preflight (will the restart work? no_go fails here,
nothing launched) → flight_windows (spark-submit, Trigger.AvailableNow, a restart of the same query
from its checkpoint; the driver refuses a changed window, delay or landing folder unless the run
accepts it: the ``accept_changes`` Param) → collect_progress (this run's micro-batches and
last watermark to XCom) + late_ledger (every row this run's batches dropped as late, written to
``<output>_late/batch=<N>.jsonl``, and the balance input = aggregated + late + quarantined) + audit_checkpoint (the watermark never went backwards) → state_checkpoint (rows in state, bounded
by the watermark, the chain a restart replays) + windows_complete
(the completeness gate: waits until the watermark passed the interval the run closes, then records
it on the ``flight_windows_complete`` asset for downstream DAGs) → announce_days (one partitioned
event on ``flight_windows_days`` per New York day the emitted-through watermark newly closed, key
``YYYY-MM-DD``, each day once: ``flights_daily_report`` runs once per final day).

``max_active_runs=1``: two runs of one query on one checkpoint corrupt it. Daily intervals are
America/New_York midnights (pendulum), so 2013-03-10 is a 23-hour interval and 2013-11-03 a
25-hour one. The Spark connection is ``spark_default`` (``local[2]`` when set from the environment
as JSON: ``{"conn_type":"spark","host":"local[2]","extra":{"deploy-mode":"client"}}``).

``WATERMARK_OPS_SPARK_LAUNCH`` picks how the Spark job runs (read at parse time): ``submit``
(default, spark-submit: a Spark application per run) or ``connect`` (a thin client on the
long-lived Spark Connect server of the ``spark_connect_default`` connection; ``make up`` and
``make run`` start one).

``WATERMARK_OPS_PIPELINE_END`` (an ISO date, default 2013-12-31) ends the catch-up earlier: the
end-to-end test on the real deployment unpauses the DAG with three days to run.

Cheap to parse: no pyspark, no file I/O at module level.
"""

from __future__ import annotations

import os
from datetime import timedelta

import pendulum
from airflow.sdk import Asset, CronDataIntervalTimetable, Param, dag, task

from watermark_ops.airflow.notifiers import WatermarkWebhookNotifier
from watermark_ops.airflow.run import watermarked_run
from watermark_ops.examples.flights.daily import DAY_ASSET_NAME, day_asset_uri, day_facts
from watermark_ops.examples.flights.settings import (
    SPARK_JOBS_DIR,
    STATE_MAINTENANCE_CONF,
    job_locations,
    spark_submit_env,
)

JOB = "flight_windows"
LOCATIONS = job_locations(JOB)
# Downstream DAGs schedule on this asset: each event says through which instant the hourly windows
# in the sink are final (extra: watermark_ms, emitted_through_ms).
FLIGHT_WINDOWS_COMPLETE = Asset(name="flight_windows_complete", uri="file://" + LOCATIONS["output"])
# One partitioned event per New York day whose windows are all in the sink (partition key YYYY-MM-DD;
# extra["partitions"][day]: windows, departures, late_rows). flights_daily_report schedules on it.
FLIGHT_WINDOWS_DAYS = Asset(name=DAY_ASSET_NAME, uri=day_asset_uri(LOCATIONS["output"]))
START = pendulum.datetime(2013, 1, 1, tz="America/New_York")
LAUNCH = os.environ.get("WATERMARK_OPS_SPARK_LAUNCH", "submit")


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
        "max_files_per_trigger": Param(
            None, type=["null", "integer"], minimum=1,
            description="the file source's maxFilesPerTrigger: a run of several landed files becomes several "
                        "micro-batches (empty: all files in one)"),
        "accept_changes": Param(
            "", type="string",
            description="changes of the query this run accepts on purpose, comma-separated: window_duration, "
                        "watermark_delay (a changed delay_threshold), source_path. Spark accepts them silently with "
                        "surprising results, so the driver refuses them unless named here (for the run that makes "
                        "the change; the next runs compare with it)"),
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

    # The run pattern: spark-submit the restart, then progress, the late-row ledger, the audit (the
    # watermark never went backwards; its memory lives in Airflow's asset state store, so it survives
    # Spark's log purging), the completeness gate and the day announcements.
    #
    # Completeness gate. A run's watermark ends a little before its interval's end (the newest
    # departure that landed in it, minus the delay threshold), and max_active_runs=1 keeps the next
    # run from moving it further: so each run closes the interval *before* it, i.e. everything up
    # to data_interval_start (under Trigger.Once, whose windows appear one run later, one interval
    # earlier still).
    #
    # Completeness per New York day, as partitioned asset events: every day the emitted-through
    # watermark (what committed batches really wrote; under Trigger.Once one run later) newly closed,
    # announced once across retries, restarts and re-runs (memory in the asset state store). After
    # late_ledger, so each day's late rows so far are in its sink; skipped when no day closed.
    run = watermarked_run(
        "flight_windows_run",
        application=str(SPARK_JOBS_DIR / "flight_windows.py"),
        py_files=",".join(str(SPARK_JOBS_DIR / f) for f in ("flight_inputs.py", "upsert_sink.py")),
        checkpoint=LOCATIONS["checkpoint"],
        landings=[LOCATIONS["landing"]],
        application_args=[
            "--landing", LOCATIONS["landing"],
            "--output", LOCATIONS["output"],
            "--delay-threshold", "{{ params.delay_threshold }}",
            # One token, so that an empty value (off) reaches the job as "" instead of a dangling flag.
            "--max-event-time-ahead={{ params.max_event_time_ahead }}",
            "--output-mode", "{{ params.output_mode }}",
        ],
        spark_trigger="{{ params.spark_trigger }}",
        max_files_per_trigger="{{ params.max_files_per_trigger }}",
        launch=LAUNCH,
        accept_changes="{{ params.accept_changes }}",
        # Over Connect only session (SQL) confs can be set; the server's own are set where it starts.
        # The maintenance interval keeps the state compacted although each spark-submit lives seconds
        # (settings.STATE_MAINTENANCE_CONF); the preflight gate checks these confs against the checkpoint.
        conf={"spark.sql.shuffle.partitions": "{{ params.shuffle_partitions }}", **STATE_MAINTENANCE_CONF,
              **({"spark.ui.showConsoleProgress": "false"} if LAUNCH == "submit" else {})},
        env_vars=spark_submit_env(),
        late_sink=LOCATIONS["output"].rstrip("/") + "_late",
        lateness=False,  # the delay-threshold advice reads every landed file: `watermark-ops lateness` on demand
        complete_target="{{ data_interval_start if params.spark_trigger == 'availableNow' "
                        "else data_interval_start - macros.timedelta(days=1) }}",
        complete_asset=FLIGHT_WINDOWS_COMPLETE,
        complete_kwargs={
            "max_lag": None,  # a replay of 2013 lags processing time by years by construction
            "on_failure_callback": WatermarkWebhookNotifier(checkpoint=LOCATIONS["checkpoint"]),
        },
        partition_asset=FLIGHT_WINDOWS_DAYS,
        partition_since=START.isoformat(),
        partition_timezone="America/New_York",
        partition_facts=day_facts(LOCATIONS["output"]),
        task_ids={"submit": JOB, "complete": "windows_complete", "announce": "announce_days"},
        prefix_group_id=False,
    )
    land() >> run


flights_pipeline()
