"""Where runtime state lives: one folder, ``$WATERMARK_OPS_HOME`` or ``<repo>/.runtime``.

Layout under the runtime home (all created on demand by the code that writes them)::

    airflow/                 AIRFLOW_HOME with its SQLite metadata DB (set by the Makefile)
    landing/flights/         JSON-lines files written by the lander, one per data interval
    landing/weather/         the weather lander's files
    checkpoints/<job>/       Spark checkpoints (offset log, commit log, state, metadata)
    checkpoints/<job>.progress.jsonl   the job's per-batch progress log, beside its checkpoint
    output/<job>/            the job's Parquet sinks (results and quarantine)
"""

from __future__ import annotations

import os
from pathlib import Path

from watermark_ops.core.progress import progress_log_path

REPO_ROOT = Path(__file__).resolve().parents[4]  # plugins/watermark_ops/examples/flights/settings.py
SPARK_JOBS_DIR = REPO_ROOT / "spark_jobs"
#: The example's explicit checkpoint entries ([watermark_ops] monitor_config).
MONITOR_CONFIG = REPO_ROOT / "dags" / "watermark_monitor.json"
#: What the example's Spark runs set so that their state stays compacted (docs/state-and-preflight.md,
#: "The maintenance task"). Spark snapshots the state and deletes old state files only in its
#: maintenance task, which first runs one ``maintenanceInterval`` (default 60 s) after the driver
#: loads its first state store; an availableNow run per spark-submit keeps its stores loaded for a
#: few seconds (about 3.5 s of a 25-70 s run here), so with the default it never compacts and every
#: restart replays every delta since version 1. At 1 s the task runs while the stores are loaded: it
#: snapshots a store once more than ``minDeltasForSnapshot`` (default 10) deltas follow its last
#: snapshot, and deletes what ``minBatchesToRetain`` (100) no longer keeps. On the long-lived Spark
#: Connect server (``make run`` may pick it) the task keeps running between runs anyway; the same
#: conf does no harm there.
STATE_MAINTENANCE_CONF = {"spark.sql.streaming.stateStore.maintenanceInterval": "1s",
                          "spark.sql.streaming.stateStore.minDeltasForSnapshot": "4"}


def runtime_home() -> Path:
    """The runtime folder: ``$WATERMARK_OPS_HOME`` if set, else ``<repo>/.runtime``."""
    return Path(os.environ.get("WATERMARK_OPS_HOME") or REPO_ROOT / ".runtime")


def job_locations(job: str, home: Path | None = None) -> dict[str, str]:
    """Default locations of a Spark job's files under the runtime home.

    :param job: the job name (``flight_windows``, ...).
    :return: ``{"landing": <home>/landing/flights, "weather_landing": <home>/landing/weather,
        "checkpoint": <home>/checkpoints/<job>, "progress_log": <checkpoint>.progress.jsonl,
        "output": <home>/output/<job>}``.
    """
    home = home or runtime_home()
    checkpoint = str(home / "checkpoints" / job)
    return {
        "landing": str(home / "landing" / "flights"),
        "weather_landing": str(home / "landing" / "weather"),
        "checkpoint": checkpoint,
        "progress_log": progress_log_path(checkpoint),
        "output": str(home / "output" / job),
    }


def airflow_config_env(home: Path | None = None) -> dict[str, str]:
    """The example deployment's ``[watermark_ops]`` settings, as Airflow environment variables.

    The package needs none (every checkpoint a DAG task touches registers itself); the example adds
    its jobs' thresholds, notes and landing folders (``dags/watermark_monitor.json``, whose
    locations name ``$WATERMARK_OPS_HOME``) and the runtime home's checkpoints as the pages' root
    ``runtime`` (page addresses ``runtime/<job>``). The Makefile exports the same two.

    :return: ``{"AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG": path,
        "AIRFLOW__WATERMARK_OPS__CHECKPOINT_ROOTS": '{"runtime": "<home>/checkpoints"}'}``.
    """
    import json

    home = home or runtime_home()
    return {
        "AIRFLOW__WATERMARK_OPS__MONITOR_CONFIG": str(MONITOR_CONFIG),
        "AIRFLOW__WATERMARK_OPS__CHECKPOINT_ROOTS": json.dumps({"runtime": str(home / "checkpoints")}),
    }


def spark_submit_env() -> dict[str, str]:
    """``env_vars`` for the provider's SparkSubmitOperator: this interpreter's ``bin`` first on
    ``PATH`` (spark-submit finds ``SPARK_HOME`` and the driver's Python through it) and
    ``PYSPARK_PYTHON`` set to this interpreter. Read at DAG parse time; no I/O."""
    import sys

    bin_dir = os.path.dirname(sys.executable)
    return {"PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYSPARK_PYTHON": sys.executable}
