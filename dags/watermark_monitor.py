"""watermark_monitor: every 5 minutes, classify the watermark of every known checkpoint; alert on alarms.

Two tasks per cycle, whatever the number of checkpoints (:mod:`watermark_ops.airflow.monitor`):

* ``watch`` lists the known checkpoints at run time (not when the DAG file is parsed), with no
  configuration: every checkpoint a watermark-ops task of any DAG touched registered itself in
  Airflow's asset state store (:mod:`watermark_ops.airflow.registry`, this task's inlet), plus the
  explicit entries of ``[watermark_ops] checkpoints`` / ``monitor_config`` for checkpoints no DAG
  touches, or to give thresholds, a ``conn_id`` (format: :mod:`watermark_ops.airflow.config`; this
  repository's example sets ``monitor_config`` to ``dags/watermark_monitor.json``). It evaluates
  them all concurrently in one task instance (a bounded thread pool; each checkpoint through its
  own connection; every checkpoint's remembered view is kept in the registry's asset state store
  between cycles, shared with the sensors, so unchanged checkpoints are not listed again on any worker): the alarms in full are its return value, the counts per state
  its XCom ``summary``. Healthy: ``advancing``, or ``idle`` within ``max_idle``; alarm: ``stalled``, ``lagging``, ``jumped``, idle
  too long, or a checkpoint that cannot be read (an alarm of its own, never hiding the others). A
  missing checkpoint with ``missing_ok`` (every registered one unless configured otherwise) is
  counted as ``missing`` and skipped.
* ``alarm`` is mapped over the alarms only: one task instance per alarm, named by its checkpoint
  (the map index), failing with the classification and posting a JSON alert through
  ``WatermarkWebhookNotifier`` to the connection ``watermark_ops_webhook``. No alarm: one skipped
  task instance.

A run that overruns its 5-minute slot (storage hanging) raises a ``DeadlineAlert`` through the
same notifier; a ``watch`` that fails (a bad configuration) alerts through it too.
``max_active_runs=1`` and ``catchup=False``: a monitor has nothing to catch up.

Cheap to parse: no pyspark, no file I/O, and none of the evaluation code (``watermark_ops.core.stall``,
the sensors) imported at module level: the tasks import it when they run.
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
from watermark_ops.airflow.registry import CHECKPOINT_REGISTRY


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
    @task(inlets=[CHECKPOINT_REGISTRY], on_failure_callback=WatermarkWebhookNotifier())
    def watch() -> list[dict]:
        """Every known checkpoint evaluated in this one task; returns the alarms, pushes the summary."""
        from watermark_ops.airflow.monitor import watch_cycle

        return watch_cycle(get_current_context())

    @task(on_failure_callback=WatermarkWebhookNotifier(), map_index_template="{{ checkpoint }}")
    def alarm(alarm: dict) -> None:
        """One alarm: named by its checkpoint, fails, and the notifier posts it."""
        from watermark_ops.airflow.monitor import raise_alarm

        raise_alarm(get_current_context(), alarm)

    alarm.expand(alarm=watch())


watermark_monitor()
