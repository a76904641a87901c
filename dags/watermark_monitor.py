"""watermark_monitor: every 5 minutes, classify the watermark of every watched checkpoint; alert on alarms.

``checkpoints`` reads the config file at run time (not when the DAG file is parsed):
``dags/watermark_monitor.json`` beside this file, or the file named by
``$WATERMARK_OPS_MONITOR_CONFIG``. The main job's checkpoint (``flight_windows``, run by
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

import json
import os
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import AsyncCallback, CronTriggerTimetable, DeadlineAlert, DeadlineReference, dag, task

from watermark_ops.airflow.notifiers import WatermarkWebhookNotifier
from watermark_ops.airflow.sensors import WatermarkStallSensor

DEFAULT_CONFIG = Path(__file__).with_name("watermark_monitor.json")
CONFIG_ENV = "WATERMARK_OPS_MONITOR_CONFIG"
#: The job whose checkpoint is always watched (flights_pipeline's).
PIPELINE_JOB = "flight_windows"
THRESHOLD_KEYS = ("idle_after", "max_idle", "max_lag", "max_skew", "stall_window", "stall_batches")


def load_checkpoints(path: str | os.PathLike) -> list[dict]:
    """The config file → one ``WatermarkStallSensor`` kwargs dict per checkpoint (for ``expand_kwargs``).

    :return: ``[{"checkpoint": str, "missing_ok": bool, <threshold>: JSON value, ...}]``, the
        flight_windows job included, duplicates (same location) dropped (first wins).
    :raises ValueError: naming the file and the entry, for bad JSON, an unknown key, an entry
        with neither or both of ``checkpoint`` and ``job``, or a bad threshold.
    """
    from watermark_ops.core.thresholds import Thresholds
    from watermark_ops.examples.flights.settings import job_locations

    where = str(path)
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{where}: cannot read the monitor config: {exc}") from exc
    if not isinstance(config, dict) or not isinstance(config.get("checkpoints", []), list):
        raise ValueError(f"{where}: expected an object with a 'checkpoints' list")
    defaults = config.get("defaults") or {}
    unknown = set(defaults) - set(THRESHOLD_KEYS)
    if unknown:
        raise ValueError(f"{where}: defaults: unknown keys {sorted(unknown)}; expected {list(THRESHOLD_KEYS)}")
    entries = list(config.get("checkpoints") or [])
    if not any(isinstance(e, dict) and e.get("job") == PIPELINE_JOB for e in entries):
        entries.append({"job": PIPELINE_JOB})
    allowed = {"checkpoint", "job", "missing_ok", "note", *THRESHOLD_KEYS}
    out, seen = [], set()
    for index, entry in enumerate(entries):
        label = f"{where}: checkpoints[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{label}: expected an object, got {entry!r}")
        if set(entry) - allowed:
            raise ValueError(f"{label}: unknown keys {sorted(set(entry) - allowed)}; expected {sorted(allowed)}")
        if ("checkpoint" in entry) == ("job" in entry):
            raise ValueError(f"{label}: give exactly one of 'checkpoint' (a location) and 'job' (a job name)")
        location = entry.get("checkpoint") or job_locations(entry["job"])["checkpoint"]
        thresholds = {k: entry.get(k, defaults.get(k)) for k in THRESHOLD_KEYS if k in entry or k in defaults}
        try:
            Thresholds(**thresholds)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{label} ({location}): {exc}") from exc
        if location in seen:
            continue
        seen.add(location)
        out.append({"checkpoint": location, "missing_ok": bool(entry.get("missing_ok", "job" in entry)), **thresholds})
    return out


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
        return load_checkpoints(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)

    WatermarkStallSensor.partial(
        task_id="watch",
        timeout=0,
        mode="reschedule",
        poke_interval=60,
        on_failure_callback=WatermarkWebhookNotifier(),
        map_index_template="{{ task.checkpoint }}",
    ).expand_kwargs(checkpoints())


watermark_monitor()
