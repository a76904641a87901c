"""watermark_monitor: every 5 minutes, classify the watermark of every watched checkpoint; alert on alarms.

``checkpoints`` reads the config file at run time (not when the DAG file is parsed):
``dags/watermark_monitor.json`` beside this file, or the file named by
``$WATERMARK_OPS_MONITOR_CONFIG`` (its format: :mod:`watermark_ops.examples.flights.watch`). The main job's checkpoint (``flight_windows``, run by
``flights_pipeline``) is always watched. ``watch`` is one mapped ``WatermarkStallSensor`` per
checkpoint (its map index is named by the checkpoint): one evaluation each (``timeout`` 0: the
monitor's schedule is the re-evaluation), success while healthy (``advancing``, or ``idle``
within ``max_idle``), failure on ``stalled``, ``lagging``, ``jumped`` or idle too long, with the
classification and its evidence in XCom. A failure posts a JSON alert through
``WatermarkWebhookNotifier`` to the connection ``watermark_ops_webhook``; a missing checkpoint
with ``missing_ok`` is skipped (the job has not run yet).

A run that overruns its 5-minute slot (storage hanging) raises a ``DeadlineAlert`` through the
same notifier. ``max_active_runs=1`` and ``catchup=False``: a monitor has nothing to catch up.

Cheap to parse: no pyspark, no file I/O at module level.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import AsyncCallback, CronTriggerTimetable, DeadlineAlert, DeadlineReference, dag, task

from watermark_ops.airflow.notifiers import WatermarkWebhookNotifier
from watermark_ops.airflow.sensors import WatermarkStallSensor

# The config's reader (shared with the UI plugin, which lists the same checkpoints).
from watermark_ops.examples.flights.watch import config_path, load_checkpoints


@dag(
    dag_id="watermark_monitor",
    schedule=CronTriggerTimetable("*/5 * * * *", timezone="UTC"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 0},
    deadline=DeadlineAlert(
        reference=DeadlineReference.DAGRUN_QUEUED_AT,
        interval=timedelta(minutes=5),
        callback=AsyncCallback(WatermarkWebhookNotifier, kwargs={}),
    ),
    tags=["watermark-ops", "monitoring"],
    doc_md=__doc__,
)
def watermark_monitor():
    @task
    def checkpoints() -> list[dict]:
        """The watched checkpoints, read from the config file now (at run time)."""
        return load_checkpoints(config_path())

    WatermarkStallSensor.partial(
        task_id="watch",
        timeout=0,
        mode="reschedule",
        poke_interval=60,
        on_failure_callback=WatermarkWebhookNotifier(),
        map_index_template="{{ task.checkpoint }}",
    ).expand_kwargs(checkpoints())


watermark_monitor()
