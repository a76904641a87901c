"""watermark_monitor: every 5 minutes, classify the watermark of every known checkpoint; alert on alarms.

``checkpoints`` lists them at run time (not when the DAG file is parsed), with no configuration:
every checkpoint a watermark-ops task of any DAG touched registered itself in Airflow's asset state
store (:mod:`watermark_ops.airflow.registry`), plus the explicit entries of ``[watermark_ops]
checkpoints`` / ``monitor_config`` for checkpoints no DAG touches, or to give thresholds (format:
:mod:`watermark_ops.airflow.config`; this repository's example sets ``monitor_config`` to
``dags/watermark_monitor.json``). ``watch`` is one mapped ``WatermarkStallSensor`` per
checkpoint (its map index is named by the checkpoint): one evaluation each (``timeout`` 0: the
monitor's schedule is the re-evaluation), success while healthy (``advancing``, or ``idle``
within ``max_idle``), failure on ``stalled``, ``lagging``, ``jumped`` or idle too long, with the
classification and its evidence in XCom. A failure posts a JSON alert through
``WatermarkWebhookNotifier`` to the connection ``watermark_ops_webhook``; a missing checkpoint
with ``missing_ok`` (every registered one unless configured otherwise) is skipped.

A run that overruns its 5-minute slot (storage hanging) raises a ``DeadlineAlert`` through the
same notifier. ``max_active_runs=1`` and ``catchup=False``: a monitor has nothing to catch up.

Cheap to parse: no pyspark, no file I/O at module level.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import (
    AsyncCallback,
    CronTriggerTimetable,
    DeadlineAlert,
    DeadlineReference,
    dag,
    get_current_context,
    task,
)

from watermark_ops.airflow.notifiers import WatermarkWebhookNotifier
from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY, monitor_checkpoints
from watermark_ops.airflow.sensors import WatermarkStallSensor


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
    @task(inlets=[CHECKPOINT_REGISTRY])
    def checkpoints() -> list[dict]:
        """The known checkpoints now (at run time): the registry (an inlet) and the configuration."""
        return monitor_checkpoints(get_current_context())

    WatermarkStallSensor.partial(
        task_id="watch",
        timeout=0,
        mode="reschedule",
        poke_interval=60,
        on_failure_callback=WatermarkWebhookNotifier(),
        map_index_template="{{ task.checkpoint }}",
        inlets=[CHECKPOINT_REGISTRY],  # a mapped task's inlets come from partial(): its registration
    ).expand_kwargs(checkpoints())


watermark_monitor()
